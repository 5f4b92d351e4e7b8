"""Metric math: step-time statistics, throughput, speedup, efficiency, confidence intervals."""

from __future__ import annotations

import functools
import math
import statistics
from typing import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    xs = sorted(samples)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def step_stats(step_times_s: Sequence[float], global_batch: int, window_s: float | None = None) -> dict:
    """Summary of per-step wall times (s). throughput = global samples / measured time: the measured
    window (window_throughput) when given, else the sum of the step times; time_per_step_s = measured
    time / steps; the percentiles and CV describe the step times' distribution."""
    if not step_times_s:
        raise ValueError("no measured steps")
    if any(t <= 0 for t in step_times_s):
        raise ValueError("step times must be positive")
    total = float(window_s) if window_s else float(sum(step_times_s))
    mean = statistics.fmean(step_times_s)
    stdev = statistics.stdev(step_times_s) if len(step_times_s) > 1 else 0.0
    return {
        "measured_steps": len(step_times_s),
        "throughput": global_batch * len(step_times_s) / total,
        "step_time_median_s": statistics.median(step_times_s),
        "step_time_p5_s": percentile(step_times_s, 5),
        "step_time_p95_s": percentile(step_times_s, 95),
        "step_time_mean_s": mean,
        "step_time_cv": stdev / mean,
        "time_per_step_s": total / len(step_times_s),
    }


def speedup(throughput: float | None, baseline_throughput: float | None) -> float | None:
    """Throughput relative to the framework's single-device baseline."""
    if not throughput or not baseline_throughput:
        return None
    return throughput / baseline_throughput


def efficiency(speedup_value: float | None, world_size: int) -> float | None:
    """Scaling efficiency = speedup / N (1.0 is perfect linear scaling)."""
    if speedup_value is None:
        return None
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    return speedup_value / world_size


def wrapper_overhead(throughput_n1: float | None, baseline_throughput: float | None) -> float | None:
    """Cost of the wrapper on one device: 1 - throughput(strategy, 1) / baseline (> 0: slower)."""
    if not throughput_n1 or not baseline_throughput:
        return None
    return 1.0 - throughput_n1 / baseline_throughput


def merge_rank_step_times(per_rank: Sequence[Sequence[float]]) -> list[float]:
    """Per step, the slowest rank's time. For the step-time distribution only: ranks' step boundaries
    are not aligned, so the sum of per-step maxima exceeds the elapsed time."""
    if not per_rank:
        raise ValueError("no ranks")
    n = min(len(r) for r in per_rank)
    return [max(r[i] for r in per_rank) for i in range(n)]


# Every CI says what it covers (`ci_scope`): the noise within one run (batch means over its steps), or
# run to run (a t-interval over repeats). Coverage is checked by simulation: tests/cisim.py.

CI_LEVEL = 0.95
MIN_BATCH_STEPS = 30
"""Steps per batch at least: shorter batches of autocorrelated steps (AR(1), phi 0.8) are too
correlated with each other and the batch-means CI undercovers (simulated: 88% at 10 steps/batch)."""
MIN_BATCHES, MAX_BATCHES = 5, 20
MIN_CI_STEPS = MIN_BATCHES * MIN_BATCH_STEPS
"""Fewest steps a within-run CI is given for."""
MIN_STOP_STEPS = MAX_BATCHES * MIN_BATCH_STEPS
"""Fewest steps adaptive stopping may stop at on the CI: its look needs all MAX_BATCHES batches, because
stopping on a CI with few degrees of freedom picks the runs whose spread came out small (simulated:
88% coverage for noisy runs stopped at 150 steps, 89.8% at 300 (10 batches), at least 91.9% at 600
over cv 1-15%, phi 0-0.8 and 1% outliers of 10 sd; see tests/cisim.py)."""
MIN_MERGED_BATCHES = 10
"""Autocorrelated batch means: batches are merged (twice as long) down to this many, no fewer (a lag-1 test
over fewer batches has too little power to pass them as independent)."""
LAG1_Z = 1.645
"""One-sided 5% test of the batch means' lag-1 autocorrelation: (r + 1/k) sqrt(k) above it rejects (and the
batches are merged)."""
LAG1_Z_REFUSE = 2.326
"""At the last batch count the test is at 1%: above it, no CI (a 5% test there refused iid runs 5% of the time)."""
LAG1_MAX = 0.9
"""Largest (bias-corrected) lag-1 autocorrelation the CI is widened for."""


def t_cdf(t, df):
    """Student-t CDF for integer df >= 1, exact: Abramowitz & Stegun 26.7.3/26.7.4 in theta = atan(t / sqrt(df)).
    Vectorised: t and df broadcast (numpy arrays: the regression gate's simulations, distbench.results.gatestats); a
    float for scalar arguments. The project's one t CDF (t_quantile inverts it)."""
    import numpy as np

    t_arr, df_arr = np.broadcast_arrays(np.asarray(t, dtype=float), np.asarray(df))
    if df_arr.size and (df_arr < 1).any():
        raise ValueError(f"df must be >= 1, got {df}")
    df_arr = df_arr.astype(int)
    theta = np.arctan(np.abs(t_arr) / np.sqrt(df_arr))
    c2 = np.cos(theta) ** 2
    # odd df: (2/pi) (theta + sin cos (1 + 2/3 c^2 + 2*4/(3*5) c^4 + ...)), the series empty at df 1;
    # even df: sin (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ...)
    term_o, total_o = np.ones(t_arr.shape), np.where(df_arr > 1, 1.0, 0.0)
    term_e, total_e = np.ones(t_arr.shape), np.ones(t_arr.shape)
    for k in range(1, int(df_arr.max(initial=1)) // 2 + 1):
        odd = k < (df_arr - 1) // 2
        term_o = np.where(odd, term_o * c2 * (2 * k) / (2 * k + 1), term_o)
        total_o = np.where(odd, total_o + term_o, total_o)
        even = k < df_arr // 2
        term_e = np.where(even, term_e * c2 * (2 * k - 1) / (2 * k), term_e)
        total_e = np.where(even, total_e + term_e, total_e)
    odd_a = 2 / math.pi * (theta + np.sin(theta) * np.cos(theta) * total_o)
    a = np.where(df_arr % 2 == 1, odd_a, np.sin(theta) * total_e)
    out = 0.5 + np.copysign(a / 2, t_arr)
    return float(out) if out.ndim == 0 else out


def t_quantile(p: float, df: int) -> float:
    """Student-t quantile for integer df: t_cdf inverted by bisection (exact to ~1e-12)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


@functools.lru_cache(maxsize=None)
def t_crit(df: int, level: float = CI_LEVEL) -> float:
    """Two-sided critical t value."""
    return t_quantile(1 - (1 - level) / 2, df)


def batch_count(n: int) -> int:
    """Batches a within-run CI over n steps starts from (0: too few steps for one): n // MIN_BATCH_STEPS, at
    most MAX_BATCHES, so the batch size grows with the run (n / MAX_BATCHES steps from MIN_STOP_STEPS on)."""
    k = min(MAX_BATCHES, n // MIN_BATCH_STEPS)
    return k if k >= MIN_BATCHES else 0


def batch_levels(n: int) -> list[int]:
    """Batch counts tried in turn: batch_count(n), then halved (each batch twice as long) while at least
    MIN_MERGED_BATCHES remain; a run that starts below that is tried at its first count only."""
    k = batch_count(n)
    levels = [k] if k else []
    while k // 2 >= MIN_MERGED_BATCHES:
        k //= 2
        levels.append(k)
    return levels


def batch_means(x, batches: int):
    """Mean, standard error and lag-1 autocorrelation of the batch means, over the last axis of `x`, by
    non-overlapping batch means (the first n mod `batches` samples left out)."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    b = x.shape[-1] // batches
    y = x[..., x.shape[-1] - batches * b :].reshape(*x.shape[:-1], batches, b).mean(axis=-1)
    d = y - y.mean(axis=-1, keepdims=True)
    ss = (d * d).sum(axis=-1)
    mean = y.mean(axis=-1)
    spread = ss > batches * (1e-9 * np.abs(mean)) ** 2  # batch means equal up to rounding: no correlation to see
    lag1 = np.where(spread, (d[..., 1:] * d[..., :-1]).sum(axis=-1) / np.where(spread, ss, 1.0), 0.0)
    return mean, np.sqrt(ss / (batches - 1) / batches), lag1


def batch_means_ci(x, level: float = CI_LEVEL) -> dict:
    """Batch-means t-intervals of the mean of each row of `x` (numpy arrays, one value per row).

    The lag-1 autocorrelation r of the batch means is tested at each count of batch_levels(n) in turn
    (one-sided: (r + 1/k) sqrt(k) > LAG1_Z rejects independent batch means; LAG1_Z_REFUSE at the last
    count); the first count that passes
    gives the CI, widened by sqrt((1 + rho) / (1 - rho)), rho = r + (1 + 3 r) / k (r's small-sample bias
    removed, clipped to [0, LAG1_MAX]): an AR(1) chain of batch means inflates the variance of their mean
    by about that factor. Rows whose batch means stay correlated at every count get no CI (`ok` False;
    `lag1` is then the first count's r)."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    shape = x.shape[:-1]
    out = {key: np.full(shape, np.nan) for key in ("mean", "se", "half_width", "lag1", "widened")}
    out["batches"] = np.zeros(shape, dtype=int)
    out["ok"] = np.zeros(shape, dtype=bool)
    levels = batch_levels(x.shape[-1])
    for k in levels:
        mean, se, r = batch_means(x, k)
        if np.isnan(out["lag1"]).all():
            out["lag1"] = r
        z = LAG1_Z if k != levels[-1] else LAG1_Z_REFUSE
        take = ~out["ok"] & ((r + 1 / k) * math.sqrt(k) <= z)
        rho = np.clip(r + (1 + 3 * r) / k, 0.0, LAG1_MAX)
        factor = np.sqrt((1 + rho) / (1 - rho))
        for key, value in (("mean", mean), ("se", se * factor), ("lag1", r), ("widened", factor), ("batches", k)):
            out[key] = np.where(take, value, out[key])
        out["half_width"] = np.where(take, t_crit(k - 1, level) * se * factor, out["half_width"])
        out["ok"] = out["ok"] | take
        if out["ok"].all():
            break
    return out


SHORT_LAG1 = 0.9
"""Above this lag-1 autocorrelation of the step times, a CI over fewer than MIN_STOP_STEPS steps carries a caveat:
its few batches cannot see the correlation (tests/cisim.py: 83-86% coverage at phi 0.98, 150-450 steps)."""


def step_lag1(step_times_s: Sequence[float]) -> float:
    """Lag-1 autocorrelation of a series of step times (0 for a constant series)."""
    x = list(step_times_s)
    mean = sum(x) / len(x)
    d = [v - mean for v in x]
    ss = sum(v * v for v in d)
    return sum(a * b for a, b in zip(d[1:], d[:-1])) / ss if ss > 0 else 0.0


def within_run_step_ci(step_times_s: Sequence[float], level: float = CI_LEVEL) -> tuple[dict | None, str | None]:
    """(step_time_ci's dict or None, why there is none or what was done to it: a note for the record)."""
    n = len(step_times_s)
    if not batch_count(n):
        return None, (
            f"{n} measured steps: a within-run CI needs at least {MIN_CI_STEPS} "
            "(more --max-time or --steps), or --repeats 2 or more for a run-to-run CI"
        )
    ci = {key: value.item() for key, value in batch_means_ci([list(step_times_s)], level).items()}
    k0, k = batch_count(n), int(ci["batches"])
    if not ci["ok"]:
        return None, (
            f"no within-run CI: the batch means stay autocorrelated (lag-1 r {ci['lag1']:.2f} over {k0} batches, "
            f"still correlated at {batch_levels(n)[-1]}): run longer (--max-time), or --repeats 2 or more"
        )
    note = None
    if k < k0:
        note = f"batch means autocorrelated over {k0} batches: {k} batches of {n // k} steps used"
    if ci["widened"] > 1.0005:
        note = (note + "; " if note else "") + (
            f"CI widened x{ci['widened']:.3f} for the batch means' lag-1 autocorrelation {ci['lag1']:.2f}"
        )
    lag1 = step_lag1(step_times_s)
    if n < MIN_STOP_STEPS and lag1 > SHORT_LAG1:
        note = (note + "; " if note else "") + (
            f"the steps' lag-1 autocorrelation is {lag1:.2f} over only {n} steps: this CI may under-cover (simulated "
            f"coverage 83-92% at lag-1 0.95-0.98 below {MIN_STOP_STEPS} steps): run longer (--max-time) or "
            "--repeats 2 or more"
        )
    return {
        "mean": ci["mean"],
        "se": ci["se"],
        "df": k - 1,
        "half_width": ci["half_width"],
        "rel_half_width": ci["half_width"] / ci["mean"],
        "batches": k,
        "batch_size": n // k,
        "lag1": ci["lag1"],
        "widened": ci["widened"],
    }, note


def step_time_ci(step_times_s: Sequence[float], level: float = CI_LEVEL) -> dict | None:
    """Batch-means t-interval of the mean step time of one run (batch_means_ci): None below MIN_CI_STEPS
    steps, or when the batch means stay autocorrelated at every batch size (within_run_step_ci says why)."""
    return within_run_step_ci(step_times_s, level)[0]


def target_met(ci: dict | None, target: float) -> bool:
    """Whether adaptive stopping may stop on this CI (over all MAX_BATCHES batches)."""
    return ci is not None and ci["batches"] >= MAX_BATCHES and ci["rel_half_width"] <= target


def rate_ci(rate: float, rel_half_width: float) -> tuple[float, float | None]:
    """CI of a rate (samples/s) from the relative CI half-width of the time per step it divides by."""
    return rate / (1 + rel_half_width), (rate / (1 - rel_half_width) if rel_half_width < 1 else None)


def within_run_ci(step_times_s: Sequence[float], throughput: float) -> dict:
    """Record fields of the within-run 95% CI of `throughput`, or a `ci_note` saying why there is none (or that
    the batches were lengthened, or the CI widened, for autocorrelated batch means)."""
    ci, note = within_run_step_ci(step_times_s)
    if ci is None:
        return {
            "throughput_ci_low": None,
            "throughput_ci_high": None,
            "ci_method": None,
            "ci_scope": None,
            "ci_note": note,
        }
    lo, hi = rate_ci(throughput, ci["rel_half_width"])
    return {
        "throughput_ci_low": lo,
        "throughput_ci_high": hi,
        "ci_method": f"batch means: t over {ci['batches']} batches of {ci['batch_size']} steps",
        "ci_scope": f"within-run noise (batch means over {ci['batches']} batches)",
        "ci_note": note,
    }


def repeats_ci(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float, float]:
    """(geometric mean, low, high): t-interval on log(values) over R >= 2 independent repeats."""
    if len(values) < 2 or min(values) <= 0:
        raise ValueError("need at least 2 positive values for a CI over repeats")
    return tuple(math.exp(v) for v in mean_ci([math.log(v) for v in values], level))


def mean_ci(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): t-interval of the mean of R >= 2 independent values."""
    if len(values) < 2:
        raise ValueError("need at least 2 values for a t-interval")
    m = statistics.fmean(values)
    hw = t_crit(len(values) - 1, level) * statistics.stdev(values) / math.sqrt(len(values))
    return m, m - hw, m + hw


def difference_ci(
    a: float, se_a: float, df_a: int, b: float, se_b: float, df_b: int, level: float = CI_LEVEL
) -> tuple[float, float]:
    """Welch-Satterthwaite t-interval of a - b from two independent estimates."""
    var = se_a**2 + se_b**2
    if var == 0:
        return a - b, a - b
    df = var**2 / (se_a**4 / df_a + se_b**4 / df_b)
    hw = t_crit(max(1, math.floor(df)), level) * math.sqrt(var)
    return a - b - hw, a - b + hw


def next_look(n: int) -> int:
    """Adaptive stopping looks at the CI only at MIN_STOP_STEPS * 2**j steps: few, geometrically spaced
    looks keep the coverage of the CI reported at the stop."""
    look = MIN_STOP_STEPS
    while look <= n:
        look *= 2
    return look


PILOT_STEPS = MIN_CI_STEPS
"""Most steps of the pilot that sizes a two-stage window (two_stage_steps). Under a time limit the pilot takes at
most PILOT_SHARE of it (two_stage_pilot_steps), the window the rest."""
PILOT_SHARE = 0.1
"""The share of --max-time a pilot may take: it only measures the pace."""


def two_stage_pilot_steps(first_steps: int, first_s: float, max_time_s: float) -> int:
    """Steps the pilot adds after its first `first_steps` (which took `first_s` seconds, the slowest rank's):
    up to PILOT_STEPS in all, within PILOT_SHARE of `max_time_s` (0: no limit)."""
    more = PILOT_STEPS - first_steps
    if max_time_s > 0 and first_s > 0:
        more = min(more, int(max_time_s * PILOT_SHARE * first_steps / first_s) - first_steps)
    return max(0, more)


def two_stage_steps(
    pilot_steps: int, pilot_s: float, min_steps: int, max_steps: int, max_time_s: float
) -> tuple[int, str]:
    """(K, why): the steps of a window sized in advance from the budget and the pilot's mean pace (never from
    the pilot's noise, nor from the window's own steps): what is left of `max_time_s` after the pilot, at the
    pilot's mean time per step, capped by `max_steps` and at least `min_steps` (--steps); without a time limit
    the step cap. A window whose length depended on the noise of the steps before it (a CI target met by a
    pilot's narrow CI, or by the window's own at a look) would be short exactly where the steps had been alike,
    and where slow phases are also noisier its mean would be biased; K here follows only the mean pace, and a
    window of fixed length gets an honest batch-means CI (its coverage and bias: benchmarks/two_stage_window.py).
    why: 'max_time' or 'max_steps'."""
    k, why = max_steps, "max_steps"
    if max_time_s > 0 and pilot_s > 0:
        fits = max(min_steps, int((max_time_s - pilot_s) * pilot_steps / pilot_s))
        if fits < k:
            k, why = fits, "max_time"
    return max(k, 1), why


def window_throughput(
    per_rank_segments: Sequence[Sequence[float]], steps: int, global_batch: int
) -> tuple[float, float]:
    """(measured window seconds, throughput). Each rank times segments of steps, each from a collective
    all ranks leave together (the barrier before the loop, a stopping check) to the end of its last
    synchronized step; a segment lasts as long as its slowest rank, and the window is their sum."""
    window = sum(max(seg) for seg in zip(*per_rank_segments))
    return window, global_batch * steps / window


def comm_metrics(
    step_sync_s: float | None,
    step_independent_s: float | None,
    allreduce_s: float | None,
    exposed_ci: tuple[float, float] | None = None,
) -> dict:
    """exposed_comm_s = step_sync - step_independent, raw (negative when the difference is within the
    noise; its CI says so); comm_overhead = exposed / step_sync; overlap_raw = 1 - exposed / standalone
    all-reduce time; overlap = overlap_raw clipped to [0, 1], for display only."""
    out = dict.fromkeys(
        ("exposed_comm_s", "comm_overhead", "overlap", "overlap_raw", "exposed_comm_ci_low", "exposed_comm_ci_high")
    )
    if not step_sync_s or step_independent_s is None:
        return out
    exposed = step_sync_s - step_independent_s
    out.update(exposed_comm_s=exposed, comm_overhead=exposed / step_sync_s)
    if exposed_ci is not None:
        out["exposed_comm_ci_low"], out["exposed_comm_ci_high"] = exposed_ci
    if allreduce_s and allreduce_s > 0:
        out["overlap_raw"] = 1.0 - exposed / allreduce_s
        out["overlap"] = min(1.0, max(0.0, out["overlap_raw"]))
    return out


def bus_bandwidth(size_bytes: float, seconds: float, world_size: int) -> tuple[float, float]:
    """All-reduce bandwidths (bytes/s) as nccl-tests defines them: algbw = S / t, busbw = algbw * 2 (n - 1) / n."""
    if seconds <= 0:
        raise ValueError("seconds must be positive")
    if world_size < 1:
        raise ValueError("world_size must be >= 1")
    algbw = size_bytes / seconds
    return algbw, algbw * 2 * (world_size - 1) / world_size

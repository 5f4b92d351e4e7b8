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
# run to run (a t-interval over repeats). Coverage is checked by simulation: distbench/cisim.py.

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
over cv 1-15%, phi 0-0.8 and 1% outliers of 10 sd; see distbench/cisim.py)."""


def t_cdf(t: float, df: int) -> float:
    """Student-t CDF for integer df, exact: Abramowitz & Stegun 26.7.3/26.7.4 in theta = atan(t / sqrt(df))."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 c^2 + 2*4/(3*5) c^4 + ...))
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        a = 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    else:  # even: sin (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ...)
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        a = math.sin(theta) * total
    return 0.5 + math.copysign(a / 2, t)


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
    """Batches for a within-run CI over n steps (0: too few steps for one)."""
    k = min(MAX_BATCHES, n // MIN_BATCH_STEPS)
    return k if k >= MIN_BATCHES else 0


def batch_means(x, batches: int):
    """Mean and its standard error over the last axis of `x` by non-overlapping batch means (the first
    n mod `batches` samples left out)."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    b = x.shape[-1] // batches
    y = x[..., x.shape[-1] - batches * b :].reshape(*x.shape[:-1], batches, b).mean(axis=-1)
    return y.mean(axis=-1), y.std(axis=-1, ddof=1) / math.sqrt(batches)


def step_time_ci(step_times_s: Sequence[float], level: float = CI_LEVEL) -> dict | None:
    """Batch-means t-interval of the mean step time of one run; None below MIN_CI_STEPS steps."""
    k = batch_count(len(step_times_s))
    if not k:
        return None
    mean, se = (float(v) for v in batch_means(step_times_s, k))
    hw = t_crit(k - 1, level) * se
    return {
        "mean": mean,
        "se": se,
        "df": k - 1,
        "half_width": hw,
        "rel_half_width": hw / mean,
        "batches": k,
        "batch_size": len(step_times_s) // k,
    }


def target_met(ci: dict | None, target: float) -> bool:
    """Whether adaptive stopping may stop on this CI (over all MAX_BATCHES batches)."""
    return ci is not None and ci["batches"] >= MAX_BATCHES and ci["rel_half_width"] <= target


def rate_ci(rate: float, rel_half_width: float) -> tuple[float, float | None]:
    """CI of a rate (samples/s) from the relative CI half-width of the time per step it divides by."""
    return rate / (1 + rel_half_width), (rate / (1 - rel_half_width) if rel_half_width < 1 else None)


def within_run_ci(step_times_s: Sequence[float], throughput: float) -> dict:
    """Record fields of the within-run 95% CI of `throughput`, or a note saying why there is none."""
    ci = step_time_ci(step_times_s)
    if ci is None:
        return {
            "throughput_ci_low": None,
            "throughput_ci_high": None,
            "ci_method": None,
            "ci_scope": None,
            "ci_note": f"{len(step_times_s)} measured steps: a within-run CI needs at least {MIN_CI_STEPS} "
            "(more --max-time or --steps), or --repeats 2 or more for a run-to-run CI",
        }
    lo, hi = rate_ci(throughput, ci["rel_half_width"])
    return {
        "throughput_ci_low": lo,
        "throughput_ci_high": hi,
        "ci_method": f"batch means: t over {ci['batches']} batches of {ci['batch_size']} steps",
        "ci_scope": f"within-run noise (batch means over {ci['batches']} batches)",
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

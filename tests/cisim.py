"""Simulated step-time series, and the coverage and bias of distbench's confidence intervals on them.

One run's step times: 1 + cv * AR(1) noise (lag-1 correlation phi, Student-t(4) innovations at unit
variance) plus outliers: with probability outlier_p a step is slower by cv * outlier_scale * Exp(1).
The true mean step time is 1 + outlier_p * cv * outlier_scale, the true throughput its inverse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distbench.results import stats


@dataclass(frozen=True)
class SeriesModel:
    phi: float = 0.5
    cv: float = 0.05
    outlier_p: float = 0.02
    outlier_scale: float = 4.0

    @property
    def true_mean(self) -> float:
        return 1.0 + self.outlier_p * self.cv * self.outlier_scale

    def label(self) -> str:
        return f"phi {self.phi:g}, cv {self.cv:.0%}, outliers {self.outlier_p:.0%} x {self.outlier_scale:g} sd"


def step_series(rng: np.random.Generator, runs: int, n: int, model: SeriesModel) -> np.ndarray:
    e = rng.standard_t(4, size=(runs, n)) / math.sqrt(2.0)  # t(4) has variance 2
    z = np.empty_like(e)
    z[:, 0] = e[:, 0]
    s = math.sqrt(1 - model.phi**2)
    for t in range(1, n):
        z[:, t] = model.phi * z[:, t - 1] + s * e[:, t]
    slow = (rng.random((runs, n)) < model.outlier_p) * rng.exponential(model.cv * model.outlier_scale, (runs, n))
    return 1.0 + model.cv * z + slow


def _t_hw(x: np.ndarray, r: int) -> np.ndarray:
    """Half width of the t-interval of the mean of each row of r values."""
    return stats.t_crit(r - 1) * x.std(axis=1, ddof=1) / math.sqrt(r)


def _run_means(rng: np.random.Generator, trials: int, r: int, steps: int, model: SeriesModel) -> np.ndarray:
    """trials x r runs' mean step times."""
    return step_series(rng, trials * r, steps, model).reshape(trials, r, steps).mean(axis=2)


def _result(
    mean: np.ndarray, hw: np.ndarray, model: SeriesModel, steps: np.ndarray, ok: np.ndarray | None = None
) -> dict:
    """Coverage over the runs given a CI (`ok`; all by default), and the share of runs given one."""
    mu = model.true_mean
    ok = np.ones(mean.shape, dtype=bool) if ok is None else ok
    return {
        "coverage": float(np.mean(np.abs(mean[ok] - mu) <= hw[ok])) if ok.any() else float("nan"),
        "bias": float(np.mean(1.0 / mean) * mu - 1.0),  # of throughput = 1 / mean step time
        "median_rel_half_width": float(np.median(hw[ok] / mean[ok])) if ok.any() else float("nan"),
        "median_steps": float(np.median(steps)),
        "given": float(np.mean(ok)),
    }


def fixed_steps(rng: np.random.Generator, model: SeriesModel, n: int, runs: int = 2000) -> dict:
    """Within-run CI (batch means) after a fixed number of steps. The run's mean is its estimate whether or
    not it is given a CI (bias); coverage is over the runs given one."""
    x = step_series(rng, runs, n, model)
    ci = stats.batch_means_ci(x)
    mean = np.where(ci["ok"], ci["mean"], x.mean(axis=1))
    return _result(mean, ci["half_width"], model, np.full(runs, n), ci["ok"])


def fixed_batches(rng: np.random.Generator, model: SeriesModel, n: int, runs: int = 2000) -> dict:
    """For comparison: the rule before the lag-1 test (stats.batch_count(n) batches, no test, no widening)."""
    x = step_series(rng, runs, n, model)
    k = stats.batch_count(n)
    mean, se, _ = stats.batch_means(x, k)
    return _result(mean, stats.t_crit(k - 1) * se, model, np.full(runs, n))


def adaptive(
    rng: np.random.Generator,
    model: SeriesModel,
    target: float,
    *,
    first: int = 20,
    max_steps: int = 4800,
    runs: int = 2000,
) -> dict:
    """distbench/workers/stopping.measure's rule: look at the CI only at stats.next_look() step counts; stop at the
    first look within `target`, else at max_steps (--max-time); report the CI of all steps at the stop."""
    looks = []
    n = first
    while n < max_steps:
        if stats.batch_count(n):
            looks.append(n)
        n = stats.next_look(n)
    looks.append(max_steps)
    x = step_series(rng, runs, max_steps, model)
    stop = np.full(runs, len(looks) - 1)
    means, hws, oks = np.empty((len(looks), runs)), np.empty((len(looks), runs)), np.empty((len(looks), runs), bool)
    for j, n in enumerate(looks):
        ci = stats.batch_means_ci(x[:, :n])
        means[j], hws[j], oks[j] = np.where(ci["ok"], ci["mean"], x[:, :n].mean(axis=1)), ci["half_width"], ci["ok"]
        may_stop = ci["ok"] & (ci["batches"] >= stats.MAX_BATCHES)  # as stats.target_met
        stop = np.where((stop == len(looks) - 1) & may_stop & (hws[j] / means[j] <= target) & (j < stop), j, stop)
    idx = np.arange(runs)
    return _result(means[stop, idx], hws[stop, idx], model, np.asarray(looks)[stop], oks[stop, idx])


def naive_adaptive(
    rng: np.random.Generator,
    model: SeriesModel,
    target: float,
    *,
    first: int = 20,
    every: int = 5,
    max_steps: int = 4800,
    runs: int = 2000,
) -> dict:
    """For comparison: a normal CI over steps taken as independent, checked every `every` steps."""
    x = step_series(rng, runs, max_steps, model)
    n = np.arange(1, max_steps + 1)
    csum, csq = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
    mean = csum / n
    sd = np.sqrt(np.maximum(csq / n - mean**2, 0) * n / np.maximum(n - 1, 1))
    hw = 1.959964 * sd / np.sqrt(n)
    checked = (n >= first) & ((n - first) % every == 0)
    ok = checked & (hw / mean <= target)
    stop = np.where(ok.any(axis=1), ok.argmax(axis=1), max_steps - 1)
    idx = np.arange(runs)
    return _result(mean[idx, stop], hw[idx, stop], model, stop + 1)


def repeats(
    rng: np.random.Generator, model: SeriesModel, r: int, *, run_sd: float = 0.02, steps: int = 50, trials: int = 2000
) -> dict:
    """t-interval on log throughput over r repeats; each repeat is a run of `steps` steps whose speed
    also varies run to run (a heavy-tailed factor: exp(run_sd * t(4) / sqrt 2)). The truth is the
    median run's throughput, 1 / true mean step time."""
    x = _run_means(rng, trials, r, steps, model)
    logs = -np.log(x * np.exp(run_sd * rng.standard_t(4, size=(trials, r)) / math.sqrt(2.0)))
    m, hw = logs.mean(axis=1), _t_hw(logs, r)
    truth = -math.log(model.true_mean)
    return {
        "coverage": float(np.mean(np.abs(m - truth) <= hw)),
        "bias": float(np.mean(np.exp(m)) * model.true_mean - 1.0),
        "median_rel_half_width": float(np.median(np.expm1(hw))),
        "median_steps": float(steps * r),
    }


def paired_exposed(
    rng: np.random.Generator,
    model: SeriesModel,
    r: int,
    *,
    exposed: float = 0.05,
    drift_sd: float = 0.03,
    trend: float = 0.0,
    alternate: bool = True,
    steps: int = 50,
    trials: int = 2000,
) -> dict:
    """Paired t-interval of exposed communication (sync - no-sync time per step) over r pairs of runs.
    The speed drifts from pair to pair (sd drift_sd) and trends by `trend` per run; sync steps are
    `exposed` longer on average. `alternate`: pairs run A B, B A, ... (as distbench.kinds.measure does). The
    truth is the exposed time at the mean speed of the whole measurement."""
    drift = np.exp(drift_sd * rng.standard_normal((trials, r)))
    swap = np.array([alternate and i % 2 for i in range(r)], dtype=int)
    pos_a, pos_b = 2 * np.arange(r) + swap, 2 * np.arange(r) + 1 - swap
    speed = 1.0 + trend * np.arange(2 * r)
    a = (_run_means(rng, trials, r, steps, model) + exposed) * speed[pos_a]
    b = _run_means(rng, trials, r, steps, model) * speed[pos_b]
    d = (a - b) * drift
    m, hw = d.mean(axis=1), _t_hw(d, r)
    # E[drift] = exp(sd^2 / 2); the mean speed over all 2r runs
    truth = exposed * math.exp(drift_sd**2 / 2) * float(speed.mean())
    return {
        "coverage": float(np.mean(np.abs(m - truth) <= hw)),
        "bias": float(np.mean(m) / truth - 1.0),
        "median_rel_half_width": float(np.median(hw / truth)),
        "median_steps": float(steps * r * 2),
    }


def throughput_ratio(
    rng: np.random.Generator, model: SeriesModel, n: int, *, ratio: float = 0.9, trials: int = 2000
) -> dict:
    """CI of a throughput ratio B/A of two independent runs: each side's within-run CI as a throughput CI
    (stats.rate_ci), combined on the log scale (analysis.ratio_ci_from_cis). The truth is `ratio`."""
    from distbench.analysis import ratio_ci_from_cis

    sides = []
    for scale in (1.0, 1.0 / ratio):
        x = step_series(rng, trials, n, model) * scale
        ci = stats.batch_means_ci(x)
        mean = np.where(ci["ok"], ci["mean"], x.mean(axis=1))
        sides.append((1.0 / mean, ci["half_width"] / mean, ci["ok"]))
    covered, widths = 0, []
    for (ta, ra, oa), (tb, rb, ob) in zip(zip(*sides[0]), zip(*sides[1])):
        if not (oa and ob):
            continue  # a refused CI: distbench gives no ratio CI either
        ci_a, ci_b = stats.rate_ci(ta, ra), stats.rate_ci(tb, rb)
        if ci_a[1] is None or ci_b[1] is None:
            continue  # a CI wider than its estimate: distbench gives no ratio CI either
        lo, hi = ratio_ci_from_cis(ta, ci_a, tb, ci_b)
        covered += lo <= ratio <= hi
        widths.append((hi - lo) / 2 / ratio)
    return {
        "coverage": covered / max(1, len(widths)),
        "bias": 0.0,
        "median_rel_half_width": float(np.median(widths)),
        "median_steps": float(n),
        "intervals": len(widths),
    }


NOISE_LAWS = ("t4", "normal", "lognormal")
"""The run-to-run noise laws of the gate's simulations, each at unit variance."""


def run_noise(rng: np.random.Generator, law: str, size) -> np.ndarray:
    """Run-to-run noise of log throughput at unit variance: 't4' Student-t(4) / sqrt 2 (heavy tailed), 'normal',
    or 'lognormal': minus a centred lognormal of shape 0.5 (skewed: a few runs much slower), standardized."""
    if law == "t4":
        return rng.standard_t(4, size=size) / math.sqrt(2.0)
    if law == "normal":
        return rng.standard_normal(size)
    if law == "lognormal":
        s = 0.5
        mean, var = math.exp(s * s / 2), (math.exp(s * s) - 1) * math.exp(s * s)
        return -(np.exp(s * rng.standard_normal(size)) - mean) / math.sqrt(var)
    raise ValueError(f"unknown noise law {law!r}")


GATE_PATTERNS = {
    "spread 3x": {"hetero": 3.0},
    "one point 5x": {"noisy": 5.0},
    "5 of 20 points 3x": {"noisy": 3.0, "noisy_points": 5},
}
"""The heterogeneity patterns of the issue-34 acceptance: the points' sd spread 3x; one point 5x noisier; 5 of 20
points 3x noisier."""


def gate_sweeps(
    rng: np.random.Generator,
    *,
    points: int = 20,
    r: int = 3,
    run_sd: float = 0.025,
    effect: float = 1.0,
    hetero: float = 1.0,
    noisy: float = 1.0,
    noisy_points: int = 1,
    law: str = "t4",
    floor: bool = False,
    threshold: float = 0.05,
    one_df_points: int = 0,
    slowed_points: int = 1,
    b_noise: float = 1.0,
    slowed_noise: float = 1.0,
    trials: int = 4000,
) -> dict:
    """`distbench compare` of simulated sweeps A and B of `points` points, exactly as compare._judge judges
    them (distbench.results.gatestats: each point's variance pooled over A's and B's repeats, moderated
    across the points, t on log throughput, Holm one-sided for regressions). Each run's log
    throughput varies run to run by run_sd x the unit-variance noise `law` (run_noise; independent between
    runs and points); the points' run_sd spread by a factor `hetero` from the quietest to the noisiest
    (geometrically), and the last `noisy_points` points' are `noisy` times that (points much noisier than the
    rest: the moderation's assumption, one noise level per sweep, broken). B's median-noise point (index
    points // 2 - 1: among the quiet ones in every pattern) is `effect` times A's (the others are A/A);
    `slowed_points` > 1: that many, from there towards the quieter points. `b_noise`: every point's run_sd in B
    that many times A's (B on a busier machine: A and B no longer share a point's variance); `slowed_noise`: the
    slowed points' run_sd in B that many times more (a change that also adds noise). No
    shift common to a whole sweep (another time of day, a busier machine) is simulated: repeats do not see
    one, only a noise floor does. r repeats per side; `floor`: r = 1 and the variances from a third sweep C,
    an A/A run of A (compare --noise-floor). family_false_alarm: share of comparisons calling any A/A point a
    regression; power: share calling the changed point one (per slowed point, averaged; all_caught: share
    calling every slowed point one; per_point: each point's share called a regression). `one_df_points`: that many of B's first points lost one repeat (a failed
    run): R - 1 runs, R - 2 df there. noise_note: share
    of comparisons in which compare says B's run-to-run noise differs from A's (gatestats.noise_ratio_p <=
    ALPHA over the points with equal df on both sides; NaN on a floor); it draws no random numbers, so the other
    outputs are as without it."""
    from distbench.results import gatestats

    sd = run_sd * np.exp(np.linspace(-math.log(hetero) / 2, math.log(hetero) / 2, points))
    sd[points - noisy_points :] *= noisy
    reps = 1 if floor else r
    target = [points // 2 - 1 - i for i in range(slowed_points)]
    sd_b = sd * b_noise
    sd_b[target] *= slowed_noise

    def runs(scale: np.ndarray = sd) -> np.ndarray:
        return scale[None, :, None] * run_noise(rng, law, (trials, points, reps))

    a, b = runs(), runs(sd_b)
    b[:, target, :] += math.log(effect)
    n_b = np.full(points, float(reps))
    if one_df_points and not floor:
        b[:, :one_df_points, reps - 1] = np.nan
        n_b[:one_df_points] = reps - 1
    ma, mb = a.mean(axis=-1), np.nanmean(b, axis=-1)
    fires = math.nan  # a noise floor has no repeats: compare's noise-ratio check needs them on both sides
    if floor:
        c = runs()[..., 0]
        var, df, _, _ = gatestats.moderate((c - a[..., 0]) ** 2 / 2, np.ones(points))
        d, se, df = gatestats.welch(ma, var, reps, df, mb, var, reps, df, shared=True)
    else:
        sides = (a.var(axis=-1, ddof=1), reps - 1.0, np.nanvar(b, axis=-1, ddof=1), n_b - 1)
        var, df = gatestats.pooled(*sides)
        var, df, _, _ = gatestats.moderate(var, df, gatestats.spread_excess(*sides))
        fires = float((gatestats.noise_ratio_p(*sides)[0] <= gatestats.ALPHA).mean())
        d, se = mb - ma, np.sqrt(var * (1 / reps + 1 / n_b))
    _, _, code = gatestats.verdict_codes(d, se, df, threshold)
    regression = code == -1
    null = np.delete(regression, target, axis=1) if effect != 1.0 else regression
    return {
        "family_false_alarm": float(null.any(axis=1).mean()),
        "power": float(regression[:, target].mean()) if effect != 1.0 else float("nan"),
        "all_caught": float(regression[:, target].all(axis=1).mean()) if effect != 1.0 else float("nan"),
        "per_point": regression.mean(axis=0),
        "noise_note": fires,
        "trials": trials,
    }

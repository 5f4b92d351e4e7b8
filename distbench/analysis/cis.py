"""95% confidence intervals of one record's throughput, speedup and efficiency, and of the ratio of two records'
throughputs (from the records' own CIs, or batch means over their step times)."""

from __future__ import annotations

import math
from typing import Sequence

from distbench.analysis.records import num
from distbench.analysis.sweep import Sweep
from distbench.results import stats

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def throughput_ci(record: dict) -> tuple[float, float] | None:
    """The record's own 95% CI of throughput, when it has a sane one."""
    lo, hi = num(record.get("throughput_ci_low")), num(record.get("throughput_ci_high"))
    if lo is None or hi is None or lo <= 0 or hi < lo:
        return None
    return lo, hi


def scaled_ci(record: dict, value_key: str, baseline: dict | None = None) -> tuple[float, float] | None:
    """95% CI of speedup or efficiency. With the baseline's CI too, both are combined on the log scale
    (speedup = throughput / baseline throughput); else only the point's own throughput CI is used."""
    ci, value, estimate = throughput_ci(record), num(record.get(value_key)), num(record.get("throughput"))
    if ci is None or value is None or not estimate:
        return None
    base_ci = throughput_ci(baseline) if baseline and baseline is not record else None
    base_thr = num(baseline.get("throughput")) if baseline else None
    if base_ci and base_thr:
        ci = ratio_ci_from_cis(base_thr, base_ci, estimate, ci)
        estimate /= base_thr
    # the value scales with the estimate (throughput, or speedup when the baseline is included)
    return value * ci[0] / estimate, value * ci[1] / estimate


def steps_throughput_ci(step_times_s: Sequence[float], throughput: float) -> tuple[float, float]:
    """Within-run 95% CI of a record's throughput from its step times (batch means,
    stats.step_time_ci), for records that carry no CI of their own."""
    times = list(step_times_s)
    ci = stats.step_time_ci(times) if times and min(times) > 0 else None
    if ci is None and len(times) >= stats.MIN_CI_STEPS:
        raise ValueError("no within-run CI: the batch means stay autocorrelated")
    if ci is None:
        raise ValueError(f"too few steps ({len(times)} < {stats.MIN_CI_STEPS})")
    lo, hi = stats.rate_ci(throughput, ci["rel_half_width"])
    if hi is None:
        raise ValueError("a CI wider than the estimate")
    return lo, hi


def log_se(ci: tuple[float, float], df: float | None = None) -> float:
    """Standard error on the log scale of a value with this 95% CI: a t-interval with `df` degrees of
    freedom (a normal one when df is None)."""
    crit = stats.t_crit(max(1, math.floor(df + 1e-9))) if df else Z95
    return (math.log(ci[1]) - math.log(ci[0])) / (2 * crit)


def ci_df(record: dict) -> int | None:
    """Degrees of freedom of the record's own throughput CI: R - 1 for a t-interval over R repeats, else None
    (a within-run CI's df is not stored; it is taken as normal)."""
    reps = [r for r in record.get("repeats") or [] if r.get("status", "ok") == "ok"]
    return len(reps) - 1 if len(reps) >= 2 and str(record.get("ci_scope") or "").startswith("run-to-run") else None


def ratio_ci_from_cis(
    a: float,
    ci_a: tuple[float, float],
    b: float,
    ci_b: tuple[float, float],
    df_a: float | None = None,
    df_b: float | None = None,
) -> tuple[float, float]:
    """CI of b/a from each side's 95% CI, combined on the log scale (delta method, independent sides); a
    side's CI with df degrees of freedom is a t-interval, and the two combine with Welch-Satterthwaite df."""
    se_a, se_b = log_se(ci_a, df_a), log_se(ci_b, df_b)
    se = math.hypot(se_a, se_b)
    r = math.log(b / a)
    if se == 0 or not (df_a or df_b):
        return math.exp(r - Z95 * se), math.exp(r + Z95 * se)
    df = se**4 / sum(s**4 / d for s, d in ((se_a, df_a), (se_b, df_b)) if d and s > 0)
    crit = stats.t_crit(max(1, math.floor(df + 1e-9)))
    return math.exp(r - crit * se), math.exp(r + crit * se)


def throughput_ratio_ci(sweep_a: "Sweep", a: dict, sweep_b: "Sweep", b: dict) -> tuple[tuple[float, float] | None, str]:
    """CI of throughput(b) / throughput(a) and how it was obtained ('records': both records' CIs,
    'batch means': both from step times, 'mixed'), or (None, why not)."""
    thr_a, thr_b = num(a.get("throughput")), num(b.get("throughput"))
    if not thr_a or not thr_b:
        return None, "no throughput"
    ci_a, ci_b = throughput_ci(a), throughput_ci(b)
    how = "records" if ci_a and ci_b else "mixed" if ci_a or ci_b else "batch means"
    df_a, df_b = ci_df(a) if ci_a else None, ci_df(b) if ci_b else None
    try:
        ci_a = ci_a or steps_throughput_ci(sweep_a.step_times(a), thr_a)
        ci_b = ci_b or steps_throughput_ci(sweep_b.step_times(b), thr_b)
    except ValueError as exc:
        return None, str(exc)
    return ratio_ci_from_cis(thr_a, ci_a, thr_b, ci_b, df_a, df_b), how


def efficiency_ratio_ci(
    best: dict, other: dict, sweep: "Sweep | None", key: str = "efficiency"
) -> tuple[float, float] | None:
    """95% CI of efficiency(other) / efficiency(best) at the same N (`key`: efficiency or efficiency_per_core),
    from the throughput ratio's CI (records' CIs or batch means over step times); the baselines' uncertainty is
    not included."""
    thr_b, thr_o = num(best.get("throughput")), num(other.get("throughput"))
    eff_b, eff_o = num(best.get(key)), num(other.get(key))
    if not (thr_b and thr_o and eff_b and eff_o):
        return None
    if sweep is None:
        ci_b, ci_o = throughput_ci(best), throughput_ci(other)
        ci = ratio_ci_from_cis(thr_b, ci_b, thr_o, ci_o) if ci_b and ci_o else None
    else:
        ci, _ = throughput_ratio_ci(sweep, best, sweep, other)
    if ci is None:
        return None
    scale = (eff_o / thr_o) / (eff_b / thr_b)  # baseline ratio when the frameworks differ, else 1
    return ci[0] * scale, ci[1] * scale

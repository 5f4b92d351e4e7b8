"""Measuring one planned point: repeats, the independent (no-sync) variant, CI and noise flags.

Each repeat and the independent variant are separate fresh process trees (distbench.launch).
The combined record keeps every measured step time; throughput is the median over repeats with a
bootstrap 95% CI (over repeats when there are several, over steps when there is one).
"""
from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from distbench import stats
from distbench.launch import run_point
from distbench.plan import PlannedPoint
from distbench.record import add_step_metrics

NOISY_CV = 0.10
"""Coefficient of variation of step times above which a point is flagged noisy."""


def _summary(record: dict) -> dict:
    keep = ("status", "reason", "throughput", "step_time_median_s", "step_time_cv", "measured_steps",
            "stopping", "allreduce_s", "record_id")
    return {k: record.get(k) for k in keep}


def combine_repeats(runs: list[dict], noisy_cv: float = NOISY_CV) -> dict:
    """One point record from R repeat records of the same config."""
    runs = [add_step_metrics(r) for r in runs]
    bad = [r for r in runs if r["status"] != "ok"]
    record = dict(bad[0] if bad else runs[0])
    record["repeats"] = [_summary(r) for r in runs]
    samples = [s for r in runs for s in (r.get("telemetry_samples") or [])]
    if samples:
        record["telemetry_samples"] = samples
    if bad:
        if len(runs) > 1:
            record["reason"] = f"repeat {runs.index(bad[0]) + 1} of {len(runs)}: {bad[0].get('reason')}"
        return record
    all_steps = [t for r in runs for t in r["step_times_s"]]
    record["step_times_s"] = all_steps
    record.update(stats.step_stats(all_steps, record["global_batch"]))
    thr = [r["throughput"] for r in runs]
    if len(runs) > 1:
        record["throughput"] = statistics.median(thr)
        lo, hi = stats.bootstrap_median_ci(thr)
        record["ci_method"] = f"bootstrap over {len(runs)} repeats (median)"
    elif len(all_steps) >= 2:
        lo, hi = stats.bootstrap_throughput_ci(all_steps, record["global_batch"])
        record["ci_method"] = f"bootstrap over {len(all_steps)} steps"
    else:
        lo = hi = None
    record["throughput_ci_low"], record["throughput_ci_high"] = lo, hi
    ar = [r["allreduce_s"] for r in runs if r.get("allreduce_s")]
    record["allreduce_s"] = statistics.median(ar) if ar else None
    record["noisy"] = record["step_time_cv"] > noisy_cv
    return record


def measure_point(point: PlannedPoint, workdir: Path, *, timeout_s: float, repeats: int = 1,
                  noisy_cv: float = NOISY_CV, telemetry_interval_s: float = 0.0) -> dict:
    """Run a planned point R times, plus its independent variant when it measures communication."""
    cfg = point.config
    runs = [run_point(point.strategy, cfg, workdir / f"r{r + 1}", timeout_s, telemetry_interval_s)
            for r in range(repeats)]
    record = combine_repeats(runs, noisy_cv)
    if record["status"] == "ok" and cfg.measure_comm:
        indep_cfg = dataclasses.replace(cfg, sync=False, measure_comm=False)
        indep = add_step_metrics(run_point(point.strategy, indep_cfg, workdir / "independent", timeout_s))
        record["independent"] = _summary(indep)
        if indep["status"] == "ok":
            record.update(stats.comm_metrics(record["step_time_median_s"], indep["step_time_median_s"],
                                             record.get("allreduce_s")))
        else:
            record["comm_note"] = f"independent variant {indep['status']}: {indep.get('reason')}"
    for key in ("comm_overhead", "exposed_comm_s", "allreduce_s", "overlap"):
        record.setdefault(key, None)
    return record

"""Measuring one planned point: repeats, the independent (no-sync) variant, CIs and noise flags.

Each repeat is a separate fresh process tree (distbench.run.launch). With communication measured, where
the strategy allows (Strategy.nosync_in_process) each repeat runs A T B T A in one process tree (the
real step, the tiny-collective variant, the no-sync variant, re-wrapping the same replicas: PointConfig.
nosync_order), which splits the step into communication, straggler wait and compute (distbench.results.split);
otherwise the synchronized (A) and independent (B) runs alternate as process trees of their own, A B,
B A, ..., R pairs. The first A sets the step count (adaptive stopping; where A T B T A runs in one process
tree, a pilot sizes it in advance: workers/common.measure_two_stage); every run after it runs as many steps. Throughput: one run's
over its measured window, or over R repeats the geometric mean, with a 95% CI that says what it
covers (`ci_scope`): within-run noise (batch means over the steps of one run) or run to run (t over
R repeats). Every measured step time is kept for the step-time distribution.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from distbench.core.workload import Measurement
from distbench.results import split, stats
from distbench.results.record import add_step_metrics, build_record
from distbench.run.launch import run_point
from distbench.run.plan import PlannedPoint

NOSYNC_KEPT = ("step_times_s", "peak_memory_bytes", "peak_memory_per_rank_bytes", "tiny_collective_calls")
"""What a no-sync run keeps beside its summary (and its nosync_* and data_wait_* fields): every sample."""
NOISY_CV = Measurement.noisy_cv  # --noisy-cv's default, declared in core/workload.py
"""Coefficient of variation of step times above which a point is flagged noisy."""


def _summary(record: dict) -> dict:
    keep = (
        "status",
        "reason",
        "throughput",
        "time_per_step_s",
        "step_time_median_s",
        "step_time_cv",
        "measured_steps",
        "measured_window_s",
        "stopping",
        "allreduce_s",
        "record_id",
        "launch",
        "per_rank_step_times_s",
        "ran_alone",
    )  # launch: the wall-time split (analysis.wall_split); per-rank step times: every sample of every repeat
    return {k: record.get(k) for k in keep}


def _in_process_runs(record: dict) -> dict[str, list[dict]]:
    """The runs measured in `record`'s processes besides the point itself (PointConfig.nosync_order), by
    letter ('T', 'B', and the closing 'A'), each as a run of its own; their span goes into the run's
    `stopping` so the wall-time split can count it. A failed run gives {'B': [its status and reason]}.
    In place, on the run's own record before it is combined: its `segments` are taken out of it."""
    segments = record.pop("segments", None)
    if record["status"] != "ok" or not segments:
        if record["status"] == "ok":
            return {"B": [{"status": "failed", "reason": "the synchronized run wrote no variant segments"}]}
        return {"B": [{"status": record["status"], "reason": record.get("reason")}]}
    out: dict[str, list[dict]] = {}
    for seg in segments:
        out.setdefault(seg.pop("variant"), []).append(
            add_step_metrics({"status": "ok", "global_batch": record["global_batch"], **seg})
        )
    record["stopping"]["nosync_span"] = [
        segments[0]["stopping"]["segment_start"],
        segments[-1]["stopping"]["window"][1],
    ]
    return out


def _kept(run: dict) -> dict:
    """A variant run as the record keeps it: its summary and every sample."""
    return {
        **_summary(run),
        **{k: v for k, v in run.items() if k in NOSYNC_KEPT or k.startswith(("nosync_", "data_wait"))},
    }


def combine_repeats(runs: list[dict], noisy_cv: float = NOISY_CV) -> dict:
    """One point record from R repeat records of the same config: a copy of the first run's record (of the
    first failed run's, if any), with the measurement stage (repeat_fields) merged by build_record. Keys that
    stop being true of the pooled record are removed from the copy: a single run's per-rank step times
    (pooled repeats keep theirs per repeat) and its ci_note (the pooled CI says its own)."""
    runs = [add_step_metrics(r) for r in runs]
    bad = [r for r in runs if r["status"] != "ok"]
    record = dict(bad[0] if bad else runs[0])
    if not bad:
        if len(runs) > 1:  # per repeat in record["repeats"]; the first run's alone would not match the pooled steps
            record.pop("per_rank_step_times_s", None)
        record.pop("ci_note", None)
    return build_record(record, measurement=repeat_fields(runs, record, noisy_cv))


def repeat_fields(runs: list[dict], record: dict, noisy_cv: float = NOISY_CV) -> dict:
    """The measurement fields of R repeats (their step metrics filled) for the point `record` (read, not
    changed): every repeat's summary and telemetry samples; for ok repeats the pooled step times and their
    statistics, throughput with its CI (run to run over R > 1 repeats, else within the run), the median
    standalone all-reduce and the noisy flag; for a failed repeat, which one failed."""
    bad = [r for r in runs if r["status"] != "ok"]
    out: dict = {"repeats": [_summary(r) for r in runs]}
    samples = [s for r in runs for s in (r.get("telemetry_samples") or [])]
    if samples:
        out["telemetry_samples"] = samples
    if bad:
        if len(runs) > 1:
            out["reason"] = f"repeat {runs.index(bad[0]) + 1} of {len(runs)}: {bad[0].get('reason')}"
        return out
    all_steps = [t for r in runs for t in r["step_times_s"]]
    out["step_times_s"] = all_steps
    out["measured_window_s"] = sum(r.get("measured_window_s") or sum(r["step_times_s"]) for r in runs)
    out.update(stats.step_stats(all_steps, record["global_batch"], out["measured_window_s"]))
    if len(runs) > 1:
        thr, lo, hi = stats.repeats_ci([r["throughput"] for r in runs])
        out.update(
            throughput=thr,
            time_per_step_s=record["global_batch"] / thr,
            throughput_ci_low=lo,
            throughput_ci_high=hi,
            ci_method=f"t-interval on log throughput over {len(runs)} repeats (geometric mean)",
            ci_scope=f"run-to-run (t over {len(runs)} repeats)",
        )
    else:
        out.update(stats.within_run_ci(all_steps, out["throughput"]))
        if out["ci_scope"] and record["world_size"] > 1:
            # The batch means run over the per-step slowest-rank times, applied to the window throughput;
            # the coverage simulations (tests/cisim.py) model one series.
            out["ci_scope"] += " of the per-step slowest-rank times (coverage simulated for one series)"
    ar = [r["allreduce_s"] for r in runs if r.get("allreduce_s")]
    out["allreduce_s"] = statistics.median(ar) if ar else None
    out["noisy"] = out["step_time_cv"] > noisy_cv
    return out


def exposed_comm_ci(sync_runs: list[dict], indep_runs: list[dict]) -> tuple[tuple[float, float] | None, str]:
    """95% CI of exposed communication per step (time per step, sync - independent) and its scope.

    R >= 2 pairs: a paired t-interval over the pairs' differences. Each pair ran back to back (A B,
    B A, ...: in one process tree or two), so a slow drift of the machine moves both of its runs and
    cancels in the difference, and the pairs are independent process trees: this covers run-to-run
    variation. One pair: a Welch interval from the two runs' within-run (batch-means) standard errors,
    treating the two windows as independent (two consecutive windows, of one process tree or of two);
    it covers only the noise within those two windows, not run-to-run variation."""
    diffs = [a["time_per_step_s"] - b["time_per_step_s"] for a, b in zip(sync_runs, indep_runs)]
    if len(diffs) > 1:
        _, lo, hi = stats.mean_ci(diffs)
        return (lo, hi), f"run-to-run (paired t over {len(diffs)} sync/no-sync pairs)"
    a, b = (stats.step_time_ci(r["step_times_s"]) for r in (sync_runs[0], indep_runs[0]))
    if a is None or b is None:
        return None, f"no CI: a within-run CI needs at least {stats.MIN_CI_STEPS} steps per run"
    # batch means estimate the mean step time; scale their standard errors to the time per step
    se_a = a["se"] * sync_runs[0]["time_per_step_s"] / a["mean"]
    se_b = b["se"] * indep_runs[0]["time_per_step_s"] / b["mean"]
    return (
        stats.difference_ci(
            sync_runs[0]["time_per_step_s"], se_a, a["df"], indep_runs[0]["time_per_step_s"], se_b, b["df"]
        ),
        "within-run noise of one sync and one no-sync run (Welch, batch means)",
    )


def _three_terms(record: dict, runs: list[dict], in_process: list[dict[str, list[dict]]]) -> dict:
    """Communication, straggler wait and compute (distbench.results.split) from the repeats' runs, exposed
    communication, comm overhead and overlap from its communication term (A - T, not the wait), and the real step measured after its variants against the
    point's own (sync_after_variant_ratio): measurement fields for `record` (read, not changed)."""
    reps = [{**extra, "A": [a, *extra.get("A", [])]} for a, extra in zip(runs, in_process)]
    calls = [t.get("tiny_collective_calls") for x in in_process for t in x.get("T", [])]
    out: dict = {"comm_split": split.three_terms(reps, sum(calls) if calls and None not in calls else None)}
    out["tiny"] = [_kept(t) for x in in_process for t in x.get("T", [])]
    out["pair_order"] = [split.ORDER] * len(in_process)
    # A - T (without the wait), over the headline step time (the opening A's), as the throughput beside it
    out.update(split.comm_fields(out["comm_split"], record.get("allreduce_s"), record.get("time_per_step_s")))
    closing = [x["A"][0]["throughput"] for x in in_process if x.get("A")]
    if len(closing) == len(runs):
        first = statistics.geometric_mean(a["throughput"] for a in runs)
        out["sync_after_variant_ratio"] = statistics.geometric_mean(closing) / first
    return out


def comm_fields(
    point: PlannedPoint, record: dict, runs: list[dict], indeps: list[dict], in_process: list[dict]
) -> dict:
    """The communication part of the measurement stage for the combined `record` (read, not changed): the
    no-sync runs kept whole, then exposed communication and overlap (three terms where the variants ran in
    the same processes, else A/B pairs), the stragglers, or a comm_note saying why there is none; every
    communication headline field is present (None when not measured)."""
    out: dict = {}
    if indeps and record["status"] == "ok":
        out["independent"] = [_kept(b) for b in indeps]
        bad = next((b for b in indeps if b["status"] != "ok"), None)
        if bad is not None:
            out["comm_note"] = f"independent variant {bad['status']}: {bad.get('reason')}"
        elif in_process:
            out.update(_three_terms(record, runs, in_process))
        else:
            out["pair_order"] = ["AB" if i % 2 == 0 else "BA" for i in range(len(indeps))]
            ci, scope = exposed_comm_ci(runs, indeps)
            out.update(
                stats.comm_metrics(
                    statistics.fmean(a["time_per_step_s"] for a in runs),
                    statistics.fmean(b["time_per_step_s"] for b in indeps),
                    record.get("allreduce_s"),
                    ci,
                )
            )
            out["exposed_comm_ci_scope"] = scope
            out["split_note"] = (
                "no tiny-collective variant for this strategy (its no-sync variant runs as a process tree of its "
                "own): exposed communication includes the wait for the slowest rank"
            )
        if out["independent"]:
            per_rank = [b.get("per_rank_step_times_s") for b in out["independent"]]
            out["stragglers"] = split.stragglers(
                [p for p in per_rank if p], "the no-sync variant's per-rank step times (each rank's own pace)"
            )
    if point.strategy.no_comm_reason and point.config.world_size > 1:
        out["comm_note"] = f"communication overhead not applicable: {point.strategy.no_comm_reason}"
    for key in ("comm_overhead", "exposed_comm_s", "allreduce_s", "overlap"):
        if key not in record and key not in out:
            out[key] = None
    return out


def measure_point(
    point: PlannedPoint,
    workdir: Path,
    *,
    timeout_s: float,
    repeats: int = 1,
    noisy_cv: float = NOISY_CV,
    telemetry_interval_s: float = 0.0,
) -> dict:
    """Run a planned point R times; when it measures communication, each synchronized run (A) is paired
    with its variants: in its own processes, split.ORDER (A T B T A: balanced within every repeat, so a
    steady trend of the machine cancels at any repeat count; three terms, distbench.results.split), or, where the
    variant is a process tree of its own, B in alternating order A B, B A, A B ... (the trend cancels over
    pairs). The first A sets the step count (adaptive stopping, or, for A T B T A in one process tree, a window
    sized in advance by a pilot: workers/common.measure_two_stage); every other run of the point runs exactly
    that many steps, with the same telemetry sampling, so the runs are like for like (a later repeat's first A
    follows only its warmup, where repeat 1's followed the pilot too)."""
    cfg = point.config
    runs, indeps, in_process = [], [], []

    def run(c, name, limit_s=timeout_s):
        return add_step_metrics(run_point(point.strategy, c, workdir / name, limit_s, telemetry_interval_s))

    for r in range(repeats):
        fixed = runs[0]["measured_steps"] if runs and runs[0]["status"] == "ok" else None
        sync_cfg = dataclasses.replace(cfg, target_ci=0.0, steps=fixed) if fixed else cfg
        if not (cfg.measure_comm and (not runs or runs[0]["status"] == "ok")):
            runs.append(run(sync_cfg, f"r{r + 1}"))  # every repeat after the first: the first's step count
            continue
        if point.strategy.nosync_in_process:  # split.ORDER in one process tree: five runs' work and time
            order = split.ORDER
            both = run(dataclasses.replace(sync_cfg, nosync_order=order), f"r{r + 1}", len(order) * timeout_s)
            if both["status"] in ("ok", "interrupted", "skipped"):
                runs.append(both)
                extra = _in_process_runs(both)
                indeps.append(extra["B"][0])
                in_process.append(extra)
                if both["status"] == "ok":
                    continue
                break
            # A variant may be what failed: the synchronized run alone, so its point is not lost with it
            # (a hung run so costs up to 6x the timeout). The failed run's time counts as a no-sync run's.
            reason = f"{both['status']} with the variants in its processes ({order}): {both.get('reason')}"
            indeps.append({"status": both["status"], "reason": reason, "launch": both.get("launch")})
            alone = {**run(sync_cfg, f"r{r + 1}-alone"), "ran_alone": True}
            if alone["status"] != "ok":  # the failed run may be the cause
                alone["reason"] = f"{alone.get('reason')} (run alone, after the variants: {reason})"
            runs.append(alone)
            break
        if r % 2 == 0:  # A B
            runs.append(run(sync_cfg, f"r{r + 1}"))
            if runs[-1]["status"] != "ok":
                break
            fixed = runs[-1]["measured_steps"]
        indep_cfg = dataclasses.replace(cfg, sync=False, measure_comm=False, target_ci=0.0, steps=fixed)
        indeps.append(run(indep_cfg, f"independent{r + 1}"))
        if r % 2 == 1:  # B A
            runs.append(run(sync_cfg, f"r{r + 1}"))
    record = combine_repeats(runs, noisy_cv)
    return build_record(record, measurement=comm_fields(point, record, runs, indeps, in_process))

"""Running a plan of training points (scale, run, fit) through the one runner (distbench.run.runner): how such a
point is measured and what its record gets (speedup, efficiency: derive), the sweep's stored options (resume)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from distbench.core import mfu
from distbench.core.config import point_key  # what identifies a point (resume, OOM bookkeeping)
from distbench.core.errors import BadInput
from distbench.core.strategies import FRAMEWORK_BASELINE
from distbench.kinds.measure import measure_point
from distbench.results import stats
from distbench.results.kind import RecordKind, Status, record_kind
from distbench.results.record import add_step_metrics, build_record
from distbench.results.store import Store
from distbench.run.devices import cpu_cores
from distbench.run.plan import Plan, PlannedPoint, SweepOptions
from distbench.run.runner import Kind, ProgressFn, recorded_sweep, run_points


def add_baseline(baselines: dict, record: dict) -> None:
    """Keep a baseline record for derive: framework -> the baseline (all the cores), and on CPU workers
    (framework, threads per worker) -> the baseline measured with that many threads."""
    config = record.get("config") or {}
    if record_kind(record) is not RecordKind.BASELINE_REFERENCE:
        baselines[record["framework"]] = record
    if record.get("device") == "cpu":
        baselines[(record["framework"], config.get("threads_per_worker"))] = record


def derive(record: dict, baselines: dict) -> dict:
    """The record's last build stages before the sweep's bookkeeping, merged by distbench.results.record.build_record
    into `record` (in place, returned too): its step metrics where no repeats were combined, MFU
    (distbench.core.mfu.mfu_fields) and derived_fields against the sweep's baselines. speedup, efficiency,
    efficiency_per_core and wrapper_overhead are always present (None where they do not apply)."""
    if record.get("measured_steps") is None:  # combined records (repeats) already carry their metrics
        add_step_metrics(record)
    for key in ("speedup", "efficiency", "efficiency_per_core", "wrapper_overhead"):
        record.setdefault(key, None)  # first: a value the record already has stays where none is derived
    return build_record(
        record,
        mfu=mfu.mfu_fields(record) if record["status"] == "ok" else None,
        derived=derived_fields(record, baselines),
    )


def derived_fields(record: dict, baselines: dict) -> dict:
    """Speedup, efficiency and (at N=1) the wrapper's overhead against the framework baseline; on CPU
    workers also the efficiency per core (against the baseline with the same threads per worker, see
    add_baseline); or the note saying why there are none. The record is read, not changed."""
    if record_kind(record) is RecordKind.BASELINE_REFERENCE:
        return {
            "speedup_note": (
                f"reference for efficiency per core: {record['strategy']!r} on "
                f"{record['config']['baseline_threads']} thread(s), not a scaling point"
            )
        }
    base = baselines.get(record["framework"])
    if record["status"] != "ok" or not base or base.get("status") != "ok":
        if record["status"] == "ok" and record["framework"] in FRAMEWORK_BASELINE:
            return {"speedup_note": f"no successful {FRAMEWORK_BASELINE[record['framework']]!r} baseline in this sweep"}
        return {}
    sp = stats.speedup(record["throughput"], base["throughput"])
    out: dict = {"speedup": sp, "efficiency": stats.efficiency(sp, record["world_size"])}
    if record["world_size"] == 1 and record["strategy"] != base["strategy"]:
        out["wrapper_overhead"] = stats.wrapper_overhead(record["throughput"], base["throughput"])
    if record.get("device") == "cpu":
        threads = (record.get("config") or {}).get("threads_per_worker")
        ref = baselines.get((record["framework"], threads))
        if ref and ref.get("status") == "ok":
            # Workers beyond the cores cannot run at once: perfect scaling on C physical cores (not SMT
            # siblings) at t threads per worker is min(N, C // t) times the t-thread baseline, not N times.
            cores = mfu.physical_cores(cpu_cores())
            parallel = min(record["world_size"], max(1, cores // max(1, threads or 1)))
            out["efficiency_per_core"] = stats.efficiency(
                stats.speedup(record["throughput"], ref["throughput"]), parallel
            )
            out["per_core_baseline"] = f"{ref['strategy']} on {threads} thread(s)" + (
                f"; {parallel} of the {record['world_size']} workers can run at once on {cores} physical cores"
                if parallel < record["world_size"]
                else ""
            )
        else:
            out["efficiency_per_core_note"] = f"no successful {base['strategy']!r} baseline on {threads} thread(s)"
    return out


def run_plan(
    plan: Plan,
    store: Store,
    *,
    options: SweepOptions,
    command: str,
    progress: ProgressFn | None = None,
    workdir: str | None = None,
    records_dir: str | None = None,
    resume: str | None = None,
) -> tuple[str, list[dict]]:
    """Run every planned point in order; each finished point is committed before the next starts.

    The sweep stores `options` whole (stored_options reads them back for `--resume`).
    Ctrl-C stops the sweep, keeps every committed point and marks the sweep 'interrupted'.
    With `resume`, points of that sweep that finished ok (or were skipped) are kept and not re-run;
    missing or failed ones run again and replace their failed rows.
    """
    kept: dict[tuple[str, int, int, int | None], dict] = {}
    if resume:
        for old in store.points(resume):
            key = point_key(old["strategy"], old.get("config") or old)
            if old["status"] == Status.OK or (old["status"] == Status.SKIPPED and not old.get("after_oom")):
                kept[key] = old
            else:
                store.delete_point(old["point_id"])
    stored = {
        "kind": RecordKind.TRAINING.value,
        "sweep_options": options.to_dict(),
        "resolved_device": plan.device.device,
    }
    with recorded_sweep(store, command=command, options=stored, notes=plan.notes, resume=resume) as sweep_id:
        root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"distbench-{sweep_id}-"))
        try:
            kind = training(
                timeout_s=options.timeout,
                repeats=options.repeats,
                noisy_cv=options.noisy_cv,
                telemetry_interval_s=options.telemetry_interval,
            )
            return sweep_id, run_points(
                plan.points, store, sweep_id, kind, workdir=root, kept=kept, progress=progress, records_dir=records_dir
            )
        finally:
            if not workdir:  # the work folders of successful points are gone; failed ones stay
                try:
                    root.rmdir()
                except OSError:
                    pass


def stored_options(store: Store, sweep_id: str) -> SweepOptions:
    """The options a `distbench scale` / `run` sweep was started with (run_plan stores them whole)."""
    saved = json.loads(store.sweep(sweep_id)["options_json"] or "{}")
    old = saved.get("replay")
    if old:  # stored before SweepOptions, under the click parameter names of the time
        saved["sweep_options"] = {
            **old,
            "gpus": old["gpus_text"],
            "nodes": old.get("nodes_text", "1"),
            "strategies": old["strategy"],
            "compile": old["compile_"],
        }
    if "sweep_options" not in saved:
        raise BadInput(f"sweep {sweep_id} was not made by `distbench scale` (nothing to resume)")
    return SweepOptions.from_dict(saved["sweep_options"])


def training(*, timeout_s: float, repeats: int, noisy_cv: float, telemetry_interval_s: float) -> Kind:
    """How a training point (scale, run, fit) is measured (measure_point: repeats, variants) and finished:
    speedup and efficiency against the baseline of its --batch-size value measured earlier in the sweep."""
    baselines: dict[int | None, dict] = {}  # per --batch-size value: framework -> baseline (add_baseline)

    def measure(point: PlannedPoint, point_dir: Path) -> dict:
        return measure_point(
            point,
            point_dir,
            timeout_s=timeout_s,
            repeats=repeats,
            noisy_cv=noisy_cv,
            telemetry_interval_s=telemetry_interval_s,
        )

    def kept(point: PlannedPoint, record: dict) -> None:
        if point.strategy.baseline:
            add_baseline(baselines.setdefault(_batch(point), {}), record)

    def finish(point: PlannedPoint, record: dict) -> list[dict]:
        kept(point, record)
        derive(record, baselines.get(_batch(point), {}))
        return [record]

    return Kind(measure=measure, finish=finish, kept=kept)


def _batch(point: PlannedPoint) -> int | None:
    return point_key(point.strategy.name, point.config.to_dict()).batch

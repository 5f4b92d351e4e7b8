"""The one point runner of every measuring command (scale, run, fit, comm, infer, converge, verify): its one
skip rule, its one commit path (the store, else a JSON file) and the sweep row around it.

A command plans its points with its kind's planner (kinds.plans or run.plan.make_plan: its options in, a Plan out: PlannedPoints
(strategy, config, the plan's skip reason), the device and notes; every point made by plan.planned), opens a sweep
(`new_sweep`, or `recorded_sweep` around a store it holds) and hands the points to `run_points` with a
`Kind`: how a point of that kind is measured (measure_point for training, one run_point for the single-run
kinds) and what its record becomes before it is stored (derive for training, one record per batch size for
infer, a verdict for verify)."""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from distbench import __version__
from distbench.core import envinfo, strategies
from distbench.core.config import point_key
from distbench.results.kind import RecordKind, Status, record_kind, sweep_kind
from distbench.results.record import base_record, write_record
from distbench.results.store import Store
from distbench.run import signals
from distbench.run.launch import run_point
from distbench.run.plan import PlannedPoint

ProgressFn = Callable[[str, int, int, PlannedPoint, "dict | None"], None]
"""progress(phase, i, total, point, record): phase 'kept' (resumed, with its record), 'start' (record None)
or 'done' (with the point's record)."""


# -- the skip rule
def after_oom_reason(oom: dict) -> str:
    """Why a point is not tried after `oom`, the record of a smaller batch of its strategy and N that ran out."""
    return (
        f"not tried: batch {point_key(oom['strategy'], oom['config']).batch} ran out of memory at this strategy and N"
    )


def skip_reason(point: PlannedPoint, oom: dict | None = None) -> str | None:
    """THE skip rule: why `point` is not run (None: it runs). First a module its strategy needs that is
    missing, then the reason its plan gave (device, precision, an earlier result), then `oom`: a smaller
    batch of the same strategy and N that ran out of memory in this sweep."""
    return strategies.not_installed(point.strategy) or point.skip_reason or (after_oom_reason(oom) if oom else None)


def skipped_record(point: PlannedPoint, reason: str, status: str = Status.SKIPPED.value) -> dict:
    return base_record(
        point.config.to_dict(),
        strategy=point.strategy.name,
        framework=point.strategy.framework,
        status=status,
        reason=reason,
    )


# -- how a kind of point is measured
def _one_record(point: PlannedPoint, record: dict) -> list[dict]:
    return [record]


def _nothing(point: PlannedPoint, record: dict) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Kind:
    """How the points of one command are measured and what each measurement becomes."""

    measure: Callable[[PlannedPoint, Path], dict]
    """Run the point in its work folder and return its record; never raises for the point's own failures
    (a KeyboardInterrupt passes: the runner records the point 'interrupted')."""
    finish: Callable[[PlannedPoint, dict], list[dict]] = _one_record
    """The records to store for a point, from its record (measured, skipped or interrupted)."""
    kept: Callable[[PlannedPoint, dict], None] = _nothing
    """Told of each record kept from the sweep being resumed (instead of measuring the point)."""
    record_kind: RecordKind = RecordKind.TRAINING
    """What its records measure, stamped on each as `kind` (a training kind's per-core baseline reference
    is stamped as such: distbench.results.kind.record_kind)."""


def single_run(timeout_s: float, telemetry_interval_s: float = 0.0) -> Callable[[PlannedPoint, Path], dict]:
    """The `measure` of the kinds whose point is one run of its worker (comm, infer, converge, verify)."""

    def measure(point: PlannedPoint, workdir: Path) -> dict:
        return run_point(point.strategy, point.config, workdir, timeout_s, telemetry_interval_s)

    return measure


# -- the runner
def run_points(
    points: Iterable[PlannedPoint], store: Store | None, sweep_id: str | None, kind: Kind, **kw
) -> list[dict]:
    """_run_points inside the sweep's one local Ray head, when it has Ray points to run on one
    (distbench.run.raycluster.sweep_head: started before them, stopped when the sweep ends, however it ends)."""
    from distbench.run.raycluster import sweep_head

    points = list(points)
    kept = kw.get("kept") or {}
    to_run = [p for p in points if point_key(p.strategy.name, p.config.to_dict()) not in kept]
    with sweep_head(to_run):
        return _run_points(points, store, sweep_id, kind, **kw)


def _run_points(
    points: Iterable[PlannedPoint],
    store: Store | None,
    sweep_id: str | None,
    kind: Kind,
    *,
    workdir: str | Path,
    kept: dict | None = None,
    progress: ProgressFn | None = None,
    records_dir: str | Path | None = None,
) -> list[dict]:
    """Run the points in order; each point's records are committed (`commit`) before the next point starts,
    and returned. A point whose key is in `kept` (a resumed sweep's) is not run again: its record is
    returned as it is. Ctrl-C (or SIGTERM/SIGHUP) while a point is measured records it 'interrupted',
    commits it and raises again. The work folder of a point that ends ok is removed; others stay (their
    records name them). `store` None: nothing is committed (a library caller that keeps the records)."""
    points = list(points)
    kept = kept or {}
    records: list[dict] = []
    oom_at: dict[tuple, dict] = {}  # (strategy, N, nodes, workload) -> its smallest batch that ran out of memory
    total = len(points)
    for i, point in enumerate(points, 1):
        signals.check()  # a signal whose exception was lost while the last point ran (signals.check)
        key = point_key(point.strategy.name, point.config.to_dict())
        if key in kept:
            record = kept[key]
            kind.kept(point, record)
            records.append(record)
            if progress:
                progress("kept", i, total, point, record)
            continue
        if progress:
            progress("start", i, total, point, None)
        stop = point_dir = None
        oom = oom_at.get(key[:-1])
        if oom and point_key(oom["strategy"], oom["config"]).batch == key.batch:
            oom = None  # the same batch again (another seed, converge): it is tried, not assumed
        reason = skip_reason(point, oom)
        if reason:
            record = skipped_record(point, reason)
            record["after_oom"] = bool(oom) and reason == after_oom_reason(oom)
        else:
            point_dir = (
                Path(workdir) / f"{i:03d}-{point.strategy.name}-n{point.config.world_size}-k{point.config.nodes}"
            )
            try:
                record = kind.measure(point, point_dir)
            except KeyboardInterrupt as exc:  # its worker tree is already gone (launch.run_point)
                cause = signals.interruption(exc)
                phase, where = getattr(exc, "distbench_phase", (None, "while it was measured"))
                why = f"stopped by {cause.name if cause else 'SIGINT'} {where}"  # where: distbench.core.phases.during
                record = skipped_record(point, why, status=Status.INTERRUPTED.value)
                if phase:
                    record["stopped_phase"] = phase
                record["workdir"] = str(point_dir)
                stop = exc
        record["sweep_id"] = sweep_id
        record["auto_added"] = point.auto_added
        if record["status"] == Status.OOM:
            oom_at.setdefault(key[:-1], record)
        finished = kind.finish(point, record)
        for j, r in enumerate(finished):
            r["sweep_id"] = sweep_id
            r.setdefault(
                "kind", (record_kind(r) if kind.record_kind is RecordKind.TRAINING else kind.record_kind).value
            )
            r.setdefault("auto_added", point.auto_added)
            name = f"{sweep_id}-{i:03d}-{point.strategy.name}-n{point.config.world_size}"
            saved = (
                Path(records_dir) / f"{name}{f'-{j + 1}' if len(finished) > 1 else ''}.json" if records_dir else None
            )
            commit(store, sweep_id, r, saved)
        records.extend(finished)
        if progress:
            progress("done", i, total, point, record)
        if stop is not None:
            raise stop
        if record["status"] == Status.OK and point_dir is not None:  # failed points keep theirs (record names it)
            shutil.rmtree(point_dir, ignore_errors=True)
    return records


def commit(store: Store | None, sweep_id: str | None, record: dict, saved: Path | None = None) -> None:
    """THE commit path: the record into the store as one transaction, whatever signal arrives meanwhile (or
    as JSON when the store cannot be written, Store.commit_point); also into `saved` when that is given."""
    if store is not None:
        with signals.deferred():
            record["point_id"] = store.commit_point(sweep_id, record, fallback=saved)
    if saved:
        write_record(saved, record)


# -- the sweep around the points
def command_line(argv: list[str] | None = None) -> str:
    return shlex.join(["distbench", *(sys.argv[1:] if argv is None else argv)])


@contextlib.contextmanager
def recorded_sweep(store: Store, *, command: str, options: dict, notes: list[str], resume: str | None = None):
    """A sweep row in the store for the duration of a `with` block (every command that measures
    uses this): 'complete' when the block finishes, 'interrupted' when it is left by an exception
    (Ctrl-C included). `resume` reopens an existing sweep instead of starting one."""
    if resume:
        store.reopen_sweep(resume)
        sweep_id = resume
    else:
        env = envinfo.capture_environment()
        sweep_id = store.start_sweep(
            command=command,
            version=__version__,
            git_sha=env.get("distbench_git_sha"),
            env=env,
            options=options,
            notes=notes,
        )
    status, note = "interrupted", None
    try:
        yield sweep_id
        status = "complete"
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP (distbench.run.signals)
        cause = signals.interruption(exc)
        note = f"interrupted by {cause.name if cause else 'SIGINT'}"
        if cause is not None:
            cause.sweep = (sweep_id, str(store.path), command, sweep_kind(options))
        raise
    finally:
        store.finish_sweep(sweep_id, status, note=note)


@dataclasses.dataclass
class OpenSweep:
    """A sweep being run: where its points are committed (no store: nowhere) and their scratch folder."""

    store: Store | None
    id: str | None
    workdir: Path
    records: list[dict] = dataclasses.field(default_factory=list)
    """Every record committed so far."""

    def run(self, points: Iterable[PlannedPoint], kind: Kind, progress: ProgressFn | None = None) -> list[dict]:
        """run_points into this sweep; returns this call's records (and adds them to `records`)."""
        done = run_points(points, self.store, self.id, kind, workdir=self.workdir, progress=progress)
        self.records.extend(done)
        return done


@contextlib.contextmanager
def new_sweep(results: str, kind: str, options: dict, notes: list[str], command: str | None = None):
    """A new sweep in the --results store for the duration of a `with` block (see recorded_sweep), with a
    fresh scratch folder (removed at the end when no failed point left its logs there)."""
    with Store(results) as store:
        with recorded_sweep(store, command=command or command_line(), options=options, notes=notes) as sid:
            sweep = OpenSweep(store, sid, Path(tempfile.mkdtemp(prefix=f"distbench-{kind}-{sid}-")))
            try:
                yield sweep
            finally:
                with contextlib.suppress(OSError):
                    sweep.workdir.rmdir()

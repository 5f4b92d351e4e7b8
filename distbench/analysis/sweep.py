"""Reading a sweep back from the results store: opening the store read-only, finding a sweep by id or 'latest',
and loading its row, its points' records and their per-step samples (every query is a Store method)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from distbench.core.errors import BadInput
from distbench.results import split
from distbench.results.kind import RecordKind, Status, record_kind
from distbench.results.store import Store


# -- opening the store and finding a sweep
def open_store(path: str | os.PathLike) -> Store:
    """Open an existing store for reading; a missing file is an error here (reading must not create one)."""
    path = Path(path)
    if not path.exists():
        raise BadInput(
            f"no results store at {path.resolve()} (run `distbench scale` first, or pass --results PATH or set "
            "DISTBENCH_RESULTS)"
        )
    if path.is_dir():
        raise BadInput(f"{path} is a folder, not a results store (pass the .db file to --results)")
    return Store(path)


def list_sweeps(store: Store, limit: int = 20) -> list[dict]:
    """Recent sweeps, newest first, with their point counts (ok and total)."""
    return store.sweeps_with_counts(limit)


def resolve_sweep_id(store: Store, sweep: str) -> str:
    """'latest' -> the newest sweep's id; an unknown id -> BadInput listing recent ids (from Store.sweep)."""
    if sweep == "latest":
        recent = store.sweeps(1)
        if not recent:
            raise BadInput(f"{store.path} has no sweeps yet (run `distbench scale` first)")
        return recent[0]["id"]
    return store.sweep(sweep)["id"]


LATEST_SEARCH = 100
"""How many of the newest sweeps 'latest' looks through for one the command can use."""


def _training(data: "Sweep") -> list[dict]:
    """The sweep's training measurements: successful points that are not comm, verify, inference or per-core."""
    return [r for r in data.scaling_points if record_kind(r) is not RecordKind.INFERENCE]


def is_converge(record: dict) -> bool:
    return record_kind(record) is RecordKind.CONVERGE


SCALING_COMMANDS = ("scale", "run", "slurm", "k8s")
"""The commands whose sweeps hold throughput at each N (fit's batch search, profile's few profiled steps and
converge's time to accuracy do not)."""
RESUMABLE_COMMANDS = ("scale", "run")
"""The commands whose sweeps `distbench scale --resume` can finish (they store their SweepOptions)."""


MEASURING_COMMANDS = (*SCALING_COMMANDS, "fit", "profile", "converge", "verify", "comm", "infer")


def sweep_command(row: dict) -> str | None:
    """The distbench subcommand that made a sweep ('scale', 'fit', ...), from its recorded command line; None
    when none was recorded (or it names none of MEASURING_COMMANDS)."""
    words = str(row.get("command") or "").split()
    made = words[1] if len(words) > 1 and words[0].endswith("distbench") else None
    return made if made in MEASURING_COMMANDS else None


def _made_by(row: dict, commands: tuple[str, ...]) -> bool:
    """The sweep was made by one of `commands` (a sweep without a recorded command is judged on its points)."""
    made = sweep_command(row)
    return made is None or made in commands


def _resumable(store: Store, row: dict) -> bool:
    """A scale or run sweep (fit and profile store the same options, but are not resumed by scale) that stored
    the options `scale --resume` replays (kinds.sweep.stored_options)."""
    if not _made_by(row, RESUMABLE_COMMANDS):
        return False
    options = json.loads(store.sweep(row["id"]).get("options_json") or "{}")
    return "sweep_options" in options or "replay" in options


LATEST_USES = {
    "any": ("any sweep", None, None),
    "training": ("training points", None, lambda data: bool(_training(data))),
    "scaling": (
        "throughput points at each N (scale, run, slurm, k8s)",
        lambda _store, row: _made_by(row, SCALING_COMMANDS),
        lambda data: any(not is_converge(r) for r in _training(data)),
    ),
    "resume": ("a scale or run sweep to resume", _resumable, None),
    "comm": (
        "`distbench comm` points",
        lambda _store, row: _made_by(row, ("comm",)),
        lambda d: bool(d.comm_points),
    ),
    "profile": (
        "profiled training points (distbench profile)",
        lambda _store, row: _made_by(row, ("profile",)),
        lambda data: bool(_training(data)),
    ),
    "converge": (
        "`distbench converge` runs",
        lambda _store, row: _made_by(row, ("converge",)),
        lambda data: any(is_converge(r) for r in data.points),
    ),
}
"""What 'latest' means per command: `results show/export` any sweep; `report` the newest sweep with training
points (scale, run, slurm, k8s, fit, profile, converge: not comm, verify or infer alone); `compare` and
`predict` the newest made by scale, run, slurm or k8s with training throughput points (a fit, profile or
converge sweep does not do); `scale --resume` the newest scale or run sweep; `predict --comm` the newest comm
sweep, `--profile` the newest profile sweep, `--converge-sweep` the newest converge sweep; `compare
--noise-floor` the newest scaling sweep (as compare's own sweeps)."""


def pick_latest(store: Store, use: str = "any") -> tuple[str, str]:
    """'latest' for a command: (the newest sweep it can use (LATEST_USES[use]: what it is, a test of its
    store row or None, a test of its points or None), one line saying which was picked,
    naming newer sweeps passed over and `--resume` for an interrupted one). BadInput when none fits."""
    what, row_ok, usable = LATEST_USES[use]
    rows = store.sweeps_with_counts(LATEST_SEARCH)
    if not rows:
        raise BadInput(f"{store.path} has no sweeps yet (run `distbench scale` first)")
    skipped: list[dict] = []
    for row in rows:
        found = row_ok is None or row_ok(store, row)
        if found and usable is not None:
            found = bool(row["points_ok"]) and usable(load_sweep(store, row["id"]))
        if found:
            line = (
                f"latest: sweep {row['id']} ({row['status']}, {row['points_ok']} of {row['points_total']} point(s) ok: "
                f"{row['command'] or 'no command recorded'})"
            )
            if skipped:
                line += f"; passed over {len(skipped)} newer sweep(s) without {what}: " + ", ".join(
                    f"{r['id']} ({r['status']}, {r['points_ok']} ok)" for r in skipped[:3]
                )
            return row["id"], line + _resume_hint(row if not skipped else skipped[0])
        skipped.append(row)
    raise BadInput(
        f"none of the {len(rows)} newest sweep(s) in {store.path} has {what}: give a sweep id "
        f"(`distbench results list`)" + _resume_hint(rows[0])
    )


def _resume_hint(row: dict) -> str:
    """For an interrupted sweep (or one still marked running): how to finish it."""
    if row["status"] in ("interrupted", "running") and "distbench scale" in (row["command"] or ""):
        return f"; `distbench scale --resume {row['id']}` finishes {row['id']}'s missing points"
    if row["status"] in ("interrupted", "running"):
        return f"; sweep {row['id']} is {row['status']}"
    return ""


# -- the loaded sweep
@dataclass
class Sweep:
    """One sweep as stored: its row (env/options/notes parsed) and its points, each with `point_id`."""

    info: dict
    points: list[dict]
    steps: dict[int, list[float]] = field(default_factory=dict)
    store_path: str = ""

    @property
    def id(self) -> str:
        return self.info["id"]

    def step_times(self, record: dict) -> list[float]:
        """Per-step samples from the `steps` table, falling back to the record's own list."""
        times = self.steps.get(record.get("point_id"))
        return list(times) if times else list(record.get("step_times_s") or [])

    @property
    def scaling_points(self) -> list[dict]:
        """Successful training points (no comm micro-benchmarks, verify runs or per-core baselines)."""
        return [
            r
            for r in self.points
            if r.get("status") == Status.OK
            and record_kind(r) not in (RecordKind.COMM, RecordKind.VERIFY, RecordKind.BASELINE_REFERENCE)
        ]

    @property
    def comm_points(self) -> list[dict]:
        return [r for r in self.points if r.get("status") == Status.OK and record_kind(r) is RecordKind.COMM]

    @property
    def problem_points(self) -> list[dict]:
        """Points that did not produce a measurement: skipped, failed, timeout, oom."""
        return [r for r in self.points if r.get("status") != Status.OK]

    @property
    def cpu_workers(self) -> bool:
        return any(r.get("device") == "cpu" for r in self.points)


def _loads(text: str | None, default):
    try:
        return json.loads(text) if text else default
    except ValueError:
        return default


def load_sweep(store: Store, sweep: str) -> Sweep:
    """Load a sweep (id or 'latest') with every point's record and per-step samples."""
    sweep_id = resolve_sweep_id(store, sweep)
    info = dict(store.sweep(sweep_id))
    for key, default in (("env", {}), ("options", {}), ("notes", [])):
        info[key] = _loads(info.pop(f"{key}_json", None), default)
    points = [split.with_split_comm(record) for record in store.points(sweep_id)]  # one meaning of communication
    for record in points:
        record.setdefault("sweep_id", sweep_id)
    steps = store.sweep_steps(sweep_id)
    return Sweep(info=info, points=points, steps=steps, store_path=str(store.path))

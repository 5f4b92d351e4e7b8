"""Where a point's wall time goes: launch to first step, warmup, measuring, the no-sync variant, the all-reduce
benchmark and teardown, from the launch's and the worker's clock stamps in the record."""

from __future__ import annotations

from typing import Iterable

from distbench.analysis.records import num

WALL_PARTS = (
    ("startup", "launch to first step"),
    ("warmup", "warmup"),
    ("measuring", "measuring"),
    ("no_sync", "no-sync variant"),
    ("allreduce", "all-reduce benchmark"),
    ("teardown", "teardown"),
    ("unattributed", "unattributed"),
)
"""The phases of a point's wall time, in order, with their names for people."""


def span(pair) -> float | None:
    """Seconds from pair[0] to pair[1] (two clock stamps), at least 0; None when either stamp is missing."""
    if not isinstance(pair, (list, tuple)) or len(pair) < 2 or num(pair[0]) is None or num(pair[1]) is None:
        return None
    return max(0.0, num(pair[1]) - num(pair[0]))


def _run_split(run: dict) -> dict[str, float | None]:
    """One launched process tree: the parent's launch start and wall time (run['launch']) against the
    worker's wall-clock stamps (run['stopping']: warmup_start, window, allreduce_window). Differences
    between clocks of two nodes can only shrink a phase to 0, never make it negative."""
    launch, st = run.get("launch") or {}, run.get("stopping") or {}
    wall, start = num(launch.get("wall_s")), num(launch.get("started"))
    window = st.get("window") or (None, None)
    first, m0, m1 = num(st.get("warmup_start")), num(window[0]), num(window[1])
    out: dict[str, float | None] = {
        "total": wall,
        "measuring": span(window),
        "warmup": span((first, m0)),
        "allreduce": span(st.get("allreduce_window")),
    }
    if out["allreduce"] is None and out["measuring"] is not None and run.get("allreduce_s") is None:
        out["allreduce"] = 0.0  # no all-reduce benchmark in this run
    out["startup"] = span((start, first))
    end = start + wall if start is not None and wall is not None else None
    out["teardown"] = None if None in (end, m1, out["allreduce"]) else max(0.0, end - m1 - out["allreduce"])
    # The no-sync variant measured in this run's processes (PointConfig.nosync_order): before the
    # synchronized run's warmup (B A), inside startup; after its window (A B), inside teardown.
    nosync = st.get("nosync_span")
    out["no_sync"] = span(nosync) or 0.0
    phase = "startup" if nosync and first is not None and num(nosync[1]) <= first else "teardown"
    if out["no_sync"] and out[phase] is not None:
        out[phase] = max(0.0, out[phase] - out["no_sync"])
    return out


def wall_split(record: dict) -> dict[str, float | None] | None:
    """Seconds of one point's wall time per phase (WALL_PARTS keys, plus 'total'): launch to first step
    (process start, imports, model and data, process-group init), warmup, measuring, the no-sync variant
    (its whole run), the standalone all-reduce benchmark and teardown (gathering results, writing the
    record, processes exiting), summed over repeats. A phase the record cannot place is None and its
    seconds are 'unattributed'. None for a point that was never launched (skipped)."""
    repeats = record.get("repeats") or []
    runs = repeats if repeats and all(r.get("launch") for r in repeats) else [record]
    variant = record.get("independent")
    variants = [v for v in (variant if isinstance(variant, list) else [variant]) if isinstance(v, dict)]
    splits = [_run_split(r) for r in runs if (r.get("launch") or {}).get("wall_s") is not None]
    if not splits:
        return None
    out = {
        key: _sum_known([s[key] for s in splits]) for key in ("startup", "warmup", "measuring", "allreduce", "teardown")
    }
    # variants that ran as process trees of their own (an in-process one is inside its run's wall time)
    walls = [
        num((v.get("launch") or {}).get("wall_s"))
        for v in variants
        if not (v.get("stopping") or {}).get("segment_start")
    ]
    out["no_sync"] = _sum_known(walls + [s["no_sync"] for s in splits])
    out["total"] = sum(s["total"] for s in splits) + sum(w for w in walls if w is not None)
    out["unattributed"] = max(0.0, out["total"] - sum(v for k, v in out.items() if k != "total" and v))
    return out


def _sum_known(values: list[float | None]) -> float | None:
    """The sum, or None when any value is unknown."""
    return None if None in values else sum(values)


def wall_split_total(records: Iterable[dict]) -> dict[str, float] | None:
    """The sweep's points together: seconds per phase (a phase unknown for a point counts as unattributed)."""
    splits = [s for s in (wall_split(r) for r in records) if s]
    if not splits:
        return None
    out = {k: sum(s.get(k) or 0.0 for s in splits) for k, _ in WALL_PARTS[:-1]}
    total = sum(s["total"] for s in splits)
    return {**out, "total": total, "unattributed": max(0.0, total - sum(out.values()))}


def wall_split_line(records: Iterable[dict]) -> str | None:
    """'wall time of the points: 250 s; measuring 59% (148 s), launch to first step 27%, ...' or None."""
    split = wall_split_total(records)
    if not split or not split["total"]:
        return None
    total = split["total"]
    parts = [
        f"{label} {split[k] / total:.0%}" + (f" ({split[k]:.0f} s)" if k == "measuring" else "")
        for k, label in WALL_PARTS
        if split[k] >= 0.005 * total or k == "measuring"
    ]
    return f"wall time of the points: {total:.0f} s; " + ", ".join(parts)

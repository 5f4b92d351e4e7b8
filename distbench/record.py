"""The one result-record schema and the one helper that writes it.

Every worker, whatever its strategy, ends by calling `write_record` (rank 0 only); the parent adds
launch facts (argv, exit status, stderr tail) with `finalize_record`; everything downstream (store,
tables, JSON, reports) reads only these records.
"""
from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path

from distbench import stats

SCHEMA_VERSION = 1
STATUSES = ("ok", "skipped", "failed", "timeout", "oom", "interrupted")


def base_record(config: dict, *, strategy: str, framework: str, status: str, reason: str | None = None) -> dict:
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    return {
        "schema": SCHEMA_VERSION,
        "record_id": uuid.uuid4().hex,
        "strategy": strategy,
        "framework": framework,
        "model": config.get("model"),
        "world_size": config.get("world_size"),
        "nodes": config.get("nodes", 1),
        "device": config.get("device"),
        "scaling": config.get("scaling"),
        "per_device_batch": config.get("per_device_batch"),
        "global_batch": (config.get("per_device_batch") or 0) * (config.get("world_size") or 0),
        "status": status,
        "reason": reason,
        "config": config,
        "step_times_s": [],
    }


def write_record(path: str | os.PathLike, record: dict) -> None:
    """Atomically write a record as JSON (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".rec-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(record, fh, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:  # e.g. a full disk: leave no half-written file behind
        os.unlink(tmp)
        raise


def read_record(path: str | os.PathLike) -> dict:
    with open(path) as fh:
        record = json.load(fh)
    if not isinstance(record, dict) or record.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"{path}: not a distbench result record (schema {SCHEMA_VERSION})")
    return record


def add_step_metrics(record: dict) -> dict:
    """Fill throughput (over the measured window when the record has one) and step-time statistics
    from the record's measured step times."""
    times = record.get("step_times_s") or []
    if record.get("status") == "ok" and times:
        record.update(stats.step_stats(times, record["global_batch"], record.get("measured_window_s")))
    else:
        for key in ("throughput", "step_time_median_s", "step_time_p5_s", "step_time_p95_s",
                    "step_time_mean_s", "step_time_cv", "measured_steps"):
            record.setdefault(key, None)
    return record

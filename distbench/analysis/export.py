"""A sweep as data for other tools: one row per point (a pandas frame) and the whole sweep as a JSON document."""

from __future__ import annotations

import json

from distbench.analysis.fields import COMM_FIELDS
from distbench.analysis.records import token_fields
from distbench.analysis.sweep import Sweep
from distbench.profile.compare import profile_columns
from distbench.results.record import HEADLINE_FIELDS

FRAME_COLUMNS = ("sweep_id", "point_id", *HEADLINE_FIELDS, *COMM_FIELDS)
_SKIP_IN_FRAME = {"step_times_s", "per_rank_step_times_s", "config", "launch", "stderr_tail", "telemetry", "profile"}


def points_frame(sweep: Sweep):
    """One row per point: the fixed columns above, then any other scalar record fields, then
    telemetry as `telemetry.<name>` columns. Lists and dicts become JSON text."""
    import pandas as pd

    rows = []
    for r in sweep.points:
        row = {c: r.get(c) for c in FRAME_COLUMNS}
        for k, v in r.items():
            if k not in row and k not in _SKIP_IN_FRAME:
                row[k] = json.dumps(v, sort_keys=True, default=str) if isinstance(v, (list, dict)) else v
        tel = r.get("telemetry") if isinstance(r.get("telemetry"), dict) else {}
        for k, v in tel.items():
            row[f"telemetry.{k}"] = json.dumps(v) if isinstance(v, (list, dict)) else v
        if isinstance(r.get("profile"), dict):  # the breakdown as columns (distbench profile / --profile)
            row.update(profile_columns(r["profile"]))
        row["config"] = json.dumps(r.get("config", {}), sort_keys=True, default=str)
        rows.append(row)
    # The fixed columns stay even when the whole sweep lacks them (e.g. CI before it is recorded), so
    # exports from different sweeps have the same leading layout.
    columns = dict.fromkeys([*FRAME_COLUMNS, *(k for row in rows for k in row if k != "config")])
    return pd.DataFrame(rows, columns=[*columns, "config"])


def sweep_document(sweep: Sweep) -> dict:
    """The sweep row and every full record with its steps, JSON-able."""
    return {
        "sweep": sweep.info,
        "points": [{**r, **token_fields(r), "step_times_s": sweep.step_times(r)} for r in sweep.points],
    }

"""`distbench results list|show`: the stored sweeps and one sweep's points as rich tables."""

from __future__ import annotations

from typing import Sequence

from rich.markup import escape as rich_escape
from rich.table import Table

from distbench import analysis as an
from distbench.analysis import Sweep
from distbench.analysis.output import Notes, cells, status_cell, table
from distbench.report.tables import scaling_columns, sweep_when


def sweeps_table(rows: Sequence[dict], store_path) -> Table:
    columns = ["id", "started", "status", "points ok/total", "command"]
    t = table(f"sweeps in {rich_escape(str(store_path))} (newest first)", columns, right=["points ok/total"])
    for col in t.columns:
        col.overflow = "fold"
    for r in rows:
        t.add_row(
            *(rich_escape(str(r[k])) for k in ("id", "started", "status")),
            f"{r['points_ok']}/{r['points_total']}",
            rich_escape(str(r["command"] or "")),
        )
    return t


def points_table(sweep: Sweep, notes: Notes | None = None) -> Table:
    """The sweep's points like `distbench scale` prints them, plus the 95% CI and noise when recorded; with
    `notes`, a point's reason is a number in its status cell and the text goes under the table."""
    scaling, scaling_cells = scaling_columns(sweep, "\n")
    columns = ["strategy", "N", *scaling, "step median\n(ms)", "step p95\n(ms)", "CV", "status"]
    t = table(f"sweep {rich_escape(sweep.id)}", columns, right=columns[1:-1])
    for r in sweep.points:
        if notes is not None and r.get("status") != "ok" and r.get("reason"):
            shown = status_cell({"status": r.get("status")}) + " " + notes.ref(r["reason"])
        else:
            shown = status_cell(r, " [yellow](noisy)[/]" if an.is_noisy(r) else "")
        shown += " (comm benchmark)" if an.is_comm(r) else " (verify run)" if an.is_verify(r) else ""
        t.add_row(
            rich_escape(an.series_name(r)),
            str(r.get("world_size")),
            *scaling_cells(r),
            *cells(r, "step_time_median_s", "step_time_p95_s", "step_time_cv"),
            shown,
        )
    return t


def sweep_header(sweep: Sweep) -> list[str]:
    i = sweep.info
    notes = [f"note: {n}" for n in i.get("notes") or []]
    return [f"sweep {i['id']}: {sweep_when(i)}", f"command: {i.get('command') or '-'}", *notes]

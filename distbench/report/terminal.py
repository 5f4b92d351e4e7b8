"""`distbench results list|show`: the stored sweeps and one sweep's points as rich tables."""

from __future__ import annotations

from typing import Sequence

from rich.markup import escape as rich_escape
from rich.table import Table

from distbench import analysis as an
from distbench.analysis import Sweep
from distbench.output import STATUS_STYLE, fmt_num
from distbench.report.model import ci_text


def sweeps_table(rows: Sequence[dict], store_path) -> Table:
    table = Table(title=f"sweeps in {rich_escape(str(store_path))} (newest first)", title_justify="left")
    for col, justify in (
        ("id", "left"),
        ("started", "left"),
        ("status", "left"),
        ("points ok/total", "right"),
        ("command", "left"),
    ):
        table.add_column(col, justify=justify, overflow="fold")
    for r in rows:
        table.add_row(
            rich_escape(r["id"]),
            rich_escape(str(r["started"])),
            rich_escape(str(r["status"])),
            f"{r['points_ok']}/{r['points_total']}",
            rich_escape(str(r["command"] or "")),
        )
    return table


def points_table(sweep: Sweep) -> Table:
    """The sweep's points like `distbench scale` prints them, plus the 95% CI and noise when recorded."""
    with_ci = any(an.throughput_ci(r) for r in sweep.points)
    table = Table(title=f"sweep {rich_escape(sweep.id)}", title_justify="left")
    columns = [("strategy", "left"), ("N", "right"), ("throughput\n(samples/s)", "right")]
    if with_ci:
        columns.append(("95% CI\n(samples/s)", "right"))
    cpu = any(r.get("device") == "cpu" for r in sweep.points)
    columns += [("speedup", "right"), ("efficiency\n(whole\nmachine)" if cpu else "efficiency", "right")]
    columns += [("efficiency\n(per core)", "right")] if cpu else []
    columns += [
        ("MFU", "right"),
        ("step median\n(ms)", "right"),
        ("step p95\n(ms)", "right"),
        ("CV", "right"),
        ("status", "left"),
    ]
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for r in sweep.points:
        status = str(r.get("status", "?"))
        shown = f"[{STATUS_STYLE.get(status, 'white')}]{rich_escape(status)}[/]"
        if status != "ok" and r.get("reason"):
            shown += f": {rich_escape(str(r['reason']))}"
        if status == "ok" and an.is_noisy(r):
            shown += " [yellow](noisy)[/]"
        if an.is_comm(r):
            shown += " (comm benchmark)"
        row = [rich_escape(an.series_name(r)), str(r.get("world_size")), fmt_num(r.get("throughput"), ".2f")]
        if with_ci:
            row.append(ci_text(r))
        row += [fmt_num(r.get("speedup"), ".2f"), fmt_num(r.get("efficiency"), ".0%")]
        row += [fmt_num(r.get("efficiency_per_core"), ".0%")] if cpu else []
        row += [
            fmt_num(r.get("mfu"), ".1%"),
            fmt_num(r.get("step_time_median_s"), ".1f", 1e3),
            fmt_num(r.get("step_time_p95_s"), ".1f", 1e3),
            fmt_num(r.get("step_time_cv"), ".0%"),
            shown,
        ]
        table.add_row(*row)
    return table


def sweep_header(sweep: Sweep) -> list[str]:
    i = sweep.info
    lines = [
        f"sweep {i['id']}: {i.get('status')}, started {i.get('started')}"
        + (f", finished {i.get('finished')}" if i.get("finished") else ""),
        f"command: {i.get('command') or '-'}",
    ]
    lines += [f"note: {n}" for n in i.get("notes") or []]
    return lines


def wrapper_lines(sweep: Sweep) -> list[str]:
    return an.summarize(sweep).wrapper

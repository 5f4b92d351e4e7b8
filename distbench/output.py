"""Presenting points: the terminal table (rich), progress lines and the JSON document."""

from __future__ import annotations

import json

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from distbench.analysis import num, series_name, wall_split_line
from distbench.strategies import FRAMEWORK_BASELINE
from distbench.config import swept_batch

JSON_FIELDS = (
    "strategy",
    "framework",
    "model",
    "world_size",
    "nodes",
    "device",
    "status",
    "reason",
    "throughput",
    "step_time_median_s",
    "step_time_p5_s",
    "step_time_p95_s",
    "step_time_cv",
    "measured_steps",
    "speedup",
    "efficiency",
    "wrapper_overhead",
    "scaling",
    "per_device_batch",
    "global_batch",
    "throughput_ci_low",
    "throughput_ci_high",
    "ci_method",
    "noisy",
    "comm_overhead",
    "exposed_comm_s",
    "allreduce_s",
    "grad_bytes",
    "overlap",
    "stopping",
    "data_wait_fraction",
    "ci_scope",
    "ci_note",
    "measured_window_s",
    "time_per_step_s",
    "exposed_comm_ci_low",
    "exposed_comm_ci_high",
    "exposed_comm_ci_scope",
    "overlap_raw",
    "peak_memory_bytes",
    "workdir",
    "efficiency_per_core",
    "per_core_baseline",
    "math_mode",
    "model_flops_per_sample",
    "achieved_flops_per_device",
    "peak_flops_per_device",
    "mfu",
    "mfu_note",
    "cpu_gemm_peak",
    "sweep_id",
    "point_id",
)

STATUS_STYLE = {
    "ok": "green",
    "skipped": "yellow",
    "failed": "red",
    "timeout": "red",
    "oom": "magenta",
    "interrupted": "yellow",
}


def fmt_num(value, spec: str, scale: float = 1.0) -> str:
    """The one number formatter of the tables (terminal, report, exports): value * scale in the format
    `spec`, or "-" for a missing, NaN, infinite, boolean or non-numeric value."""
    x = num(value)
    return "-" if x is None else format(x * scale, spec)


def fmt_bytes(value) -> str:
    """A byte count in binary units ("512 B", "2.14 GiB"), or "-" when missing."""
    x = num(value)
    if x is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024:
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.3g} {unit}"
        x /= 1024
    return f"{x:.3g} TiB"


def json_document(records: list[dict], extra_fields: tuple[str, ...] = ()) -> str:
    points = []
    for r in records:
        p = {k: r.get(k) for k in (*JSON_FIELDS, *extra_fields)}
        p["config"] = r.get("config")
        if r.get("status") != "ok" and r.get("stderr_tail"):
            p["stderr_tail"] = r["stderr_tail"][-1500:]
        points.append(p)
    return json.dumps(points, indent=2, sort_keys=False)


def results_table(records: list[dict], title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    several_batches = len({swept_batch(r.get("config") or r) for r in records}) > 1
    cpu = any(r.get("device") == "cpu" for r in records)
    efficiency = (
        (("efficiency\n(whole\nmachine)", "right"), ("efficiency\n(per core)", "right"))
        if cpu
        else (("efficiency", "right"),)
    )
    for col, justify in (
        ("strategy", "left"),
        ("N", "right"),
        ("throughput\n(samples/s)", "right"),
        ("95% CI", "right"),
        ("speedup", "right"),
        *efficiency,
        ("MFU", "right"),
        ("step median\n(ms)", "right"),
        ("step p95\n(ms)", "right"),
        ("comm\noverhead", "right"),
        ("overlap", "right"),
        ("status", "left"),
    ):
        table.add_column(col, justify=justify)
    for r in records:
        status = r.get("status", "?")
        shown = f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"
        if status != "ok" and r.get("reason"):
            shown += f": {escape(str(r['reason']))}"  # reasons quote workers: '[/path]' is not markup
        if status == "ok" and r.get("noisy"):
            shown += f" [yellow](noisy: CV {r['step_time_cv']:.0%})[/]"
        ci = "-"
        if r.get("throughput_ci_low") is not None:  # high None: unbounded (step-time CI half-width >= 100%)
            high = r.get("throughput_ci_high")
            ci = f"{r['throughput_ci_low']:.2f}..{'unbounded' if high is None else f'{high:.2f}'}"
        label = escape(series_name(r))
        if several_batches:
            label += f" batch {swept_batch(r.get('config') or r)}"
        table.add_row(
            label,
            str(r["world_size"]),
            fmt_num(r.get("throughput"), ".2f"),
            ci,
            fmt_num(r.get("speedup"), ".2f"),
            fmt_num(r.get("efficiency"), ".0%"),
            *((fmt_num(r.get("efficiency_per_core"), ".0%"),) if cpu else ()),
            fmt_num(r.get("mfu"), ".1%"),
            fmt_num(r.get("step_time_median_s"), ".1f", 1e3),
            fmt_num(r.get("step_time_p95_s"), ".1f", 1e3),
            fmt_num(r.get("comm_overhead"), ".0%"),
            fmt_num(r.get("overlap"), ".0%"),
            shown,
        )
    return table


def wrapper_lines(records: list[dict]) -> list[str]:
    lines = []
    for r in records:
        if r.get("wrapper_overhead") is not None:
            cost = r["wrapper_overhead"]
            lines.append(
                f"1-device wrapper cost: {r['strategy']} at N=1 is {abs(cost):.1%} "
                f"{'slower' if cost >= 0 else 'faster'} than the plain "
                f"{FRAMEWORK_BASELINE.get(r['framework'], r['framework'])!r} loop (CIs: distbench report)"
            )
    return lines


def stopping_line(records: list[dict]) -> str | None:
    """Which points met the CI target and which ran out of measuring time."""
    rules: dict[str, list[str]] = {}
    for r in records:
        rule = (r.get("stopping") or {}).get("rule")
        if r.get("status") == "ok" and rule:
            rules.setdefault(rule, []).append(f"{r['strategy']}@{r['world_size']}")
    if not rules or set(rules) == {"fixed_steps"}:
        return None
    parts = []
    if rules.get("target_ci_met"):
        parts.append(f"{len(rules['target_ci_met'])} point(s) reached the CI target")
    if rules.get("max_time"):
        parts.append(
            f"{len(rules['max_time'])} stopped at --max-time before reaching it ({', '.join(rules['max_time'])})"
        )
    if rules.get("max_steps"):
        parts.append(f"{len(rules['max_steps'])} stopped at the step cap")
    return "adaptive stopping: " + "; ".join(parts)


def print_summary(console: Console, records: list[dict], notes: list[str], sweep_id: str, store_path) -> None:
    for note in notes:
        console.print(f"[dim]note:[/] {escape(note)}", highlight=False)
    console.print(results_table(records, title=f"sweep {sweep_id}"))
    for line in wrapper_lines(records):
        console.print(line, highlight=False, markup=False)
    waits = [
        f"{r['strategy']}@{r['world_size']} {r['data_wait_fraction']:.0%}"
        for r in records
        if r.get("status") == "ok"
        and (r.get("config") or {}).get("data") == "disk"
        and r.get("data_wait_fraction") is not None
    ]
    if waits:
        console.print(
            "share of step time waiting for input data (--data disk): " + ", ".join(waits),
            highlight=False,
            markup=False,
        )
    line = stopping_line(records)
    if line:
        console.print(line, highlight=False, markup=False)
    line = wall_split_line(records)
    if line:
        console.print(line, highlight=False, markup=False)
    noisy = [f"{r['strategy']}@{r['world_size']}" for r in records if r.get("noisy")]
    if noisy:
        console.print(
            f"noisy points (step-time CV above the threshold; read their curves with care): {', '.join(noisy)}",
            highlight=False,
            markup=False,
        )
    if any(r.get("device") == "cpu" for r in records):
        console.print(
            "efficiency (whole machine) = speedup / N against the baseline on all the cores; efficiency "
            "(per core) against the baseline on the same threads per worker",
            style="dim",
            highlight=False,
            markup=False,
        )
    console.print(
        "MFU = model FLOPs per second per device / the device's peak (NVIDIA's dense datasheet peak for "
        "the math type; on CPU workers a float32 GEMM measured on the same threads); '-' = no known peak "
        "(the record's mfu_note says why)",
        style="dim",
        highlight=False,
        markup=False,
    )
    console.print(
        "speedup = throughput / the same framework's single-device baseline; efficiency = speedup / N; "
        "comm overhead = (step - step without gradient sync) / step; overlap = share of the standalone "
        "all-reduce time hidden behind compute",
        style="dim",
        highlight=False,
        markup=False,
    )
    console.print(f"results stored in {store_path} (sweep {sweep_id})", highlight=False, markup=False)

"""Presenting points: the terminal table (rich), progress lines and the JSON document."""

from __future__ import annotations

import json
from functools import partial

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from distbench.analysis import num, series_name, wall_split_line
from distbench.strategies import FRAMEWORK_BASELINE
from distbench.config import swept_batch

JSON_FIELDS = tuple(
    """strategy framework model world_size nodes device status reason throughput step_time_median_s step_time_p5_s
    step_time_p95_s step_time_cv measured_steps speedup efficiency wrapper_overhead scaling per_device_batch
    global_batch throughput_ci_low throughput_ci_high ci_method noisy comm_overhead exposed_comm_s allreduce_s
    grad_bytes overlap stopping data_wait_fraction ci_scope ci_note measured_window_s time_per_step_s
    exposed_comm_ci_low exposed_comm_ci_high exposed_comm_ci_scope overlap_raw peak_memory_bytes workdir
    efficiency_per_core per_core_baseline math_mode model_flops_per_sample achieved_flops_per_device
    peak_flops_per_device mfu mfu_note cpu_gemm_peak sweep_id point_id""".split()
)

STATUS_STYLE = {
    "ok": "green",
    "skipped": "yellow",
    "failed": "red",
    "timeout": "red",
    "oom": "magenta",
    "interrupted": "yellow",
}

FORMATS = {  # how the tables (terminal and report) show a record's field; seconds (*_s) are shown in ms
    "throughput": ".2f",
    "speedup": ".2f",
    "efficiency": ".0%",
    "efficiency_per_core": ".0%",
    "mfu": ".1%",
    "step_time_cv": ".0%",
    "comm_overhead": ".0%",
    "overlap": ".0%",
    "data_wait_fraction": ".0%",
}


def fmt_num(value, spec: str, scale: float = 1.0) -> str:
    """The one number formatter of the tables (terminal, report, exports): value * scale in the format
    `spec`, or "-" for a missing, NaN, infinite, boolean or non-numeric value."""
    x = num(value)
    return "-" if x is None else format(x * scale, spec)


def fmt_ms(seconds) -> str:
    return fmt_num(seconds, ".1f", 1e3)


def cells(record: dict, *fields: str) -> list[str]:
    """The record's `fields` as table cells: seconds in ms, byte counts in binary units, else FORMATS."""
    return [
        fmt_ms(record.get(f))
        if f.endswith("_s")
        else fmt_bytes(record.get(f))
        if f.endswith("bytes")
        else fmt_num(record.get(f), FORMATS[f])
        for f in fields
    ]


def table(title: str | None, columns, right=()) -> Table:
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col, justify="right" if col in right else "left")
    return t


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


def status_cell(r: dict, noisy: str = "") -> str:
    """The status in its colour, why the point did not run, or `noisy` (markup) after an ok one."""
    status = str(r.get("status", "?"))
    shown = f"[{STATUS_STYLE.get(status, 'white')}]{escape(status)}[/]"
    if status != "ok" and r.get("reason"):
        shown += f": {escape(str(r['reason']))}"  # reasons quote workers: '[/path]' is not markup
    return shown + (noisy if status == "ok" else "")


def results_table(records: list[dict], title: str | None = None) -> Table:
    several_batches = len({swept_batch(r.get("config") or r) for r in records}) > 1
    cpu = any(r.get("device") == "cpu" for r in records)
    efficiency = ["efficiency\n(whole\nmachine)", "efficiency\n(per core)"] if cpu else ["efficiency"]
    columns = ["strategy", "N", "throughput\n(samples/s)", "95% CI", "speedup", *efficiency, "MFU"]
    columns += ["step median\n(ms)", "step p95\n(ms)", "comm\noverhead", "overlap", "status"]
    t = table(title, columns, right=columns[1:-1])
    for r in records:
        shown = status_cell(r, f" [yellow](noisy: CV {r['step_time_cv']:.0%})[/]" if r.get("noisy") else "")
        ci = "-"
        if r.get("throughput_ci_low") is not None:  # high None: unbounded (step-time CI half-width >= 100%)
            high = r.get("throughput_ci_high")
            ci = f"{r['throughput_ci_low']:.2f}..{'unbounded' if high is None else f'{high:.2f}'}"
        label = escape(series_name(r))
        if several_batches:
            label += f" batch {swept_batch(r.get('config') or r)}"
        t.add_row(
            label,
            str(r["world_size"]),
            *cells(r, "throughput"),
            ci,
            *cells(r, "speedup", "efficiency", *(["efficiency_per_core"] if cpu else []), "mfu"),
            *cells(r, "step_time_median_s", "step_time_p95_s", "comm_overhead", "overlap"),
            shown,
        )
    return t


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
    say = partial(console.print, highlight=False, markup=False)
    for note in notes:
        console.print(f"[dim]note:[/] {escape(note)}", highlight=False)
    console.print(results_table(records, title=f"sweep {sweep_id}"))
    for line in wrapper_lines(records):
        say(line)
    waits = [
        f"{r['strategy']}@{r['world_size']} {r['data_wait_fraction']:.0%}"
        for r in records
        if r.get("status") == "ok"
        and (r.get("config") or {}).get("data") == "disk"
        and r.get("data_wait_fraction") is not None
    ]
    if waits:
        say("share of step time waiting for input data (--data disk): " + ", ".join(waits))
    for line in (stopping_line(records), wall_split_line(records)):
        if line:
            say(line)
    noisy = [f"{r['strategy']}@{r['world_size']}" for r in records if r.get("noisy")]
    if noisy:
        say(f"noisy points (step-time CV above the threshold; read their curves with care): {', '.join(noisy)}")
    if any(r.get("device") == "cpu" for r in records):
        say(
            "efficiency (whole machine) = speedup / N against the baseline on all the cores; efficiency "
            "(per core) against the baseline on the same threads per worker",
            style="dim",
        )
    say(
        "MFU = model FLOPs per second per device / the device's peak (NVIDIA's dense datasheet peak for "
        "the math type; on CPU workers a float32 GEMM measured on the same threads); '-' = no known peak "
        "(the record's mfu_note says why)",
        style="dim",
    )
    say(
        "speedup = throughput / the same framework's single-device baseline; efficiency = speedup / N; "
        "comm overhead = (step - step without gradient sync) / step; overlap = share of the standalone "
        "all-reduce time hidden behind compute",
        style="dim",
    )
    say(f"results stored in {store_path} (sweep {sweep_id})")

"""Presenting points: the terminal table (rich), progress lines and the JSON document."""

from __future__ import annotations

import json
import os
import shutil
import sys
from functools import partial

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from distbench.analysis import num, series_name, split_lines, wall_split_line
from distbench.analysis.lines import stopping_line, wrapper_lines
from distbench.analysis.records import token_fields, tokens_per_s
from distbench.core.config import swept_batch
from distbench.results.record import (
    BATCH_FIELDS,
    OUTCOME_FIELDS,
    POINT_FIELDS,
    SCALING_FIELDS,
    STEP_TIME_FIELDS,
    THROUGHPUT_CI_FIELDS,
)
from distbench.results.split import overhead_cell, overhead_legend

JSON_FIELDS = (
    *POINT_FIELDS,
    "backend",
    *OUTCOME_FIELDS,
    "throughput",
    *STEP_TIME_FIELDS,
    "measured_steps",
    *SCALING_FIELDS,
    *BATCH_FIELDS,
    *THROUGHPUT_CI_FIELDS,
    "ci_method",
    "noisy",
    *"""comm_overhead exposed_comm_s allreduce_s grad_bytes overlap stopping data_wait_fraction ci_scope ci_note
    measured_window_s time_per_step_s exposed_comm_ci_low exposed_comm_ci_high exposed_comm_ci_scope overlap_raw
    peak_memory_bytes workdir efficiency_per_core per_core_baseline math_mode model_flops_per_sample
    achieved_flops_per_device peak_flops_per_device mfu mfu_note cpu_gemm_peak comm_split stragglers split_note
    sweep_id point_id""".split(),
)
"""The fields of `--format json`, in the document's order (a published format: the order stays): the
headline fields (distbench.results.record.HEADLINE_FIELDS), then the rest of what a reader of one point needs."""

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
    """The commands' one table style (the compact style of `scale`'s table); print it with print_table."""
    t = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True
    )
    for col in columns:
        t.add_column(col, justify="right" if col in right else "left")
    return t


class Notes:
    """Reasons listed under a table instead of inside it: a cell shows `ref(text)` ('[1]'), the same text
    gets the same number; `lines()` are printed under the table ('[1] text')."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def ref(self, text) -> str:
        """'\\[n]': rich markup for a literal '[n]' (the note's number, given on first use)."""
        return f"\\[{self.numbers.setdefault(str(text), len(self.numbers) + 1)}]"

    def lines(self) -> list[str]:
        return [f"[{n}] {text}" for text, n in self.numbers.items()]


def print_table(console: Console, shown: Table, notes: Notes | list[str] | None = None) -> None:
    """Print a table so that it fits the width (table_width: COLUMNS, else the terminal's, else 120): rich's
    fitting wraps its columns (a word too long for its column is folded, never cut off), then the notes
    under it as plain text, wrapped at the same width."""
    width = table_width(console)
    for column in shown.columns:
        if column.overflow == "ellipsis":  # rich's default cuts a long word off: fold it instead
            column.overflow = "fold"
    console.print(shown, width=width)
    for line in notes.lines() if isinstance(notes, Notes) else notes or ():
        console.print(line, width=width, markup=False, highlight=False)


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
        p.update(token_fields(r))  # token models: seq_len, tokens/s in total and per device, MFU
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


TABLE_COLUMNS = {  # --columns name: header (CPU workers' efficiency header says "whole machine")
    "strategy": "strategy",
    "N": "N",
    "backend": "backend",
    "throughput": "throughput\nsamples/s",
    "tokens": "tokens/s",
    "tokens_per_device": "tokens/s\nper\ndevice",
    "ci": "95% CI",
    "tokens_ci": "95% CI\n(tokens/s)",
    "speedup": "speedup",
    "efficiency": "efficiency",
    "efficiency_per_core": "eff.\n(per\ncore)",
    "mfu": "MFU",
    "step_median": "step\nmedian\n(ms)",
    "step_p95": "step\np95\n(ms)",
    "cv": "CV",
    "comm": "comm\noverhead",
    "overlap": "overlap",
    "memory": "peak\nmemory",
    "status": "status",
}
"""Every column of the terminal table, in display order (`--wide` shows them all)."""

DEFAULT_COLUMNS = (
    "strategy",
    "N",
    "backend",
    "throughput",
    "ci",
    "speedup",
    "efficiency",
    "efficiency_per_core",
    "step_median",
    "comm",
    "status",
)
"""What fits 100-120 terminal columns; efficiency_per_core shows only where points ran on CPU workers."""


def parse_columns(text: str | None, wide: bool = False) -> tuple[str, ...] | None:
    """`--columns` 'strategy,N,throughput' -> the names in display order; None -> None, the default for the
    points shown (default_columns), or every column with --wide. ValueError names the unknown ones and the valid names."""
    if not text:
        return tuple(TABLE_COLUMNS) if wide else None
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in TABLE_COLUMNS]
    if unknown or not names:
        raise ValueError(
            f"unknown column(s) {', '.join(map(repr, unknown)) or 'none given'}; valid: {', '.join(TABLE_COLUMNS)}"
        )
    return tuple(n for n in TABLE_COLUMNS if n in names)


DECODER_COLUMNS = ("strategy", "N", "backend", "tokens", "tokens_per_device", "tokens_ci", "speedup", "efficiency")
DECODER_COLUMNS += ("mfu", "memory", "status")
"""The default columns when the points train a decoder language model (gpt2, llama): tokens per second in
total and per device, MFU and peak memory per device."""


def default_columns(records: list[dict]) -> tuple[str, ...]:
    """DECODER_COLUMNS when any point trains a decoder language model, else DEFAULT_COLUMNS."""
    decoder = any((r.get("config") or {}).get("model") in ("gpt2", "llama") for r in records)
    return DECODER_COLUMNS if decoder else DEFAULT_COLUMNS


def _ci_cell(r: dict, per_sample: int = 1) -> str:
    """The throughput's CI, in samples/s, or in tokens/s with per_sample = the sequence length."""
    if r.get("throughput_ci_low") is None or not per_sample:
        return "-"
    low, high = r["throughput_ci_low"] * per_sample, r.get("throughput_ci_high")  # None: unbounded
    spec = ".2f" if per_sample == 1 else ",.0f"
    return f"{low:{spec}}..{'unbounded' if high is None else format(high * per_sample, spec)}"


_CELL = {
    "N": lambda r: str(r["world_size"]),
    "backend": lambda r: escape(str(r.get("backend") or "-")),
    "throughput": lambda r: cells(r, "throughput")[0],
    "tokens": lambda r: fmt_num(tokens_per_s(r), ",.0f"),
    "tokens_per_device": lambda r: fmt_num(tokens_per_s(r, per_device=True), ",.0f"),
    "ci": _ci_cell,
    "tokens_ci": lambda r: _ci_cell(r, (r.get("config") or {}).get("seq_len") or 0),
    "speedup": lambda r: cells(r, "speedup")[0],
    "efficiency": lambda r: cells(r, "efficiency")[0],
    "efficiency_per_core": lambda r: cells(r, "efficiency_per_core")[0],
    "mfu": lambda r: cells(r, "mfu")[0],
    "step_median": lambda r: fmt_ms(r.get("step_time_median_s")),
    "step_p95": lambda r: fmt_ms(r.get("step_time_p95_s")),
    "cv": lambda r: cells(r, "step_time_cv")[0],
    "comm": lambda r: overhead_cell(r, cells(r, "comm_overhead")[0]),
    "overlap": lambda r: cells(r, "overlap")[0],
    "memory": lambda r: fmt_bytes(r.get("peak_memory_bytes")),
}


def reason_notes(records: list[dict]) -> dict[str, int]:
    """{reason: footnote number} of the points that did not run ok, numbered in order of first use."""
    numbers: dict[str, int] = {}
    for r in records:
        if r.get("status") != "ok" and r.get("reason"):
            numbers.setdefault(str(r["reason"]), len(numbers) + 1)
    return numbers


def reason_lines(records: list[dict]) -> list[str]:
    """The reasons under the table: '[1] dp N=2, N=4: DataParallel needs CUDA devices; ...' (plain text)."""
    numbers = reason_notes(records)
    points: dict[str, list[str]] = {}
    for r in records:
        if r.get("status") != "ok" and r.get("reason"):
            points.setdefault(str(r["reason"]), []).append(f"{series_name(r)} N={r.get('world_size')}")
    return [f"[{numbers[reason]}] {', '.join(names)}: {reason}" for reason, names in points.items()]


def short_status(r: dict, numbers: dict[str, int] | None = None) -> str:
    """The status word in its colour, 'noisy' after an ok one, and the number of its reason under the table."""
    status = str(r.get("status", "?"))
    shown = f"[{STATUS_STYLE.get(status, 'white')}]{escape(status)}[/]"
    if status == "ok" and r.get("noisy"):
        shown += " [yellow]noisy[/]"
    if numbers and status != "ok" and r.get("reason"):
        shown += f" \\[{numbers[str(r['reason'])]}]"
    return shown


def results_table(records: list[dict], title: str | None = None, columns: tuple[str, ...] | None = None) -> Table:
    """The points, one row each, in the chosen columns (default: DEFAULT_COLUMNS); status as a short word
    with the number of its reason (reason_lines, printed under the table)."""
    several_batches = len({swept_batch(r.get("config") or r) for r in records}) > 1
    several_lengths = len({(r.get("config") or {}).get("seq_len") for r in records} - {None}) > 1
    cpu = any(r.get("device") == "cpu" for r in records)
    tokens = any((r.get("config") or {}).get("seq_len") for r in records)
    shown = [
        c
        for c in (columns or default_columns(records))
        if (cpu or c != "efficiency_per_core") and (tokens or c not in ("tokens", "tokens_per_device", "tokens_ci"))
    ]
    headers = {**TABLE_COLUMNS, "efficiency": "eff.\n(whole\nmachine)" if cpu else "efficiency"}
    t = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True
    )
    for c in shown:  # numbers never wrap or truncate; names and status words wrap when space runs out
        text = c in TEXT_COLUMNS
        t.add_column(headers[c], justify="left" if text else "right", no_wrap=not text, overflow="fold")
    numbers = reason_notes(records)
    for r in records:
        label = escape(series_name(r))
        if several_batches:
            label += f" batch {swept_batch(r.get('config') or r)}"
        if several_lengths and (r.get("config") or {}).get("seq_len"):
            label += f" seq {r['config']['seq_len']}"
        row = {"strategy": label, "status": short_status(r, numbers)}
        t.add_row(*(row[c] if c in row else _CELL[c](r) for c in shown))
    return t


TEXT_COLUMNS = ("strategy", "backend", "status")
DROP_ORDER = ("efficiency_per_core", "comm", "step_median", "ci", "tokens_ci", "backend", "speedup", "efficiency")
DROP_ORDER += ("tokens",)
"""Which columns give way, first to last, when the table does not fit the width (names and status never)."""


def fitted_table(
    console: Console, records: list[dict], title: str | None, columns: tuple[str, ...] | None, width: int
) -> tuple[Table, list[str]]:
    """The table in `columns`, less the first columns of DROP_ORDER while its narrowest form (text columns
    wrapped at words, numbers whole) is wider than `width`; and the names left out."""
    chosen = list(columns or default_columns(records))
    dropped: list[str] = []
    options = console.options.update_width(10_000)
    while True:
        shown = results_table(records, title=title, columns=tuple(chosen))
        if console.measure(shown, options=options).minimum <= width:
            return shown, dropped
        give = next((c for c in DROP_ORDER if c in chosen and (c != "efficiency_per_core" or _any_cpu(records))), None)
        if give is None:
            return shown, dropped
        chosen.remove(give)
        dropped.append(give)


def _any_cpu(records: list[dict]) -> bool:
    return any(r.get("device") == "cpu" for r in records)


def table_width(console: Console | None = None) -> int:
    """The table's width: COLUMNS when set (also when output goes to a file), else the terminal's, else 120."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if console is None:
        return shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else 120
    return console.width if console.is_terminal else min(console.width, 120)


def legend_lines(records: list[dict], shown: list[str]) -> list[str]:
    """What the columns the table shows mean (a column left out, or not chosen, is not explained)."""
    out = []
    if _any_cpu(records) and "efficiency" in shown:
        out.append(
            "efficiency (whole machine) = speedup / N against the baseline on all the cores"
            + (
                "; efficiency (per core) against the baseline on the same threads per worker"
                if "efficiency_per_core" in shown
                else ""
            )
        )
    if "mfu" in shown:
        out.append(
            "MFU = model FLOPs per second per device / the device's peak (NVIDIA's dense datasheet peak for "
            "the math type; on CPU workers a float32 GEMM measured on the same threads); '-' = no known peak "
            "(the record's mfu_note says why)"
        )
    parts = []
    if "speedup" in shown:
        parts.append("speedup = throughput / the same framework's single-device baseline")
    if "efficiency" in shown:
        parts.append("efficiency = speedup / N")
    if "comm" in shown:
        parts.append(
            "comm overhead = communication's exposed time / step (with the three-term split its communication "
            "term, A - T, without the straggler wait; else step - step without gradient sync)"
        )
    if "overlap" in shown:
        parts.append("overlap = share of the standalone all-reduce time hidden behind compute")
    below = (
        overhead_legend([(f"{series_name(r)} N={r.get('world_size')}", r) for r in records])
        if "comm" in shown
        else None
    )
    return out + (["; ".join(parts)] if parts else []) + ([below] if below else [])


def print_summary(
    console: Console,
    records: list[dict],
    notes: list[str],
    sweep_id: str,
    store_path,
    columns: tuple[str, ...] | None = None,
) -> None:
    width = table_width(console)
    say = partial(console.print, highlight=False, markup=False, width=width)
    for note in notes:
        console.print(f"[dim]note:[/] {escape(note)}", highlight=False, width=width)
    title = f"sweep {sweep_id}"
    if columns == tuple(TABLE_COLUMNS):  # --wide: as wide as it takes
        shown, dropped = results_table(records, title=title, columns=columns), []
        width = max(width, console.measure(shown, options=console.options.update_width(10_000)).maximum)
    else:
        shown, dropped = fitted_table(console, records, title, columns, width)
    console.print(shown, width=width)
    if dropped:
        say(
            f"left out to fit {width} characters: {', '.join(dropped)} (--columns to choose, --wide for all)",
            style="dim",
        )
    for line in reason_lines(records):
        say(line)
    if (
        any(r.get("backend") for r in records)
        and "backend" in (columns or default_columns(records))
        and "backend" not in dropped
    ):
        say(
            "backend = what carried the gradients (nccl: GPU to GPU; gloo/mpi: through host memory)",
            style="dim",
        )
    for line in wrapper_lines(records):
        say(line)
    for line in split_lines(records):  # where each N > 1 step goes (distbench.results.split)
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
    noisy = [f"{series_name(r)}@{r['world_size']}" for r in records if r.get("noisy")]
    if noisy:
        say(f"noisy points (step-time CV above the threshold; read their curves with care): {', '.join(noisy)}")
    for line in legend_lines(records, [c for c in (columns or DEFAULT_COLUMNS) if c not in dropped]):
        say(line, style="dim")
    say(f"results stored in {store_path} (sweep {sweep_id})")

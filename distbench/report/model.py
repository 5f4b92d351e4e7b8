"""The report as data: `build_report` turns a sweep into sections of plain blocks that the HTML template and
the Markdown renderer both walk. Every number is formatted here; every string is plain text, escaped only
by the renderers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

from distbench import analysis as an
from distbench import predict as predict_mod
from distbench import split as split_mod
from distbench.analysis import Sweep, num
from distbench.config import swept_batch
from distbench.output import cells, fmt_bytes, fmt_ms, fmt_num
from distbench.strategies import STRATEGIES


# -- the blocks (the template dispatches on `kind`: the class name in lower case)
class Block:
    @property
    def kind(self) -> str:
        return type(self).__name__.lower()


@dataclass
class Plot:
    name: str
    title: str
    svg: bytes
    png: bytes
    caption: str = ""
    section: str = ""  # the id of the section it belongs to, where no section builder places it by name


@dataclass
class Text(Block):
    text: str
    style: str = ""  # "" (a paragraph), "muted" (definitions and asides) or "callout"
    lead: str = ""  # bold words before the text


@dataclass
class Bullets(Block):
    items: list[str]


@dataclass
class Heading(Block):
    text: str


@dataclass
class Table(Block):
    headers: list[str]
    rows: list[list[str]]
    row_classes: list[str] = field(default_factory=list)  # "bad": a point that produced no measurement
    numeric: bool = True  # right-align the cells that read as numbers


@dataclass
class Figure(Block):
    plot: Plot


@dataclass
class Grid(Block):
    figures: list[Figure]


@dataclass
class Details(Block):
    """Verbatim text folded away (a failed point's stderr tail); the HTML page only."""

    summary: str
    text: str


@dataclass
class Section:
    id: str
    nav: str  # the link text in the page's navigation
    blocks: list
    title: str = ""  # the heading; the nav text when not given

    def __post_init__(self):
        self.title = self.title or self.nav


@dataclass
class Report:
    sweep_id: str
    when: str  # see sweep_when
    command: str
    store_path: str
    callout: Text | None
    sections: list[Section]
    plots: list[Plot]


def sweep_when(info: dict) -> str:
    """'<status>, started <time>[, finished <time>]': the report's and `results show`'s header."""
    finished = f", finished {info['finished']}" if info.get("finished") else ""
    return f"{info.get('status')}, started {info.get('started')}{finished}"


# -- what the sections say
CPU_NOTE = (
    "This sweep ran on CPU workers (device = cpu), not GPUs: each 'GPU' was a CPU worker process and "
    "the workers shared the machine's CPU cores. Absolute numbers are CPU numbers, and the scaling "
    "seen here says little about scaling on GPUs."
)
CAPACITY_NOTE = (
    "Measured points only: each entry is the smallest measured N that reaches the target; "
    "when none does, it says 'not reached at the largest measured N'. Nothing is extrapolated "
    "beyond the measured device counts."
)
CAPACITY_HINT = (
    "Pass --target-throughput SAMPLES_PER_S and/or --epoch-samples N [--epoch-time S] to see how many "
    "devices each strategy needs; measured throughput per N:"
)
DEFINITIONS = (
    "throughput = global samples per second over the measured steps; speedup = throughput / the same "
    "framework's single-device baseline ('torch' or 'tf'); efficiency = speedup / N; "
    "on CPU workers efficiency (whole machine) is against the baseline on all the cores and efficiency "
    "(per core) against the same baseline on the threads each worker had; MFU = the model's training "
    "FLOPs per second per device / the device's peak (NVIDIA's dense datasheet figure for the math type, "
    "or a float32 GEMM measured on the worker's threads; '-' when the GPU is not in the table); "
    "1-device wrapper cost = 1 - throughput(strategy, N=1) / baseline. Error bars and CIs are the "
    "records' 95% throughput CIs; speedup and efficiency bars combine the point's and the "
    "baseline's CIs when both are recorded. Noisy = flagged by the measurement, or step-time CV above "
    f"{an.CV_NOISY:.0%}."
)
COMM_CAPTION = (
    "Each bar is the step (its window mean, the statistic exposed communication is a difference of): compute "
    "with no communication running, communication hidden behind compute (overlapped), and exposed "
    "communication that the step waits for (the wait for the slowest rank included; see the next figure)."
)
SPLIT_CAPTION = (
    "Each bar is the real step (window mean) of a point whose variants ran in its own processes (A T B T A): "
    "compute = the no-sync variant (B), straggler wait = the tiny-collective variant (T, a few bytes "
    "all-reduced once per step) - B, communication = the real step (A) - T. The straggler wait also holds that "
    "tiny all-reduce's own latency (meeting once per step), which at short steps can be most of it; for a "
    "strategy whose replicas step in one process (mirrored) it is that latency alone, the stragglers being in "
    "compute. Error bars: each term's 95% CI (its scope is in the table). A term below 0 within its noise is "
    "drawn as 0."
)
NO_COMM = (
    "This sweep has no communication measurements (no exposed_comm_s, comm_overhead, allreduce_s or "
    "overlap in its records), so how much of the step is spent communicating is not shown."
)
NO_TELEMETRY = "This sweep has no telemetry (utilization, memory, power) in its records."
WALL_NOTE = (
    "Seconds of each point's wall time by phase, summed over its repeats: launch to first step (process "
    "start, imports, model and data, process-group setup), warmup, measuring, the no-sync variant (its "
    "whole run), the standalone all-reduce benchmark, and teardown (gathering results, writing the record, "
    "processes exiting). Unattributed: seconds the records cannot place (records written before the "
    "phases were stamped)."
)
FIT_NOTE = (
    "A `distbench fit` search: each strategy and N doubled its per-device batch until one ran out of memory, "
    "then bisected between the largest that ran and the smallest that did not; the trials are in the order "
    "they ran, each a short real point. "
)
BATCH_NOTE = (
    "Each strategy and N ran every batch size, smallest first; a batch that ran out of memory is 'oom' "
    "and the larger batches of that strategy and N were not tried. "
)
MEMORY_NOTE = (
    "Peak memory: the most any device of "
    "the point had allocated (GPUs) or the largest worker process's peak RSS (CPU workers). Power and "
    "energy come from NVML, on GPUs only."
)


# -- tables
Rows = tuple[list[str], list[list[str]]]  # (headers, rows)


def ci_text(record: dict) -> str:
    ci = an.throughput_ci(record)
    return f"{fmt_num(ci[0], '.2f')}-{fmt_num(ci[1], '.2f')}" if ci else "-"


def math_text(mode: dict | None) -> str:
    """'TF32 on, cuDNN autotune on, NCHW' (GPUs) or the layout alone (CPU workers); '-' for older records."""
    mode = mode or {}
    word = lambda v: v if isinstance(v, str) else ("on" if v else "off")  # noqa: E731
    flags = (("tf32", "TF32"), ("cudnn_autotune", "cuDNN autotune"))
    parts = [f"{name} {word(mode[k])}" for k, name in flags if mode.get(k) is not None]
    parts += [mode["layout"]] if mode.get("layout") else []
    return ", ".join(parts) or "-"


def scaling_columns(sweep: Sweep, br: str = " ") -> tuple[list[str], Callable[[dict], list[str]]]:
    """Throughput to MFU, as the report and `results show` list points: the headers and a record's cells. The
    CI column only when a point has a CI, efficiency per core only on CPU workers; `br` breaks the headers."""
    with_ci, cpu = any(an.throughput_ci(r) for r in sweep.points), sweep.cpu_workers
    headers = [f"throughput{br}(samples/s)", *([f"95% CI{br}(samples/s)"] if with_ci else []), "speedup"]
    headers += [f"efficiency{br}(whole{br}machine)", f"efficiency{br}(per core)"] if cpu else ["efficiency"]
    efficiency = ["efficiency", "efficiency_per_core"] if cpu else ["efficiency"]

    def row(r: dict) -> list[str]:
        ci = [ci_text(r)] if with_ci else []
        return [*cells(r, "throughput"), *ci, *cells(r, "speedup", *efficiency, "mfu")]

    return [*headers, "MFU"], row


def points_rows(sweep: Sweep) -> tuple[list[str], list[list[str]], list[str]]:
    """The training points: headers, rows and a class per row ("bad" where the point did not run)."""
    scaling, scaling_cells = scaling_columns(sweep)
    headers = ["strategy", "N", "model", "device", "backend", "status", *scaling, "math mode"]
    headers += ["step median (ms)", "step p5 (ms)", "step p95 (ms)", "CV", "noisy"]
    rows, classes = [], []
    for r in sweep.points:
        if an.is_comm(r):
            continue
        ok = r.get("status") == "ok"
        row = [an.series_name(r), *(str(r.get(k)) for k in ("world_size", "model", "device"))]
        row += [str(r.get("backend") or "-"), str(r.get("status"))]  # what carried the gradients (issue 22)
        row += [*scaling_cells(r), math_text(r.get("math_mode"))]
        row += cells(r, "step_time_median_s", "step_time_p5_s", "step_time_p95_s", "step_time_cv")
        rows.append([*row, "yes" if ok and an.is_noisy(r) else ""])
        classes.append("" if ok else "bad")
    return headers, rows, classes


def comm_rows(sweep: Sweep) -> Rows:
    headers = ["strategy", "N", "step (window mean, ms)", "exposed comm (ms)", "comm overhead", "all-reduce (ms)"]
    rows = [
        [
            an.series_name(r),
            str(r.get("world_size")),
            fmt_ms((an.comm_breakdown(r) or {}).get("step_s", r.get("time_per_step_s"))),
            fmt_ms((an.comm_breakdown(r) or {}).get("exposed_s", r.get("exposed_comm_s"))),
            *cells(r, "comm_overhead", "allreduce_s", "overlap", "grad_bytes", "data_wait_fraction"),
        ]
        for r in sweep.scaling_points
        if an.has_comm_fields(r)
    ]
    return [*headers, "overlap", "gradient bytes", "data wait"], rows


def split_rows(sweep: Sweep) -> Rows:
    """One row per point with a three-term split: each term in ms with its 95% CI, and the straggler."""
    headers = ["strategy", "N", "step (ms)", "compute (ms)", "straggler wait (ms)", "communication (ms)"]

    def term(split: dict, key: str) -> str:
        ci = split.get(f"{key}_ci")
        text = f"{split[f'{key}_s'] * 1e3:.2f}"
        return text + (f" [{ci[0] * 1e3:.2f}, {ci[1] * 1e3:.2f}]" if ci else "")

    rows = []
    for r in sweep.scaling_points:
        split = r.get("comm_split")
        if not split:
            continue
        worst = split_mod.worst_straggler(r)
        straggler = (
            f"rank {worst['rank']}: {worst['slowest_share']:.0%} of steps, {worst['others_wait_s'] * 1e3:.2f} ms"
            if worst
            else "-"
        )
        rows.append(
            [
                an.series_name(r),
                str(r.get("world_size")),
                f"{split['step_s'] * 1e3:.2f}",
                *(term(split, k) for k in ("compute", "wait", "communication")),
                straggler,
                split.get("ci_scope") or "-",
            ]
        )
    return [*headers, "slowest rank most often (others' wait per step)", "CI covers"], rows


def busbw_pairs(record: dict) -> list[tuple[float, float]]:
    """(message size in bytes, bus bandwidth in GB/s) of a comm record."""
    sizes, bw = record.get("sizes_bytes"), record.get("busbw_gbps")
    if not (isinstance(sizes, list) and isinstance(bw, list)):
        return []
    return [(num(s), num(b)) for s, b in zip(sizes, bw) if num(s) and num(b) is not None]


def busbw_rows(sweep: Sweep) -> Rows:
    rows = []
    for r in sweep.comm_points:
        if pairs := busbw_pairs(r):
            size, peak = max(pairs, key=lambda p: p[1])
            sizes = f"{fmt_bytes(pairs[0][0])} - {fmt_bytes(pairs[-1][0])}"
            rows.append(
                [str(r.get("strategy")), str(r.get("world_size")), sizes, fmt_num(peak, ".3g"), fmt_bytes(size)]
            )
    return ["benchmark", "N", "message sizes", "peak busbw (GB/s)", "at size"], rows


def telemetry_rows(sweep: Sweep) -> tuple[list[str], list[tuple[dict, dict]]]:
    """The telemetry metrics any point has, and (record, its values) for the points that have some."""
    rows = [(r, t) for r in sweep.scaling_points if (t := an.telemetry_values(r))]
    return list(dict.fromkeys(m for _, t in rows for m in t)), rows


def telemetry_table(sweep: Sweep) -> Rows:
    metrics, rows = telemetry_rows(sweep)

    def cell(m: str, v) -> str:
        if v is not None and m == "throttled":
            return "yes" if v else "no"
        return fmt_bytes(v) if "bytes" in m else fmt_num(v, ".4g")

    return ["point", *metrics], [[an.point_name(r), *(cell(m, t.get(m)) for m in metrics)] for r, t in rows]


def energy_notes(sweep: Sweep) -> list[str]:
    """What energy per sample covers where it is not every GPU of the point (e.g. node 0's GPUs only)."""
    notes = []
    for r in sweep.scaling_points:
        tel = r.get("telemetry") if isinstance(r.get("telemetry"), dict) else {}
        scope = tel.get("energy_scope")
        if tel.get("energy_per_sample_j") is not None and scope and not str(scope).startswith("all "):
            notes.append(f"{an.point_name(r)}: energy per sample covers {scope}.")
    return notes


def wall_table(sweep: Sweep) -> Rows:
    """One row per launched point and one for all of them; empty when no record has launch times."""
    points = [r for r in sweep.points if not an.is_comm(r) and an.wall_split(r)]
    splits = [(an.point_name(r), an.wall_split(r)) for r in points]
    splits += [("all points", an.wall_split_total(points))] if points else []
    rows = []
    for name, split in splits:
        total = split["total"]
        share = split["measuring"] / total if total and split["measuring"] is not None else None
        parts = (fmt_num(split[k], ".1f") for k, _ in an.WALL_PARTS)
        rows.append([name, *parts, fmt_num(total, ".1f"), fmt_num(share, ".0%")])
    return ["point", *(f"{label} (s)" for _, label in an.WALL_PARTS), "total (s)", "measuring share"], rows


def batch_of(r: dict) -> int | None:
    return swept_batch(r.get("config") or r)


def batch_points(sweep: Sweep) -> list[dict]:
    """Training and inference points of a sweep with more than one batch size (else none)."""
    pts = [r for r in sweep.points if not an.is_comm(r) and batch_of(r)]
    return pts if len({batch_of(r) for r in pts}) > 1 else []


def batch_values(r: dict) -> dict[str, float | None]:
    tel = an.telemetry_values(r)
    power = (r.get("telemetry") or {}).get("power_w_mean")
    return {
        "throughput": num(r.get("throughput")),
        "step_time_median_s": num(r.get("step_time_median_s")),
        "peak_memory_bytes": num(r.get("peak_memory_bytes"))
        or tel.get("gpu_mem_peak_bytes")
        or tel.get("rss_peak_bytes"),
        "power_w": num(r.get("power_w_mean")) or (sum(power.values()) if isinstance(power, dict) and power else None),
        "energy_per_sample_j": num(r.get("energy_per_sample_j")) or tel.get("energy_per_sample_j"),
    }


def batch_series(sweep: Sweep) -> dict[str, list[dict]]:
    """'strategy N=n [over k nodes]' -> its points sorted by batch size."""
    groups: dict[tuple[str, int, int], list[dict]] = {}
    for r in batch_points(sweep):
        key = (str(r.get("strategy")), int(r.get("world_size") or 0), int(r.get("nodes") or 1))
        groups.setdefault(key, []).append(r)
    return {
        f"{s} N={n}" + (f" over {k} nodes" if k > 1 else ""): sorted(v, key=batch_of) for (s, n, k), v in groups.items()
    }


def batch_table(sweep: Sweep) -> Rows:
    rows = []
    for label, pts in batch_series(sweep).items():
        for r in pts:
            v = batch_values(r)
            rows.append(
                [
                    label,
                    str(batch_of(r)),
                    str(r.get("status")),
                    *cells(v, "throughput", "step_time_median_s"),
                    fmt_bytes(v["peak_memory_bytes"] or None),
                    fmt_num(v["power_w"], ".1f"),
                    fmt_num(v["energy_per_sample_j"], ".4g"),
                ]
            )
    headers = ["point", "batch", "status", "throughput (samples/s)", "step time median (ms)"]
    return [*headers, "peak memory per device", "mean power (W)", "energy per sample (J)"], rows


def batch_fit_table(sweep: Sweep) -> Rows:
    """Per strategy and N: the largest batch that ran, and the batch that ran out of memory."""
    rows = []
    for label, pts in batch_series(sweep).items():
        ok = [batch_of(r) for r in pts if r.get("status") == "ok"]
        oom = [batch_of(r) for r in pts if r.get("status") == "oom"]
        rows.append([label, str(max(ok)) if ok else "none", str(min(oom)) if oom else "-"])
    return ["point", "largest batch that fit", "ran out of memory at"], rows


def capacity_table(sweep: Sweep, target_throughput, epoch_samples, epoch_time) -> Rows:
    rows = an.capacity(
        sweep.scaling_points, target_throughput=target_throughput, epoch_samples=epoch_samples, epoch_time_s=epoch_time
    )
    multi = len({r.workload for r in rows}) > 1
    headers = (["workload"] if multi else []) + ["strategy", "measured throughput (samples/s)"]
    if target_throughput is not None:
        headers.append(f"devices for {target_throughput:g} samples/s")
    if epoch_samples:
        headers.append(f"time per epoch of {epoch_samples:,} samples")
        if epoch_time is not None:
            headers.append(f"devices for an epoch within {an.format_duration(epoch_time)}")
    out = []
    for row in rows:
        cells = ([row.workload] if multi else []) + [
            row.strategy,
            ", ".join(f"N={n}: {fmt_num(t, '.2f')}" for n, t in row.measured),
        ]
        if target_throughput is not None:
            cells.append(row.target_throughput or "-")
        if epoch_samples:
            cells.append(", ".join(f"N={n}: {an.format_duration(t)}" for n, t in row.epoch_times))
            if epoch_time is not None:
                cells.append(row.target_epoch or "-")
        out.append(cells)
    return headers, out


def problem_table(points: list[dict]) -> Table:
    rows = [
        [
            an.series_name(r),
            str(r.get("world_size")),
            str(r.get("status")),
            str(r.get("reason") or "no reason recorded"),
        ]
        for r in points
    ]
    return Table(["strategy", "N", "status", "reason"], rows)


def env_rows(sweep: Sweep) -> list[list[str]]:
    env = sweep.info.get("env") or {}
    rows = []
    for key, value in sorted(env.items()):
        if isinstance(value, dict) and key == "packages":
            text = ", ".join(f"{k} {v}" for k, v in sorted(value.items()) if v)
        else:
            text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
        rows.append([key, text])
    return [*rows, ["options", json.dumps(sweep.info.get("options") or {}, sort_keys=True, default=str)]]


# -- the sections
@dataclass
class Inputs:
    sweep: Sweep
    summary: an.Summary
    plots: dict[str, Plot]
    capacity: Rows
    capacity_asked: bool
    prediction: dict | None
    placed: set[str] = field(default_factory=set)

    def figures(self, *names: str) -> list[Figure]:
        """The named plots that were drawn (a plot with nothing to show is not drawn)."""
        self.placed.update(names)
        return [Figure(self.plots[n]) for n in names if n in self.plots]


def table_or(headers_rows, empty: str) -> Table | Text:
    headers, rows = headers_rows
    return Table(headers, rows) if rows else Text(empty)


def summary_section(c: Inputs) -> Section:
    blocks = [block for title, lines in c.summary.sections() for block in (Heading(title), Bullets(lines))]
    return Section("summary", "Summary", blocks)


def points_section(c: Inputs) -> Section:
    headers, rows, classes = points_rows(c.sweep)
    table = Table(headers, rows, classes) if rows else Text("The sweep has no training points.")
    return Section("points", "Points", [table, Text(DEFINITIONS, "muted")])


def scaling_section(c: Inputs) -> Section:
    figures = c.figures("speedup", "efficiency", "throughput")
    return Section("scaling", "Scaling", [Grid(figures) if figures else Text("No successful training points to plot.")])


def communication_section(c: Inputs) -> Section:
    blocks = [*c.figures("comm"), Table(*comm_rows(c.sweep))] if "comm" in c.plots else [Text(NO_COMM)]
    if "split" in c.plots:
        blocks += [Heading("Compute, straggler wait, communication"), *c.figures("split"), Table(*split_rows(c.sweep))]
    if "busbw" in c.plots:
        blocks += [Heading("Collective bandwidth"), *c.figures("busbw"), Table(*busbw_rows(c.sweep))]
    return Section("communication", "Communication", blocks)


# -- the wrappers section (issue 13): what a wrapper or sharded strategy costs against plain torch and ddp
WRAPPERS_NOTE = (
    "Each ratio is throughput(strategy) / throughput(reference) for the same workload and batch: "
    "against plain 'torch' at 1 device, and against 'ddp' at the same N. Below 1.0 the strategy is "
    "slower. '95% CI' combines both points' throughput CIs on the log scale "
    "(analysis.throughput_ratio_ci); a strategy is called slower or faster only when that CI "
    "excludes 1.0, and within noise only when it includes it. Peak memory is per device, next to "
    "ddp's at the same N and batch."
)
STEPS_SCOPE = "within-run noise (batch means over the point's stored step times)"


def is_wrapper(record: dict) -> bool:
    strategy = STRATEGIES.get(str(record.get("strategy")))
    return bool(strategy and strategy.group in ("wrappers", "sharded", "engines"))


@dataclass
class Ratio:
    """throughput(point) / throughput(ref) with its 95% CI (None, and `how` says why, when there is none)."""

    value: float
    ci: tuple[float, float] | None
    how: str

    @property
    def verdict(self) -> str:
        if self.ci is None:
            return f"no CI ({self.how})"
        return "slower" if self.ci[1] < 1 else "faster" if self.ci[0] > 1 else "within noise"

    @property
    def span(self) -> str:
        return f"{self.ci[0]:.3f}-{self.ci[1]:.3f}" if self.ci else "no CI"

    def cell(self) -> str:
        return f"{self.value:.3f}x ({self.span})"

    def words(self, ref: str) -> str:
        ci = f" (95% CI {self.span})" if self.ci else ""
        return f"{self.value:.3f}x {ref}'s throughput{ci}: {self.verdict}"


def throughput_ratio(sweep: Sweep, ref: dict | None, r: dict, scopes: set[str]) -> Ratio | None:
    """The ratio against `ref` (None without a successful reference); adds what its CI covers to `scopes`."""
    if ref is None or not num(ref.get("throughput")) or not num(r.get("throughput")):
        return None
    ci, how = an.throughput_ratio_ci(sweep, ref, sweep, r)
    if ci:
        scopes.update(str(p.get("ci_scope") or STEPS_SCOPE) if an.throughput_ci(p) else STEPS_SCOPE for p in (ref, r))
    return Ratio(num(r["throughput"]) / num(ref["throughput"]), ci, how)


def wrapper_rows(sweep: Sweep, points: list[dict], scopes: set[str]) -> tuple[list[list[str]], list[str], dict]:
    """One workload's wrapper points: table rows, a sentence per strategy, and each strategy's 1-device
    verdict against torch (strategy -> Ratio or None)."""
    order = list(STRATEGIES)
    wrappers = sorted(
        (r for r in points if is_wrapper(r)),
        key=lambda r: (order.index(r["strategy"]), int(r.get("nodes") or 1), int(r["world_size"])),
    )
    ddp = {(int(r["world_size"]), int(r.get("nodes") or 1)): r for r in points if r.get("strategy") == "ddp"}
    rows, words, one_device = [], [], {}
    for r in wrappers:
        n, name = int(r["world_size"]), an.series_name(r)
        base = an.baseline_for(r, points) if n == 1 else None
        ref = ddp.get((n, int(r.get("nodes") or 1)))
        vs_torch, vs_ddp = throughput_ratio(sweep, base, r, scopes), throughput_ratio(sweep, ref, r, scopes)
        mem, ref_mem = batch_values(r)["peak_memory_bytes"], batch_values(ref)["peak_memory_bytes"] if ref else None
        mem_ratio = mem / ref_mem if mem and ref_mem else None
        rows.append(
            [
                name,
                str(n),
                fmt_num(r.get("throughput"), ".2f"),
                vs_torch.cell() if vs_torch else "no 'torch' baseline" if n == 1 else "-",
                vs_ddp.cell() if vs_ddp else f"no 'ddp' point at N={n}",
                fmt_bytes(mem or None),
                fmt_bytes(ref_mem or None),
                fmt_num(mem_ratio, ".2f") + ("x" if mem_ratio else ""),
            ]
        )
        parts = [vs_torch.words("plain torch")] if vs_torch else []
        parts += [vs_ddp.words("ddp")] if vs_ddp else []
        parts += [f"peak memory {mem_ratio:.2f}x ddp's"] if mem_ratio else []
        parts += [loop_cost_words(r)] if loop_cost_words(r) else []
        words.append(f"{name} at N={n}: " + ("; ".join(parts) or "no reference point to compare with") + ".")
        if n == 1:
            one_device[name] = vs_torch
    return rows, words, one_device


def loop_cost_words(r: dict) -> str | None:
    """The part of a loop-owning wrapper's step that is its own loop (measured in the worker: the step time
    minus the step function's, median per step; distbench/workers/wrapper_loop.SteppedLoop.around_s), or None."""
    around, step = (r.get("wrapper") or {}).get("loop_around_step_s"), r.get("step_time_median_s")
    if around is None or not step:
        return None
    return (
        f"its own loop around the step (events and hooks, plus the thread hand-off) {around * 1e3:.2f} ms a step, "
        f"{around / step:.2%} of its median step; the rest of any gap to plain torch is outside that loop "
        "(the step itself, the process, or run-to-run noise)"
    )


def wrapper_answer(one_device: dict, skipped: list[dict]) -> str:
    """The seed's question, 'do the wrappers cost training speed?', answered from the 1-device ratios."""
    groups: dict[str, list[str]] = {}
    for name, ratio in one_device.items():
        if ratio is None:
            label, entry = "with no 'torch' baseline to compare with", name
        elif ratio.ci is None:
            label, entry = "without a CI, so not settled", f"{name} ({ratio.value:.3f}x)"
        elif ratio.verdict == "within noise":
            label = "within noise of plain torch (95% CI includes 1.0)"
            entry = f"{name} ({ratio.value:.3f}x, 95% CI {ratio.span})"
        else:
            label = {
                "slower": "measurably slower than plain torch (95% CI below 1.0)",
                "faster": "measurably faster than plain torch (95% CI above 1.0)",
            }[ratio.verdict]
            cost = 1 - ratio.value
            entry = f"{name} ({abs(cost):.1%} {'slower' if cost >= 0 else 'faster'})"
        groups.setdefault(label, []).append(entry)
    lines = [f"{label}: {', '.join(names)}" for label, names in groups.items()]
    unmeasured = sorted({str(r.get("strategy")) for r in skipped if int(r.get("world_size") or 0) == 1})
    lines += [f"not measured: {', '.join(unmeasured)} (see below)"] if unmeasured else []
    if not lines:
        return "No wrapper or sharded strategy has a successful 1-device point, so its cost is not measured."
    return "At 1 device, " + "; ".join(lines) + "."


def timing_lines(points: list[dict]) -> list[str]:
    """How each strategy's steps were timed, where its records say so (a wrapper that owns its loop)."""
    notes: dict[str, dict] = {}  # timing note -> its strategies (a dict: ordered, once each)
    for r in points:
        if r.get("timing"):
            notes.setdefault(str(r["timing"]), {})[str(r.get("strategy"))] = None
    lines = [f"{', '.join(names)}: timing, as its records say: {note}." for note, names in notes.items()]
    if lines:
        lines.append(
            "The other strategies' records carry no timing note: distbench's own step function, timed like ddp's."
        )
    return lines


def wrappers_section(c: Inputs) -> Section | None:
    points = [r for r in c.sweep.points if is_wrapper(r) and not an.is_comm(r)]
    if not points:
        return None
    groups = {k: g for k, g in an.group_by_workload(c.sweep.scaling_points).items() if any(map(is_wrapper, g))}
    scopes: set[str] = set()
    skipped = [r for r in points if r.get("status") != "ok"]
    blocks: list = []
    for key, group in groups.items():
        rows, words, one_device = wrapper_rows(c.sweep, group, scopes)
        blocks += [Heading(an.workload_label(key, groups))] if len(groups) > 1 else []
        blocks += [
            Text(wrapper_answer(one_device, skipped), lead="Do the wrappers cost speed?"),
            Table(
                [
                    "strategy",
                    "N",
                    "throughput (samples/s)",
                    "vs torch at N=1 (95% CI)",
                    "vs ddp at the same N (95% CI)",
                    "peak memory per device",
                    "ddp's peak memory",
                    "memory vs ddp",
                ],
                rows,
            ),
            Bullets(words),
        ]
    if not groups:
        blocks.append(Text(wrapper_answer({}, skipped)))
    if timing := timing_lines(points):
        blocks.append(Bullets(timing))
    blocks += [Text(WRAPPERS_NOTE + (f" The CIs cover: {'; '.join(sorted(scopes))}." if scopes else ""), "muted")]
    blocks += [Heading("Not measured"), problem_table(skipped)] if skipped else []
    return Section("wrappers", "Wrappers", blocks, "Wrapper and sharded strategies")


def steps_section(c: Inputs) -> Section:
    blocks = c.figures("steps") or [Text("No per-step samples in this sweep.")]
    return Section("steps", "Step times", blocks, "Step-time distributions")


def telemetry_section(c: Inputs) -> Section:
    blocks = [Text(NO_TELEMETRY)]
    if "telemetry" in c.plots:
        blocks = [*c.figures("telemetry"), Table(*telemetry_table(c.sweep))]
        blocks += [Text(note, "muted") for note in energy_notes(c.sweep)]
    return Section("telemetry", "Telemetry", blocks)


def wall_section(c: Inputs) -> Section | None:
    headers, rows = wall_table(c.sweep)
    blocks = [Text(WALL_NOTE, "muted"), Table(headers, rows)]
    return Section("wall", "Wall time", blocks, "Where the wall time goes") if rows else None


def batch_section(c: Inputs) -> Section | None:
    if not batch_points(c.sweep):
        return None
    fit = (c.sweep.info.get("options") or {}).get("kind") == "fit"
    return Section(
        "batch",
        "Batch size",
        [
            Text((FIT_NOTE if fit else BATCH_NOTE) + MEMORY_NOTE, "muted"),
            *c.figures("batch"),
            Table(*batch_fit_table(c.sweep)),
            Table(*batch_table(c.sweep)),
        ],
    )


def capacity_section(c: Inputs) -> Section:
    blocks = [] if c.capacity_asked else [Text(CAPACITY_HINT, "muted")]
    blocks += [Text(CAPACITY_NOTE), table_or(c.capacity, "No successful points to plan with.")]
    return Section("capacity", "Capacity", blocks, "Capacity planning")


def predicted_section(c: Inputs) -> Section | None:
    if not (doc := c.prediction):
        return None
    blocks = [
        Text(predict_mod.PREDICTION_NOTE, "callout"),
        *c.figures("predicted"),
        Table(*predict_mod.table_rows(doc)),
        Heading("Validation: leave-largest-N-out"),
        table_or(predict_mod.validation_rows(doc), "Needs at least 3 measured N."),
        Bullets([line.strip() for line in predict_mod.summary_lines(doc)]),
    ]
    return Section("predicted", "Predicted", blocks, "Predicted capacity")


def problems_section(c: Inputs) -> Section:
    points = c.sweep.problem_points
    tails = [
        Details(f"stderr tail: {an.point_name(r)}", str(r["stderr_tail"])[-2000:])
        for r in points
        if r.get("stderr_tail")
    ]
    blocks = [problem_table(points), *tails] if points else [Text("Every point produced a measurement.")]
    return Section("problems", "Skipped/failed", blocks, "Skipped and failed points")


def environment_section(c: Inputs) -> Section:
    notes = c.sweep.info.get("notes") or []
    blocks = [*([Bullets(list(notes))] if notes else []), Table(["", "value"], env_rows(c.sweep), numeric=False)]
    return Section("environment", "Environment", blocks)


SECTIONS: list[Callable[[Inputs], Section | None]] = [  # in page order; None: the section does not apply
    summary_section,
    points_section,
    scaling_section,
    communication_section,
    wrappers_section,  # only when the sweep has wrapper or sharded strategies (their `group`)
    steps_section,
    telemetry_section,
    wall_section,
    batch_section,
    capacity_section,
    predicted_section,
    problems_section,
    environment_section,
]


def build_report(
    sweep: Sweep,
    plots: list[Plot],
    *,
    target_throughput: float | None = None,
    epoch_samples: int | None = None,
    epoch_time: float | None = None,
    prediction: dict | None = None,
) -> Report:
    """The whole report as data: the sweep's header, the CPU-workers callout and the sections that apply."""
    inputs = Inputs(
        sweep=sweep,
        summary=an.summarize(sweep),
        plots={p.name: p for p in plots},
        capacity=capacity_table(sweep, target_throughput, epoch_samples, epoch_time),
        capacity_asked=target_throughput is not None or bool(epoch_samples),
        prediction=prediction,
    )
    sections = [s for s in (build(inputs) for build in SECTIONS) if s]
    for plot in plots:  # a plot no builder names goes at the end of its own section
        home = next((s for s in sections if s.id == plot.section), None)
        if home and plot.name not in inputs.placed:
            home.blocks.append(Figure(plot))
    i = sweep.info
    return Report(
        sweep_id=sweep.id,
        when=sweep_when(i),
        command=str(i.get("command") or "-"),
        store_path=str(sweep.store_path),
        callout=Text(CPU_NOTE, "callout", "CPU workers.") if sweep.cpu_workers else None,
        sections=sections,
        plots=plots,
    )

"""Presenting a stored sweep: terminal tables (`results list/show`), exports, and the report.

`write_report` makes ONE self-contained HTML file (plots inline as base64 SVG data URIs, inline CSS, a
Content-Security-Policy that forbids any network load), a Markdown twin for a PR or wiki with the
plots written beside it as PNG, and a CSV of the points. Plots are drawn on `matplotlib.figure.Figure`
objects (no pyplot, no GUI backend; PNGs through Agg). Every string that comes from the store is
escaped before it reaches HTML, Markdown or rich markup.

    from distbench.analysis import open_store, load_sweep
    from distbench.report import write_report
    with open_store("distbench-results/distbench.db") as store:
        files = write_report(load_sweep(store, "latest"), "report.html", target_throughput=1000)
"""
from __future__ import annotations

import base64
import html
import importlib.util
import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rich.markup import escape as rich_escape
from rich.table import Table

from distbench import analysis as an
from distbench import predict as predict_mod
from distbench.analysis import Sweep, num, pct
from distbench.config import swept_batch
from distbench.errors import BadInput

STATUS_STYLE = {"ok": "green", "skipped": "yellow", "failed": "red", "timeout": "red", "oom": "magenta", "interrupted": "yellow"}


# -- terminal ---------------------------------------------------------------------------------------------
def _f(value, fmt: str) -> str:
    x = num(value)
    return "-" if x is None else format(x, fmt)


def _ms(value) -> str:
    x = num(value)
    return "-" if x is None else f"{x * 1e3:.1f}"


def _ci_text(record: dict, fmt: str = ".2f") -> str:
    ci = an.throughput_ci(record)
    return f"{ci[0]:{fmt}}-{ci[1]:{fmt}}" if ci else "-"


def sweeps_table(rows: Sequence[dict], store_path) -> Table:
    table = Table(title=f"sweeps in {rich_escape(str(store_path))} (newest first)", title_justify="left")
    for col, justify in (("id", "left"), ("started", "left"), ("status", "left"), ("points ok/total", "right"),
                         ("command", "left")):
        table.add_column(col, justify=justify, overflow="fold")
    for r in rows:
        table.add_row(rich_escape(r["id"]), rich_escape(str(r["started"])), rich_escape(str(r["status"])),
                      f"{r['points_ok']}/{r['points_total']}", rich_escape(str(r["command"] or "")))
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
    columns += [("MFU", "right"), ("step median\n(ms)", "right"),
                ("step p95\n(ms)", "right"), ("CV", "right"), ("status", "left")]
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
        row = [rich_escape(an.series_name(r)), str(r.get("world_size")), _f(r.get("throughput"), ".2f")]
        if with_ci:
            row.append(_ci_text(r))
        row += [_f(r.get("speedup"), ".2f"), pct(num(r.get("efficiency")))]
        row += [pct(num(r.get("efficiency_per_core")))] if cpu else []
        row += [pct(num(r.get("mfu")), 1), _ms(r.get("step_time_median_s")),
                _ms(r.get("step_time_p95_s")), pct(num(r.get("step_time_cv"))), shown]
        table.add_row(*row)
    return table


def sweep_header(sweep: Sweep) -> list[str]:
    i = sweep.info
    lines = [f"sweep {i['id']}: {i.get('status')}, started {i.get('started')}"
             + (f", finished {i.get('finished')}" if i.get("finished") else ""),
             f"command: {i.get('command') or '-'}"]
    lines += [f"note: {n}" for n in i.get("notes") or []]
    return lines


def wrapper_lines(sweep: Sweep) -> list[str]:
    return an.summarize(sweep).wrapper


# -- exports ----------------------------------------------------------------------------------------------
def check_writable(path: str | Path) -> None:
    """Refuse, before any work, an output path that cannot be a file (its folder is a file, or it is a folder)."""
    path = Path(path)
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise BadInput(f"cannot write {path}: {parent} is not a folder")
            break
    if path.is_dir():
        raise BadInput(f"cannot write {path}: it is a folder")


def _write_text(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from None


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NEGATIVE_NUMBER = re.compile(r"-((\d[\d,]*(\.\d*)?|\.\d+)(e[+-]?\d+)?%?)?")  # "-12.5", "-3%", "-1e-05", "-"


def spreadsheet_safe(value):
    """Neutralise formula injection (OWASP): a text cell that begins with = + - @ tab or CR gets a leading
    ' so a spreadsheet shows it as text instead of running it. Numbers, and text that is only a negative
    number (or the "-" placeholder), stay as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NEGATIVE_NUMBER.fullmatch(value):
        return "'" + value
    return value


def safe_csv(frame) -> str:
    """The frame as CSV with every text cell and header passed through `spreadsheet_safe`. Lines end in
    CRLF (RFC 4180) so that a cell holding a bare CR is quoted too, instead of starting a new row."""
    frame = frame.rename(columns=spreadsheet_safe)
    for col in frame.select_dtypes(exclude="number").columns:  # text columns; numbers are never touched
        frame[col] = frame[col].map(spreadsheet_safe)
    return frame.to_csv(index=False, lineterminator="\r\n")


def have_pyarrow() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def export(sweep: Sweep, *, csv: str | None = None, parquet: str | None = None,
           json_path: str | None = None) -> list[str]:
    """Write the sweep as CSV / Parquet (one row per point, pandas) and/or JSON (the full records and
    their step times). '-' writes CSV or JSON to stdout. Returns the paths written."""
    if not (csv or parquet or json_path):
        raise BadInput("nothing to export: give --csv PATH, --parquet PATH or --json PATH")
    if parquet and not have_pyarrow():
        raise BadInput("--parquet needs pyarrow, which is not installed: pip install pyarrow")
    if sum(p == "-" for p in (csv, json_path)) > 1:
        raise BadInput("only one of --csv and --json can write to stdout ('-')")
    for path in (csv, parquet, json_path):
        if path and path != "-":
            check_writable(path)
    written = []
    frame = an.points_frame(sweep) if (csv or parquet) else None
    if csv:
        _write_text(csv, safe_csv(frame))
        written.append(csv)
    if parquet:
        try:
            frame.to_parquet(parquet, index=False)
        except OSError as exc:
            raise BadInput(f"cannot write {parquet}: {exc.strerror or exc}") from None
        written.append(parquet)
    if json_path:
        _write_text(json_path, json.dumps(an.sweep_document(sweep), indent=2, sort_keys=True, default=str) + "\n")
        written.append(json_path)
    return [p for p in written if p != "-"]


# -- plots ------------------------------------------------------------------------------------------------
@dataclass
class Plot:
    name: str
    title: str
    svg: bytes
    png: bytes


def _mpl(text) -> str:
    """A label matplotlib shows literally: no mathtext ($), no legend-hiding leading underscore."""
    s = str(text).replace("$", r"\$")
    return " " + s if s.startswith("_") else s


def _render(fig, name: str, title: str) -> Plot:
    svg, png = io.BytesIO(), io.BytesIO()
    fig.savefig(svg, format="svg", bbox_inches="tight", metadata={"Date": None})
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
    return Plot(name=name, title=title, svg=svg.getvalue(), png=png.getvalue())


class _Colors:
    def __init__(self):
        self._map: dict[str, str] = {}
        self._cycle = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                       "#7f7f7f", "#bcbd22", "#17becf"]

    def __call__(self, key: str) -> str:
        if key not in self._map:
            self._map[key] = self._cycle[len(self._map) % len(self._cycle)]
        return self._map[key]


def _series(points: Sequence[dict], include_baselines: bool) -> list[tuple[str, str, list[dict], bool]]:
    """(label, colour key, points sorted by N, is_baseline) per strategy and workload."""
    groups = an.group_by_workload(points)
    out = []
    for key, pts in groups.items():
        for strategy, spts in an.by_strategy(pts).items():
            base = an.is_baseline(spts[0])
            if base and not include_baselines:
                continue
            label = strategy + (" (baseline)" if base else "")
            if len(groups) > 1:
                label += f" · {an.workload_label(key, groups)}"
            out.append((label, strategy, spts, base))
    return out


def _n_axis(ax, ns: Sequence[int]) -> None:
    from matplotlib.ticker import NullLocator

    ns = sorted(set(ns))
    if ns and ns[-1] / max(1, ns[0]) > 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(ns)
    ax.set_xticklabels([str(n) for n in ns])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("N (devices)")
    ax.grid(True, alpha=0.3)


def _errorbars(spts: Sequence[dict], key: str, points: Sequence[dict]):
    lows, highs, any_ci = [], [], False
    for r in spts:
        value = num(r.get(key))
        ci = (an.throughput_ci(r) if key == "throughput"
              else an.scaled_ci(r, key, an.baseline_for(r, points)))
        if ci and value is not None:
            any_ci = True
            lows.append(max(0.0, value - ci[0]))
            highs.append(max(0.0, ci[1] - value))
        else:
            lows.append(0.0)
            highs.append(0.0)
    return [lows, highs] if any_ci else None


def _line_plot(sweep: Sweep, colors: _Colors, key: str, name: str, title: str, ylabel: str):
    from matplotlib.figure import Figure

    points = [r for r in sweep.scaling_points if num(r.get(key)) is not None]
    series = _series(points, include_baselines=(key == "throughput"))
    if not series:
        return None
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    ns = [int(r["world_size"]) for _, _, spts, _ in series for r in spts]
    if key == "speedup":
        lo, hi = min(ns), max(ns)
        ax.plot([lo, hi], [lo, hi], linestyle="--", color="#888888", label="ideal (linear)")
    if key == "efficiency":
        ax.axhline(1.0, linestyle=":", color="#888888", label="ideal (100%)")
        ax.axhline(an.EFFICIENCY_TARGET, linestyle="--", color="#d62728", alpha=0.6,
                   label=f"{an.EFFICIENCY_TARGET:.0%}")
    for label, ckey, spts, base in series:
        xs = [int(r["world_size"]) for r in spts]
        ys = [num(r[key]) for r in spts]
        ax.errorbar(xs, ys, yerr=_errorbars(spts, key, sweep.scaling_points), marker="s" if base else "o", capsize=4,
                    color=colors(ckey), label=_mpl(label), linestyle="none" if base else "-")
    _n_axis(ax, ns)
    if key == "efficiency":
        from matplotlib.ticker import PercentFormatter

        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, max(1.1, ax.get_ylim()[1]))  # autoscaled limits already cover the error bars
    else:
        ax.set_ylim(bottom=0)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _render(fig, name, title)


def plot_comm(sweep: Sweep, colors: _Colors):
    from matplotlib.figure import Figure

    rows = [(r, an.comm_breakdown(r)) for r in sweep.scaling_points]
    rows = [(r, b) for r, b in rows if b]
    if not rows:
        return None
    rows.sort(key=lambda rb: (str(rb[0].get("strategy")), int(rb[0].get("world_size") or 0)))
    fig = Figure(figsize=(max(5.0, 1.0 + 0.9 * len(rows)), 4.2))
    ax = fig.subplots()
    xs = list(range(len(rows)))
    compute = [b["compute_only_s"] * 1e3 for _, b in rows]
    hidden = [b["overlapped_s"] * 1e3 for _, b in rows]
    exposed = [b["exposed_s"] * 1e3 for _, b in rows]
    ax.bar(xs, compute, color="#c7c7c7", label="compute (no communication running)")
    ax.bar(xs, hidden, bottom=compute, color="#9ecae1", label="communication overlapped with compute")
    ax.bar(xs, exposed, bottom=[c + h for c, h in zip(compute, hidden)], color="#d62728",
           label="exposed communication")
    for x, (_, b) in zip(xs, rows):
        if b["overlap"] is not None:
            ax.annotate(f"overlap {b['overlap']:.0%}", (x, b["step_s"] * 1e3), ha="center", va="bottom",
                        fontsize="x-small", xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(xs)
    ax.set_xticklabels([_mpl(f"{an.series_name(r)}\nN={r.get('world_size')}") for r, _ in rows], fontsize="small")
    ax.set_ylabel("median step time (ms)")
    title = "Where the step time goes: exposed vs overlapped communication"
    ax.set_title(title)
    ax.legend(fontsize="x-small", loc="upper left")
    ax.set_ylim(top=max(b["step_s"] for _, b in rows) * 1e3 * 1.35)
    return _render(fig, "comm", title)


def plot_busbw(sweep: Sweep, colors: _Colors):
    from matplotlib.figure import Figure

    recs = []
    for r in sweep.comm_points:
        sizes, bw = r.get("sizes_bytes"), r.get("busbw_gbps")
        if isinstance(sizes, list) and isinstance(bw, list):
            pairs = [(num(s), num(b)) for s, b in zip(sizes, bw) if num(s) and num(b) is not None]
            if pairs:
                recs.append((r, pairs))
    if not recs:
        return None
    fig = Figure(figsize=(7.2, 4.2))
    ax = fig.subplots()
    for r, pairs in recs:
        ax.plot([p[0] for p in pairs], [p[1] for p in pairs], marker="o",
                color=colors(str(r.get("strategy"))) if len(recs) <= 10 else None,
                label=_mpl(f"{r.get('strategy')} N={r.get('world_size')}"))
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _bytes(x)))
    ax.tick_params(axis="x", labelsize="x-small", labelrotation=30)
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s, busbw)")
    title = "Collective bus bandwidth vs message size"
    ax.set_title(title)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize="small")
    return _render(fig, "busbw", title)


def _point_label(r: dict) -> str:
    return an.point_name(r)


def plot_steps(sweep: Sweep):
    from matplotlib.figure import Figure

    data = [(r, [t * 1e3 for t in sweep.step_times(r)]) for r in sweep.scaling_points]
    data = [(r, d) for r, d in data if d]
    if not data:
        return None
    fig = Figure(figsize=(7.2, 1.2 + 0.45 * len(data)))
    ax = fig.subplots()
    box = dict(whis=(5, 95), showmeans=True, showfliers=False, medianprops={"color": "#d62728"},
               meanprops={"markerfacecolor": "#2ca02c", "markeredgecolor": "none"})
    try:
        ax.boxplot([d for _, d in data], orientation="horizontal", **box)
    except TypeError:  # matplotlib < 3.10
        ax.boxplot([d for _, d in data], vert=False, **box)
    import numpy as np

    rng = np.random.default_rng(0)
    for i, (_, d) in enumerate(data, 1):  # every sample, jittered: with few steps the box alone misleads
        ax.scatter(d, i + rng.uniform(-0.18, 0.18, len(d)), s=14, color="#1f77b4", alpha=0.7, zorder=3,
                   linewidths=0)
    ax.set_yticks(range(1, len(data) + 1))
    ax.set_yticklabels([_mpl(_point_label(r)) for r, _ in data], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("step time (ms); box = quartiles, whiskers = p5-p95, line = median, triangle = mean, dots = every step")
    title = "Step-time distribution per point"
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    return _render(fig, "steps", title)


def _telemetry_rows(sweep: Sweep) -> tuple[list[str], list[tuple[dict, dict]]]:
    rows = [(r, an.telemetry_values(r)) for r in sweep.scaling_points]
    rows = [(r, t) for r, t in rows if t]
    metrics: list[str] = []
    for _, t in rows:
        metrics += [m for m in t if m not in metrics]
    return metrics, rows


TELEMETRY_TABLE_ONLY = {"throttled"}
"""Yes/no telemetry: shown in the table, not as bars."""


def plot_telemetry(sweep: Sweep):
    from matplotlib.figure import Figure

    metrics, rows = _telemetry_rows(sweep)
    metrics = [m for m in metrics if m not in TELEMETRY_TABLE_ONLY]
    if not rows or not metrics:
        return None
    cols = 2 if len(metrics) > 1 else 1
    nrows = (len(metrics) + cols - 1) // cols
    fig = Figure(figsize=(7.6, max(2.4, nrows * (0.8 + 0.32 * len(rows)))))
    axes = fig.subplots(nrows, cols, squeeze=False)
    labels = [_mpl(_point_label(r)) for r, _ in rows]
    for i, metric in enumerate(metrics):
        ax = axes[i // cols][i % cols]
        values = [t.get(metric) for _, t in rows]
        scale, unit = (2 ** 30, " (GiB)") if "bytes" in metric else (1, "")
        ax.barh(range(len(rows)), [0 if v is None else v / scale for v in values], color="#1f77b4")
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(labels, fontsize="x-small")
        ax.invert_yaxis()
        ax.set_title(_mpl(metric + unit), fontsize="small")
        ax.tick_params(axis="x", labelsize="x-small")
    for j in range(len(metrics), nrows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.tight_layout()
    return _render(fig, "telemetry", "Telemetry per point")


# -- batch-size axis ---------------------------------------------------------------------------------------
BATCH_METRICS = (  # key, label, scale applied for display
    ("throughput", "throughput (samples/s)", 1.0),
    ("step_time_median_s", "step time median (ms)", 1e3),
    ("peak_memory_bytes", "peak memory per device (GiB)", 2.0 ** -30),
    ("power_w", "mean power, all GPUs of the point (W)", 1.0),
    ("energy_per_sample_j", "energy per sample (J)", 1.0),
)
BATCH_NOTE = ("Each strategy and N ran every batch size, smallest first; a batch that ran out of memory is 'oom' "
              "and the larger batches of that strategy and N were not tried. Peak memory: the most any device of "
              "the point had allocated (GPUs) or the largest worker process's peak RSS (CPU workers). Power and "
              "energy come from NVML, on GPUs only.")


def _batch_of(r: dict) -> int | None:
    return swept_batch(r.get("config") or r)


def _batch_points(sweep: Sweep) -> list[dict]:
    """Training and inference points of a sweep with more than one batch size (else none)."""
    pts = [r for r in sweep.points if not an.is_comm(r) and _batch_of(r)]
    return pts if len({_batch_of(r) for r in pts}) > 1 else []


def _batch_values(r: dict) -> dict[str, float | None]:
    tel = an.telemetry_values(r)
    power = (r.get("telemetry") or {}).get("power_w_mean")
    return {"throughput": num(r.get("throughput")), "step_time_median_s": num(r.get("step_time_median_s")),
            "peak_memory_bytes": num(r.get("peak_memory_bytes")) or tel.get("gpu_mem_peak_bytes")
            or tel.get("rss_peak_bytes"),
            "power_w": num(r.get("power_w_mean")) or (sum(power.values()) if isinstance(power, dict) and power
                                                       else None),
            "energy_per_sample_j": num(r.get("energy_per_sample_j")) or tel.get("energy_per_sample_j")}


def _batch_series(sweep: Sweep) -> dict[tuple[str, int, int], list[dict]]:
    """(strategy, N, nodes) -> its points sorted by batch size."""
    groups: dict[tuple[str, int, int], list[dict]] = {}
    for r in _batch_points(sweep):
        groups.setdefault((str(r.get("strategy")), int(r.get("world_size") or 0), int(r.get("nodes") or 1)),
                          []).append(r)
    return {k: sorted(v, key=_batch_of) for k, v in groups.items()}


def _series_label(key: tuple[str, int, int]) -> str:
    strategy, n, k = key
    return f"{strategy} N={n}" + (f" over {k} nodes" if k > 1 else "")


def plot_batch(sweep: Sweep, colors: _Colors):
    from matplotlib.figure import Figure

    series = _batch_series(sweep)
    values = {k: [(_batch_of(r), _batch_values(r)) for r in pts if r.get("status") == "ok"] for k, pts in series.items()}
    metrics = [m for m in BATCH_METRICS if any(v[m[0]] is not None for pts in values.values() for _, v in pts)]
    if not metrics:
        return None
    cols = 2 if len(metrics) > 1 else 1
    nrows = (len(metrics) + cols - 1) // cols
    fig = Figure(figsize=(9.6, 3.2 * nrows))
    axes = fig.subplots(nrows, cols, squeeze=False)
    batches = sorted({b for pts in values.values() for b, _ in pts})
    for i, (key, label, scale) in enumerate(metrics):
        ax = axes[i // cols][i % cols]
        for skey, pts in values.items():
            xy = [(b, v[key] * scale) for b, v in pts if v[key] is not None]
            if xy:
                ax.plot([b for b, _ in xy], [y for _, y in xy], marker="o", color=colors(_series_label(skey)),
                        label=_mpl(_series_label(skey)))
        if batches and batches[-1] / batches[0] > 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches], fontsize="x-small")
        ax.set_xlabel("batch size", fontsize="small")
        ax.set_title(label, fontsize="small")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    for j in range(len(metrics), nrows * cols):
        axes[j // cols][j % cols].set_visible(False)
    axes[0][0].legend(fontsize="x-small")
    fig.tight_layout()
    return _render(fig, "batch", "Throughput, step time, memory and power against batch size")


def _batch_table(sweep: Sweep) -> tuple[list[str], list[list[str]]]:
    rows = []
    for key, pts in _batch_series(sweep).items():
        for r in pts:
            v = _batch_values(r)
            rows.append([_series_label(key), str(_batch_of(r)), str(r.get("status")),
                         _f(v["throughput"], ".2f"), _ms(v["step_time_median_s"]),
                         _bytes(v["peak_memory_bytes"]) if v["peak_memory_bytes"] else "-",
                         _f(v["power_w"], ".1f"), _f(v["energy_per_sample_j"], ".4g")])
    return ["point", "batch", "status", "throughput (samples/s)", "step time median (ms)", "peak memory per device",
            "mean power (W)", "energy per sample (J)"], rows


def _batch_fit_table(sweep: Sweep) -> tuple[list[str], list[list[str]]]:
    """Per strategy and N: the largest batch that ran, and the batch that ran out of memory."""
    rows = []
    for key, pts in _batch_series(sweep).items():
        ok = [_batch_of(r) for r in pts if r.get("status") == "ok"]
        oom = [_batch_of(r) for r in pts if r.get("status") == "oom"]
        rows.append([_series_label(key), str(max(ok)) if ok else "none", str(min(oom)) if oom else "-"])
    return ["point", "largest batch that fit", "ran out of memory at"], rows


# -- where the wall time goes ------------------------------------------------------------------------------
WALL_NOTE = ("Seconds of each point's wall time by phase, summed over its repeats: launch to first step (process "
             "start, imports, model and data, process-group setup), warmup, measuring, the no-sync variant (its "
             "whole run), the standalone all-reduce benchmark, and teardown (gathering results, writing the record, "
             "processes exiting). Unattributed: seconds the records cannot place (records written before the "
             "phases were stamped).")


def _wall_table(sweep: Sweep) -> tuple[list[str], list[list[str]]]:
    """One row per launched point and one for all of them; empty when no record has launch times."""
    points = [r for r in sweep.points if not an.is_comm(r) and an.wall_split(r)]
    rows = []
    for name, split in [*((an.point_name(r), an.wall_split(r)) for r in points),
                        *((("all points", an.wall_split_total(points)),) if points else ())]:
        total = split["total"]
        rows.append([name, *(_f(split[k], ".1f") for k, _ in an.WALL_PARTS), _f(total, ".1f"),
                     pct(split["measuring"] / total if total and split["measuring"] is not None else None)])
    return ["point", *(f"{label} (s)" for _, label in an.WALL_PARTS), "total (s)", "measuring share"], rows


def _energy_notes(sweep: Sweep) -> list[str]:
    """What energy per sample covers where it is not every GPU of the point (e.g. node 0's GPUs only)."""
    notes = []
    for r in sweep.scaling_points:
        tel = r.get("telemetry") if isinstance(r.get("telemetry"), dict) else {}
        scope = tel.get("energy_scope")
        if tel.get("energy_per_sample_j") is not None and scope and not str(scope).startswith("all "):
            notes.append(f"{an.point_name(r)}: energy per sample covers {scope}.")
    return notes


# -- report content (shared by HTML and Markdown) ----------------------------------------------------------
def _points_rows(sweep: Sweep) -> tuple[list[str], list[list[str]], list[str]]:
    with_ci = any(an.throughput_ci(r) for r in sweep.points)
    headers = ["strategy", "N", "model", "device", "status", "throughput (samples/s)"]
    headers += ["95% CI (samples/s)"] if with_ci else []
    cpu = any(r.get("device") == "cpu" for r in sweep.points)
    headers += ["speedup", "efficiency (whole machine)" if cpu else "efficiency"]
    headers += ["efficiency (per core)"] if cpu else []
    headers += ["MFU", "math mode", "step median (ms)", "step p5 (ms)", "step p95 (ms)", "CV", "noisy"]
    rows, classes = [], []
    for r in sweep.points:
        if an.is_comm(r):
            continue
        ok = r.get("status") == "ok"
        row = [an.series_name(r), str(r.get("world_size")), str(r.get("model")), str(r.get("device")),
               str(r.get("status")), _f(r.get("throughput"), ".2f")]
        row += [_ci_text(r)] if with_ci else []
        row += [_f(r.get("speedup"), ".2f"), pct(num(r.get("efficiency")))]
        row += [pct(num(r.get("efficiency_per_core")))] if cpu else []
        row += [pct(num(r.get("mfu")), 1), _math_text(r.get("math_mode")), _ms(r.get("step_time_median_s")),
                _ms(r.get("step_time_p5_s")), _ms(r.get("step_time_p95_s")), pct(num(r.get("step_time_cv"))),
                "yes" if ok and an.is_noisy(r) else ""]
        rows.append(row)
        classes.append("" if ok else "bad")
    return headers, rows, classes


def _math_text(mode: dict | None) -> str:
    """'TF32 on, cuDNN autotune on, NCHW' (GPUs) or the layout alone (CPU workers); '-' for older records."""
    if not mode:
        return "-"
    word = lambda v: v if isinstance(v, str) else ("on" if v else "off")  # noqa: E731
    parts = [f"TF32 {word(mode['tf32'])}"] if mode.get("tf32") is not None else []
    parts += [f"cuDNN autotune {word(mode['cudnn_autotune'])}"] if mode.get("cudnn_autotune") is not None else []
    parts += [mode["layout"]] if mode.get("layout") else []
    return ", ".join(parts) or "-"


def _comm_rows(sweep: Sweep) -> tuple[list[str], list[list[str]]]:
    headers = ["strategy", "N", "step median (ms)", "exposed comm (ms)", "comm overhead", "all-reduce (ms)",
               "overlap", "gradient bytes", "data wait"]
    rows = []
    for r in sweep.scaling_points:
        if not an.has_comm_fields(r):
            continue
        b = an.comm_breakdown(r) or {}
        grad = num(r.get("grad_bytes"))
        rows.append([an.series_name(r), str(r.get("world_size")), _ms(r.get("step_time_median_s")),
                     _ms(b.get("exposed_s", r.get("exposed_comm_s"))), pct(num(r.get("comm_overhead"))),
                     _ms(r.get("allreduce_s")), pct(num(r.get("overlap"))),
                     _bytes(grad) if grad is not None else "-", pct(num(r.get("data_wait_fraction")))])
    return headers, rows


def _busbw_rows(sweep: Sweep) -> tuple[list[str], list[list[str]]]:
    rows = []
    for r in sweep.comm_points:
        sizes, bw = r.get("sizes_bytes") or [], r.get("busbw_gbps") or []
        pairs = [(num(a), num(b)) for a, b in zip(sizes, bw) if num(a) and num(b) is not None]
        if not pairs:
            continue
        size, peak = max(pairs, key=lambda p: p[1])
        rows.append([str(r.get("strategy")), str(r.get("world_size")), f"{_bytes(pairs[0][0])} - {_bytes(pairs[-1][0])}",
                     f"{peak:.3g}", _bytes(size)])
    return ["benchmark", "N", "message sizes", "peak busbw (GB/s)", "at size"], rows


def _bytes(x: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.3g} {unit}"
        x /= 1024
    return str(x)


def _telemetry_table(sweep: Sweep) -> tuple[list[str], list[list[str]]]:
    metrics, rows = _telemetry_rows(sweep)
    out = []
    for r, t in rows:
        cells = [_point_label(r)]
        for m in metrics:
            v = t.get(m)
            if v is None:
                cells.append("-")
            elif "bytes" in m:
                cells.append(_bytes(v))
            elif m == "throttled":
                cells.append("yes" if v else "no")
            else:
                cells.append(f"{v:.4g}")
        out.append(cells)
    return ["point", *metrics], out


def _capacity_table(sweep: Sweep, target_throughput, epoch_samples, epoch_time) -> tuple[list[str], list[list[str]]]:
    rows = an.capacity(sweep.scaling_points, target_throughput=target_throughput, epoch_samples=epoch_samples,
                       epoch_time_s=epoch_time)
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
        cells = ([row.workload] if multi else []) + [row.strategy,
                                                     ", ".join(f"N={n}: {t:.2f}" for n, t in row.measured)]
        if target_throughput is not None:
            cells.append(row.target_throughput or "-")
        if epoch_samples:
            cells.append(", ".join(f"N={n}: {an.format_duration(t)}" for n, t in row.epoch_times))
            if epoch_time is not None:
                cells.append(row.target_epoch or "-")
        out.append(cells)
    return headers, out


def _problems(sweep: Sweep) -> list[tuple[str, str, str, str]]:
    return [(an.series_name(r), str(r.get("world_size")), str(r.get("status")),
             str(r.get("reason") or "no reason recorded")) for r in sweep.problem_points]


def _env_rows(sweep: Sweep) -> list[tuple[str, str]]:
    env = sweep.info.get("env") or {}
    rows = []
    for key in sorted(env):
        value = env[key]
        if isinstance(value, dict) and key == "packages":
            text = ", ".join(f"{k} {v}" for k, v in sorted(value.items()) if v)
        elif isinstance(value, (dict, list)):
            text = json.dumps(value, sort_keys=True, default=str)
        else:
            text = str(value)
        rows.append((key, text))
    rows.append(("options", json.dumps(sweep.info.get("options") or {}, sort_keys=True, default=str)))
    return rows


def _cpu_note(sweep: Sweep) -> str | None:
    if not sweep.cpu_workers:
        return None
    return ("This sweep ran on CPU workers (device = cpu), not GPUs: each 'GPU' was a CPU worker process and "
            "the workers shared the machine's CPU cores. Absolute numbers are CPU numbers, and the scaling "
            "seen here says little about scaling on GPUs.")


CAPACITY_NOTE = ("Measured points only: each entry is the smallest measured N that reaches the target; "
                 "when none does, it says 'not reached at the largest measured N'. Nothing is extrapolated "
                 "beyond the measured device counts.")
DEFINITIONS = ("throughput = global samples per second over the measured steps; speedup = throughput / the same "
               "framework's single-device baseline ('torch' or 'tf'); efficiency = speedup / N; "
               "on CPU workers efficiency (whole machine) is against the baseline on all the cores and efficiency "
               "(per core) against the same baseline on the threads each worker had; MFU = the model's training "
               "FLOPs per second per device / the device's peak (NVIDIA's dense datasheet figure for the math type, "
               "or a float32 GEMM measured on the worker's threads; '-' when the GPU is not in the table); "
               "1-device wrapper cost = 1 - throughput(strategy, N=1) / baseline. Error bars and CIs are the "
               "records' 95% throughput CIs; speedup and efficiency bars combine the point's and the "
               "baseline's CIs when both are recorded. Noisy = flagged by the measurement, or step-time CV above "
               f"{an.CV_NOISY:.0%}.")


@dataclass
class ReportFiles:
    html: Path
    markdown: Path
    csv: Path
    images: list[Path]


def _paths(out: str | Path) -> tuple[Path, Path, Path]:
    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise BadInput(f"--out {out}: give an .html file name (the Markdown, CSV and plots are written next to it)")
    return out, out.with_suffix(".md"), out.with_name(f"{out.stem}-points.csv")


def make_plots(sweep: Sweep) -> list[Plot]:
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "distbench", "svg.fonttype": "path"}):
        colors = _Colors()
        plots = [
            _line_plot(sweep, colors, "throughput", "throughput", "Throughput vs N", "throughput (samples/s)"),
            _line_plot(sweep, colors, "speedup", "speedup", "Speedup vs N (vs the framework's 1-device baseline)",
                       "speedup"),
            _line_plot(sweep, colors, "efficiency", "efficiency", "Scaling efficiency vs N", "efficiency"),
            plot_comm(sweep, colors),
            plot_busbw(sweep, colors),
            plot_steps(sweep),
            plot_telemetry(sweep),
            plot_batch(sweep, colors),
        ]
    return [p for p in plots if p is not None]


def write_report(sweep: Sweep, out: str | Path, *, target_throughput: float | None = None,
                 epoch_samples: int | None = None, epoch_time: float | None = None) -> ReportFiles:
    """Write <out>.html, <out>.md, <out>-points.csv and <out>-<plot>.png next to each other."""
    html_path, md_path, csv_path = _paths(out)
    if epoch_time is not None and not epoch_samples:
        raise BadInput("--epoch-time needs --epoch-samples (how many samples one epoch has)")
    for path in (html_path, md_path, csv_path):
        check_writable(path)
    try:
        html_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"cannot write {html_path}: {exc.strerror or exc}") from None
    summary = an.summarize(sweep)
    plots = make_plots(sweep)
    prediction = predict_mod.latest_for(sweep.store_path, sweep.id)  # predicted capacity (distbench predict)
    if prediction:
        plots.append(predict_mod.plot(prediction))
    by_name = {p.name: p for p in plots}
    ctx = dict(sweep=sweep, summary=summary, plots=by_name,
               capacity=_capacity_table(sweep, target_throughput, epoch_samples, epoch_time),
               capacity_asked=target_throughput is not None or bool(epoch_samples), prediction=prediction)
    images = {p.name: html_path.with_name(f"{html_path.stem}-{p.name}.png") for p in plots}
    page = render_html(**ctx)
    markdown = render_markdown(**ctx, images={k: v.name for k, v in images.items()},
                               csv_name=csv_path.name)
    frame = an.points_frame(sweep)
    try:
        for p in plots:
            images[p.name].write_bytes(p.png)
        csv_path.write_text(safe_csv(frame))
        md_path.write_text(markdown)
        html_path.write_text(page)
    except OSError as exc:
        raise BadInput(f"cannot write {exc.filename or html_path}: {exc.strerror or exc}") from None
    return ReportFiles(html=html_path, markdown=md_path, csv=csv_path, images=list(images.values()))


# -- HTML ---------------------------------------------------------------------------------------------------
def e(text) -> str:
    return html.escape(str(text), quote=True)


CSS = """
body{font-family:-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:0;color:#1b1f24;
background:#fff;line-height:1.45}
main{max-width:1100px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:1.6em;margin:0 0 4px}h2{font-size:1.25em;margin:34px 0 10px;border-bottom:1px solid #d0d7de;
padding-bottom:4px}h3{font-size:1.05em;margin:18px 0 6px}
.meta{color:#57606a;font-size:.92em}.meta code{font-size:.95em}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f6f8fa;border-radius:4px}
code{padding:1px 4px}pre{padding:8px;overflow-x:auto;font-size:.82em;white-space:pre-wrap}
.callout{border-left:4px solid #d4a72c;background:#fff8c5;padding:10px 14px;margin:16px 0;border-radius:4px}
.summary ul{margin:4px 0 8px 0;padding-left:22px}.summary li{margin:3px 0}
table{border-collapse:collapse;margin:8px 0 14px;font-size:.88em}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#fff1f0}
figure{margin:12px 0 22px}figure img{max-width:100%;height:auto;border:1px solid #eaeef2}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:6px 18px}.grid figure img{width:100%}
figcaption{color:#57606a;font-size:.88em}
nav{font-size:.9em;margin:12px 0}nav a{margin-right:12px;color:#0969da;text-decoration:none}
.muted{color:#57606a}
"""

# Sets data-report-ready="yes" on <html> once every plot image has decoded (browser tests read it).
MARKER_JS = """
(function(){
  var root=document.documentElement, errors=0;
  window.addEventListener('error', function(){ errors++; root.setAttribute('data-js-errors', String(errors)); });
  window.addEventListener('load', function(){
    var imgs=document.querySelectorAll('img.plot'), loaded=0;
    for (var i=0;i<imgs.length;i++){ if (imgs[i].complete && imgs[i].naturalWidth>0) loaded++; }
    root.setAttribute('data-plots-expected', String(imgs.length));
    root.setAttribute('data-plots-loaded', String(loaded));
    root.setAttribute('data-report-ready', loaded===imgs.length ? 'yes' : 'no');
  });
})();
"""

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def _numeric(text: str) -> bool:
    t = text.replace("%", "").replace(",", "").replace("-", "", 1).replace(".", "", 1).strip()
    return t.isdigit()


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], classes: Sequence[str] | None = None,
                numeric: bool = True) -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{e(classes[i])}"' if classes and classes[i] else ""
        cells = "".join(f'<td class="n">{e(c)}</td>' if numeric and _numeric(str(c)) else f"<td>{e(c)}</td>" for c in row)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figure(plot: Plot | None, caption: str = "") -> str:
    if plot is None:
        return ""
    data = base64.b64encode(plot.svg).decode("ascii")
    cap = f"<figcaption>{e(caption)}</figcaption>" if caption else ""
    return (f'<figure><img class="plot" id="plot-{e(plot.name)}" alt="{e(plot.title)}" '
            f'src="data:image/svg+xml;base64,{data}">{cap}</figure>')


def _paragraph(text: str, cls: str = "") -> str:
    return f'<p class="{cls}">{e(text)}</p>' if cls else f"<p>{e(text)}</p>"


COMM_CAPTION = ("Each bar is the median step: compute with no communication running, communication hidden "
                "behind compute (overlapped), and exposed communication that the step waits for.")
NO_COMM = ("This sweep has no communication measurements (no exposed_comm_s, comm_overhead, allreduce_s or "
           "overlap in its records), so how much of the step is spent communicating is not shown.")
NO_TELEMETRY = "This sweep has no telemetry (utilization, memory, power) in its records."


def render_html(*, sweep: Sweep, summary: an.Summary, plots: dict[str, Plot], capacity, capacity_asked: bool,
                prediction: dict | None = None) -> str:
    i = sweep.info
    parts = [f"<h1>distbench report: sweep {e(sweep.id)}</h1>",
             f'<p class="meta">{e(i.get("status"))}, started {e(i.get("started"))}'
             + (f', finished {e(i.get("finished"))}' if i.get("finished") else "")
             + f' &middot; store <code>{e(sweep.store_path)}</code><br>command: <code>{e(i.get("command") or "-")}</code></p>']
    nav = [("summary", "Summary"), ("points", "Points"), ("scaling", "Scaling"), ("communication", "Communication"),
           ("steps", "Step times"), ("telemetry", "Telemetry"), ("capacity", "Capacity"), ("problems", "Skipped/failed"),
           ("environment", "Environment")]
    if _batch_points(sweep):
        nav.insert(6, ("batch", "Batch size"))
    wall = _wall_table(sweep)
    if wall[1]:
        nav.insert(nav.index(("telemetry", "Telemetry")) + 1, ("wall", "Wall time"))
    if prediction:
        nav.insert(nav.index(("capacity", "Capacity")) + 1, ("predicted", "Predicted"))
    parts.append("<nav>" + "".join(f'<a href="#{k}">{e(v)}</a>' for k, v in nav) + "</nav>")
    note = _cpu_note(sweep)
    if note:
        parts.append(f'<div class="callout" id="cpu-note"><strong>CPU workers.</strong> {e(note)}</div>')

    parts.append('<section class="summary" id="summary"><h2>Summary</h2>')
    for title, lines in summary.sections():
        parts.append(f"<h3>{e(title)}</h3><ul>" + "".join(f"<li>{e(line)}</li>" for line in lines) + "</ul>")
    parts.append("</section>")

    headers, rows, classes = _points_rows(sweep)
    parts.append('<section id="points"><h2>Points</h2>')
    parts.append(_html_table(headers, rows, classes) if rows else _paragraph("The sweep has no training points."))
    parts.append(_paragraph(DEFINITIONS, "muted") + "</section>")

    parts.append('<section id="scaling"><h2>Scaling</h2>')
    if not any(k in plots for k in ("throughput", "speedup", "efficiency")):
        parts.append(_paragraph("No successful training points to plot."))
    parts.append('<div class="grid">')
    parts.append(_figure(plots.get("speedup"), "Dashed line: ideal linear speedup. Error bars: 95% CI when recorded."))
    parts.append(_figure(plots.get("efficiency"), f"Dashed red line: {an.EFFICIENCY_TARGET:.0%} efficiency."))
    parts.append(_figure(plots.get("throughput"), "Squares: single-device baselines. Error bars: 95% CI when "
                                                  "recorded."))
    parts.append("</div></section>")

    parts.append('<section id="communication"><h2>Communication</h2>')
    if "comm" in plots:
        parts.append(_figure(plots["comm"], COMM_CAPTION))
        parts.append(_html_table(*_comm_rows(sweep)))
    else:
        parts.append(_paragraph(NO_COMM))
    if "busbw" in plots:
        parts.append("<h3>Collective bandwidth</h3>" + _figure(plots["busbw"], "From the comm records in this sweep.")
                     + _html_table(*_busbw_rows(sweep)))
    parts.append("</section>")

    parts.append('<section id="steps"><h2>Step-time distributions</h2>')
    parts.append(_figure(plots.get("steps")) or _paragraph("No per-step samples in this sweep."))
    parts.append("</section>")

    parts.append('<section id="telemetry"><h2>Telemetry</h2>')
    if "telemetry" in plots:
        parts.append(_figure(plots["telemetry"], "Per-GPU and per-worker values are shown as their maximum."))
        parts.append(_html_table(*_telemetry_table(sweep)))
        parts.extend(_paragraph(n, "muted") for n in _energy_notes(sweep))
    else:
        parts.append(_paragraph(NO_TELEMETRY))
    parts.append("</section>")
    if wall[1]:
        parts.append('<section id="wall"><h2>Where the wall time goes</h2>' + _paragraph(WALL_NOTE, "muted")
                     + _html_table(*wall) + "</section>")

    if _batch_points(sweep):
        parts.append('<section id="batch"><h2>Batch size</h2>' + _paragraph(BATCH_NOTE, "muted"))
        parts.append(_figure(plots.get("batch")) + _html_table(*_batch_fit_table(sweep)))
        parts.append(_html_table(*_batch_table(sweep)) + "</section>")

    parts.append('<section id="capacity"><h2>Capacity planning</h2>')
    if not capacity_asked:
        parts.append(_paragraph("Pass --target-throughput SAMPLES_PER_S and/or --epoch-samples N [--epoch-time S] "
                                "to see how many devices each strategy needs; measured throughput per N:", "muted"))
    parts.append(_paragraph(CAPACITY_NOTE))
    parts.append(_html_table(*capacity) if capacity[1] else _paragraph("No successful points to plan with."))
    parts.append("</section>")
    if prediction:
        parts.append('<section id="predicted"><h2>Predicted capacity</h2>'
                     + f'<div class="callout">{e(predict_mod.PREDICTION_NOTE)}</div>'
                     + _figure(plots.get("predicted")) + _html_table(*predict_mod.table_rows(prediction))
                     + "<h3>Validation: leave-largest-N-out</h3>"
                     + (_html_table(*predict_mod.validation_rows(prediction))
                        if predict_mod.validation_rows(prediction)[1] else _paragraph("Needs at least 3 measured N."))
                     + "<ul>" + "".join(f"<li>{e(x.strip())}</li>" for x in predict_mod.summary_lines(prediction))
                     + "</ul></section>")

    parts.append('<section id="problems"><h2>Skipped and failed points</h2>')
    problems = _problems(sweep)
    if problems:
        parts.append(_html_table(["strategy", "N", "status", "reason"], problems))
        for r in sweep.problem_points:
            tail = r.get("stderr_tail")
            if tail:
                parts.append(f"<details><summary>stderr tail: {e(_point_label(r))}</summary>"
                             f"<pre>{e(str(tail)[-2000:])}</pre></details>")
    else:
        parts.append(_paragraph("Every point produced a measurement."))
    parts.append("</section>")

    parts.append('<section id="environment"><h2>Environment</h2>')
    sweep_notes = i.get("notes") or []
    if sweep_notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in sweep_notes) + "</ul>")
    parts.append(_html_table(["", "value"], _env_rows(sweep), numeric=False))
    parts.append("</section>")

    body = "\n".join(p for p in parts if p)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>distbench report {e(sweep.id)}</title>\n<style>{CSS}</style>\n</head>\n"
            f"<body>\n<main>\n{body}\n</main>\n<script>{MARKER_JS}</script>\n</body>\n</html>\n")


# -- Markdown -----------------------------------------------------------------------------------------------
def md(text) -> str:
    """Escape store text for Markdown tables and paragraphs (HTML escaped, pipes and newlines neutralized)."""
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(md(spreadsheet_safe(h)) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md(spreadsheet_safe(c)) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(*, sweep: Sweep, summary: an.Summary, plots: dict[str, Plot], capacity, capacity_asked: bool,
                    images: dict[str, str], csv_name: str, prediction: dict | None = None) -> str:
    i = sweep.info
    out = [f"# distbench report: sweep {md(sweep.id)}", "",
           f"{md(i.get('status'))}, started {md(i.get('started'))}"
           + (f", finished {md(i.get('finished'))}" if i.get("finished") else "")
           + f". Command: <code>{md(i.get('command') or '-')}</code>. Points as CSV: [{md(csv_name)}]({csv_name}).", ""]
    note = _cpu_note(sweep)
    if note:
        out += [f"> **CPU workers.** {md(note)}", ""]
    out += ["## Summary", ""]
    for title, lines in summary.sections():
        out += [f"**{md(title)}**", ""] + [f"- {md(line)}" for line in lines] + [""]

    def image(name: str, caption: str = ""):
        if name in plots:
            out.extend([f"![{md(plots[name].title)}]({images[name]})", ""] + ([f"*{md(caption)}*", ""] if caption else []))

    headers, rows, _ = _points_rows(sweep)
    out += ["## Points", "", _md_table(headers, rows) if rows else "The sweep has no training points.", "",
            md(DEFINITIONS), "", "## Scaling", ""]
    image("speedup", "Dashed line: ideal linear speedup.")
    image("efficiency")
    image("throughput")
    out += ["## Communication", ""]
    if "comm" in plots:
        image("comm", COMM_CAPTION)
        out += [_md_table(*_comm_rows(sweep)), ""]
    else:
        out += [md(NO_COMM), ""]
    if "busbw" in plots:
        image("busbw")
        out += [_md_table(*_busbw_rows(sweep)), ""]
    out += ["## Step-time distributions", ""]
    image("steps")
    out += ["## Telemetry", ""]
    if "telemetry" in plots:
        image("telemetry")
        out += [_md_table(*_telemetry_table(sweep)), ""] + [f"*{md(n)}*\n" for n in _energy_notes(sweep)]
    else:
        out += [md(NO_TELEMETRY), ""]
    wall = _wall_table(sweep)
    if wall[1]:
        out += ["## Where the wall time goes", "", md(WALL_NOTE), "", _md_table(*wall), ""]
    if _batch_points(sweep):
        out += ["## Batch size", "", md(BATCH_NOTE), ""]
        image("batch")
        out += [_md_table(*_batch_fit_table(sweep)), "", _md_table(*_batch_table(sweep)), ""]
    out += ["## Capacity planning", ""]
    if not capacity_asked:
        out += ["Pass `--target-throughput` and/or `--epoch-samples` [`--epoch-time`] to see how many devices each "
                "strategy needs; measured throughput per N:", ""]
    out += [md(CAPACITY_NOTE), ""]
    out += [_md_table(*capacity) if capacity[1] else "No successful points to plan with.", ""]
    if prediction:
        out += ["## Predicted capacity", "", f"> {md(predict_mod.PREDICTION_NOTE)}", ""]
        image("predicted")
        out += [_md_table(*predict_mod.table_rows(prediction)), "", "**Validation: leave-largest-N-out**", ""]
        validation = predict_mod.validation_rows(prediction)
        out += [_md_table(*validation) if validation[1] else "Needs at least 3 measured N.", ""]
        out += [f"- {md(x.strip())}" for x in predict_mod.summary_lines(prediction)] + [""]
    out += ["## Skipped and failed points", ""]
    problems = _problems(sweep)
    out += [_md_table(["strategy", "N", "status", "reason"], problems) if problems
            else "Every point produced a measurement.", ""]
    out += ["## Environment", ""] + [f"- {md(n)}" for n in i.get("notes") or []] + [""]
    out += [_md_table(["", "value"], _env_rows(sweep)), ""]
    return "\n".join(out)

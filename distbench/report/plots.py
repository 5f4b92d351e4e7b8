"""The report's plots, drawn on matplotlib `Figure` objects (no pyplot; matplotlib is imported only when
drawing) and kept as SVG (for the HTML page) and PNG (for the Markdown). Adding a plot = one entry in `PLOTS`."""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

from distbench import analysis as an
from distbench.analysis import Sweep, num
from distbench.analysis.output import fmt_bytes
from distbench.profile.plot import CAPTION as PROFILE_CAPTION
from distbench.profile.plot import plot_profile
from distbench.report.blocks import Plot
from distbench.report.tables import batch_of, batch_series, batch_values, busbw_pairs, telemetry_rows


def _mpl(text) -> str:
    """A label matplotlib shows literally: no mathtext ($), no legend-hiding leading underscore."""
    s = str(text).replace("$", r"\$")
    return " " + s if s.startswith("_") else s


def _render(fig, name: str, title: str, caption: str = "", section: str = "") -> Plot:
    svg, png = io.BytesIO(), io.BytesIO()
    fig.savefig(svg, format="svg", bbox_inches="tight", metadata={"Date": None})
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
    return Plot(name, title, svg.getvalue(), png.getvalue(), caption, section)


def _colors() -> Callable[[str], str]:
    """One colour per strategy (or series), the same in every plot of a report: matplotlib's tab10 in order."""
    from matplotlib.colors import TABLEAU_COLORS

    cycle, given = list(TABLEAU_COLORS.values()), {}
    return lambda key: given.setdefault(key, cycle[len(given) % len(cycle)])


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def _grid(count: int, width: float, height: Callable[[int], float]):
    """A figure with `count` axes, two per row (one when count is 1), `height(rows)` inches high."""
    from matplotlib.figure import Figure

    cols = 2 if count > 1 else 1
    rows = (count + cols - 1) // cols
    fig = Figure(figsize=(width, height(rows)))
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes


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


def _x_ticks(ax, values: Sequence[int], **label_style) -> None:
    """The sorted `values` as the x ticks, on a log2 scale when they span more than 8x."""
    if values and values[-1] / max(1, values[0]) > 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(values, [str(v) for v in values], **label_style)


def _n_axis(ax, ns: Sequence[int]) -> None:
    from matplotlib.ticker import NullLocator

    _x_ticks(ax, sorted(set(ns)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("N (devices)")
    ax.grid(True, alpha=0.3)


def _errorbars(spts: Sequence[dict], key: str, points: Sequence[dict]):
    bars = []
    for r in spts:
        value = num(r.get(key))
        # the per-core figure's baseline is a separate record: its bars carry the point's own CI only
        base = an.baseline_for(r, points) if key != "efficiency_per_core" else None
        ci = an.throughput_ci(r) if key == "throughput" else an.scaled_ci(r, key, base)
        bars.append((max(0.0, value - ci[0]), max(0.0, ci[1] - value)) if ci and value is not None else None)
    return [[bar[i] if bar else 0.0 for bar in bars] for i in (0, 1)] if any(bars) else None


EFFICIENCY_LABELS = {"efficiency": "whole machine", "efficiency_per_core": "per core"}


def line_plot(sweep: Sweep, colors, title: str, *, key: str, ylabel: str, keys: dict | None = None):
    """`key` (throughput, speedup or efficiency) against N, a line per strategy and workload; `keys`: the key
    per workload group (workload_key) where groups read different efficiencies, each line labelled with its own."""
    key_of = (lambda r: keys.get(an.workload_key(r), key)) if keys else (lambda r: key)
    points = [r for r in sweep.scaling_points if num(r.get(key_of(r))) is not None]
    series = _series(points, include_baselines=(key == "throughput"))
    if not series:
        return None
    if keys:
        series = [(f"{lab} ({EFFICIENCY_LABELS[key_of(pts[0])]})", ck, pts, base) for lab, ck, pts, base in series]
    fig, ax = _figure(6.4, 4.0)
    ns = [int(r["world_size"]) for _, _, spts, _ in series for r in spts]
    if key == "speedup":
        lo, hi = min(ns), max(ns)
        ax.plot([lo, hi], [lo, hi], linestyle="--", color="#888888", label="ideal (linear)")
    if key.startswith("efficiency"):
        ax.axhline(1.0, linestyle=":", color="#888888", label="ideal (100%)")
        ax.axhline(
            an.EFFICIENCY_TARGET, linestyle="--", color="#d62728", alpha=0.6, label=f"{an.EFFICIENCY_TARGET:.0%}"
        )
    for label, ckey, spts, base in series:
        ax.errorbar(
            [int(r["world_size"]) for r in spts],
            [num(r[key_of(r)]) for r in spts],
            yerr=_errorbars(spts, key_of(spts[0]), sweep.scaling_points),
            marker="s" if base else "o",
            capsize=4,
            color=colors(ckey),
            label=_mpl(label),
            linestyle="none" if base else "-",
        )
    _n_axis(ax, ns)
    if key.startswith("efficiency"):
        from matplotlib.ticker import PercentFormatter

        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, max(1.1, ax.get_ylim()[1]))  # autoscaled limits already cover the error bars
    else:
        ax.set_ylim(bottom=0)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def plot_efficiency(sweep: Sweep, colors, title: str):
    """Efficiency against N: the figure the summary reads (analysis.efficiency_key), per core on CPU workers."""
    keys = an.efficiency_keys(sweep.scaling_points)  # per workload group, as the summary reads each
    if len(set(keys.values())) > 1:
        title = f"{title} (each workload's line as the summary reads it)"
        return line_plot(sweep, colors, title, key="efficiency", ylabel="efficiency", keys=keys)
    key = an.efficiency_key(sweep.scaling_points)
    if key == "efficiency":
        return line_plot(sweep, colors, title, key=key, ylabel="efficiency")
    title = f"{title} (per core, as the summary reads; bars: the point's own CI)"
    return line_plot(sweep, colors, title, key=key, ylabel="efficiency (per core)")


def plot_comm(sweep: Sweep, colors, title: str):
    rows = [(r, b) for r in sweep.scaling_points if (b := an.comm_breakdown(r))]
    if not rows:
        return None
    rows.sort(key=lambda rb: (str(rb[0].get("strategy")), int(rb[0].get("world_size") or 0)))
    fig, ax = _figure(max(5.0, 1.0 + 0.9 * len(rows)), 4.2)
    xs = list(range(len(rows)))
    compute, hidden, exposed = ([b[k] * 1e3 for _, b in rows] for k in ("compute_only_s", "overlapped_s", "exposed_s"))
    ax.bar(xs, compute, color="#c7c7c7", label="compute (no communication running)")
    ax.bar(xs, hidden, bottom=compute, color="#9ecae1", label="communication overlapped with compute")
    ax.bar(xs, exposed, bottom=[c + h for c, h in zip(compute, hidden)], color="#d62728", label="exposed communication")
    for x, (_, b) in zip(xs, rows):
        if b["overlap"] is not None:
            ax.annotate(
                f"overlap {b['overlap']:.0%}",
                (x, b["step_s"] * 1e3),
                ha="center",
                va="bottom",
                fontsize="x-small",
                xytext=(0, 2),
                textcoords="offset points",
            )
    ax.set_xticks(xs, [_mpl(f"{an.series_name(r)}\nN={r.get('world_size')}") for r, _ in rows], fontsize="small")
    ax.set_ylabel("step time, window mean (ms)")
    ax.set_title(title)
    ax.legend(fontsize="x-small", loc="upper left")
    ax.set_ylim(top=max(b["step_s"] for _, b in rows) * 1e3 * 1.35)
    return fig


SPLIT_TERMS = (
    ("compute", "#c7c7c7", "compute (the no-sync variant)"),
    ("wait", "#ff7f0e", "straggler wait + sync latency (tiny - no-sync)"),
    ("communication", "#d62728", "communication (sync - tiny)"),
)


def plot_split(sweep: Sweep, colors, title: str):
    """A stacked bar per point with a three-term split (distbench.results.split); each term's 95% CI as an error bar
    at the top of its segment. A term below 0 is drawn hatched from the top of the others down, so the solid part
    of the bar ends at the step it labels (a black tick)."""
    rows = [r for r in sweep.scaling_points if r.get("comm_split")]
    if not rows:
        return None
    rows.sort(key=lambda r: (str(r.get("strategy")), int(r.get("world_size") or 0)))
    fig, ax = _figure(max(5.0, 1.0 + 0.9 * len(rows)), 4.2)
    xs = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for key, color, label in SPLIT_TERMS:
        values = [max(0.0, r["comm_split"][f"{key}_s"]) * 1e3 for r in rows]
        ax.bar(xs, values, bottom=bottom, color=color, label=label)
        top = [b + v for b, v in zip(bottom, values)]
        for x, r, t in zip(xs, rows, top):
            ci = r["comm_split"].get(f"{key}_ci")
            if ci:
                v = r["comm_split"][f"{key}_s"] * 1e3
                err = [[max(0.0, v - ci[0] * 1e3)], [max(0.0, ci[1] * 1e3 - v)]]
                ax.errorbar([x], [t], yerr=err, fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
        bottom = top
    for key, color, label in SPLIT_TERMS:  # terms below 0 subtract from the top
        below = [-min(0.0, r["comm_split"][f"{key}_s"]) * 1e3 for r in rows]
        if any(below):
            top = [b - h for b, h in zip(bottom, below)]
            ax.bar(xs, below, bottom=top, color="white", edgecolor=color, hatch="//", label=f"{label} below 0")
            bottom = top
    steps = [r["comm_split"]["step_s"] * 1e3 for r in rows]
    ax.hlines(steps, [x - 0.45 for x in xs], [x + 0.45 for x in xs], color="black", linewidth=1.5, label="step")
    ax.set_xticks(xs, [_mpl(f"{an.series_name(r)}\nN={r.get('world_size')}") for r in rows], fontsize="small")
    ax.set_ylabel("step time, window mean (ms)")
    ax.set_title(title)
    ax.legend(fontsize="x-small", loc="upper left")
    tops = [sum(max(0.0, r["comm_split"][f"{k}_s"]) for k, _, _ in SPLIT_TERMS) * 1e3 for r in rows]
    ax.set_ylim(bottom=0, top=max(tops + steps) * 1.35)
    return fig


def plot_busbw(sweep: Sweep, colors, title: str):
    recs = [(r, pairs) for r in sweep.comm_points if (pairs := busbw_pairs(r))]
    if not recs:
        return None
    from matplotlib.ticker import FuncFormatter

    fig, ax = _figure(7.2, 4.2)
    for r, pairs in recs:
        ax.plot(
            *zip(*pairs),  # message size, bus bandwidth
            marker="o",
            color=colors(str(r.get("strategy"))) if len(recs) <= 10 else None,
            label=_mpl(f"{r.get('strategy')} N={r.get('world_size')}"),
        )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_bytes(x)))
    ax.tick_params(axis="x", labelsize="x-small", labelrotation=30)
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s, busbw)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize="small")
    return fig


def plot_steps(sweep: Sweep, colors, title: str):
    data = [(r, [t * 1e3 for t in d]) for r in sweep.scaling_points if (d := sweep.step_times(r))]
    if not data:
        return None
    import numpy as np

    fig, ax = _figure(7.2, 1.2 + 0.45 * len(data))
    box = dict(
        whis=(5, 95),
        showmeans=True,
        showfliers=False,
        medianprops={"color": "#d62728"},
        meanprops={"markerfacecolor": "#2ca02c", "markeredgecolor": "none"},
    )
    try:
        ax.boxplot([d for _, d in data], orientation="horizontal", **box)
    except TypeError:  # matplotlib < 3.10
        ax.boxplot([d for _, d in data], vert=False, **box)
    rng = np.random.default_rng(0)
    for i, (_, d) in enumerate(data, 1):  # every sample, jittered: with few steps the box alone misleads
        ax.scatter(d, i + rng.uniform(-0.18, 0.18, len(d)), s=14, color="#1f77b4", alpha=0.7, zorder=3, linewidths=0)
    ax.set_yticks(range(1, len(data) + 1), [_mpl(an.point_name(r)) for r, _ in data], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel(
        "step time (ms); box = quartiles, whiskers = p5-p95, line = median, triangle = mean, dots = every step"
    )
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def plot_telemetry(sweep: Sweep, colors, title: str):
    metrics, rows = telemetry_rows(sweep)
    metrics = [m for m in metrics if m != "throttled"]  # yes/no: in the table, not as bars
    if not rows or not metrics:
        return None
    fig, axes = _grid(len(metrics), 7.6, lambda n: max(2.4, n * (0.8 + 0.32 * len(rows))))
    labels = [_mpl(an.point_name(r)) for r, _ in rows]
    for ax, metric in zip(axes, metrics):
        scale, unit = (2**30, " (GiB)") if "bytes" in metric else (1, "")
        ax.barh(range(len(rows)), [(t.get(metric) or 0) / scale for _, t in rows], color="#1f77b4")
        ax.set_yticks(range(len(rows)), labels, fontsize="x-small")
        ax.invert_yaxis()
        ax.set_title(_mpl(metric + unit), fontsize="small")
        ax.tick_params(axis="x", labelsize="x-small")
    fig.tight_layout()
    return fig


BATCH_METRICS = (  # key, label, scale applied for display
    ("throughput", "throughput (samples/s)", 1.0),
    ("step_time_median_s", "step time median (ms)", 1e3),
    ("peak_memory_bytes", "peak memory per device (GiB)", 2.0**-30),
    ("power_w", "mean power, all GPUs of the point (W)", 1.0),
    ("energy_per_sample_j", "energy per sample (J)", 1.0),
)


def plot_batch(sweep: Sweep, colors, title: str):
    values = {
        label: [(batch_of(r), batch_values(r)) for r in pts if r.get("status") == "ok"]
        for label, pts in batch_series(sweep).items()
    }
    metrics = [m for m in BATCH_METRICS if any(v[m[0]] is not None for pts in values.values() for _, v in pts)]
    if not metrics:
        return None
    fig, axes = _grid(len(metrics), 9.6, lambda n: 3.2 * n)
    batches = sorted({b for pts in values.values() for b, _ in pts})
    for ax, (key, label, scale) in zip(axes, metrics):
        for series, pts in values.items():
            xy = [(b, v[key] * scale) for b, v in pts if v[key] is not None]
            if xy:
                ax.plot(*zip(*xy), marker="o", color=colors(series), label=_mpl(series))
        _x_ticks(ax, batches, fontsize="x-small")
        ax.set_xlabel("batch size", fontsize="small")
        ax.set_title(label, fontsize="small")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize="x-small")
    fig.tight_layout()
    return fig


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
    "compute. Error bars: each term's 95% CI (its scope is in the table). A term below 0 is drawn hatched "
    "from the top of the others down, so each bar's solid part ends at its step (the black tick)."
)


@dataclass(frozen=True)
class PlotSpec:
    name: str  # file name part (report-<name>.png) and HTML id (plot-<name>)
    title: str
    draw: Callable  # (sweep, colors, title) -> matplotlib Figure, or None when there is nothing to show
    section: str  # the id of the report section it goes in (distbench.report.sections.SECTIONS)
    caption: str = ""


PLOTS: list[PlotSpec] = [  # drawn in this order, so a strategy's colour is set by the first plot it is in
    PlotSpec(
        "throughput",
        "Throughput vs N",
        partial(line_plot, key="throughput", ylabel="throughput (samples/s)"),
        "scaling",
        "Squares: single-device baselines. Error bars: 95% CI when recorded.",
    ),
    PlotSpec(
        "speedup",
        "Speedup vs N (vs the framework's 1-device baseline)",
        partial(line_plot, key="speedup", ylabel="speedup"),
        "scaling",
        "Dashed line: ideal linear speedup. Error bars: 95% CI when recorded.",
    ),
    PlotSpec(
        "efficiency",
        "Scaling efficiency vs N",
        plot_efficiency,
        "scaling",
        f"Dashed red line: {an.EFFICIENCY_TARGET:.0%} efficiency.",
    ),
    PlotSpec(
        "comm",
        "Where the step time goes: exposed vs overlapped communication",
        plot_comm,
        "communication",
        COMM_CAPTION,
    ),
    PlotSpec(
        "split",
        "Where the step time goes: compute, straggler wait, communication",
        plot_split,
        "communication",
        SPLIT_CAPTION,
    ),
    PlotSpec(
        "busbw",
        "Collective bus bandwidth vs message size",
        plot_busbw,
        "communication",
        "From the comm records in this sweep.",
    ),
    PlotSpec("steps", "Step-time distribution per point", plot_steps, "steps"),
    PlotSpec(
        "telemetry",
        "Telemetry per point",
        plot_telemetry,
        "telemetry",
        "Per-GPU and per-worker values are shown as their maximum.",
    ),
    PlotSpec("batch", "Throughput, step time, memory and power against batch size", plot_batch, "batch"),
    PlotSpec("profile", "Where a profiled step goes, per operation category", plot_profile, "profile", PROFILE_CAPTION),
]


def make_plots(sweep: Sweep) -> list[Plot]:
    import matplotlib

    plots = []
    with matplotlib.rc_context({"svg.hashsalt": "distbench", "svg.fonttype": "path"}):
        colors = _colors()
        for spec in PLOTS:
            fig = spec.draw(sweep, colors, spec.title)
            if fig is not None:
                plots.append(_render(fig, spec.name, spec.title, spec.caption, spec.section))
    return plots

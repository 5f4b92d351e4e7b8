"""The report's profile figure: a stacked bar per profiled point, its step split into the categories (ms per
step), drawn on a matplotlib Figure (no pyplot), for distbench.report.plots' PLOTS."""

from __future__ import annotations

from distbench.profile.categories import CATEGORIES, LABELS
from distbench.profile.compare import point_label, profiled

CAPTION = (
    "Each bar is one profiled point: a few steps profiled after its timed window with the framework's own "
    "profiler (torch.profiler, tf.profiler), every instant of the step attributed to one category (ms per "
    "step, mean over the profiled steps). The black tick is the step the clock measured around the same "
    "profiled steps; the categories add up to the traced step, the difference is listed as left over."
)

_COLORS = (
    "#1f77b4",  # convolution
    "#ff7f0e",  # matmul
    "#2ca02c",  # normalisation
    "#d62728",  # elementwise
    "#9467bd",  # pooling
    "#8c564b",  # loss
    "#e377c2",  # optimizer
    "#17becf",  # communication
    "#bcbd22",  # memcpy
    "#7f7f7f",  # data input
    "#c7c7c7",  # host overhead
    "#f0f0f0",  # idle
)


def plot_profile(sweep, colors, title: str):
    """None when no point of the sweep was profiled."""
    rows = profiled(sweep.points)
    if not rows:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(5.0, 1.5 + 1.1 * len(rows)), 4.6))
    ax = fig.subplots()
    xs = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for c, color in zip(CATEGORIES, _COLORS):
        values = [((r["profile"]["categories"].get(c) or {}).get("s") or 0.0) * 1e3 for r in rows]
        if not any(values):
            continue
        ax.bar(xs, values, bottom=bottom, color=color, edgecolor="white", linewidth=0.3, label=LABELS[c])
        bottom = [b + v for b, v in zip(bottom, values)]
    for x, r in zip(xs, rows):
        clock = r["profile"].get("clock_step_s")
        if clock:
            ax.plot([x - 0.4, x + 0.4], [clock * 1e3] * 2, color="black", linewidth=1.2)
    ax.set_xticks(xs, [f"{point_label(r)}\n{r.get('model')}" for r in rows], fontsize="small")
    ax.set_ylabel("ms per profiled step")
    ax.set_title(title)
    ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_ylim(bottom=0)
    return fig

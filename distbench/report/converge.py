"""The report's time-to-accuracy section (distbench converge, issue 23): validation curves, the MLPerf-style
table, throughput speedup next to time-to-target speedup, and the equivalence flags. Added by render.py to a
sweep whose points carry `converge` records; other sweeps get nothing."""

from __future__ import annotations

import io

from distbench.analysis import Sweep
from distbench.converge.summary import CI_SCOPE, EQUIVALENCE_MARGIN, fmt, speed_and_time_cells, summarize
from distbench.report.blocks import Bullets, Figure, Plot, Report, Section, Table, Text
from distbench.results.kind import RecordKind, record_kind

NOTE = (
    "Each run trains the same model on the same data (a seeded shard of each global batch per rank; no sample "
    "twice per epoch) with the LR rule shown, and is evaluated on the held-out split every few steps (evaluation "
    "time excluded). Time to target: training seconds until the validation accuracy crossed the target, "
    "interpolated between the two evaluations around the crossing, without the first step (tracing, lazy "
    "initialization: recorded apart); the mean over the seeds, fastest and slowest dropped at 3 or more seeds, a "
    "run that did not converge counting as the slowest; with more such runs than are dropped (any, below 3 seeds) "
    "the point did not converge (MLPerf Training's rule); skipped or interrupted runs are not counted. Time "
    "speedup: the ratio of these means. Throughput speedup can exceed time-to-target "
    "speedup: a larger global batch may need more epochs. Same as 1 device?: two one-sided tests of the final "
    "accuracy at the stated margin (equivalent, DIFFERENT, inconclusive)."
)


def converge_points(sweep: Sweep) -> list[dict]:
    return [r for r in sweep.points if record_kind(r) is RecordKind.CONVERGE]


def table_rows(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = [
        "strategy",
        "N",
        "global batch",
        "LR rule, peak LR",
        "converged",
        "epochs to target",
        "time to target s (min-max)",
        "time-to-target speedup [95% CI]",
        "throughput speedup",
        "final accuracy (sd)",
        "evaluation s (apart)",
        "same as 1 device?",
    ]
    out = []
    for r in rows:
        speed, t = speed_and_time_cells(r)
        lr = r.get("lr") or {}
        same = {"equivalent": "equivalent", "different": "DIFFERENT", "inconclusive": "inconclusive"}.get(
            r.get("equivalence") or "", "-"
        )
        out.append(
            [
                r["strategy"],
                str(r["world_size"]),
                str(r["global_batch"]),
                f"{lr.get('rule', '-')}, {fmt(lr.get('peak_lr'), '.3g')}",
                f"{r['converged']}/{r['runs']}",
                fmt(r["epochs_to_target"], ".2f"),
                t,
                speed,
                fmt(r.get("throughput_speedup"), ".2f"),
                f"{fmt(r['final_accuracy'], '.4f')} ({fmt(r['final_accuracy_std'], '.4f')})",
                fmt(r.get("eval_s"), ".3g"),
                same,
            ]
        )
    return headers, out


def curves_plot(points: list[dict]) -> Plot | None:
    """Validation accuracy against training seconds and against epochs, one line per run, a colour per
    (strategy, N)."""
    runs = [r for r in points if r.get("status") == "ok" and r.get("converge")]
    if not runs:
        return None
    from matplotlib import colormaps
    from matplotlib.figure import Figure as MplFigure

    colors = [colormaps["tab20"](i) for i in range(20)]
    keys: list[tuple] = []
    fig = MplFigure(figsize=(11, 4))
    ax_t, ax_e = fig.subplots(1, 2)
    target = runs[0]["converge"]["target_accuracy"]
    for r in runs:
        key = (r["strategy"], r["world_size"])
        if key not in keys:
            keys.append(key)
        color = colors[keys.index(key) % len(colors)]
        curve = r["converge"]["curve"]
        first = r is next(q for q in runs if (q["strategy"], q["world_size"]) == key)
        for ax, x in ((ax_t, "train_s"), (ax_e, "epoch")):
            ax.plot(
                [p[x] for p in curve],
                [p["val_accuracy"] for p in curve],
                color=color,
                alpha=0.8,
                lw=1.2,
                label=f"{key[0]} N={key[1]}" if first else None,
            )
    for ax, xlabel in ((ax_t, "training seconds (evaluation excluded)"), (ax_e, "epochs")):
        ax.axhline(target, color="black", ls="--", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("validation accuracy")
        ax.grid(alpha=0.3)
    ax_e.legend(fontsize=7, loc="lower right")
    svg, png = io.BytesIO(), io.BytesIO()
    fig.savefig(svg, format="svg", bbox_inches="tight", metadata={"Date": None})
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
    caption = f"one line per run (seed); dashed: the target {target:g}"
    return Plot("converge-curves", "Validation accuracy during training", svg.getvalue(), png.getvalue(), caption)


def section(sweep: Sweep, plot: Plot | None) -> Section | None:
    points = converge_points(sweep)
    if not points:
        return None
    margin = (sweep.info.get("options") or {}).get("equivalence_margin") or EQUIVALENCE_MARGIN
    rows = summarize(points, margin)
    flags = [
        f"{r['strategy']} N={r['world_size']}: {r['equivalence_note']}"
        for r in rows
        if r.get("equivalence") in ("different", "inconclusive")
    ]
    gaps = [
        f"{r['strategy']} N={r['world_size']}: throughput x{r['throughput_speedup']:.2f}, time to target "
        f"x{r['time_speedup']:.2f}"
        for r in rows
        if r["world_size"] > 1 and r.get("throughput_speedup") and r.get("time_speedup")
    ]
    blocks: list = [Text(NOTE, "muted")]
    if plot is not None:
        blocks.append(Figure(plot))
    blocks.append(Table(*table_rows(rows)))
    blocks.append(Text(f"Confidence intervals: {CI_SCOPE}.", "muted"))
    if gaps:
        blocks.append(Bullets(["Throughput speedup vs time-to-target speedup (against the N=1 baseline)", *gaps]))
    notes = [f"{r['strategy']} N={r['world_size']}: {r['verdict']}" for r in rows if r["verdict"] != "converged"]
    notes += [f"{r['strategy']} N={r['world_size']}: {r['time_speedup_note']}" for r in rows if r["time_speedup_note"]]
    if notes:
        blocks.append(Bullets(["Runs and intervals", *notes]))
    blocks.append(
        Text(
            "; ".join(flags)
            if flags
            else "Every strategy's final accuracy is within the margin of its reference's (TOST), or there were "
            "too few seeds to tell ('-').",
            "callout" if flags else "",
            "Not shown to be the same training as one device:" if flags else "Equivalence:",
        )
    )
    return Section("converge", "Time to accuracy", blocks, "Time to accuracy")


def plots(sweep: Sweep) -> list[Plot]:
    p = curves_plot(converge_points(sweep))
    return [p] if p else []


def add_section(report: Report, sweep: Sweep, all_plots: list[Plot]) -> None:
    """Put the section after the summary (in place), using the curves plot among `all_plots`."""
    plot = next((p for p in all_plots if p.name == "converge-curves"), None)
    s = section(sweep, plot)
    if s is not None:
        report.sections.insert(min(1, len(report.sections)), s)

"""`distbench profile`: points measured as `run` measures them, then a few steps of each profiled after its
timed window; every point's breakdown into one set of categories, the points side by side, the sentences
that name their largest differences, and a trace file per point."""

from __future__ import annotations

import json

import click

from distbench.analysis import output
from distbench.analysis.records import is_noisy
from distbench.commands import options as opt
from distbench.core.errors import BadInput
from distbench.kinds.sweep import run_plan
from distbench.profile import compare
from distbench.profile.categories import parse_filter
from distbench.profile.hooks import STEPS
from distbench.profile.request import with_profiling
from distbench.profile.trace import trace_folder
from distbench.results.store import Store
from distbench.run.plan import SweepOptions, make_plan
from distbench.run.runner import command_line

DEFAULT_STRATEGIES = ("torch", "tf")


@click.command()
@opt.option(
    "--gpus", "gpus_text", default="1", help="Device count of every profiled point (a comma list profiles each)."
)
@click.option(
    "--category",
    "category_text",
    metavar="NAMES",
    help="Comma list of the categories to print (e.g. convolution,normalisation); default: all. "
    "Every category is stored either way.",
)
@click.option(
    "--trace-dir",
    type=click.Path(file_okay=False),
    help="Folder for the trace files (Chrome trace-event JSON). Default: beside the store, <results>-traces/.",
)
@click.option(
    "--profile-steps",
    type=click.IntRange(1, 100),
    default=STEPS,
    show_default=True,
    help="Steps profiled per point, after its timed window.",
)
@opt.workload_options()
@opt.results_option("SQLite results store; every point is committed as soon as it finishes.")
@opt.format_option("json prints one JSON document: each point's breakdown, the side-by-side rows and sentences.")
def profile(gpus_text, category_text, trace_dir, profile_steps, results, fmt, **workload):
    """Why one strategy or framework is faster: each point's step split into operation categories
    (convolution, matmul, normalisation, ..., host overhead, idle) from torch.profiler / tf.profiler, the
    points side by side, and a Chrome trace file per point (Perfetto, chrome://tracing).

    The timed window runs first, unprofiled, so throughput figures are those of `distbench run`.

    Example: distbench profile --strategy torch,tf --model resnet18 --image-size 32
    """
    try:
        categories = parse_filter(category_text)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    workload["profile"] = True
    if not workload.get("strategies"):
        workload["strategies"] = DEFAULT_STRATEGIES
    opts = SweepOptions(gpus=gpus_text, add_baselines=False, **workload)
    plan = make_plan(opts)
    profiling = with_profiling(
        plan,
        trace_dir or trace_folder(results),
        dir_flag="--trace-dir" if trace_dir else "--results",
        steps=profile_steps,
    )
    err = opt.err_console()
    store = Store(results)
    opt.print_notes(err, plan.notes)

    def progress(phase, i, total, point, record):
        name = f"{point.strategy.name} N={point.config.world_size}"
        if phase == "done":
            detail = (
                f"{record['throughput']:.2f} samples/s" if record.get("status") == "ok" else record.get("reason") or ""
            )
            err.print(f"[{i}/{total}] {name}: {record['status']} {detail}".rstrip(), markup=False, highlight=False)

    with store:
        sweep_id, records = run_plan(profiling.plan, store, options=opts, command=command_line(), progress=progress)
    if fmt == "json":
        headers, rows = compare.side_by_side(records, categories)
        doc = {
            "sweep_id": sweep_id,
            "points": [
                {k: r.get(k) for k in ("strategy", "world_size", "status", "throughput", "profile", "profile_trace")}
                | ({"profile_note": r["profile_note"]} if r.get("profile_note") else {})
                for r in records
            ],
            "side_by_side": {"headers": headers, "rows": rows},
            "sentences": compare.sentences(records, is_noisy),
        }
        click.echo(json.dumps(doc, indent=2, default=str))
    else:
        print_profiles(opt.out_console(), records, categories)
        err.print(f"stored as sweep {sweep_id} in {results}", markup=False, highlight=False)
    profiling.finish()


profile.params = [p for p in profile.params if p.name != "profile"]  # the run/scale flag: always on here


def print_profiles(out, records: list[dict], categories: tuple[str, ...] | None = None) -> None:
    """Each profiled point's breakdown, then (with two or more) the side-by-side table and its sentences."""
    for r in records:
        if r.get("profile_note"):
            out.print(f"{compare.point_label(r)}: {r['profile_note']}", markup=False, highlight=False)
    recs = compare.profiled(records)
    if not recs:
        out.print("no point was profiled (see the reasons above)", markup=False)
        return
    for r in recs:
        prof = r["profile"]
        out.print(
            f"\n{compare.point_label(r)} ({r.get('framework')}, {prof.get('device')}): {prof.get('steps')} profiled "
            f"steps with {prof.get('profiler')}" + (f"; trace: {r['profile_trace']}" if r.get("profile_trace") else ""),
            markup=False,
            highlight=False,
        )
        output.print_table(out, _table(*compare.breakdown_rows(r, categories)))
    if len(recs) > 1:
        out.print("\nSide by side (ms per step; differences against the first):", markup=False)
        output.print_table(out, _table(*compare.side_by_side(recs, categories)))
        for line in compare.sentences(recs, is_noisy):
            out.print(f"- {line}", markup=False, highlight=False)


def _table(headers: list[str], rows: list[list[str]]):
    """The commands' table style; cells as plain text (an operation's name is never read as markup)."""
    from rich.text import Text

    shown = output.table(None, headers, right=[h for h in headers[1:] if not h.startswith("top")])
    for row in rows:
        shown.add_row(*(Text(str(cell)) for cell in row))
    return shown

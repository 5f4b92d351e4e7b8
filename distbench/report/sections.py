"""The report's sections, in page order (SECTIONS): each builder turns the sweep's tables, plots and notes into
one `Section` of blocks, or None where the section does not apply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from distbench import analysis as an
from distbench import predict as predict_mod
from distbench.analysis import Sweep
from distbench.profile.categories import CATEGORIES, LABELS, MEANING
from distbench.profile.compare import point_label, profiled, sentences, side_by_side
from distbench.report.blocks import Bullets, Details, Figure, Grid, Heading, Plot, Section, Table, Text
from distbench.report.sharding import sharding_section
from distbench.report.tables import (
    Rows,
    batch_fit_table,
    batch_points,
    batch_table,
    busbw_rows,
    comm_legend,
    comm_rows,
    energy_notes,
    env_rows,
    points_rows,
    problem_table,
    split_rows,
    telemetry_table,
    wall_table,
)
from distbench.report.wrappers import is_wrapper, timing_lines, wrapper_answer, wrapper_rows

# -- what the sections say
CAPACITY_NOTE = (
    "Measured points only: each entry is the smallest measured N that reaches the target; "
    "when none does, it says 'not reached at the largest measured N'. Nothing is extrapolated "
    "beyond the measured device counts."
)
CAPACITY_HINT = (
    "The measured throughput of each strategy at each N, with its 95% CI (the record's own, else the "
    "within-run CI from its step times by batch means; '(no CI)': too few steps for one; 'noisy': the point is "
    "flagged noisy), and per device. Pass "
    "--target-throughput SAMPLES_PER_S and/or --epoch-samples N [--epoch-time S] to `distbench report` for "
    "the devices each strategy needs; `distbench predict SWEEP --gpus 16,32,64` predicts device counts "
    "beyond the measured ones (the Predicted section, once a prediction is saved)."
)
COMM_RELATION = (
    "How these figures relate: exposed comm is the time per step that gradient synchronization adds to "
    "the step, and comm overhead is that time as a share of the step; all-reduce is the same gradients' "
    "all-reduce timed on its own, and overlap the share of it hidden behind compute; the step split's "
    "communication (below, when measured) is the synchronized step's time left to communication once "
    "compute and straggler wait are set apart, measured another way, so it need not equal exposed comm."
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

PROFILE_NOTE = (
    "Categories: " + "; ".join(f"{LABELS[c]}: {MEANING[c]}" for c in CATEGORIES) + ". Each point's trace file "
    "(Chrome trace-event JSON: Perfetto, chrome://tracing) is named in its record (profile_trace)."
)
WRAPPERS_NOTE = (
    "Each ratio is throughput(strategy) / throughput(reference) for the same workload and batch: "
    "against plain 'torch' at 1 device, and against 'ddp' at the same N. Below 1.0 the strategy is "
    "slower. '95% CI' combines both points' throughput CIs on the log scale "
    "(analysis.throughput_ratio_ci); a strategy is called slower or faster only when that CI "
    "excludes 1.0, and within noise only when it includes it. Peak memory is per device, next to "
    "ddp's at the same N and batch."
)


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
    blocks = []
    for title, lines in c.summary.sections():
        if c.sweep.cpu_workers:  # said once, in the report's CPU-workers callout
            lines = [line for line in lines if line != an.summary.CPU_WORKERS_NOTE]
        blocks += [Heading(title), Bullets(lines)] if lines else []
    return Section("summary", "Summary", blocks)


def points_section(c: Inputs) -> Section:
    headers, rows, classes = points_rows(c.sweep)
    table = Table(headers, rows, classes) if rows else Text("The sweep has no training points.")
    return Section("points", "Points", [table, Text(DEFINITIONS, "muted")])


def scaling_section(c: Inputs) -> Section:
    figures = c.figures("speedup", "efficiency", "throughput")
    return Section("scaling", "Scaling", [Grid(figures) if figures else Text("No successful training points to plot.")])


def communication_section(c: Inputs) -> Section:
    blocks = (
        [*c.figures("comm"), Table(*comm_rows(c.sweep)), Text(COMM_RELATION, "muted")]
        + ([Text(legend, "muted")] if (legend := comm_legend(c.sweep)) else [])
        if "comm" in c.plots
        else [Text(NO_COMM)]
    )
    if "split" in c.plots:
        blocks += [Heading("Compute, straggler wait, communication"), *c.figures("split"), Table(*split_rows(c.sweep))]
    if "busbw" in c.plots:
        blocks += [Heading("Collective bandwidth"), *c.figures("busbw"), Table(*busbw_rows(c.sweep))]
    return Section("communication", "Communication", blocks)


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


def profile_section(c: Inputs) -> Section | None:
    """distbench profile / --profile: the stacked bar per point, the side-by-side table and its sentences."""
    points = profiled(c.sweep.points)
    if not points:
        return None
    blocks: list = [*c.figures("profile"), Table(*side_by_side(points))]
    blocks += [Bullets(lines)] if (lines := sentences(points, an.is_noisy)) else []
    notes = [f"{point_label(r)}: {r['profile_note']}" for r in c.sweep.points if r.get("profile_note")]
    blocks += [Bullets(notes)] if notes else []
    blocks.append(Text(PROFILE_NOTE, "muted"))
    return Section("profile", "Profile", blocks, "Where the step goes: operation categories")


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
    blocks = [Text(CAPACITY_NOTE)] if c.capacity_asked else [Text(CAPACITY_HINT, "muted")]
    blocks += [table_or(c.capacity, "No successful points to plan with.")]
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
    if c.sweep.cpu_workers:  # the plan's CPU-workers note: the report's callout says it
        notes = [n for n in notes if not str(n).startswith("CPU workers (")]
    blocks = [*([Bullets(list(notes))] if notes else []), Table(["", "value"], env_rows(c.sweep), numeric=False)]
    return Section("environment", "Environment", blocks)


SECTIONS: list[Callable[[Inputs], Section | None]] = [  # in page order; None: the section does not apply
    summary_section,
    points_section,
    scaling_section,
    communication_section,
    wrappers_section,  # only when the sweep has wrapper or sharded strategies (their `group`)
    lambda c: sharding_section(c.sweep),  # only when the sweep has a decoder model or a sharded strategy
    profile_section,  # only when points were profiled (distbench profile, --profile)
    steps_section,
    telemetry_section,
    wall_section,
    batch_section,
    capacity_section,
    predicted_section,
    problems_section,
    environment_section,
]

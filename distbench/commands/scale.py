"""`distbench scale` (a sweep over strategies and device counts) and `distbench run` (one point)."""

from __future__ import annotations

import dataclasses

import click

from distbench.analysis.output import (
    DECODER_COLUMNS,
    DEFAULT_COLUMNS,
    TABLE_COLUMNS,
    json_document,
    parse_columns,
    print_summary,
)
from distbench.analysis.sweep import pick_latest
from distbench.commands import options as opt
from distbench.core.errors import BadInput, DistbenchError
from distbench.core.strategies import strategy_names
from distbench.kinds.sweep import run_plan, stored_options
from distbench.profile.request import with_profiling
from distbench.profile.trace import trace_folder
from distbench.results import split
from distbench.results.store import Store
from distbench.run.plan import SweepOptions, make_plan
from distbench.run.runner import command_line


def _ok_detail(record: dict) -> str:
    """'12.3 samples/s, 95% CI 12.1..12.5 (within-run ...), stopped at --max-time' for a progress line."""
    text = f"{record['throughput']:.2f} samples/s"
    low, high = record.get("throughput_ci_low"), record.get("throughput_ci_high")
    if low is not None:  # high None: unbounded (the step-time CI's half-width is 100% or more)
        text += f", 95% CI {low:.2f}..{'unbounded' if high is None else f'{high:.2f}'}"
    else:
        text += f", no CI ({record.get('measured_steps')} steps; --repeats 2 gives a run-to-run CI)"
    rule = (record.get("stopping") or {}).get("rule")
    if rule in ("max_time", "max_steps"):
        text += f", stopped at --{rule.replace('_', '-')} before the CI target"
    return text


def output_options(fn):
    """Where `scale` and `run` put their results (not part of what is measured, so not stored for --resume)."""
    fn = opt.format_option("json prints one JSON document (a list of points) to stdout.")(fn)
    fn = click.option(
        "--wide", is_flag=True, help="The table with every column (see --columns); wider than 120 characters."
    )(fn)
    fn = click.option(
        "--columns",
        "columns_text",
        metavar="NAMES",
        help=f"Comma list of the table's columns, from: {', '.join(TABLE_COLUMNS)}. "
        f"Default: {','.join(DEFAULT_COLUMNS)}; for gpt2 and llama {','.join(DECODER_COLUMNS)} (fits 120 "
        "characters; COLUMNS is honoured).",
    )(fn)
    fn = click.option(
        "--records-dir",
        type=click.Path(file_okay=False),
        help="Also write each finished point's result record as JSON into this folder "
        "(e.g. shared storage on a cluster; `distbench collect` merges them).",
    )(fn)
    return opt.results_option("SQLite results store; every point is committed as soon as it finishes.")(fn)


POINT_OVERHEAD_S = 16.0
"""Seconds a point costs besides its measured windows: launch to first step, warmup and teardown, the median
over the 12 points of `distbench scale --gpus 1,2 --device cpu --model resnet50` on 2 cores (docs/benchmarks.md,
the wall-time split: 5.6 to 36.1 s). Only for the opening estimate; no GPU run has measured it yet."""
QUICK_MAX_TIME_S = 10.0


def _budget_s(plan, repeats: int, max_time: float | None = None) -> float | None:
    """Seconds the plan's runnable points take at most, roughly: each measures up to its --max-time (at N > 1
    five times with the variants in its processes, A T B T A, twice with a no-sync run of its own), times
    --repeats, plus POINT_OVERHEAD_S; None with fixed steps only."""
    total = 0.0
    for point in plan.points:
        cfg = point.config
        if point.skip_reason:
            continue
        if cfg.target_ci <= 0:
            return None
        runs = (len(split.ORDER) if point.strategy.nosync_in_process else 2) if cfg.measure_comm else 1
        measuring = (max_time if max_time is not None else cfg.max_time_s) * runs
        total += (measuring + POINT_OVERHEAD_S) * repeats
    return total


def _about(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} minutes"


def duration_line(plan, repeats: int = 1) -> str:
    """The opening line: how many points, the per-point budget, roughly how long, and the quick version."""
    runnable = [p for p in plan.points if not p.skip_reason]
    if not runnable:
        return "nothing to run: every point is skipped (reasons in the table)"
    total = _budget_s(plan, repeats)
    cfg = runnable[0].config
    if total is None:
        return (
            f"{len(runnable)} point(s), each {cfg.steps} measured steps after {cfg.warmup} warmup plus ~"
            f"{POINT_OVERHEAD_S:.0f} s launch and teardown: at least {_about(len(runnable) * repeats * POINT_OVERHEAD_S)}"
            ", more as steps take time (a step's time is not known before it runs)"
        )
    budget = max(p.config.max_time_s for p in runnable)
    line = (
        f"roughly {_about(total)}: {len(runnable)} point(s) x up to {budget:g} s of measuring each "
        f"(up to 5 times at N > 1 for the variants) + ~{POINT_OVERHEAD_S:.0f} s launch and teardown"
    )
    if budget <= QUICK_MAX_TIME_S:  # already as quick as the suggestion: suggesting it would be slower
        return line
    quick = _budget_s(plan, repeats, QUICK_MAX_TIME_S)
    return line + f"; --max-time {QUICK_MAX_TIME_S:g} for a quicker run (about {_about(quick)}, wider CIs)"


def honour_steps(workload: dict) -> dict:
    """An explicit --steps without --target-ci measures exactly that many steps: adaptive stopping off."""
    ctx = click.get_current_context()
    given = lambda name: ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE  # noqa: E731
    if given("steps") and not given("target_ci"):
        return {**workload, "target_ci": 0.0}
    return workload


def table_columns(columns_text: str | None, wide: bool) -> tuple[str, ...] | None:
    """--columns / --wide -> the table's columns; a bad name is a one-line error naming --columns."""
    if columns_text and wide:
        raise BadInput("--columns and --wide: give one of them (--wide shows every column)")
    try:
        return parse_columns(columns_text, wide)
    except ValueError as exc:
        raise BadInput(f"--columns: {exc}") from None


def _execute(
    opts: SweepOptions,
    *,
    results: str,
    records_dir,
    fmt: str,
    resume: str | None = None,
    columns_text: str | None = None,
    wide: bool = False,
    trace_dir: str | None = None,
):
    """Run the sweep and print its table (or JSON); returns (sweep id, records, the Profiling of --profile or
    None: its `finish()` raises the one-line error of a point that could not be profiled as asked)."""
    columns = table_columns(columns_text, wide)
    plan = make_plan(opts)
    profiling = with_profiling(plan, trace_dir or trace_folder(results)) if opts.profile else None
    plan = profiling.plan if profiling else plan
    err = opt.err_console()
    store = Store(results)  # before any note: a file that is not a results store is refused first
    err.print(duration_line(plan, opts.repeats), markup=False, highlight=False)
    opt.print_notes(err, plan.notes)
    if opts.data == "disk":
        from distbench.core import datasets

        for cfg in {p.config.seq_len: p.config for p in plan.points}.values():  # one dataset per sequence length
            datasets.ensure_dataset(
                opts.model,
                image_size=cfg.image_size,
                seq_len=cfg.seq_len,
                num_classes=cfg.num_classes,
                samples=opts.dataset_size,
                seed=opts.seed,
            )

    def progress(phase, i, total, point, record):
        name = (
            f"{point.strategy.name} N={point.config.world_size}"
            + (f" batch {point.config.swept_batch}" if opts.batch_size and len(opts.batch_size) > 1 else "")
            + (f" seq {point.config.seq_len}" if opts.seq_len and len(opts.seq_len) > 1 else "")
        )
        if phase == "kept":
            err.print(f"[{i}/{total}] {name}: kept from sweep {resume} ({record['status']})", markup=False)
        elif phase == "start":
            err.print(f"[{i}/{total}] {name} ...", end=" " if err.is_terminal else "\n", markup=False)
        else:
            status = record["status"]
            detail = (
                _ok_detail(record)
                if status == "ok"
                else (record.get("reason") or "") + (f" (logs: {record['workdir']})" if record.get("workdir") else "")
            )
            prefix = "" if err.is_terminal else f"[{i}/{total}] {name}: "
            err.print(f"{prefix}{status} {detail}".rstrip(), markup=False)

    with store:
        sweep_id, records = run_plan(
            plan, store, options=opts, command=command_line(), progress=progress, records_dir=records_dir, resume=resume
        )
    if fmt == "json":
        click.echo(json_document(records, extra_fields=("peak_memory_bytes", "peak_memory_source", "after_oom")))
    else:
        print_summary(opt.out_console(), records, [], sweep_id, results, columns=columns)
    if profiling and fmt != "json":
        done = sum(1 for r in records if r.get("profile"))
        err.print(
            f"profiled {done} point(s) after their timed windows: `distbench results show {sweep_id}` shows the "
            f"breakdowns; trace files in {profiling.trace_dir or '(none kept)'}",
            markup=False,
            highlight=False,
        )
    return sweep_id, records, profiling


def check_some_ok(sweep_id: int, records: list[dict]) -> None:
    """Exit 1 with a one-line summary when points ran and none of them is ok (a sweep with only skipped points
    ran nothing and failed nothing: the opening line already says so)."""
    ran = [r for r in records if r.get("status") != "skipped"]
    if not ran or any(r.get("status") == "ok" for r in ran):
        return
    counts: dict[str, int] = {}
    for r in ran:
        counts[r.get("status")] = counts.get(r.get("status"), 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    raise DistbenchError(
        f"no point succeeded: {len(ran)} of {len(records)} point(s) ran ({summary}); the reasons are above and in "
        f"`distbench results show {sweep_id}`"
    )


@click.command()
@opt.option("--gpus", "gpus_text", default="1,2,4", help="Comma list of device counts to measure, e.g. 1,2,4.")
@opt.option(
    "--nodes",
    "nodes_text",
    default="1",
    help="Comma list of node counts. Values > 1 run multi-node points (N devices over K nodes, K dividing N) "
    "inside the current Slurm allocation; to submit jobs instead use `distbench slurm`.",
)
@click.option(
    "--resume",
    metavar="SWEEP",
    help="Finish an interrupted or partly failed sweep: re-run only its missing or failed points, "
    "with the options it was started with ('latest' for the newest scale or run sweep); --timeout may be raised.",
)
@opt.workload_options()
@output_options
def scale(gpus_text, nodes_text, resume, results, records_dir, fmt, columns_text, wide, **workload):
    """Sweep strategies over device counts and report throughput, speedup and efficiency.

    Each (strategy, N) point runs in a fresh process tree launched the way users launch it
    (torchrun for ddp, horovodrun for Horovod), plus each framework's single-device baseline.

    Example: distbench scale --gpus 1,2,4 --model resnet50
    """
    if resume:
        with Store(results) as store:
            if resume == "latest":  # the newest scale or run sweep, named on stderr
                resume, line = pick_latest(store, "resume")
                opt.echo_err(line)
            opts = stored_options(store, resume)
        if click.get_current_context().get_parameter_source("timeout") == click.core.ParameterSource.COMMANDLINE:
            opts = dataclasses.replace(opts, timeout=workload["timeout"])  # e.g. points that timed out, more time
    else:
        opts = SweepOptions(gpus=gpus_text, nodes=nodes_text, add_baselines=True, **honour_steps(workload))
    sweep_id, records, profiling = _execute(
        opts, results=results, records_dir=records_dir, fmt=fmt, resume=resume, columns_text=columns_text, wide=wide
    )
    if profiling:
        profiling.finish()
    check_some_ok(sweep_id, records)


RUN_DEFAULT_STRATEGY = "ddp"
ONE_POINT = {
    "strategies": {
        "multiple": False,
        "default": RUN_DEFAULT_STRATEGY,
        "metavar": "NAME",
        "show_default": True,
        "callback": lambda ctx, param, value: (value,),
        "help": f"The one strategy to run: {', '.join(strategy_names())}.",
    },
    "batch_size": {
        "metavar": "B",
        "help": "Per-device batch (weak scaling) or global batch (strong); one value. "
        "Default: 32 on GPUs, 8 on CPU workers.",
    },
}
"""`run`'s own --strategy and --batch-size: one value each (scale's take lists; so does --seq-len)."""


@click.command()
@opt.option("--gpus", "gpus_text", default="1", help="Device count for this point.")
@opt.workload_options(**ONE_POINT)
@output_options
def run(gpus_text, results, records_dir, fmt, columns_text, wide, **workload):
    """Run one point (one strategy at one device count) with the same options and output as scale.

    Example: distbench run --strategy ddp --gpus 2 --model resnet50
    """
    opts = SweepOptions(gpus=gpus_text, add_baselines=False, **honour_steps(workload))
    if len(opts.gpus) != 1:
        raise BadInput(f"run measures one point: --gpus takes one count, got {gpus_text!r} (use `distbench scale`)")
    if len(opts.strategies) != 1:
        raise BadInput("run measures one point: give exactly one --strategy (use `distbench scale` for several)")
    if opts.batch_size and len(opts.batch_size) != 1:
        raise BadInput("run measures one point: --batch-size takes one value (use `distbench scale` for several)")
    if opts.seq_len and len(opts.seq_len) != 1:
        raise BadInput("run measures one point: --seq-len takes one value (use `distbench scale` for several)")
    sweep_id, records, profiling = _execute(
        opts, results=results, records_dir=records_dir, fmt=fmt, columns_text=columns_text, wide=wide
    )
    if profiling:
        profiling.finish()
    check_some_ok(sweep_id, records)

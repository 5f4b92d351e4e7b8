"""`distbench fit`: the largest per-device batch each strategy runs at N devices without running out of
memory (distbench.batchfit searches; every trial is a real point, stored as one sweep)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from distbench.batchfit import Fit, find_largest_batch
from distbench.commands import options as opt
from distbench.errors import BadInput
from distbench.models.specs import model_names
from distbench.output import fmt_bytes
from distbench.plan import MAX_BATCH, Plan, SweepOptions, make_plan
from distbench.store import DEFAULT_PATH, Store
from distbench.strategies import strategy_names
from distbench.sweep import run_points, command_line, recorded_sweep

FIT_STEPS, FIT_WARMUP = 2, 1
"""Each trial: one warmup step (allocates activations, gradients and optimizer state) and two measured
steps, fixed (no adaptive stopping), no no-sync variant: enough to reach the step's peak memory."""


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _resolution(tolerance: float) -> str:
    if tolerance == 0:
        return "exact: the first batch that did not fit is the largest that did + 1"
    return (
        f"bisected until the first batch that did not fit is within {tolerance * 100:g}% (or 1) of the largest that did"
    )


def _ratio(fit: Fit, ref: Fit) -> float | None:
    if fit.largest is None or ref.largest is None:
        return None
    return fit.largest[0] / ref.largest[0]


def _outcome(fit: Fit) -> str:
    """Why the search ended, for the table's 'did not fit' column."""
    if fit.stopped:
        batch, r = fit.stopped
        return f"search stopped at {batch}: {r['status']}" + (f": {r['reason']}" if r.get("reason") else "")
    if fit.first_oom:
        batch, r = fit.first_oom
        return f"{batch}: oom: {r.get('reason') or 'out of memory'}"
    if fit.reached_max_batch:
        return f"none up to --max-batch {fit.max_batch}"
    return "-"


@click.command()
@click.option(
    "--strategy",
    "strategies",
    required=True,
    multiple=True,
    metavar="NAME[,NAME]",
    help=f"Strategies to compare (repeatable or comma list): {', '.join(strategy_names())}. "
    "Ratios are against the first.",
)
@click.option("--gpus", "gpus_text", default="2", show_default=True, help="Device count (one value).")
@click.option("--model", default="resnet50", show_default=True, help=f"Model: {', '.join(model_names())}.")
@click.option(
    "--image-size",
    type=opt.IMAGE_SIZE,
    default=None,
    help="Image models: input side (default: the model's on GPUs, 64 on CPU workers).",
)
@click.option("--seq-len", type=opt.SEQ_LEN, default=None, help="Token models: sequence length.")
@click.option(
    "--precision",
    type=click.Choice(["fp32", "amp", "bf16"]),
    default="fp32",
    show_default=True,
    help="fp32, amp (float16 autocast, GPUs) or bf16.",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cuda", "cpu"]),
    default="auto",
    show_default=True,
    help="auto uses the visible CUDA GPUs, CPU workers when none is visible.",
)
@click.option(
    "--start",
    type=opt.BATCH,
    default=8,
    show_default=True,
    help="Per-device batch of the first trial; it doubles while trials fit (halves while they do not).",
)
@click.option(
    "--max-batch", type=opt.BATCH, default=MAX_BATCH, show_default=True, help="Largest per-device batch to try."
)
@click.option(
    "--tolerance",
    default="5%",
    show_default=True,
    callback=opt.percent,
    help="Bisect until the first batch that does not fit is within this of the largest that does "
    "(0 = to the exact integer).",
)
@click.option("--timeout", type=opt.SECONDS, default=900.0, show_default=True, help="Seconds per trial.")
@click.option(
    "--results",
    type=click.Path(dir_okay=False),
    default=str(DEFAULT_PATH),
    show_default=True,
    help="SQLite results store; every trial is committed as a point of one sweep.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json prints one JSON document (each strategy's search and its trials).",
)
def fit(
    strategies,
    gpus_text,
    model,
    image_size,
    seq_len,
    precision,
    device,
    start,
    max_batch,
    tolerance,
    timeout,
    results,
    fmt,
):
    """Find the largest per-device batch each strategy runs at N devices before it runs out of memory,
    with its peak memory per device: how much more a sharded strategy fits.

    Each trial is a real point (a few steps in a fresh process tree); an 'oom' bounds the search, any other
    failure stops that strategy's search with its reason.

    Example: distbench fit --strategy ddp,fsdp --gpus 2 --model resnet50
    """
    if start > max_batch:
        raise BadInput(f"--start {start} is larger than --max-batch {max_batch}")

    def options(names, batch: int) -> SweepOptions:
        return SweepOptions(
            gpus=gpus_text,
            model=model,
            strategies=names,
            add_baselines=False,
            batch_size=(batch,),
            image_size=image_size,
            seq_len=seq_len,
            precision=precision,
            device=device,
            steps=FIT_STEPS,
            warmup=FIT_WARMUP,
            timeout=timeout,
            target_ci=0.0,
            comm=False,
            telemetry_interval=0.0,
        )

    checked = options(strategies, start)
    if len(checked.gpus) != 1:
        raise BadInput(f"--gpus takes one device count for fit, got {gpus_text!r}")
    first = make_plan(checked)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    cfg = first.points[0].config
    workload = f"sequence {cfg.seq_len}" if cfg.seq_len else f"image {cfg.image_size}px"
    notes = [
        first.device.note,
        f"each trial: {model}, {workload}, {precision}, the per-device batch on each of N devices, "
        f"{FIT_WARMUP} warmup + {FIT_STEPS} measured steps, no no-sync variant",
        _resolution(tolerance),
    ]
    if first.device.device == "cpu":
        notes.append(
            "CPU workers: the limit found is host memory (peak RSS per worker process), shared by all "
            "workers and everything else on the machine, not a per-device memory"
        )
    for note in notes:
        err.print(f"[dim]note:[/] {escape(note)}")
    fits: list[tuple[str, Fit]] = []
    store = Store(results)
    stored = {
        "kind": "fit",
        "sweep_options": checked.to_dict(),
        "start": start,
        "max_batch": max_batch,
        "tolerance": tolerance,
        "resolved_device": first.device.device,
    }
    try:
        with recorded_sweep(store, command=command_line(), options=stored, notes=notes) as sweep_id:
            root = Path(tempfile.mkdtemp(prefix=f"distbench-fit-{sweep_id}-"))
            for name in checked.strategies:

                def trial(batch: int, name=name) -> dict:
                    plan = make_plan(options((name,), batch))
                    [point] = plan.points  # one strategy, one N, one batch, no baselines added
                    err.print(f"{name} N={point.config.world_size}: batch {batch} ...", markup=False)
                    workdir = root / f"{name}-b{batch}"
                    [record] = run_points(
                        Plan([point], plan.device, plan.notes),
                        store,
                        sweep_id,
                        {},
                        timeout_s=timeout,
                        progress=None,
                        workdir=workdir,
                        records_dir=None,
                        repeats=1,
                        noisy_cv=checked.noisy_cv,
                        telemetry_interval_s=0.0,
                    )
                    _remove_if_empty(workdir)  # a failed trial keeps its logs (the record names them)
                    err.print(
                        f"  {record['status']}"
                        + (
                            f": {record['reason']}"
                            if record.get("reason")
                            else f", peak memory {fmt_bytes(record.get('peak_memory_bytes'))} per device"
                        ),
                        markup=False,
                    )
                    return record

                fits.append((name, find_largest_batch(trial, start=start, max_batch=max_batch, tolerance=tolerance)))
            _remove_if_empty(root)
    finally:
        store.close()
    if fmt == "json":
        sys.stdout.write(json.dumps(_document(fits, sweep_id, results, tolerance), indent=2) + "\n")
    else:
        _print_table(fits, sweep_id, results, tolerance, first.device.device)


def _document(fits: list[tuple[str, Fit]], sweep_id: str, results: str, tolerance: float) -> dict:
    ref = fits[0][1]
    rows = []
    for name, f in fits:
        largest = f.largest[1] if f.largest else {}
        rows.append(
            {
                "strategy": name,
                "world_size": (f.trials[0][1] if f.trials else {}).get("world_size"),
                "largest_batch": f.largest[0] if f.largest else None,
                "peak_memory_bytes": largest.get("peak_memory_bytes"),
                "peak_memory_source": largest.get("peak_memory_source"),
                "first_oom_batch": f.first_oom[0] if f.first_oom else None,
                "first_oom_reason": f.first_oom[1].get("reason") if f.first_oom else None,
                "reached_max_batch": f.reached_max_batch,
                "stopped": {
                    "batch": f.stopped[0],
                    "status": f.stopped[1]["status"],
                    "reason": f.stopped[1].get("reason"),
                }
                if f.stopped
                else None,
                "ratio_to_first": _ratio(f, ref),
                "trials": [
                    {
                        "per_device_batch": b,
                        "status": r["status"],
                        "reason": r.get("reason"),
                        "peak_memory_bytes": r.get("peak_memory_bytes"),
                        "point_id": r.get("point_id"),
                    }
                    for b, r in f.trials
                ],
            }
        )
    return {
        "sweep_id": sweep_id,
        "results": results,
        "tolerance": tolerance,
        "resolution": _resolution(tolerance),
        "first_strategy": fits[0][0],
        "strategies": rows,
    }


def _print_table(fits: list[tuple[str, Fit]], sweep_id: str, results: str, tolerance: float, device: str) -> None:
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    ref_name, ref = fits[0]
    memory = "peak memory per device" if device == "cuda" else "peak RSS per worker"
    table = Table(title="largest per-device batch that fits", title_justify="left")
    for col in (
        "strategy",
        "N",
        "largest batch",
        "first that did not fit",
        f"{memory} (at largest)",
        f"vs {ref_name}",
        "trials (in order)",
    ):
        table.add_column(col, justify="right" if col in ("N", "largest batch") else "left")
    for name, f in fits:
        n = (f.trials[0][1] if f.trials else {}).get("world_size")
        largest = f.largest[0] if f.largest else None
        ratio = _ratio(f, ref)
        table.add_row(
            name,
            str(n),
            "none" if largest is None else f"{'>= ' if f.reached_max_batch else ''}{largest}",
            escape(_outcome(f)),
            fmt_bytes(f.largest[1].get("peak_memory_bytes")) if f.largest else "-",
            "-" if ratio is None else f"{ratio:.2f}x",
            ", ".join(f"{b} {r['status']}" for b, r in f.trials),
        )
    out.print(table)
    for name, f in fits[1:]:
        ratio = _ratio(f, ref)
        if ratio is None:
            continue
        if f.reached_max_batch and ref.reached_max_batch:
            out.print(f"{name} and {ref_name} both fit --max-batch {f.max_batch}: raise it to compare their limits")
            continue
        bound = " at least" if f.reached_max_batch else " at most" if ref.reached_max_batch else ""
        out.print(f"{name} fits{bound} {ratio:.2f}x {ref_name}'s per-device batch ({f.largest[0]} vs {ref.largest[0]})")
    out.print(f"resolution: {_resolution(tolerance)}")
    out.print(f"results stored in {results} (sweep {sweep_id}, every trial a point)")

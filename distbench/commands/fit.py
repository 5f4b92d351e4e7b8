"""`distbench fit` (the search is distbench.kinds.batchfit's)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import click
from rich.markup import escape

from distbench.analysis import output
from distbench.analysis.output import fmt_bytes
from distbench.commands import options as opt
from distbench.core.errors import BadInput
from distbench.core.strategies import strategy_names
from distbench.kinds.batchfit import BatchSearch, find_largest_batch
from distbench.kinds.sweep import training
from distbench.run import runner
from distbench.run.plan import MAX_BATCH, SweepOptions, make_plan

MMAP_THRESHOLD = 65536
"""--memory-cap: glibc's mmap threshold for the trials (unless the environment sets one). Its default grows up
to 32 MiB as large blocks are freed, after which freed tensors stay in the heap and in the RSS: a sharded
strategy's many short-lived buffers would then count against the cap as if they were still in use."""

FIT_STEPS, FIT_WARMUP = 2, 1
"""Each trial: one warmup step (allocates activations, gradients and optimizer state) and two measured
steps, fixed (no adaptive stopping), no no-sync variant: enough to reach the step's peak memory."""


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


def _resolution(tolerance: float) -> str:
    if tolerance == 0:
        return "exact: the first batch that did not fit is the largest that did + 1"
    return (
        f"bisected until the first batch that did not fit is within {tolerance * 100:g}% (or 1) of the largest that did"
    )


def _ratio(fit: BatchSearch, ref: BatchSearch) -> float | None:
    return fit.largest[0] / ref.largest[0] if fit.largest and ref.largest else None


def _outcome_cell(fit: BatchSearch, notes: output.Notes) -> str:
    """_outcome as a table cell (markup): the reason a number, its text under the table."""
    ended = fit.stopped or fit.first_oom
    if not ended:
        return escape(_outcome(fit))
    batch, r = ended
    reason = r.get("reason") or ("out of memory" if r["status"] == "oom" else "")
    where = f"search stopped at {batch}" if fit.stopped else str(batch)
    return f"{where}: {escape(str(r['status']))}" + (f" {notes.ref(reason)}" if reason else "")


def _outcome(fit: BatchSearch) -> str:
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
@opt.workload_option(
    "strategies",
    required=True,
    help=f"Strategies to compare (repeatable or comma list): {', '.join(strategy_names())}. "
    "Ratios are against the first.",
)
@opt.option("--gpus", default="2", help="Device count (one value).")
@opt.knob_options("model", "image_size", "seq_len", "model_size", "activation_checkpointing", "precision", "device")
@opt.option(
    "--by",
    type=click.Choice(["batch", "layers"]),
    default="batch",
    show_default=True,
    help="What grows: the per-device batch, or (gpt2, llama) the number of layers at --model-size's width, "
    "at --batch-size per device: the largest model that fits.",
)
@opt.option("--batch-size", "layers_batch", type=opt.BATCH, default=1, help="--by layers: the per-device batch.")
@opt.option(
    "--memory-cap",
    type=str,
    default=None,
    help="CPU workers: a trial whose peak RSS above its RSS before the model was built exceeds this (e.g. 600M, "
    "2G) on any worker counts as not fitting: a per-device memory limit for CPU runs (its record stays 'ok').",
)
@opt.option(
    "--start",
    type=opt.BATCH,
    default=8,
    help="Per-device batch of the first trial; it doubles while trials fit (halves while they do not).",
)
@opt.option("--max-batch", type=opt.BATCH, default=MAX_BATCH, help="Largest per-device batch to try.")
@opt.option(
    "--tolerance",
    default="5%",
    callback=opt.percent,
    help="Bisect until the first batch that does not fit is within this of the largest that does "
    "(0 = to the exact integer).",
)
@opt.workload_option("timeout", help="Seconds per trial.")
@opt.results_option("SQLite results store; every trial is committed as a point of one sweep.")
@opt.format_option("json prints one JSON document (each strategy's search and its trials).")
def fit(by, layers_batch, memory_cap, start, max_batch, tolerance, results, fmt, **workload):
    """Find the largest per-device batch each strategy runs at N devices before it runs out of memory,
    with its peak memory per device: how much more a sharded strategy fits.

    Each trial is a real point (a few steps in a fresh process tree); an 'oom' bounds the search, any other
    failure stops that strategy's search with its reason.

    Example: distbench fit --strategy ddp,fsdp --gpus 2 --model resnet50
    """
    if start > max_batch:
        raise BadInput(f"--start {start} is larger than --max-batch {max_batch}")
    if isinstance(workload.get("seq_len"), tuple):
        raise BadInput(f"--seq-len {','.join(map(str, workload['seq_len']))}: fit takes one sequence length")
    cap = parse_cap(memory_cap)
    base = layer_base(workload["model"], workload.get("model_size")) if by == "layers" else None

    def options(strategies, value: int) -> SweepOptions:
        sized = {"model_size": base.format(layers=value)} if base else {}
        return SweepOptions(
            **{**workload, "strategies": strategies, **sized},
            add_baselines=False,
            batch_size=(layers_batch if base else value,),
            steps=FIT_STEPS,
            warmup=FIT_WARMUP,
            target_ci=0.0,
            comm=False,
            telemetry_interval=0.0,
        )

    checked = options(workload["strategies"], start)
    if len(checked.gpus) != 1:
        raise BadInput(f"--gpus takes one device count for fit, got {workload['gpus']!r}")
    first = make_plan(checked)
    cfg = first.points[0].config
    workload_text = f"sequence {cfg.seq_len}" if cfg.seq_len else f"image {cfg.image_size}px"
    notes = [
        first.device.note,
        f"each trial: {checked.model}, {workload_text}, {checked.precision}, the per-device batch on each of N "
        f"devices, {FIT_WARMUP} warmup + {FIT_STEPS} measured steps, no no-sync variant",
        _resolution(tolerance),
    ]
    if base:
        notes.append(
            f"--by layers: each trial is {checked.model} --model-size {base.format(layers='<layers>')} at "
            f"{layers_batch} per device; the number of layers is what doubles and bisects"
        )
    if cap:
        if first.device.device != "cpu":
            raise BadInput("--memory-cap applies to CPU workers (GPUs have their own memory limit)")
        notes.append(
            f"--memory-cap {fmt_bytes(cap)}: a trial whose peak RSS above its RSS before the model was built "
            "exceeds it on any worker counts as not fitting (a CPU run with a limit; its stored record stays 'ok')"
        )
        threshold = os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD))
        notes.append(
            f"workers run with glibc's mmap threshold at {threshold} bytes (MALLOC_MMAP_THRESHOLD_): memory "
            "a worker frees leaves its RSS, so the peak counts memory in use, as a GPU's peak allocated does"
        )
    if first.device.device == "cpu":
        notes.append(
            "CPU workers: the limit found is host memory (peak RSS per worker process), shared by all "
            "workers and everything else on the machine, not a per-device memory"
        )
    err = opt.err_console()
    opt.print_notes(err, notes)
    fits: list[tuple[str, BatchSearch]] = []
    stored = {
        "kind": "fit",
        "sweep_options": checked.to_dict(),
        "start": start,
        "max_batch": max_batch,
        "tolerance": tolerance,
        "resolved_device": first.device.device,
    }
    with runner.new_sweep(results, "fit", stored, notes) as sweep:
        for name in checked.strategies:

            def trial(batch: int, name=name) -> dict:
                record = measure(batch, name)
                seen = capped(record, cap)
                if seen is not record:
                    err.print(f"  counted as {seen['status']}: {seen['reason']}", markup=False)
                return seen

            def measure(batch: int, name: str) -> dict:
                plan = make_plan(options((name,), batch))
                [point] = plan.points  # one strategy, one N, one batch, no baselines added
                what = f"{base.format(layers=batch)} ({batch} layers)" if base else f"batch {batch}"
                err.print(f"{name} N={point.config.world_size}: {what} ...", markup=False)
                workdir = sweep.workdir / f"{name}-b{batch}"
                kind = training(
                    timeout_s=checked.timeout, repeats=1, noisy_cv=checked.noisy_cv, telemetry_interval_s=0.0
                )
                [record] = runner.run_points(plan.points, sweep.store, sweep.id, kind, workdir=workdir)
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
        _remove_if_empty(sweep.workdir)
    if fmt == "json":
        document = _document(fits, sweep.id, results, tolerance)
        if base:  # --by layers: each search's values (largest_batch, trials' per_device_batch) are layer counts
            document.update(by="layers", model_size_pattern=base, per_device_batch=layers_batch)
        click.echo(json.dumps(document, indent=2))
    else:
        _print_table(fits, sweep.id, results, tolerance, first.device.device, base)


def parse_cap(text: str | None) -> int | None:
    """--memory-cap '600M' / '2G' / '1.5GiB' / bytes -> bytes (BadInput naming the flag)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", str(text).lower())
    if not m or float(m[1]) <= 0:
        raise BadInput(f"--memory-cap must be a positive size such as 600M or 2G, got {text!r}")
    return int(float(m[1]) * 1024 ** " kmgt".index(m[2] or " "))


def layer_base(model: str, model_size: str | None) -> str:
    """--by layers: the size pattern 'l{layers}-d<hidden>-h<heads>[-kv<n>][-v<n>]' of --model-size's shape."""
    from distbench.models import decoders

    if model not in decoders.FAMILIES:
        raise BadInput(f"--by layers applies to the decoder models ({', '.join(decoders.FAMILIES)}), not {model}")
    try:
        s = decoders.decoder_shape(model, model_size)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    kv = f"-kv{s.kv_heads}" if s.kv_heads != s.heads else ""
    vocab = f"-v{s.vocab}" if s.vocab != decoders.decoder_shape(model).vocab else ""
    return f"l{{layers}}-d{s.hidden}-h{s.heads}{kv}{vocab}"


def capped(record: dict, cap: int | None) -> dict:
    """The trial as the search sees it: an 'ok' record over the cap reads as 'oom' (a copy; the stored
    record is unchanged)."""
    if not cap or record.get("status") != "ok":
        return record
    peaks = record.get("peak_memory_per_rank_bytes") or [record.get("peak_memory_bytes")]
    before = record.get("memory_before_model_per_rank_bytes") or []
    if len(before) != len(peaks) or not all(before) or not all(peaks):
        return {**record, "status": "failed", "reason": "--memory-cap: this strategy records no RSS before the model"}
    used = max(p - b for p, b in zip(peaks, before))
    if used <= cap:
        return record
    return {
        **record,
        "status": "oom",
        "reason": f"--memory-cap: {fmt_bytes(used)} above the RSS before the model exceeds {fmt_bytes(cap)}",
    }


def _document(fits: list[tuple[str, BatchSearch]], sweep_id: str, results: str, tolerance: float) -> dict:
    rows = []
    for name, f in fits:
        largest_batch, largest = f.largest or (None, {})
        oom_batch, oom = f.first_oom or (None, {})
        rows.append(
            {
                "strategy": name,
                "world_size": f.trials[0][1].get("world_size"),
                "largest_batch": largest_batch,
                "peak_memory_bytes": largest.get("peak_memory_bytes"),
                "peak_memory_source": largest.get("peak_memory_source"),
                "first_oom_batch": oom_batch,
                "first_oom_reason": oom.get("reason"),
                "reached_max_batch": f.reached_max_batch,
                "stopped": f.stopped
                and {"batch": f.stopped[0], "status": f.stopped[1]["status"], "reason": f.stopped[1].get("reason")},
                "ratio_to_first": _ratio(f, fits[0][1]),
                "trials": [
                    {
                        "per_device_batch": b,
                        **{k: r.get(k) for k in ("status", "reason", "peak_memory_bytes", "point_id")},
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


def _print_table(
    fits: list[tuple[str, BatchSearch]],
    sweep_id: str,
    results: str,
    tolerance: float,
    device: str,
    base: str | None = None,
) -> None:
    out = opt.out_console()
    ref_name, ref = fits[0]
    memory = "peak memory per device" if device == "cuda" else "peak RSS per worker"
    unit = "layers" if base else "per-device batch"
    largest = "largest layers" if base else "largest batch"
    cols = ("strategy", "N", largest, "first that did not fit", f"{memory} (at largest)", f"vs {ref_name}")
    cols += ("trials (in order)",)
    title = (
        f"largest model that fits ({base.format(layers='<layers>')})" if base else "largest per-device batch that fits"
    )
    table = output.table(title, cols, right=("N", largest))
    notes = output.Notes()
    for name, f in fits:
        ratio = _ratio(f, ref)
        table.add_row(
            name,
            str(f.trials[0][1].get("world_size")),
            f"{'>= ' if f.reached_max_batch else ''}{f.largest[0]}" if f.largest else "none",
            _outcome_cell(f, notes),
            fmt_bytes(f.largest[1].get("peak_memory_bytes")) if f.largest else "-",
            "-" if ratio is None else f"{ratio:.2f}x",
            ", ".join(f"{b} {r['status']}" for b, r in f.trials),
        )
    output.print_table(out, table, notes)
    for name, f in fits[1:]:
        ratio = _ratio(f, ref)
        if ratio is None:
            continue
        if f.reached_max_batch and ref.reached_max_batch:
            out.print(f"{name} and {ref_name} both fit --max-batch {f.max_batch}: raise it to compare their limits")
            continue
        bound = " at least" if f.reached_max_batch else " at most" if ref.reached_max_batch else ""
        out.print(f"{name} fits{bound} {ratio:.2f}x {ref_name}'s {unit} ({f.largest[0]} vs {ref.largest[0]})")
    if base:
        from distbench.models import decoders

        model = fits[0][1].trials[0][1].get("model")
        for name, f in fits:
            if f.largest:
                shape = decoders.decoder_shape(model, base.format(layers=f.largest[0]))
                count = decoders.parameter_count(shape)
                out.print(f"{name}: largest model {shape.size}, {count:,} parameters")
    out.print(f"resolution: {_resolution(tolerance)}")
    out.print(f"results stored in {results} (sweep {sweep_id}, every trial a point)")

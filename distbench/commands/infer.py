"""`distbench infer`: inference latency/throughput against batch size, PyTorch and TensorFlow."""

from __future__ import annotations

import click
from rich.markup import escape

from distbench.analysis import output
from distbench.analysis.output import fmt_bytes, json_document
from distbench.commands import options as opt
from distbench.kinds.infer import TELEMETRY_INTERVAL_S, expand
from distbench.kinds.plans import InferOptions, plan_infer
from distbench.models.specs import model_names
from distbench.results.kind import RecordKind
from distbench.run import runner
from distbench.run.devices import parse_counts
from distbench.run.plan import MAX_BATCH


@click.command()
@opt.workload_option("model", help=f"Model: {', '.join(model_names())}.")
@opt.option("--batch-sizes", default="1,8,32,128", help="Comma list of batch sizes.")
@opt.option(
    "--framework", "frameworks", default="torch,tf", help="Comma list of frameworks: torch, tf (torch,tf runs both)."
)
@opt.knob_options(
    "image_size",
    "seq_len",
    "precision",
    image_size={"help": "Image models: input side (default: the model's)."},
    seq_len={"help": "Token models: sequence length (default: the model's)."},
)
@opt.option("--steps", type=click.IntRange(2, 1_000_000), default=20, help="Timed forward passes per batch size.")
@opt.option("--warmup", type=opt.WARMUP, default=3, help="Untimed passes first.")
@opt.knob_options(
    "device",
    "timeout",
    device={"help": "auto uses a CUDA GPU when one is visible, otherwise the CPU."},
    timeout={"help": "Seconds per framework."},
)
@opt.results_option()
@opt.format_option("json prints one JSON document (a list of points).")
def infer(batch_sizes, frameworks, steps, warmup, timeout, results, fmt, **workload):
    """Inference latency (median, p95) and throughput per batch size, for PyTorch and TensorFlow.

    A batch size that does not fit in memory is recorded as 'oom' and the others still run.

    Example: distbench infer --model resnet50 --batch-sizes 1,8,32,128
    """
    sizes = parse_counts(batch_sizes, "--batch-sizes", "batch size", MAX_BATCH)
    fws = tuple(f.strip() for f in frameworks.split(",") if f.strip())
    opts = InferOptions(frameworks=fws, batch_sizes=tuple(sizes), steps=steps, warmup=warmup, **workload)
    plan = plan_infer(opts)
    choice = plan.device
    err = opt.err_console()
    opt.print_notes(err, plan.notes)
    model, precision = opts.model, opts.precision
    options = {
        "kind": "inference",
        "model": model,
        "batch_sizes": sizes,
        "frameworks": list(fws),
        "precision": precision,
    }
    points = plan.points

    def progress(phase, i, total, point, record):
        if phase == "start":
            err.print(f"{point.strategy.name}: batch sizes {', '.join(map(str, sizes))} ...")

    kind = runner.Kind(
        runner.single_run(timeout, TELEMETRY_INTERVAL_S),
        finish=lambda point, record: expand(record, point.config),
        record_kind=RecordKind.INFERENCE,
    )
    with runner.new_sweep(results, "infer", options, []) as sweep:
        sweep.run(points, kind, progress)
    records = sweep.records
    if fmt == "json":
        fields = ("latency_median_s", "latency_p95_s", "peak_memory_bytes", "power_w_mean", "energy_per_sample_j")
        click.echo(json_document(records, extra_fields=fields))
        return
    out = opt.out_console()
    memory = "peak memory (allocated per GPU)" if choice.device == "cuda" else "peak memory (process RSS)"
    cols = (
        "framework",
        "batch",
        "latency median (ms)",
        "latency p95 (ms)",
        "throughput (samples/s)",
        memory,
        "power (W)",
        "energy/sample (J)",
        "status",
    )
    table = output.table(f"inference {model} ({choice.device}, {precision})", cols, right=cols[1:-1])
    notes = output.Notes()
    for r in records:
        ok = r["status"] == "ok"
        table.add_row(
            r["framework"],
            str(r["per_device_batch"]),
            f"{r['latency_median_s'] * 1e3:.2f}" if ok else "-",
            f"{r['latency_p95_s'] * 1e3:.2f}" if ok else "-",
            f"{r['throughput']:.1f}" if ok else "-",
            fmt_bytes(r.get("peak_memory_bytes")),
            f"{r['power_w_mean']:.1f}" if r.get("power_w_mean") is not None else "unknown" if ok else "-",
            f"{r['energy_per_sample_j']:.4g}" if r.get("energy_per_sample_j") is not None else "unknown" if ok else "-",
            escape(r["status"]) + (f" {notes.ref(r['reason'])}" if r.get("reason") else ""),
        )
    output.print_table(out, table, notes)
    out.print(f"results stored in {results} (sweep {sweep.id})")

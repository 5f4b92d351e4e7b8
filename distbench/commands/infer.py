"""`distbench infer`: inference latency/throughput against batch size, PyTorch and TensorFlow."""

from __future__ import annotations

import click
from rich.markup import escape

from distbench import runner
from distbench.commands import options as opt
from distbench.config import PointConfig
from distbench.errors import BadInput
from distbench.infer import INFER, TELEMETRY_INTERVAL_S, expand
from distbench.models.specs import check_input, get_spec, model_names
from distbench.output import fmt_bytes, json_document
from distbench.plan import MAX_BATCH, PlannedPoint, cpu_cores, parse_counts, resolve_device


@click.command()
@opt.option("--model", default="resnet50", help=f"Model: {', '.join(model_names())}.")
@opt.option("--batch-sizes", default="1,8,32,128", help="Comma list of batch sizes.")
@opt.option("--framework", "frameworks", default="torch,tf", help="torch, tf or both.")
@opt.workload_option("image_size", help="Image models: input side (default: the model's).")
@opt.workload_option("seq_len", help="Token models: sequence length (default: the model's).")
@opt.workload_option("precision", help="fp32, amp (float16 autocast, GPUs) or bf16.")
@opt.option("--steps", type=click.IntRange(2, 1_000_000), default=20, help="Timed forward passes per batch size.")
@opt.option("--warmup", type=opt.WARMUP, default=3, help="Untimed passes first.")
@opt.workload_option("device", help="auto uses a CUDA GPU when one is visible, otherwise the CPU.")
@opt.workload_option("timeout", help="Seconds per framework.")
@opt.results_option()
@opt.format_option("json prints one JSON document (a list of points).")
def infer(model, batch_sizes, frameworks, image_size, seq_len, precision, steps, warmup, device, timeout, results, fmt):
    """Inference latency (median, p95) and throughput per batch size, for PyTorch and TensorFlow.

    A batch size that does not fit in memory is recorded as 'oom' and the others still run.

    Example: distbench infer --model resnet50 --batch-sizes 1,8,32,128
    """
    spec = opt.checked(get_spec, model)
    sizes = parse_counts(batch_sizes, "--batch-sizes", "batch size", MAX_BATCH)
    fws = [f.strip() for f in frameworks.split(",") if f.strip()]
    bad = [f for f in fws if f not in INFER]
    if bad or not fws:
        raise BadInput(f"unknown framework {', '.join(bad) or repr(frameworks)}; valid frameworks: torch, tf")
    choice = resolve_device(device, [1])
    image_size = None if spec.kind == "tokens" else image_size or spec.default_image_size
    opt.checked(check_input, spec, image_size=image_size, seq_len=seq_len)
    err = opt.err_console()
    if choice.device == "cpu":
        err.print(f"[dim]note:[/] running on the CPU ({cpu_cores()} cores): no CUDA GPU is in use")
    options = {"kind": "inference", "model": model, "batch_sizes": sizes, "frameworks": fws, "precision": precision}
    amp = (
        "--precision amp needs a CUDA GPU; use bf16 on CPU" if precision == "amp" and choice.device != "cuda" else None
    )
    points = [
        PlannedPoint(
            INFER[fw],
            PointConfig(
                strategy=INFER[fw].name,
                model=model,
                world_size=1,
                device=choice.device,
                per_device_batch=sizes[0],
                image_size=image_size,
                seq_len=seq_len,
                steps=steps,
                warmup=warmup,
                precision=precision,
                threads_per_worker=cpu_cores(),
                num_classes=spec.num_classes,
                extra={"batch_sizes": sizes},
            ),
            amp,
        )
        for fw in fws
    ]

    def progress(phase, i, total, point, record):
        if phase == "start":
            err.print(f"{point.strategy.name}: batch sizes {', '.join(map(str, sizes))} ...")

    kind = runner.Kind(
        runner.single_run(timeout, TELEMETRY_INTERVAL_S), finish=lambda point, record: expand(record, point.config)
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
    table = opt.table(f"inference {model} ({choice.device}, {precision})", cols, right=cols[1:-1])
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
            escape(r["status"] + (f": {r['reason']}" if r.get("reason") else "")),
        )
    out.print(table)
    out.print(f"results stored in {results} (sweep {sweep.id})")

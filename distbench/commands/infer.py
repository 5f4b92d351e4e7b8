"""`distbench infer`: inference latency/throughput against batch size, PyTorch and TensorFlow."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from distbench.commands import options as opt
from distbench.config import PointConfig
from distbench.errors import BadInput
from distbench.infer import INFER, run_framework
from distbench.models.specs import check_input, get_spec, model_names
from distbench.output import fmt_bytes, json_document
from distbench.plan import INSTALL_HINT, MAX_BATCH, _missing_modules, cpu_cores, parse_counts, resolve_device
from distbench.store import DEFAULT_PATH, Store
from distbench.sweep import command_line, recorded_sweep


@click.command()
@click.option("--model", default="resnet50", show_default=True, help=f"Model: {', '.join(model_names())}.")
@click.option("--batch-sizes", default="1,8,32,128", show_default=True, help="Comma list of batch sizes.")
@click.option("--framework", "frameworks", default="torch,tf", show_default=True, help="torch, tf or both.")
@click.option(
    "--image-size", type=opt.IMAGE_SIZE, default=None, help="Image models: input side (default: the model's)."
)
@click.option("--seq-len", type=opt.SEQ_LEN, default=None, help="Token models: sequence length (default: the model's).")
@click.option(
    "--precision",
    type=click.Choice(["fp32", "amp", "bf16"]),
    default="fp32",
    show_default=True,
    help="fp32, amp (float16 autocast, GPUs) or bf16.",
)
@click.option(
    "--steps",
    type=click.IntRange(2, 1_000_000),
    default=20,
    show_default=True,
    help="Timed forward passes per batch size.",
)
@click.option("--warmup", type=opt.WARMUP, default=3, show_default=True, help="Untimed passes first.")
@click.option(
    "--device",
    type=click.Choice(["auto", "cuda", "cpu"]),
    default="auto",
    show_default=True,
    help="auto uses a CUDA GPU when one is visible, otherwise the CPU.",
)
@click.option("--timeout", type=opt.SECONDS, default=900.0, show_default=True, help="Seconds per framework.")
@click.option(
    "--results",
    type=click.Path(dir_okay=False),
    default=str(DEFAULT_PATH),
    show_default=True,
    help="SQLite results store.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json prints one JSON document (a list of points).",
)
def infer(model, batch_sizes, frameworks, image_size, seq_len, precision, steps, warmup, device, timeout, results, fmt):
    """Inference latency (median, p95) and throughput per batch size, for PyTorch and TensorFlow.

    A batch size that does not fit in memory is recorded as 'oom' and the others still run.

    Example: distbench infer --model resnet50 --batch-sizes 1,8,32,128
    """
    try:
        spec = get_spec(model)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    sizes = parse_counts(batch_sizes, "--batch-sizes", "batch size", MAX_BATCH)
    fws = [f.strip() for f in frameworks.split(",") if f.strip()]
    bad = [f for f in fws if f not in INFER]
    if bad or not fws:
        raise BadInput(f"unknown framework {', '.join(bad) or repr(frameworks)}; valid frameworks: torch, tf")
    choice = resolve_device(device, [1])
    if spec.kind == "tokens":
        image_size = None
    else:
        image_size = image_size or spec.default_image_size
    try:
        check_input(spec, image_size=image_size, seq_len=seq_len)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if choice.device == "cpu":
        err.print(f"[dim]note:[/] running on the CPU ({cpu_cores()} cores): no CUDA GPU is in use")
    store = Store(results)
    records = []
    options = {"kind": "inference", "model": model, "batch_sizes": sizes, "frameworks": fws, "precision": precision}
    try:
        with recorded_sweep(store, command=command_line(), options=options, notes=[]) as sweep_id:
            root = Path(tempfile.mkdtemp(prefix=f"distbench-infer-{sweep_id}-"))
            for fw in fws:
                cfg = PointConfig(
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
                )
                missing = _missing_modules(INFER[fw])
                skip = f"{', '.join(missing)} is not installed: {INSTALL_HINT}" if missing else None
                if precision == "amp" and choice.device != "cuda":
                    skip = "--precision amp needs a CUDA GPU; use bf16 on CPU"
                err.print(f"{INFER[fw].name}: batch sizes {', '.join(map(str, sizes))} ...")
                for r in run_framework(fw, cfg, root / fw, timeout, skip):
                    r["sweep_id"] = sweep_id
                    r["point_id"] = store.add_point(sweep_id, r)
                    records.append(r)
    finally:
        store.close()
    if fmt == "json":
        sys.stdout.write(
            json_document(
                records,
                extra_fields=(
                    "latency_median_s",
                    "latency_p95_s",
                    "peak_memory_bytes",
                    "power_w_mean",
                    "energy_per_sample_j",
                ),
            )
            + "\n"
        )
        return
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"inference {model} ({choice.device}, {precision})", title_justify="left")
    memory = "peak memory (allocated per GPU)" if choice.device == "cuda" else "peak memory (process RSS)"
    for col in (
        "framework",
        "batch",
        "latency median (ms)",
        "latency p95 (ms)",
        "throughput (samples/s)",
        memory,
        "power (W)",
        "energy/sample (J)",
        "status",
    ):
        table.add_column(col, justify="left" if col in ("framework", "status") else "right")
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
    out.print(f"results stored in {results} (sweep {sweep_id})")

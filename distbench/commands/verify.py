"""`distbench verify`: strategy equivalence check against the single-device run."""

from __future__ import annotations

import json

import click

from distbench import runner
from distbench.commands import options as opt
from distbench.models.specs import check_input, get_spec
from distbench.plan import cpu_cores, parse_gpus, resolve_device
from distbench.strategies import parse_strategies, strategy_names
from distbench.verify import DEFAULT_RTOL, verify as run_verify
from distbench.errors import BadInput


@click.command()
@opt.option("--model", default="resnet18", help="Model to train.")
@opt.option("--gpus", "gpus_text", default="2", help="Device count for the distributed runs.")
@opt.workload_option(
    "strategies",
    help=f"Strategies to check (default: all): {', '.join(strategy_names())}.",
)
@opt.option(
    "--batch-size",
    type=opt.BATCH,
    default=8,
    help="GLOBAL batch, the same for the single-device run and split evenly across devices.",
)
@opt.option("--steps", type=click.IntRange(1, 1000), default=3, help="SGD steps compared.")
@opt.workload_option("image_size", help="Input side (default: 32 on CPU workers, the model's on GPUs).")
@opt.workload_option("num_classes", default=10, help="Classifier width.")
@opt.option(
    "--rtol",
    type=opt.FiniteFloatRange(0, 1, min_open=True),
    default=DEFAULT_RTOL,
    help="Relative tolerance for losses, weight updates and replica agreement (fp32; see docs).",
)
@opt.option(
    "--lr", type=opt.FiniteFloatRange(0, 10, min_open=True), default=0.01, help="SGD learning rate (momentum 0.9)."
)
@opt.workload_option("device", help="auto uses CUDA GPUs when enough are visible, otherwise CPU workers.")
@opt.workload_option("timeout", help="Seconds per run before it is killed.")
@opt.results_option("SQLite results store: every run (baselines too) is stored as a point of a 'verify' sweep.")
@opt.format_option("json prints the verdicts as one JSON document.")
def verify(
    model,
    gpus_text,
    strategies,
    batch_size,
    steps,
    image_size,
    num_classes,
    rtol,
    lr,
    device,
    timeout,
    results,
    fmt,
):
    """Check that each strategy trains exactly like one device with the same global batch.

    Every strategy and its framework's single-device baseline start from identical weights and
    data, take k steps, and are compared step by step (loss) and at the end (weight updates,
    replica agreement). Exits 1 when any strategy fails, with what differed.

    Every run is stored in --results as a point of a sweep of kind verify, each strategy's with
    its verdict (`distbench results show` lists them).

    Example: distbench verify --model resnet18 --gpus 2
    """
    gpus = parse_gpus(gpus_text)
    if len(gpus) != 1:
        raise BadInput(f"verify takes one device count, got {gpus_text!r}")
    n = gpus[0]
    spec = opt.checked(get_spec, model)
    if batch_size % n:  # before any output: the check is the library's, the message the same
        raise BadInput(f"--batch-size {batch_size} (global) is not divisible by --gpus {n}")
    choice = resolve_device(device, gpus)
    if choice.unfit(n):
        raise BadInput(f"--gpus {n}: {choice.unfit(n)} (use --device cpu for CPU workers)")
    if spec.kind == "tokens":
        if image_size is not None:
            raise BadInput(f"--image-size does not apply to {spec.name} (a token model)")
        size = None
    else:
        size = image_size or (spec.default_image_size if choice.device == "cuda" else max(32, spec.min_image_size))
        opt.checked(check_input, spec, image_size=size)
    chosen = parse_strategies(strategies)
    err = opt.err_console()
    opt.print_notes(err, [choice.note])
    options = {
        "kind": "verify",
        "model": model,
        "gpus": [n],
        "strategies": [s.name for s in chosen],
        "global_batch": batch_size,
        "steps": steps,
        "image_size": size,
        "num_classes": num_classes,
        "rtol": rtol,
        "lr": lr,
        "resolved_device": choice.device,
    }
    with runner.new_sweep(results, "verify", options, [choice.note]) as sweep:
        verdicts = run_verify(
            model=model,
            world_size=n,
            strategies=chosen,
            device=choice.device,
            global_batch=batch_size,
            steps=steps,
            image_size=size,
            num_classes=num_classes,
            rtol=rtol,
            lr=lr,
            timeout_s=timeout,
            threads=cpu_cores(),
            progress=lambda what: err.print(f"running {what} ..."),
            sweep=sweep,
        )
    err.print(f"results stored in {results} (sweep {sweep.id})", markup=False, highlight=False)
    if fmt == "json":
        click.echo(json.dumps(verdicts, indent=2))
    else:
        out = opt.out_console()
        table = opt.table(
            f"verify {model}: N={n}, global batch {batch_size}, {steps} steps, rtol {rtol:g}",
            ("strategy", "N", "loss max rel diff", "update max rel diff", "replicas max rel diff", "verdict"),
        )
        for r in verdicts:
            verdict = {True: "[green]pass[/]", False: "[red]FAIL[/]", None: "[yellow]skipped[/]"}[r["passed"]]
            if r.get("reason"):
                verdict += f": {r['reason']}"
            keys = ("loss_max_rel_diff", "update_max_rel_diff", "replica_max_rel_diff")
            diffs = (f"{r[k]:.2e}" if r.get(k) is not None else "-" for k in keys)
            table.add_row(r["strategy"], str(r["world_size"]), *diffs, verdict)
        out.print(table)
    if any(r["passed"] is False for r in verdicts):
        raise click.exceptions.Exit(1)

"""`distbench verify`: strategy equivalence check against the single-device run."""

from __future__ import annotations

import json

import click

from distbench.analysis import output
from distbench.commands import options as opt
from distbench.core.errors import BadInput
from distbench.core.strategies import parse_strategies, strategy_names
from distbench.kinds.plans import VerifyOptions, plan_verify
from distbench.kinds.verify import DEFAULT_RTOL, run_plan
from distbench.run import runner
from distbench.run.devices import parse_gpus


@click.command()
@opt.option("--gpus", "gpus_text", default="2", help="Device count for the distributed runs.")
@opt.workload_option(
    "strategies",
    help=f"Strategies to check (repeatable or comma list): {', '.join(strategy_names())}, or a group: core, "
    "wrappers, sharded, engines, all; deepspeed = its three ZeRO stages. Default: core.",
)
@opt.option(
    "--batch-size",
    type=opt.BATCH,
    default=8,
    help="GLOBAL batch, the same for the single-device run and split evenly across devices.",
)
@opt.option("--steps", type=click.IntRange(1, 1000), default=3, help="SGD steps compared.")
@opt.knob_options(
    "model",
    "image_size",
    "seq_len",
    "model_size",
    "activation_checkpointing",
    "shard_group",
    "num_classes",
    model={"default": "resnet18"},
    image_size={"help": "Image models: input side (default: 32 on CPU workers, the model's on GPUs)."},
    num_classes={"default": 10},
)
@opt.optimizer_options()
@opt.knob_options("device", "timeout", timeout={"help": "Seconds per run before it is killed."})
@opt.option(
    "--rtol",
    type=opt.FiniteFloatRange(0, 1, min_open=True),
    default=DEFAULT_RTOL,
    help="Largest relative difference |a - b| / |b| allowed between a strategy and its single-device run, for "
    "every step's loss and each tensor's weight update, and between the replicas' weights. fp32 sums taken in "
    "another order differ by about 1e-7; the bugs verify catches (a sum instead of a mean, duplicated data, "
    "a missing broadcast) by 1e-2 or more. verify runs in fp32 (it has no --precision), so the default suits "
    "every run it makes; raise it only to accept a known, larger difference.",
)
@opt.results_option("SQLite results store: every run (baselines too) is stored as a point of a 'verify' sweep.")
@opt.format_option("json prints the verdicts as one JSON document.")
def verify(gpus_text, strategies, batch_size, steps, rtol, timeout, results, fmt, **workload):
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
    chosen = parse_strategies(strategies)
    opts = VerifyOptions(gpus=n, strategies=tuple(chosen), global_batch=batch_size, steps=steps, **workload)
    plan = plan_verify(opts)
    err = opt.err_console()
    opt.print_notes(err, plan.notes)
    options = {
        "kind": "verify",
        **workload,
        "gpus": [n],
        "strategies": [s.name for s in chosen],
        "global_batch": batch_size,
        "steps": steps,
        "image_size": plan.points[0].config.image_size if plan.points else workload["image_size"],
        "rtol": rtol,
        "resolved_device": plan.device.device,
    }
    with runner.new_sweep(results, "verify", options, plan.notes) as sweep:
        verdicts = run_plan(
            plan,
            rtol=rtol,
            timeout_s=timeout,
            progress=lambda what: err.print(f"running {what} ..."),
            sweep=sweep,
        )
    err.print(f"results stored in {results} (sweep {sweep.id})", markup=False, highlight=False)
    if fmt == "json":
        click.echo(json.dumps(verdicts, indent=2))
    else:
        out = opt.out_console()
        table = output.table(
            f"verify {opts.model}: N={n}, global batch {batch_size}, {steps} steps, rtol {rtol:g}",
            ("strategy", "N", "loss max rel diff", "update max rel diff", "replicas max rel diff", "verdict"),
        )
        notes = output.Notes()
        for r in verdicts:
            verdict = {True: "[green]pass[/]", False: "[red]FAIL[/]", None: "[yellow]skipped[/]"}[r["passed"]]
            if r.get("reason"):
                verdict += f" {notes.ref(r['reason'])}"
            keys = ("loss_max_rel_diff", "update_max_rel_diff", "replica_max_rel_diff")
            diffs = (f"{r[k]:.2e}" if r.get(k) is not None else "-" for k in keys)
            table.add_row(r["strategy"], str(r["world_size"]), *diffs, verdict)
        output.print_table(out, table, notes)
    if any(r["passed"] is False for r in verdicts):
        raise click.exceptions.Exit(1)

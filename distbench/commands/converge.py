"""`distbench converge`: time to accuracy. The same model on the same data under each strategy and N, several
seeds, until the held-out accuracy reaches the target or the budget runs out (issue 23)."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from pathlib import Path

import click

from distbench.analysis import output
from distbench.commands import options as opt
from distbench.converge import data as cdata
from distbench.converge import lr as lr_rules
from distbench.converge.plan import SUPPORTED, ConvergeOptions
from distbench.converge.summary import EQUIVALENCE_MARGIN, fmt, speed_and_time_cells, summarize
from distbench.core import phases
from distbench.core.errors import BadInput
from distbench.core.strategies import parse_strategies
from distbench.core.workload import OPTIMIZER, Workload
from distbench.kinds.plans import plan_converge
from distbench.models.specs import check_input, get_spec
from distbench.results.kind import RecordKind
from distbench.run import runner
from distbench.run.devices import cpu_cores, parse_gpus, resolve_device

DEFAULT_STRATEGIES = "torch,ddp,tf,mirrored"


@click.command()
@opt.option(
    "--model", default="cnn", help="Model to train (an image classifier; cnn suits the default shapes, mlp the digits)."
)
@opt.option(
    "--strategy",
    "strategy_text",
    default=DEFAULT_STRATEGIES,
    help=f"Comma list of strategies: {', '.join(SUPPORTED)}.",
)
@opt.option("--gpus", "gpus_text", default="1,2", help="Device counts N (comma list); baselines run at N=1.")
@opt.option("--seeds", type=click.IntRange(1, 100), default=3, help="Runs per (strategy, N): S seeds from --seed.")
@opt.option(
    "--target-accuracy",
    type=opt.FiniteFloatRange(0, 1, min_open=True),
    default=0.8,
    help="Held-out validation accuracy to reach (a fraction, 0 < A <= 1).",
)
@opt.option(
    "--data",
    "data_path",
    default=None,
    show_default="shapes: 18,000 40x40 images of ten shapes drawn by code",
    help="shapes, digits (scikit-learn's bundled 8x8 digits), an image-folder tree (DIR/<class>/<image>), a .npz "
    "with arrays x and y, or a folder with x.npy and y.npy.",
)
@opt.option("--batch-size", type=opt.BATCH, default=32, help="Per-device batch (weak scaling: global = B x N).")
@opt.optimizer_options(
    lr={"default": 0.05, "help": "SGD learning rate at the reference batch (--batch-size, one device)."},
    seed={"help": "The first seed: the runs of each (strategy, N) use seeds --seed .. --seed + S - 1."},
)
@opt.option(
    "--lr-scaling",
    type=click.Choice(lr_rules.RULES),
    default="linear",
    help="How the LR grows with the global batch: linear (Goyal et al. 2017), sqrt, none.",
)
@opt.option(
    "--warmup-epochs",
    type=opt.FiniteFloatRange(0, 1000),
    default=1.0,
    help="Linear warmup from the reference LR to the scaled one (none where the LR is not scaled).",
)
@opt.option("--max-epochs", type=click.IntRange(1, 100_000), default=5, help="Budget: epochs per run.")
@opt.option("--max-steps", type=click.IntRange(1, 10**9), default=None, help="Budget: training steps per run.")
@opt.option("--max-time", type=opt.SECONDS, default=None, help="Budget: training seconds per run.")
@opt.option(
    "--eval-every",
    type=opt.FiniteFloatRange(0, 100, min_open=True),
    default=0.25,
    help="Evaluate every this many epochs (the resolution of steps/time to target).",
)
@opt.option(
    "--stop-at-target/--full-budget",
    default=False,
    help="Stop a run when it reaches the target (final accuracy is then the target's), or train the whole budget.",
)
@opt.workload_option("device")
@opt.option(
    "--threads",
    type=click.IntRange(1, 1024),
    default=None,
    help="CPU workers: intra-op threads per worker (default: the cores divided among the N workers).",
)
@opt.option(
    "--equivalence-margin",
    type=opt.FiniteFloatRange(0, 1, min_open=True),
    default=EQUIVALENCE_MARGIN,
    help="Margin of the final-accuracy equivalence test (TOST), as a fraction: 0.005 = 0.5 accuracy points.",
)
@opt.workload_option("timeout", help="Seconds per run before it is killed.")
@opt.results_option()
@opt.format_option("json prints the summary and every run as one JSON document.")
def converge(
    model,
    strategy_text,
    gpus_text,
    seeds,
    target_accuracy,
    data_path,
    batch_size,
    lr_scaling,
    warmup_epochs,
    max_epochs,
    max_steps,
    max_time,
    eval_every,
    stop_at_target,
    device,
    threads,
    equivalence_margin,
    timeout,
    results,
    fmt,
    **optimizer,
):
    """Time to accuracy: steps, epochs and training time to a validation accuracy, per strategy and N.

    Every run trains the same model on the same data (a seeded shard of each global batch per rank, no
    sample twice per epoch), the LR scaled by the rule, until the budget ends; it records when the held-out
    accuracy first reached the target (evaluation time excluded, reported apart). A run that never does is
    a result: "did not converge within the budget".

    Example: distbench converge --strategy torch,ddp,tf,mirrored --gpus 1,2 --target-accuracy 0.9 --seeds 3
    """
    spec = opt.checked(get_spec, model)
    if spec.kind != "image" or spec.loss != "cross_entropy":
        raise BadInput(
            f"--model {model}: converge trains image classifiers (mlp, resnet18, ...), not a {spec.kind} model"
        )
    strategies = parse_strategies((strategy_text,))
    unsupported = [s.name for s in strategies if not s.converge_module]
    if unsupported:
        raise BadInput(f"--strategy {', '.join(unsupported)}: converge runs {', '.join(SUPPORTED)}")
    gpus = parse_gpus(gpus_text)
    choice = resolve_device(device, gpus)
    cache = cdata.ensure_cache(data_path, spec.channels)
    *_, meta = cdata.read_cache(cache)
    opt.checked(check_input, spec, image_size=meta["image_size"])
    if meta["image_size"] != meta["width"]:
        raise BadInput(f"--data {data_path}: images are {meta['width']}x{meta['image_size']}; models take square ones")
    too_big = [n for n in gpus if meta["train"] // (batch_size * n) < 1]
    if too_big:
        raise BadInput(
            f"--batch-size {batch_size}: a global batch of {batch_size * max(too_big)} is more than the "
            f"{meta['train']} training samples"
        )
    options = ConvergeOptions(
        model=model,
        strategies=tuple(strategies),
        gpus=tuple(gpus),
        seeds=seeds,
        target_accuracy=target_accuracy,
        batch_size=batch_size,
        lr_scaling=lr_scaling,
        warmup_epochs=warmup_epochs,
        max_epochs=max_epochs,
        max_steps=max_steps,
        max_time_s=max_time,
        eval_every_epochs=eval_every,
        stop_at_target=stop_at_target,
        device=device,
        threads=threads,
        **optimizer,
    )
    plan = plan_converge(
        options,
        choice,
        cores=cpu_cores(),
        cache=str(cache),
        image_size=meta["image_size"],
        num_classes=meta["num_classes"],
    )
    notes = [
        choice.note,
        f"data: {meta.get('note') or meta['source']}; {meta['train']} training / {meta['val']} held-out "
        f"validation samples (fixed split), decoded once into {cache}",
        f"LR rule {lr_scaling}: base LR {options.lr:g} at global batch {batch_size}; warmup {warmup_epochs:g} epoch(s) "
        "where the LR is scaled; then constant",
    ]
    notes.append(budget_note(options, [p for p in plan.points if not p.skip_reason], meta))
    err = opt.err_console()
    opt.print_notes(err, notes)
    stored = {"kind": "converge", "options": _options_doc(options), "data": meta, "cache": str(cache)}
    stored["equivalence_margin"] = equivalence_margin  # the report's equivalence test reads it back
    planned = plan.points

    def progress(phase, i, total, point, record):
        cfg = point.config
        if phase == "start":
            err.print(f"[{i}/{total}] {point.strategy.name} N={cfg.world_size} seed {cfg.seed} ...", markup=False)
        else:
            err.print(f"  {_line(record)}", markup=False)

    with runner.new_sweep(results, "converge", stored, notes) as sweep:
        records = sweep.run(
            planned,
            runner.Kind(with_progress(runner.single_run(timeout), err), record_kind=RecordKind.CONVERGE),
            progress,
        )
        summary = summarize(records, equivalence_margin)
    if fmt == "json":
        click.echo(json.dumps({"sweep_id": sweep.id, "summary": summary, "runs": records}, indent=1, default=str))
        return
    out = opt.out_console()
    output.print_table(out, render_table(summary, target_accuracy))
    for line in equivalence_lines(summary):
        out.print(line, markup=False)
    err.print(f"sweep {sweep.id} saved in {results}; report: distbench report {sweep.id}", markup=False)


PROGRESS_EVERY_S = 15.0
"""How often a running converge run's latest evaluation is looked for and, when new, printed."""


def with_progress(measure, err, every_s: float = PROGRESS_EVERY_S):
    """`measure` (one run of a point) with a line on stderr at each new evaluation while the run goes on: the
    step, the epoch, the held-out accuracy and the seconds of training and of evaluation so far."""

    def run(point, workdir):
        done = threading.Event()
        rank_dir = Path(workdir) / "ranks"

        def watch():
            shown = None
            while not done.wait(every_s):
                doc = phases.read_progress(rank_dir)
                if doc and doc.get("step") != shown:
                    shown = doc.get("step")
                    err.print(progress_line(doc), markup=False, highlight=False)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            return measure(point, workdir)
        finally:
            done.set()
            watcher.join()

    return run


def progress_line(doc: dict) -> str:
    """'  step 450 (epoch 1.00): accuracy 0.6312, 31.2 s of training, 4.1 s of evaluation so far'."""
    return (
        f"  step {doc.get('step')} (epoch {doc.get('epoch', 0):.2f}): accuracy {doc.get('val_accuracy', 0):.4f}, "
        f"{doc.get('train_s', 0):.1f} s of training, {doc.get('eval_s', 0):.1f} s of evaluation so far"
    )


LAUNCH_S = (6, 36)
"""Seconds a run costs besides training and evaluation on CPU workers (start, imports, data, teardown): the
range of a point's launch and teardown in docs/benchmarks.md's wall-time table."""


def budget_note(o: ConvergeOptions, runs: list, meta: dict) -> str:
    """Before anything runs: how many runs, what bounds each, and that evaluation comes on top of the training
    time; with --max-time, the most the sweep can take."""
    largest = max((p.config.world_size for p in runs), default=1)
    per_epoch = max(1, meta["train"] // (o.batch_size * largest))
    steps = o.max_epochs * per_epoch if o.max_steps is None else min(o.max_steps, o.max_epochs * per_epoch)
    bound = f"{o.max_epochs} epoch(s) ({steps} steps at N={largest})"
    if o.max_steps is not None:
        bound = f"{steps} steps"
    evals = 1 + max(1, math.ceil(min(o.max_epochs, steps / per_epoch) / o.eval_every_epochs))  # one before training
    line = (
        f"{len(runs)} run(s), each training up to {bound}"
        + (" (or until the target, --stop-at-target)" if o.stop_at_target else "")
        + f"; evaluation over the {meta['val']} held-out samples, up to {evals} time(s) a run (one before training), "
        "is timed apart and comes on top"
    )
    if o.max_time_s is None:
        return line + "; no time bound: --max-time S bounds each run's training"
    lo, hi = (len(runs) * (o.max_time_s + s) for s in LAUNCH_S)
    return line + f"; at most about {lo / 60:.0f}-{hi / 60:.0f} min of training and launch, plus evaluation"


def _options_doc(o: ConvergeOptions) -> dict:
    """The sweep's stored options: converge's own settings, the model and the training section (its seed stored as
    `first_seed`, the first of the seeds)."""
    common = {f.name for f in dataclasses.fields(Workload)}
    own = [f.name for f in dataclasses.fields(ConvergeOptions) if f.name not in common and f.name != "strategies"]
    doc = {k: getattr(o, k) for k in ("model", *own)}
    doc.update({k: getattr(o, k) for k in OPTIMIZER if k != "seed"}, first_seed=o.seed)
    doc["strategies"] = [s.name for s in o.strategies]
    return doc


def _line(record: dict) -> str:
    c = record.get("converge")
    if record["status"] != "ok" or not c:
        return f"{record['status']}: {record.get('reason') or ''}".strip()
    if c["reached"]:
        return (
            f"reached {c['target_accuracy']:g} at step {c['steps_to_target']:.1f} (epoch {c['epochs_to_target']:.2f}, "
            f"{c['train_s_to_target']:.2f} s training); final accuracy {c['final_accuracy']:.4f}"
        )
    return f"did not converge within the budget ({c['stop_reason']}); final accuracy {c['final_accuracy']:.4f}"


def render_table(summary: list[dict], target: float):
    table = output.table(
        f"time to {target:g} validation accuracy (mean over the seeds; >= 3 runs: fastest and slowest dropped, a "
        "run that did not converge counts as the slowest: MLPerf)",
        (
            "strategy",
            "N",
            "global batch",
            "peak LR",
            "converged",
            "epochs to target",
            "time to target s (min-max)",
            "time speedup [95% CI]",
            "throughput speedup",
            "final acc (sd)",
        ),
    )
    for r in summary:
        speed, time_text = speed_and_time_cells(r)
        table.add_row(
            r["strategy"],
            str(r["world_size"]),
            str(r["global_batch"]),
            fmt((r.get("lr") or {}).get("peak_lr"), ".3g"),
            f"{r['converged']}/{r['runs']}",
            fmt(r["epochs_to_target"], ".2f"),
            time_text,
            speed,
            fmt(r.get("throughput_speedup"), ".2f"),
            f"{fmt(r['final_accuracy'], '.4f')} ({fmt(r['final_accuracy_std'], '.4f')})",
        )
    return table


def equivalence_lines(summary: list[dict]) -> list[str]:
    lines = []
    for r in summary:
        if r.get("equivalence") in ("different", "inconclusive"):
            flag = "FLAGGED " if r["equivalence"] == "different" else ""
            lines.append(f"{flag}{r['strategy']} N={r['world_size']}: {r['equivalence_note']}")
        if r["verdict"] != "converged":
            lines.append(f"{r['strategy']} N={r['world_size']}: {r['verdict']}")
        if r["failed"]:
            lines.append(f"{r['strategy']} N={r['world_size']}: {r['failed']} run(s) failed (counted as not converged)")
        if r.get("time_speedup_note"):
            lines.append(f"{r['strategy']} N={r['world_size']}: {r['time_speedup_note']}")
    lines.append(
        "time speedup: the baseline's (N=1) time to target / this one's (MLPerf means), 95% Welch t-interval on log "
        "times over "
        "the seeds (run to run; only where every run converged); throughput speedup: training samples per second "
        "against the same baseline"
    )
    return lines

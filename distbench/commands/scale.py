"""`distbench scale` (a sweep over strategies and device counts) and `distbench run` (one point)."""
from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.markup import escape

from distbench.commands import options as opt
from distbench.errors import BadInput
from distbench.models.specs import model_names
from distbench.output import json_document, print_summary
from distbench.plan import SweepOptions, make_plan, parse_gpus
from distbench.store import DEFAULT_PATH, Store
from distbench.strategies import parse_strategies, strategy_names
from distbench.sweep import command_line, run_plan


def _parse_percent(ctx, param, value):
    text = str(value).strip()
    try:
        number = float(text.rstrip("%"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a percentage such as 2%") from None
    if not 0 <= number < 100:
        raise click.BadParameter(f"{text!r} must be between 0% and 100%")
    return number / 100.0


def _ok_detail(record: dict) -> str:
    """'12.3 samples/s, 95% CI 12.1..12.5 (within-run ...), stopped at --max-time' for a progress line."""
    text = f"{record['throughput']:.2f} samples/s"
    if record.get("throughput_ci_low") is not None and record.get("throughput_ci_high") is not None:
        text += f", 95% CI {record['throughput_ci_low']:.2f}..{record['throughput_ci_high']:.2f}"
    else:
        text += f", no CI ({record.get('measured_steps')} steps; --repeats 2 gives a run-to-run CI)"
    rule = (record.get("stopping") or {}).get("rule")
    if rule in ("max_time", "max_steps"):
        text += f", stopped at --{rule.replace('_', '-')} before the CI target"
    return text


def workload_options(fn):
    """Options shared by `scale` and `run`, so both accept exactly the same workload knobs."""
    options = [
        click.option("--model", default="resnet50", show_default=True,
                     help=f"Model to train: {', '.join(model_names())}."),
        click.option("--strategy", "strategy", multiple=True, metavar="NAME[,NAME]",
                     help=f"Strategies to run (repeatable or comma list): {', '.join(strategy_names())}. "
                          "Default: all."),
        click.option("--batch-size", default=None, callback=opt.batch_list, metavar="B[,B]",
                     help="Per-device batch (weak scaling) or global batch (strong); a comma list sweeps them "
                          "(an 'oom' batch skips the larger ones). Default: 32 on GPUs, 8 on CPU workers."),
        click.option("--scaling", type=click.Choice(["weak", "strong"]), default="weak", show_default=True,
                     help="weak: per-device batch fixed; strong: global batch fixed and divided among N."),
        click.option("--image-size", type=opt.IMAGE_SIZE, default=None,
                     help="Input side in pixels. Default: the model's (224) on GPUs, 64 on CPU workers."),
        click.option("--seq-len", type=opt.SEQ_LEN, default=None,
                     help="Token models (bert_base, lstm): sequence length. Default: the model's (64 at most on CPU)."),
        click.option("--num-classes", type=opt.NUM_CLASSES, default=1000, show_default=True,
                     help="Classifier width of classification models."),
        click.option("--precision", type=click.Choice(["fp32", "amp", "bf16"]), default="fp32", show_default=True,
                     help="fp32; amp = float16 autocast + loss scaling (GPUs); bf16 = bfloat16 autocast / Keras "
                          "mixed_bfloat16 (CPU and GPU)."),
        click.option("--compile", "compile_", is_flag=True, help="torch.compile the model (torch strategies)."),
        click.option("--xla", is_flag=True, help="tf.function(jit_compile=True) (tf, mirrored)."),
        click.option("--channels-last", is_flag=True, help="torch.channels_last memory format (torch, image models)."),
        click.option("--tf32/--no-tf32", default=True, show_default=True,
                     help="GPUs: TF32 tensor-core math for float32 matmuls and convolutions, the same in both "
                          "frameworks (on is TF's default and torch's for convolutions); cuDNN autotuning is on "
                          "in both. Recorded per point; verify always runs without TF32."),
        click.option("--data", type=click.Choice(["synthetic", "disk"]), default="synthetic", show_default=True,
                     help="synthetic: tensors made once on the device; disk: a cached synthetic dataset read every "
                          "step by DataLoader / tf.data, reporting the share of step time spent waiting for data."),
        click.option("--dataset-size", type=click.IntRange(1, 10_000_000), default=512, show_default=True,
                     help="Samples in the --data disk dataset (written once to ~/.cache/distbench/data)."),
        click.option("--loader-workers", type=click.IntRange(0, 256), default=2, show_default=True,
                     help="--data disk: DataLoader workers / tf.data parallel map calls per process."),
        click.option("--prefetch", type=click.IntRange(0, 1024), default=2, show_default=True,
                     help="--data disk: DataLoader prefetch_factor / tf.data prefetch depth."),
        click.option("--pin-memory/--no-pin-memory", default=True, show_default=True,
                     help="--data disk: DataLoader pinned host memory (GPUs only)."),
        click.option("--steps", type=opt.STEPS, default=None,
                     help="Measured steps per point (after warmup). Default: 50 on GPUs, 10 on CPU."),
        click.option("--warmup", type=opt.WARMUP, default=None,
                     help="Unmeasured warmup steps (tracing, compilation). Default: 5 on GPUs, 3 on CPU."),
        click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
                     help="auto uses the visible CUDA GPUs (points needing more are skipped), CPU workers when "
                          "none is visible."),
        click.option("--timeout", type=opt.SECONDS, default=900.0, show_default=True,
                     help="Seconds before a point is killed and recorded as 'timeout'."),
        click.option("--seed", type=opt.SEED, default=0, show_default=True),
        click.option("--results", type=click.Path(dir_okay=False), default=str(DEFAULT_PATH), show_default=True,
                     help="SQLite results store; every point is committed as soon as it finishes."),
        click.option("--repeats", type=click.IntRange(1, 1000), default=1, show_default=True,
                     help="Run each point this many times (fresh processes); report the median and a 95% CI."),
        click.option("--target-ci", "target_ci", default="2%", show_default=True, callback=_parse_percent,
                     help="Adaptive stopping: keep measuring a point past --steps until the 95% CI half-width "
                          "of throughput is within this (e.g. 2%), or --max-time runs out. 0 turns it off."),
        click.option("--max-time", type=opt.FiniteFloatRange(0, 86400), default=None,
                     help="Seconds of measured steps after which adaptive stopping gives up (per point and repeat). "
                          "Default: 30 on GPUs, 15 on CPU workers."),
        click.option("--comm/--no-comm", default=True, show_default=True,
                     help="At N > 1 also run the independent (no-sync) variant and a standalone all-reduce, "
                          "to report exposed communication and overlap."),
        click.option("--noisy-cv", type=opt.FiniteFloatRange(0, 10, min_open=True), default=0.10, show_default=True,
                     help="Flag a point 'noisy' when its step-time coefficient of variation exceeds this."),
        click.option("--telemetry-interval", type=opt.FiniteFloatRange(0, 3600), default=0.5, show_default=True,
                     help="Seconds between telemetry samples (NVML per GPU, psutil per CPU worker); 0 turns it off."),
        click.option("--records-dir", type=click.Path(file_okay=False), default=None,
                     help="Also write each finished point's result record as JSON into this folder "
                          "(e.g. shared storage on a cluster; `distbench collect` merges them)."),
        click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
                     help="json prints one JSON document (a list of points) to stdout."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


REPLAYED = ("gpus_text", "nodes_text", "add_baselines", "model", "strategy", "batch_size", "scaling", "image_size", "num_classes",
            "steps", "warmup", "device", "timeout", "seed", "repeats", "target_ci", "max_time", "comm", "noisy_cv",
            "telemetry_interval", "seq_len", "precision", "compile_", "xla", "channels_last", "data", "dataset_size",
            "loader_workers", "prefetch", "pin_memory", "tf32")
"""The options a sweep stores so `--resume` can run its missing points exactly as planned."""


def _resume(sweep_id: str, results: str, fmt: str, records_dir, timeout: float | None = None) -> None:
    store = Store(results)
    try:
        options = json.loads(store.sweep(sweep_id)["options_json"] or "{}")
    finally:
        store.close()
    replay = options.get("replay")
    if not replay:
        raise BadInput(f"sweep {sweep_id} was not made by `distbench scale` (nothing to resume)")
    replay["strategy"] = tuple(replay["strategy"])
    if timeout is not None:  # e.g. resuming points that timed out, with more time
        replay["timeout"] = timeout
    _execute(**replay, results=results, fmt=fmt, records_dir=records_dir, resume=sweep_id)


def _execute(*, gpus_text: str, add_baselines: bool, nodes_text: str = "1", model, strategy, batch_size, scaling, image_size,
             num_classes, steps, warmup, device, timeout, seed, results, records_dir, fmt, repeats, target_ci,
             max_time, comm, noisy_cv, telemetry_interval, seq_len, precision, compile_, xla,
             channels_last, data, dataset_size, loader_workers, prefetch, pin_memory, tf32=True,
             resume=None) -> None:
    replay = {k: v for k, v in locals().items() if k in REPLAYED}
    batch_size = (batch_size,) if isinstance(batch_size, int) else batch_size and tuple(batch_size)  # old sweeps: int
    gpus = parse_gpus(gpus_text)
    strategies = parse_strategies(strategy)
    opts = SweepOptions(model=model, gpus=gpus, nodes=tuple(parse_gpus(nodes_text, "--nodes", "node")), strategies=strategies, device=device, batch_size=batch_size,
                        scaling=scaling, image_size=image_size, num_classes=num_classes, steps=steps,
                        warmup=warmup, timeout=timeout, seed=seed, add_baselines=add_baselines, comm=comm,
                        target_ci=target_ci, max_time=max_time, seq_len=seq_len, precision=precision,
                        compile=compile_, xla=xla, channels_last=channels_last, data=data,
                        dataset_size=dataset_size, loader_workers=loader_workers, prefetch=prefetch,
                        pin_memory=pin_memory, tf32=tf32)
    plan = make_plan(opts)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 160) if fmt == "table" else err
    store = Store(results)
    for note in plan.notes:
        err.print(f"[dim]note:[/] {escape(note)}")
    if data == "disk":
        from distbench import datasets

        cfg = plan.points[0].config
        datasets.ensure_dataset(model, image_size=cfg.image_size, seq_len=cfg.seq_len,
                                num_classes=cfg.num_classes, samples=dataset_size, seed=seed)

    def progress(phase, i, total, point, record):
        name = f"{point.strategy.name} N={point.config.world_size}" + (
            f" batch {point.config.swept_batch}" if batch_size and len(batch_size) > 1 else "")
        if phase == "kept":
            err.print(f"[{i}/{total}] {name}: kept from sweep {resume} ({record['status']})", markup=False)
        elif phase == "start":
            err.print(f"[{i}/{total}] {name} ...", end=" " if err.is_terminal else "\n", markup=False)
        else:
            status = record["status"]
            detail = (_ok_detail(record) if status == "ok"
                      else (record.get("reason") or "") + (f" (logs: {record['workdir']})" if record.get("workdir") else ""))
            prefix = "" if err.is_terminal else f"[{i}/{total}] {name}: "
            err.print(f"{prefix}{status} {detail}".rstrip(), markup=False)

    options = {"model": model, "gpus": gpus, "strategies": [s.name for s in strategies], "batch_size": batch_size,
               "scaling": scaling, "image_size": image_size, "num_classes": num_classes, "steps": steps,
               "warmup": warmup, "device": device, "resolved_device": plan.device.device, "timeout": timeout,
               "seed": seed, "repeats": repeats, "target_ci": target_ci, "max_time": max_time, "comm": comm,
               "noisy_cv": noisy_cv, "telemetry_interval": telemetry_interval, "seq_len": seq_len,
               "precision": precision, "compile": compile_, "xla": xla, "channels_last": channels_last, "data": data,
               "dataset_size": dataset_size, "loader_workers": loader_workers, "prefetch": prefetch,
               "pin_memory": pin_memory, "tf32": tf32, "replay": dict(replay, strategy=list(strategy))}
    try:
        sweep_id, records = run_plan(plan, store, command=command_line(), options=options, timeout_s=timeout,
                                     progress=progress, records_dir=records_dir, repeats=repeats, resume=resume,
                                     noisy_cv=noisy_cv, telemetry_interval_s=telemetry_interval)
    finally:
        store.close()
    if fmt == "json":
        sys.stdout.write(json_document(records, extra_fields=("peak_memory_bytes", "peak_memory_source",
                                                              "after_oom")) + "\n")
    else:
        print_summary(out, records, [], sweep_id, results)


@click.command()
@click.option("--gpus", "gpus_text", default="1,2,4", show_default=True,
              help="Comma list of device counts to measure, e.g. 1,2,4.")
@click.option("--nodes", "nodes_text", default="1", show_default=True,
              help="Comma list of node counts. Values > 1 run multi-node points (N devices over K nodes, K dividing N) "
                   "inside the current Slurm allocation; to submit jobs instead use `distbench slurm`.")
@click.option("--resume", default=None, metavar="SWEEP",
              help="Finish an interrupted or partly failed sweep: re-run only its missing or failed points, "
                   "with the options it was started with ('latest' for the newest sweep); --timeout may be raised.")
@workload_options
def scale(gpus_text, nodes_text, resume, **kwargs):
    """Sweep strategies over device counts and report throughput, speedup and efficiency.

    Each (strategy, N) point runs in a fresh process tree launched the way users launch it
    (torchrun for ddp, horovodrun for Horovod), plus each framework's single-device baseline.

    Example: distbench scale --gpus 1,2,4 --model resnet50
    """
    if resume:
        if resume == "latest":
            with Store(kwargs["results"]) as store:
                recent = store.sweeps(1)
            if not recent:
                raise BadInput(f"no sweeps in {kwargs['results']} to resume")
            resume = recent[0]["id"]
        source = click.get_current_context().get_parameter_source("timeout")
        given = kwargs["timeout"] if source == click.core.ParameterSource.COMMANDLINE else None
        _resume(resume, kwargs["results"], kwargs["fmt"], kwargs["records_dir"], given)
        return
    _execute(gpus_text=gpus_text, nodes_text=nodes_text, add_baselines=True, **kwargs)


@click.command()
@click.option("--gpus", "gpus_text", default="1", show_default=True, help="Device count for this point.")
@workload_options
def run(gpus_text, **kwargs):
    """Run one point (one strategy at one device count) with the same options and output as scale.

    Example: distbench run --strategy ddp --gpus 2 --model resnet50
    """
    gpus = parse_gpus(gpus_text)
    if len(gpus) != 1:
        raise BadInput(f"run measures one point: --gpus takes one count, got {gpus_text!r} (use `distbench scale`)")
    strategies = parse_strategies(kwargs["strategy"])
    if len(strategies) != 1:
        raise BadInput("run measures one point: give exactly one --strategy (use `distbench scale` for several)")
    if kwargs["batch_size"] and len(kwargs["batch_size"]) != 1:
        raise BadInput("run measures one point: --batch-size takes one value (use `distbench scale` for several)")
    _execute(gpus_text=gpus_text, add_baselines=False, **kwargs)

"""What the commands share: click types with an allowed range (a value outside it is a one-line error naming
the flag and the range, exit 2), options declared alike, consoles, `new_sweep`; and WORKLOAD, the click side
of SweepOptions."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import tempfile
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from distbench.config import DATA_SOURCES, DEVICES, PRECISIONS, SCALINGS
from distbench.errors import BadInput
from distbench.launch import run_point
from distbench.models.specs import model_names
from distbench.output import table  # noqa: F401 - the commands' one table builder (opt.table)
from distbench.record import base_record
from distbench.plan import INSTALL_HINT, MAX_BATCH, SweepOptions, _missing_modules, flag, parse_counts
from distbench.store import DEFAULT_PATH, Store
from distbench.strategies import strategy_names
from distbench.sweep import command_line, recorded_sweep


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan (which passes every comparison) and infinities."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not in the range {self._describe_range()}.", param, ctx)
        return number


SECONDS = FiniteFloatRange(0, 7 * 86400, min_open=True)
WARMUP = click.IntRange(1, 100_000)  # at least 1: tracing and compilation must not land in a measured step
BATCH = click.IntRange(1, MAX_BATCH)


def batch_list(ctx, param, value):
    """--batch-size '16,32,64' -> (16, 32, 64) (one value is a list of one); None stays None."""
    return None if value is None else tuple(parse_counts(str(value), "--batch-size", "batch size", MAX_BATCH))


def percent(ctx, param, value):
    """--target-ci '2%' (or '2') -> 0.02."""
    text = str(value).strip()
    try:
        number = float(text.rstrip("%"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a percentage such as 2%") from None
    if not 0 <= number < 100:
        raise click.BadParameter(f"{text!r} must be between 0% and 100%")
    return number / 100.0


def option(*decls: str, **attrs):
    """click.option that shows its default in --help."""
    return click.option(*decls, **{"show_default": True, **attrs})


def results_option(help: str = "SQLite results store."):
    return option("--results", type=click.Path(dir_okay=False), default=str(DEFAULT_PATH), help=help)


def format_option(help: str):
    return option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", help=help)


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def out_console() -> Console:
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def print_notes(err: Console, notes) -> None:
    for note in notes:
        err.print(f"[dim]note:[/] {escape(note)}")


@dataclasses.dataclass
class NewSweep:
    store: Store
    id: str
    workdir: Path
    """A fresh scratch folder for the points' work."""
    records: list[dict] = dataclasses.field(default_factory=list)

    def keep(self, record: dict) -> None:
        """Commit `record` as a point of this sweep and collect it in `records`."""
        record["sweep_id"] = self.id
        record["point_id"] = self.store.add_point(self.id, record)
        self.records.append(record)


@contextlib.contextmanager
def new_sweep(results: str, kind: str, options: dict, notes: list[str]):
    """A new sweep in the --results store for the duration of a `with` block (see recorded_sweep)."""
    with Store(results) as store, recorded_sweep(store, command=command_line(), options=options, notes=notes) as sid:
        yield NewSweep(store, sid, Path(tempfile.mkdtemp(prefix=f"distbench-{kind}-{sid}-")))


def run_or_skip(strategy, cfg, workdir: Path, timeout_s: float, skip: str | None, telemetry_interval_s=0.0) -> dict:
    """run_point, or a 'skipped' record with the reason `skip` when that is set."""
    if skip:
        return base_record(
            cfg.to_dict(), strategy=strategy.name, framework=strategy.framework, status="skipped", reason=skip
        )
    return run_point(strategy, cfg, workdir, timeout_s, telemetry_interval_s)


def checked(fn, *args, **kwargs):
    """fn(...) with a ValueError from it (the library's message, naming the flag) raised as BadInput."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def not_installed(strategy) -> str | None:
    """Why `strategy` cannot run here: the modules it needs that are missing (None: none is)."""
    missing = _missing_modules(strategy)
    return f"{', '.join(missing)} is not installed: {INSTALL_HINT}" if missing else None


def _spec(*decls: str, slurm: bool = False, **attrs) -> tuple[tuple[str, ...], bool, dict]:
    return decls, slurm, attrs


WORKLOAD = {
    "model": _spec(slurm=True, help=f"Model to train: {', '.join(model_names())}."),
    "strategies": _spec(
        slurm=True,
        multiple=True,
        metavar="NAME[,NAME]",
        show_default=False,
        help=f"Strategies to run (repeatable or comma list): {', '.join(strategy_names())}, or a group: "
        "core, wrappers, sharded, engines, all. Default: core (the wrapper, sharded and engine strategies "
        "run when named).",
    ),
    "batch_size": _spec(
        slurm=True,
        callback=batch_list,
        metavar="B[,B]",
        help="Per-device batch (weak scaling) or global batch (strong); a comma list sweeps them "
        "(an 'oom' batch skips the larger ones). Default: 32 on GPUs, 8 on CPU workers.",
    ),
    "scaling": _spec(
        slurm=True,
        type=click.Choice(SCALINGS),
        help="weak: per-device batch fixed; strong: global batch fixed and divided among N.",
    ),
    "image_size": _spec(
        slurm=True,
        type=click.IntRange(1, 8192),
        help="Input side in pixels. Default: the model's (224) on GPUs, 64 on CPU workers.",
    ),
    "seq_len": _spec(
        type=click.IntRange(1, 65536),
        help="Token models (bert_base, lstm): sequence length. Default: the model's (64 at most on CPU).",
    ),
    "num_classes": _spec(
        slurm=True, type=click.IntRange(2, 1_000_000), help="Classifier width of classification models."
    ),
    "precision": _spec(
        slurm=True,
        type=click.Choice(PRECISIONS),
        help="fp32; amp = float16 autocast + loss scaling (GPUs); bf16 = bfloat16 autocast / Keras "
        "mixed_bfloat16 (CPU and GPU).",
    ),
    "compile": _spec(slurm=True, is_flag=True, help="torch.compile the model (torch strategies)."),
    "xla": _spec(slurm=True, is_flag=True, help="tf.function(jit_compile=True) (tf, mirrored)."),
    "channels_last": _spec(slurm=True, is_flag=True, help="torch.channels_last memory format (torch, image models)."),
    "tf32": _spec(
        "--tf32/--no-tf32",
        slurm=True,
        help="GPUs: TF32 tensor-core math for float32 matmuls and convolutions, the same in both "
        "frameworks (on is TF's default and torch's for convolutions); cuDNN autotuning is on "
        "in both. Recorded per point; verify always runs without TF32.",
    ),
    "data": _spec(
        type=click.Choice(DATA_SOURCES),
        help="synthetic: tensors made once on the device; disk: a cached synthetic dataset read every "
        "step by DataLoader / tf.data, reporting the share of step time spent waiting for data.",
    ),
    "dataset_size": _spec(
        type=click.IntRange(1, 10_000_000),
        help="Samples in the --data disk dataset (written once to ~/.cache/distbench/data).",
    ),
    "loader_workers": _spec(
        type=click.IntRange(0, 256),
        help="--data disk: DataLoader workers / tf.data parallel map calls per process.",
    ),
    "prefetch": _spec(
        type=click.IntRange(0, 1024),
        help="--data disk: DataLoader prefetch_factor / tf.data prefetch depth.",
    ),
    "pin_memory": _spec("--pin-memory/--no-pin-memory", help="--data disk: DataLoader pinned host memory (GPUs only)."),
    "steps": _spec(
        slurm=True,
        type=click.IntRange(1, 1_000_000),
        help="Measured steps per point (after warmup). Default: 50 on GPUs, 10 on CPU.",
    ),
    "warmup": _spec(
        slurm=True,
        type=WARMUP,
        help="Unmeasured warmup steps (tracing, compilation). Default: 5 on GPUs, 3 on CPU.",
    ),
    "device": _spec(
        type=click.Choice(DEVICES),
        help="auto uses the visible CUDA GPUs (points needing more are skipped), CPU workers when none is visible.",
    ),
    "timeout": _spec(slurm=True, type=SECONDS, help="Seconds before a point is killed and recorded as 'timeout'."),
    "seed": _spec(slurm=True, type=click.IntRange(0, 2**32 - 1)),
    "repeats": _spec(
        type=click.IntRange(1, 1000),
        help="Run each point this many times (fresh processes); report the median and a 95% CI.",
    ),
    "target_ci": _spec(
        slurm=True,
        default="2%",
        callback=percent,
        help="Adaptive stopping: keep measuring a point past --steps until the 95% CI half-width "
        "of throughput is within this (e.g. 2%), or --max-time runs out. 0 turns it off.",
    ),
    "max_time": _spec(
        slurm=True,
        type=FiniteFloatRange(0, 86400),
        help="Seconds of measured steps after which adaptive stopping gives up (per point and "
        "repeat). Default: 30 on GPUs, 60 on CPU workers.",
    ),
    "comm": _spec(
        "--comm/--no-comm",
        help="At N > 1 also run the independent (no-sync) variant and a standalone all-reduce, "
        "to report exposed communication and overlap.",
    ),
    "noisy_cv": _spec(
        type=FiniteFloatRange(0, 10, min_open=True),
        help="Flag a point 'noisy' when its step-time coefficient of variation exceeds this.",
    ),
    "telemetry_interval": _spec(
        type=FiniteFloatRange(0, 3600),
        help="Seconds between telemetry samples (NVML per GPU, psutil per CPU worker); 0 turns it off.",
    ),
    "ray_address": _spec(
        metavar="auto|ray://HOST:PORT|HOST:PORT",
        help="Ray strategies (ray-ddp) only: run on this existing Ray cluster. Default: a local Ray head "
        "started for each point and stopped after it.",
    ),
}
"""The click option of each SweepOptions field a user sets (field name -> flags, default plan.flag(field);
whether `distbench slurm` takes it too; click attributes). It defaults to the field's default."""


def workload_option(name: str, **attrs):
    """The WORKLOAD option of field `name` (`attrs` override its click attributes)."""
    decls, _, spec = WORKLOAD[name]
    return option(*(decls or [flag(name)]), name, **{"default": _DEFAULTS[name], **spec, **attrs})


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SweepOptions)}


def workload_options(*, slurm: bool = False):
    """Decorator: the WORKLOAD options (only those marked for Slurm jobs when `slurm`), in field order, so
    `scale`, `run` and `slurm` accept them with the same names, defaults and help."""
    chosen = [name for name in _DEFAULTS if name in WORKLOAD and (WORKLOAD[name][1] or not slurm)]

    def decorate(fn):
        for name in reversed(chosen):  # click lists options in the order their decorators are written
            fn = workload_option(name)(fn)
        return fn

    return decorate

"""Every knob a user can set, declared once: its default, flag, help, range, whether it is part of a point's
identity, whether a Slurm/Kubernetes job takes it, and its default per device.

Two dataclasses hold them, in the style of a job-config tree:

  Workload      what is trained (model, input, math, data pipeline, seed): the point's identity
  Measurement   how long and how carefully it is measured (steps, warmup, CI target, repeats, timeouts)

`plan.SweepOptions` is the sweep's axes (device counts, nodes, strategies, batch sizes, device) plus these two;
`config.PointConfig` is one point plus the Workload plus the settings the plan resolved for it. From the
declaration come the click options (commands/options.py), the checks (`check`), the defaults per device
(`device_default`) and what identifies a point (`identity_fields`, used by config.point_key). A new flag is
one field here plus its use in the worker.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from distbench.core.errors import BadInput
from distbench.models.specs import model_names

SCALINGS = ("weak", "strong")
PRECISIONS = ("fp32", "amp", "bf16")
DATA_SOURCES = ("synthetic", "disk")
DEVICES = ("auto", "cuda", "cpu")
MAX_BATCH = 1 << 20


@dataclass(frozen=True)
class Knob:
    """A field's declaration beyond its type and default (dataclass field metadata["knob"])."""

    help: str = ""
    flag: str | None = None
    """Its command-line flag(s), e.g. '--tf32/--no-tf32'; default: --name-in-kebab-case."""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    """The value must lie in [low, high] ((low, high] when low_open); also refuses nan and infinities."""
    choices: tuple[str, ...] | None = None
    identity: bool | str = True
    """Part of what identifies a point (config.point_key); 'disk': only when the data comes from disk."""
    jobs: bool = False
    """`distbench slurm` and `distbench k8s` take it too (it means the same inside a cluster job)."""
    by_device: dict[str, Any] | None = None
    """Its value when not given (None), per resolved device ('cuda', 'cpu'): `device_default`."""
    parse: str | None = None
    """How the CLI reads it beyond its type: 'percent' ('2%' -> 0.02), 'counts' ('16,32' -> (16, 32)), 'lengths'
    ('128' -> 128, '128,256' -> (128, 256): a list only where the command sweeps it)."""
    cli: dict = field(default_factory=dict)
    """More click attributes (is_flag, multiple, metavar, show_default)."""
    command_only: bool = False
    """Each command declares this flag itself (own help and default), e.g. --gpus."""
    trains: bool = False
    """The training section (OPTIMIZER): every command that trains takes it, and means the same by it. `scale`,
    `run`, `slurm` and `k8s` take every Workload knob; `verify` and `converge` take this section whole."""


def knob(default=dataclasses.MISSING, *, factory=dataclasses.MISSING, **kw) -> Any:
    """A dataclass field with its Knob (no default: a required field; `factory`: a default made per instance)."""
    return field(default=default, default_factory=factory, metadata={"knob": Knob(**kw)})


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What is trained: together with the strategy, N, nodes and batch size, a point's identity."""

    model: str = knob("resnet50", jobs=True, help=f"Model to train: {', '.join(model_names())}.")
    device: str = knob(
        "auto",
        choices=DEVICES,
        help="auto uses the visible CUDA GPUs (points needing more are skipped), CPU workers when none is visible.",
    )
    scaling: str = knob(
        "weak",
        choices=SCALINGS,
        jobs=True,
        help="weak: per-device batch fixed; strong: global batch fixed and divided among N.",
    )
    image_size: int | None = knob(
        None,
        low=1,
        high=8192,
        jobs=True,
        by_device={"cuda": None, "cpu": 64},  # CPU: at least the model's smallest side; None: the model's
        help="Input side in pixels. Default: the model's (224) on GPUs, 64 on CPU workers.",
    )
    seq_len: int | None = knob(
        None,
        low=1,
        high=65536,
        jobs=True,
        parse="lengths",
        cli={"metavar": "S[,S]"},
        help="Token models (bert_base, lstm, gpt2, llama): sequence length; `scale` sweeps a comma list of them. "
        "Default: the model's (64 at most on CPU).",
    )
    model_size: str | None = knob(
        None,
        jobs=True,
        by_device={"cuda": None, "cpu": "tiny"},
        help="Decoder models (gpt2, llama): the size, e.g. 124m, 350m, or l<layers>-d<hidden>-h<heads>[-kv<n>] "
        "(`distbench models` lists them). Default: the model's (gpt2 124m, llama 125m) on GPUs, tiny on CPU workers.",
    )
    activation_checkpointing: bool = knob(
        False,
        jobs=True,
        cli={"is_flag": True},
        help="Recompute each decoder block's activations in the backward pass (torch strategies, gpt2 and llama).",
    )
    shard_group: int | None = knob(
        None,
        low=1,
        high=1 << 20,
        jobs=True,
        help="fsdp-hybrid: ranks per shard group (parameters, gradients and optimizer state sharded within a "
        "group, replicated across groups, as hybrid sharding does within and across nodes). Default: the ranks "
        "per node (N / --nodes); on one machine e.g. 2 runs N=4 as 2 groups of 2.",
    )
    num_classes: int = knob(1000, low=2, high=1_000_000, jobs=True, help="Classifier width of classification models.")
    precision: str = knob(
        "fp32",
        choices=PRECISIONS,
        jobs=True,
        help="fp32; amp = float16 autocast + loss scaling (GPUs); bf16 = bfloat16 autocast / Keras "
        "mixed_bfloat16 (CPU and GPU).",
    )
    compile: bool = knob(False, jobs=True, cli={"is_flag": True}, help="torch.compile the model (torch strategies).")
    xla: bool = knob(False, jobs=True, cli={"is_flag": True}, help="tf.function(jit_compile=True) (tf, mirrored).")
    channels_last: bool = knob(
        False, jobs=True, cli={"is_flag": True}, help="torch.channels_last memory format (torch, image models)."
    )
    data: str = knob(
        "synthetic",
        choices=DATA_SOURCES,
        help="synthetic: tensors made once on the device; disk: a cached synthetic dataset read every "
        "step by DataLoader / tf.data, reporting the share of step time spent waiting for data.",
    )
    loader_workers: int = knob(
        2,
        low=0,
        high=256,
        identity="disk",
        help="--data disk: DataLoader workers / tf.data parallel map calls per process.",
    )
    prefetch: int = knob(
        2, low=0, high=1024, identity="disk", help="--data disk: DataLoader prefetch_factor / tf.data prefetch depth."
    )
    pin_memory: bool = knob(
        True,
        flag="--pin-memory/--no-pin-memory",
        identity="disk",
        help="--data disk: DataLoader pinned host memory (GPUs only).",
    )
    seed: int = knob(
        0,
        low=0,
        high=2**32 - 1,
        jobs=True,
        trains=True,
        identity=False,
        help="Random seed of the weights and the data.",
    )
    lr: float = knob(
        0.01,
        low=0,
        high=10,
        low_open=True,
        jobs=True,
        trains=True,
        help="SGD learning rate (every strategy's optimizer).",
    )
    momentum: float = knob(
        0.9, low=0, high=1, jobs=True, trains=True, help="SGD momentum (every strategy's optimizer)."
    )
    tf32: bool = knob(
        True,
        flag="--tf32/--no-tf32",
        jobs=True,
        help="GPUs: TF32 tensor-core math for float32 matmuls and convolutions, the same in both "
        "frameworks (on is TF's default and torch's for convolutions); cuDNN autotuning is on "
        "in both. Recorded per point; verify always runs without TF32.",
    )

    @property
    def workload(self) -> "Workload":
        """Just the Workload part (of a SweepOptions or PointConfig)."""
        return Workload(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Workload)})


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """How a sweep measures its points (None: the device's default, `device_default`)."""

    steps: int | None = knob(
        None,
        low=1,
        high=1_000_000,
        jobs=True,
        identity=False,
        by_device={"cuda": 50, "cpu": 10},
        help="Measured steps per point (after warmup). Default: 50 on GPUs, 10 on CPU.",
    )
    warmup: int | None = knob(
        None,
        low=1,  # at least 1: tracing and compilation must not land in a measured step
        high=100_000,
        jobs=True,
        identity=False,
        by_device={"cuda": 5, "cpu": 3},
        help="Unmeasured warmup steps (tracing, compilation). Default: 5 on GPUs, 3 on CPU.",
    )
    timeout: float = knob(
        900.0,
        low=0,
        high=7 * 86400,
        low_open=True,
        jobs=True,
        identity=False,
        help="Seconds before a point is killed and recorded as 'timeout'.",
    )
    repeats: int = knob(
        1,
        low=1,
        high=1000,
        jobs=True,
        identity=False,
        help="Run each point this many times (fresh processes); report the median and a 95% CI.",
    )
    target_ci: float = knob(
        0.02,
        low=0,
        high=1,
        jobs=True,
        identity=False,
        parse="percent",
        cli={"default": "2%"},
        help="Adaptive stopping: keep measuring a point past --steps until the 95% CI half-width "
        "of throughput is within this (e.g. 2%), or --max-time runs out. 0 turns it off.",
    )
    max_time: float | None = knob(
        None,
        low=0,
        high=86400,
        jobs=True,
        identity=False,
        by_device={"cuda": 30.0, "cpu": 60.0},
        help="Seconds of measured steps after which adaptive stopping gives up (per point and "
        "repeat). Default: 30 on GPUs, 60 on CPU workers.",
    )
    """CPU workers measure up to 60 s a point: a point's launch, imports, tracing and teardown take 6 to 36 s (docs/benchmarks.md, wall-time table)
    on 2 cores, so with 15 s windows (the earlier default) they were half of a sweep's wall time, and few
    points reached the 150 steps a within-run CI needs (docs/benchmarks.md, the wall-time split)."""
    comm: bool = knob(
        True,
        flag="--comm/--no-comm",
        jobs=True,
        identity=False,
        help="At N > 1 also run the independent (no-sync) variant and a standalone all-reduce, "
        "to report exposed communication and overlap.",
    )
    noisy_cv: float = knob(
        0.10,
        low=0,
        high=10,
        low_open=True,
        jobs=True,
        identity=False,
        help="Flag a point 'noisy' when its step-time coefficient of variation exceeds this.",
    )
    telemetry_interval: float = knob(
        0.5,
        low=0,
        high=3600,
        identity=False,
        help="Seconds between telemetry samples (NVML per GPU, psutil per CPU worker); 0 turns it off.",
    )
    profile: bool = knob(
        False,
        identity=False,
        cli={"is_flag": True},
        help="After each point's timed window, profile a few steps with the framework's profiler: a "
        "per-category breakdown in the record and a Chrome trace file beside the store (distbench profile).",
    )


def knobs(cls) -> dict[str, tuple[dataclasses.Field, Knob]]:
    """name -> (field, Knob) of every declared knob of a dataclass (or instance), in field order."""
    return {f.name: (f, f.metadata["knob"]) for f in dataclasses.fields(cls) if "knob" in f.metadata}


def flag(name: str, cls=None) -> str:
    """The command-line flag of a knob: its declared one (the first of '--a/--no-a'), else --name-in-kebab-case."""
    declared = _KNOBS.get(name) if cls is None else knobs(cls).get(name)
    decl = declared[1].flag if declared else None
    return decl.split("/")[0] if decl else "--" + name.replace("_", "-")


def device_default(name: str, device: str, cls=None):
    """A knob's value on `device` ('cuda' or 'cpu') when it was not given (a knob of `cls`, default: of
    Workload and Measurement)."""
    return (_KNOBS if cls is None else knobs(cls))[name][1].by_device[device]


def identity_fields(config_cls) -> tuple[str, ...]:
    """The fields of `config_cls` that identify a point, in field order: every knob whose identity is not
    False (the 'disk'-only ones included: config.point_key drops them for synthetic data)."""
    return tuple(name for name, (_, k) in knobs(config_cls).items() if k.identity)


def disk_only_fields(config_cls) -> tuple[str, ...]:
    """Identity fields that count only when the data comes from disk (the input pipeline's settings)."""
    return tuple(name for name, (_, k) in knobs(config_cls).items() if k.identity == "disk")


def problem(value, k: Knob, label: str) -> str | None:
    """Why `value` is not a valid value of the knob (None: it is)."""
    if value is None:
        return None
    if k.choices is not None:
        return None if value in k.choices else f"{label} must be one of {', '.join(k.choices)}, got {value!r}"
    if k.low is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{label} must be a finite number, got {value}"
    if value < k.low or (k.low_open and value == k.low):
        return f"{label} must be {'>' if k.low_open else '>='} {_num(k.low)}, got {_num(value)}"
    if k.high is not None and value > k.high:
        return f"{label} must be <= {_num(k.high)}, got {_num(value)}"
    return None


def _num(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def check(obj, names=None, label=flag) -> None:
    """BadInput naming the flag of the first knob of `obj` (a dataclass instance) whose value is out of its
    declared range or choices; `names` limits the check to those knobs."""
    for name, (_, k) in knobs(obj).items():
        if names is not None and name not in names:
            continue
        if k.parse == "percent":  # a fraction, shown as the percentage the user typed
            value = getattr(obj, name)
            if not 0 <= value < 1:
                raise BadInput(f"{label(name)} must be a percentage in [0, 100), got {value * 100:g}%")
            continue
        value = getattr(obj, name)
        for one in value if isinstance(value, (tuple, list)) else (value,):  # a swept axis: each of its values
            why = problem(one, k, label(name))
            if why:
                raise BadInput(why)


_KNOBS = {**knobs(Workload), **knobs(Measurement)}

OPTIMIZER = tuple(name for name, (_, k) in knobs(Workload).items() if k.trains)
"""The training section: the Workload knobs declared `trains` (seed, lr, momentum), in field order. `verify` and
`converge` take these options whole (commands/options.optimizer_options) into a Workload, so a knob added here
reaches every command that trains."""

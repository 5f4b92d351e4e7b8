"""Typed configuration of one measured point, checked at the edge."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import NamedTuple

SCALINGS = ("weak", "strong")
PRECISIONS = ("fp32", "amp", "bf16")
DATA_SOURCES = ("synthetic", "disk")
DEVICES = ("auto", "cuda", "cpu")


@dataclass(frozen=True, kw_only=True)
class PointConfig:
    """Everything a worker needs to run one (strategy, N) point. Serialized to JSON for the worker."""

    strategy: str
    """Strategy name from distbench.strategies."""
    model: str
    """Model name from distbench.models."""
    world_size: int
    """Number of devices (GPUs, or CPU workers when there is no GPU)."""
    device: str
    """Resolved device kind: 'cuda' or 'cpu' (never 'auto' here)."""
    per_device_batch: int
    """Samples per device per step."""
    scaling: str = "weak"
    """'weak': per-device batch fixed; 'strong': global batch fixed and divided among devices."""
    image_size: int | None = 224
    """Image models: input side (None for token models)."""
    seq_len: int | None = None
    """Token models: sequence length (None = the model's default)."""
    num_classes: int = 1000
    precision: str = "fp32"
    """'fp32', 'amp' (fp16 autocast + loss scaling, GPUs) or 'bf16' (bfloat16 autocast / Keras policy)."""
    compile: bool = False
    """torch.compile the model (torch strategies)."""
    xla: bool = False
    """tf.function(jit_compile=True) (TF strategies)."""
    channels_last: bool = False
    """torch.channels_last memory format (torch strategies, image models)."""
    data: str = "synthetic"
    """'synthetic': tensors made once on the device; 'disk': a cached dataset read by a real input
    pipeline (DataLoader / tf.data) every step."""
    data_dir: str | None = None
    loader_workers: int = 2
    """DataLoader workers / tf.data parallel map calls per process."""
    prefetch: int = 2
    """DataLoader prefetch_factor / tf.data prefetch depth (batches)."""
    pin_memory: bool = True
    steps: int = 20
    """Measured steps (after warmup)."""
    warmup: int = 3
    """Unmeasured steps first: graph tracing, compilation, allocator warmup."""
    seed: int = 0
    lr: float = 0.01
    momentum: float = 0.9
    threads_per_worker: int = 1
    """CPU threads each worker may use (intra-op); the machine's cores divided among workers."""
    nodes: int = 1
    sync: bool = True
    """False runs the 'independent' variant: the same N replicas doing the same per-device step at
    the same time with no gradient synchronization (the reference for exposed communication)."""
    measure_comm: bool = False
    """After training, time a standalone all-reduce of the gradient volume with the same backend."""
    verify: bool = False
    """Equivalence mode (distbench verify): deterministic shards of one global batch, BatchNorm in
    inference mode, rank-specific initial weights that only a correct broadcast makes equal, and
    per-step losses and weight-update checksums in the record."""
    target_ci: float = 0.0
    """Keep measuring until the 95% CI half-width of throughput is within this fraction (0 = off)."""
    max_time_s: float = 0.0
    """Upper bound on measuring time when target_ci is on."""
    max_steps: int = 10000
    tf32: bool = True
    """GPUs: TF32 tensor-core math for float32 matmuls and convolutions, set the same way in both
    frameworks (TF's default; torch's default for convolutions only), with cuDNN autotuning on in
    both. Verify mode always runs without TF32 (and with deterministic kernels)."""
    baseline_threads: int | None = None
    """Set only on an extra CPU baseline measured with this many threads (the per-worker thread count
    of some N-worker points): the reference of their per-core efficiency. None on every other point."""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if self.per_device_batch < 1:
            raise ValueError(f"per-device batch must be >= 1, got {self.per_device_batch}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if self.scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {SCALINGS}, got {self.scaling!r}")
        if self.device not in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda' or 'cpu', got {self.device!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.data not in DATA_SOURCES:
            raise ValueError(f"data must be one of {DATA_SOURCES}, got {self.data!r}")
        if self.data == "disk" and not self.data_dir:
            raise ValueError("data 'disk' needs data_dir")
        if not 0 <= self.target_ci < 1:
            raise ValueError(f"target_ci must be a fraction in [0, 1), got {self.target_ci}")
        if self.max_time_s < 0:
            raise ValueError(f"max_time_s must be >= 0, got {self.max_time_s}")
        if self.threads_per_worker < 1:
            raise ValueError(f"threads_per_worker must be >= 1, got {self.threads_per_worker}")

    @property
    def global_batch(self) -> int:
        return self.per_device_batch * self.world_size

    @property
    def swept_batch(self) -> int:
        """The --batch-size value this point was planned with (per device or global by scaling)."""
        return swept_batch(self.to_dict())

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PointConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "PointConfig":
        return cls.from_dict(json.loads(text))


def is_per_core_baseline(record: dict) -> bool:
    """An extra CPU baseline run at a per-worker thread count (PointConfig.baseline_threads): a
    reference for per-core efficiency, not a point of the scaling curves."""
    return (record.get("config") or record).get("baseline_threads") is not None


def swept_batch(config: dict) -> int | None:
    """--batch-size of a point from its config (or record): the per-device batch under weak scaling,
    the global batch under strong scaling. Points of one sweep are compared at the same value."""
    per_device = config.get("per_device_batch")
    if per_device is None:
        return None
    return per_device * (config.get("world_size") or 1) if config.get("scaling") == "strong" else per_device


NOT_WORKLOAD = frozenset(
    {
        "strategy",
        "world_size",
        "nodes",
        "per_device_batch",
        "steps",
        "warmup",
        "seed",
        "target_ci",
        "max_time_s",
        "max_steps",
        "threads_per_worker",
        "sync",
        "measure_comm",
        "verify",
        "data_dir",
        "extra",
    }
)
"""Config fields that are not part of the workload: the point's own axes (strategy, N, nodes, batch: their
own key fields), how long and how it is measured, and where the machine put things (the thread split
follows the cores, the data folder is a temporary path)."""
LOADER_FIELDS = ("loader_workers", "prefetch", "pin_memory")
"""Input-pipeline settings: part of the workload only when the data comes from disk."""


class PointKey(NamedTuple):
    strategy: str | None
    world_size: int | None
    nodes: int
    workload: tuple
    """((field, value), ...) for every other config field that defines the work (see NOT_WORKLOAD)."""
    batch: int | None
    """The --batch-size value (swept_batch); last, so key[:-1] is the point without its batch size."""


def point_key(strategy: str | None, config: dict) -> PointKey:
    """What identifies a point, from its config (or a record): strategy, N, nodes, the whole workload
    (model, device, scaling, precision, image size, sequence length, classes, data source, compile, XLA,
    channels-last, ...; a field an older record lacks counts at PointConfig's default) and the
    --batch-size value. The one key of resume, the report, the analysis and `distbench compare`."""
    value = {**_DEFAULTS, **{k: v for k, v in config.items() if k in _FIELD_NAMES}}
    names = [
        n for n in _FIELD_NAMES if n not in NOT_WORKLOAD and (n not in LOADER_FIELDS or value.get("data") == "disk")
    ]
    return PointKey(
        strategy,
        config.get("world_size"),
        config.get("nodes") or 1,
        tuple((n, value.get(n)) for n in names),
        swept_batch(config),
    )


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(PointConfig))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PointConfig) if f.default is not dataclasses.MISSING}

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
    model: str
    world_size: int
    """Number of devices (GPUs, or CPU workers)."""
    device: str
    """'cuda' or 'cpu' (never 'auto' here)."""
    per_device_batch: int
    scaling: str = "weak"
    """'weak': per-device batch fixed; 'strong': global batch fixed and divided among devices."""
    image_size: int | None = 224
    seq_len: int | None = None
    """Token models (None = the model's default)."""
    num_classes: int = 1000
    precision: str = "fp32"
    """'fp32', 'amp' (fp16 autocast + loss scaling, GPUs) or 'bf16' (bfloat16 autocast / Keras policy)."""
    compile: bool = False
    xla: bool = False
    """tf.function(jit_compile=True)."""
    channels_last: bool = False
    data: str = "synthetic"
    """'synthetic': tensors made once on the device; 'disk': a cached dataset read every step by a real
    input pipeline."""
    data_dir: str | None = None
    loader_workers: int = 2
    """DataLoader workers / tf.data parallel map calls per process."""
    prefetch: int = 2
    """DataLoader prefetch_factor / tf.data prefetch depth (batches)."""
    pin_memory: bool = True
    steps: int = 20
    """Measured steps (after warmup)."""
    warmup: int = 3
    seed: int = 0
    lr: float = 0.01
    momentum: float = 0.9
    threads_per_worker: int = 1
    """CPU threads (intra-op) of each worker: the machine's cores divided among them."""
    nodes: int = 1
    sync: bool = True
    """False: the 'independent' variant, the same N replicas and steps with no gradient synchronization
    (the reference for exposed communication)."""
    measure_comm: bool = False
    """After training, time a standalone all-reduce of the gradient volume on the same backend."""
    nosync_order: str | None = None
    """The runs this process measures in order (distbench/workers/common.segment_configs), e.g. 'ATBTA': the point
    itself (A; its first), the tiny-collective variant (T) and the no-sync variant (B), with the same
    replicas re-wrapped (Strategy.nosync_in_process); None: one run."""
    verify: bool = False
    """distbench verify: deterministic shards of one global batch, BatchNorm in inference mode,
    rank-specific initial weights only a correct broadcast makes equal; per-step losses and update
    checksums in the record."""
    target_ci: float = 0.0
    """Keep measuring until the 95% CI half-width of throughput is within this fraction (0 = off)."""
    max_time_s: float = 0.0
    """Seconds: upper bound on measuring when target_ci is on."""
    max_steps: int = 10000
    tf32: bool = True
    """GPUs: TF32 tensor-core math for float32 matmuls and convolutions, set the same way in both
    frameworks, cuDNN autotuning on. Verify mode always runs without TF32 (deterministic kernels)."""
    baseline_threads: int | None = None
    """Only on an extra CPU baseline run at some N-worker points' per-worker thread count: the reference
    of their per-core efficiency."""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        for name, label, low in (
            ("world_size", "world_size", 1),
            ("per_device_batch", "per-device batch", 1),
            ("steps", "steps", 1),
            ("warmup", "warmup", 0),
            ("max_time_s", "max_time_s", 0),
            ("threads_per_worker", "threads_per_worker", 1),
        ):
            if getattr(self, name) < low:
                raise ValueError(f"{label} must be >= {low}, got {getattr(self, name)}")
        for name, choices in (("scaling", SCALINGS), ("precision", PRECISIONS), ("data", DATA_SOURCES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        if self.device not in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda' or 'cpu', got {self.device!r}")
        if self.data == "disk" and not self.data_dir:
            raise ValueError("data 'disk' needs data_dir")
        order = self.nosync_order
        if order is not None and (not self.sync or "A" not in order or set(order) - set("ATB")):
            raise ValueError(
                f"nosync_order must be None or runs A/T/B with an A on a synchronized point, got {order!r}"
            )
        if not 0 <= self.target_ci < 1:
            raise ValueError(f"target_ci must be a fraction in [0, 1), got {self.target_ci}")

    @property
    def global_batch(self) -> int:
        return self.per_device_batch * self.world_size

    @property
    def swept_batch(self) -> int:
        return swept_batch(self.to_dict())

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PointConfig":
        unknown = sorted(set(data) - set(_FIELD_NAMES))
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "PointConfig":
        return cls.from_dict(json.loads(text))


def is_per_core_baseline(record: dict) -> bool:
    """An extra CPU baseline (PointConfig.baseline_threads), not a point of the scaling curves."""
    return (record.get("config") or record).get("baseline_threads") is not None


def swept_batch(config: dict) -> int | None:
    """--batch-size of a point from its config (or record): per-device (weak scaling) or global (strong)."""
    per_device = config.get("per_device_batch")
    if per_device is None:
        return None
    return per_device * (config.get("world_size") or 1) if config.get("scaling") == "strong" else per_device


NOT_WORKLOAD = frozenset(
    "strategy world_size nodes per_device_batch steps warmup seed target_ci max_time_s max_steps "
    "threads_per_worker sync measure_comm nosync_order verify data_dir extra".split()
)
"""Config fields not part of the workload: the point's own axes (their own key fields), how long and how
it is measured, and where the machine put things (threads follow the cores; the data folder)."""
LOADER_FIELDS = ("loader_workers", "prefetch", "pin_memory")
"""Input-pipeline settings: part of the workload only when the data comes from disk."""


class PointKey(NamedTuple):
    strategy: str | None
    world_size: int | None
    nodes: int
    workload: tuple
    """((field, value), ...) of every field that defines the work."""
    batch: int | None
    """The --batch-size value (swept_batch); last, so key[:-1] is the point without its batch size."""


def point_key(strategy: str | None, config: dict) -> PointKey:
    """What identifies a point, from its config (or a record; a field an older one lacks counts at its
    default): the one key of resume, the report, the analysis and `distbench compare`."""
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

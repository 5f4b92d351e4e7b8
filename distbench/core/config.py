"""One measured point's configuration: the point itself, its Workload and the settings the plan resolved."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import NamedTuple

from distbench.core.sections import (
    CommSection,
    ConvergeSection,
    InferSection,
    ProfileSection,
    RaySection,
    from_extra,
    to_extra,
)
from distbench.core.workload import Workload, check, disk_only_fields, identity_fields, knob


def _redefault(name: str, default) -> dataclasses.Field:
    """The Workload knob `name` with another default, or none (MISSING: required); its declaration otherwise
    unchanged."""
    declared = {f.name: f for f in dataclasses.fields(Workload)}[name]
    return field(default=default, metadata=declared.metadata)


@dataclass(frozen=True, kw_only=True)
class PointConfig(Workload):
    """Everything a worker needs to run one (strategy, N) point: the point, its Workload (the knobs declared in
    distbench.core.workload) and the measurement settings the plan resolved. Serialized flat to JSON for the worker."""

    model: str = _redefault("model", dataclasses.MISSING)
    """Required at a point (the sweep's default model is the CLI's)."""
    image_size: int | None = _redefault("image_size", 224)
    """A point built by hand without one gets 224 (the side every image model was written for); a sweep
    resolves it per device and model (plan.make_plan). None: a token model."""
    strategy: str = knob(identity=False)
    world_size: int = knob(low=1, identity=False)
    """Number of devices (GPUs, or CPU workers)."""
    device: str = knob(choices=("cuda", "cpu"))  # the Workload's knob, resolved (never 'auto' here)
    """'cuda' or 'cpu' (never 'auto' here)."""
    per_device_batch: int = knob(low=1, identity=False)
    data_dir: str | None = knob(None, identity=False)
    """Where the --data disk dataset is (a path on this machine: not part of the workload)."""
    # -- the measurement settings the plan resolved
    steps: int = knob(20, low=1, identity=False)
    """Measured steps (after warmup)."""
    warmup: int = knob(3, low=0, identity=False)
    """0 only for the internal points of verify and comm (the CLI asks for >= 1)."""
    threads_per_worker: int = knob(1, low=1, identity=False)
    """CPU threads (intra-op) of each worker: the machine's cores divided among them."""
    nodes: int = knob(1, identity=False)
    sync: bool = knob(True, identity=False)
    """False: the 'independent' variant, the same N replicas and steps with no gradient synchronization
    (the reference for exposed communication)."""
    measure_comm: bool = knob(False, identity=False)
    """After training, time a standalone all-reduce of the gradient volume on the same backend."""
    nosync_order: str | None = knob(None, identity=False)
    """The runs this process measures in order (distbench/workers/common.segment_configs), e.g. 'ATBTA': the point
    itself (A; its first), the tiny-collective variant (T) and the no-sync variant (B), with the same
    replicas re-wrapped (Strategy.nosync_in_process); None: one run."""
    verify: bool = knob(False, identity=False)
    """distbench verify: deterministic shards of one global batch, BatchNorm in inference mode,
    rank-specific initial weights only a correct broadcast makes equal; per-step losses and update
    checksums in the record."""
    target_ci: float = knob(0.0, identity=False, parse="percent")
    """Keep measuring until the 95% CI half-width of throughput is within this fraction (0 = off)."""
    max_time_s: float = knob(0.0, low=0, identity=False)
    """Seconds: upper bound on measuring when target_ci is on."""
    max_steps: int = knob(10000, identity=False)
    baseline_threads: int | None = knob(None)
    """Only on an extra CPU baseline run at some N-worker points' per-worker thread count: the reference
    of their per-core efficiency."""
    # -- what only some kinds of point carry (distbench.core.sections; stored under `extra` in the JSON)
    not_applicable: tuple[str, ...] = knob((), identity=False)
    """The flags of the sweep that do not apply to this point's framework (recorded, not run)."""
    two_stage: bool = knob(False, identity=False)
    """The first run of an in-process order: sized by a pilot in advance instead of stopping adaptively."""
    tiny_collective: bool = knob(False, identity=False)
    """The tiny-collective variant (T) of an in-process order."""
    ray: RaySection | None = knob(None, identity=False)
    comm_bench: CommSection | None = knob(None, identity=False)
    infer: InferSection | None = knob(None, identity=False)
    converge: ConvergeSection | None = knob(None, identity=False)
    profiling: ProfileSection | None = knob(None, identity=False)

    def __post_init__(self):
        try:
            check(self, label=str, names=_CHECKED)
        except Exception as exc:  # a point is built by code, not typed by a user: a plain ValueError
            raise ValueError(str(exc)) from None
        if self.data == "disk" and not self.data_dir:
            raise ValueError("data 'disk' needs data_dir")
        order = self.nosync_order
        if order is not None and (not self.sync or "A" not in order or set(order) - set("ATB")):
            raise ValueError(
                f"nosync_order must be None or runs A/T/B with an A on a synchronized point, got {order!r}"
            )

    @property
    def global_batch(self) -> int:
        return self.per_device_batch * self.world_size

    @property
    def swept_batch(self) -> int:
        return swept_batch(self.to_dict())

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_dict(self) -> dict:
        """Flat, as records have always stored a config: the sections under `extra` (sections.to_extra)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _SECTIONS}
        return {**out, "extra": to_extra(self)}

    @classmethod
    def from_dict(cls, data: dict) -> "PointConfig":
        """A config from its dict (any version's: its `extra` object read into the typed sections)."""
        data = dict(data)
        sections = from_extra(data.pop("extra", None))
        unknown = sorted(set(data) - set(_FIELD_NAMES) | set(data) & set(_SECTIONS))
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        return cls(**data, **sections)

    @classmethod
    def from_json(cls, text: str) -> "PointConfig":
        return cls.from_dict(json.loads(text))


def swept_batch(config: dict) -> int | None:
    """--batch-size of a point from its config (or record): per-device (weak scaling) or global (strong)."""
    per_device = config.get("per_device_batch")
    if per_device is None:
        return None
    return per_device * (config.get("world_size") or 1) if config.get("scaling") == "strong" else per_device


IDENTITY = identity_fields(PointConfig)
"""The config fields that identify a point beside its strategy, N, nodes and batch (declared per field:
workload.Knob.identity): the workload, the device, the optimizer, a per-core baseline's threads. The rest is
how long and how it is measured, and where the machine put things."""
LOADER_FIELDS = disk_only_fields(PointConfig)
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
    names = [n for n in IDENTITY if n not in LOADER_FIELDS or value.get("data") == "disk"]
    return PointKey(
        strategy,
        config.get("world_size"),
        config.get("nodes") or 1,
        tuple((n, value.get(n)) for n in names),
        swept_batch(config),
    )


_SECTIONS = ("not_applicable", "two_stage", "tiny_collective", "ray", "comm_bench", "infer", "converge", "profiling")
"""The fields stored under `extra` (distbench.core.sections)."""
_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(PointConfig))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PointConfig) if f.default is not dataclasses.MISSING}
_CHECKED = ("world_size", "per_device_batch", "steps", "warmup", "max_time_s", "threads_per_worker", "target_ci")
_CHECKED += ("scaling", "precision", "data", "device")
"""The knobs a point checks (the others are the sweep's to check: a point built by code may, e.g., use a
model 'none' or 10 classes)."""

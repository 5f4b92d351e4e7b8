"""The typed sections of a PointConfig that only some kinds of point carry: converge's run settings, the
all-reduce benchmark's sizes, inference's batch sizes, the profiler's request and a Ray point's cluster.

A config's JSON (the worker's input, the stored record's `config`) keeps them where records have always kept
them, in one `extra` object (`to_extra`, `from_extra`): `{"converge": {...}}`, `{"backend": ..., "sizes": ...}`,
`{"batch_sizes": [...]}`, `{"profile": {...}}`, `{"ray_address": ..., "ray_placement": {...}}`, plus the
flags `not_applicable`, `two_stage` and `tiny_collective`. So stores, `--resume`, `results show`, the report
and their golden outputs read old and new records alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Literal

CommBackend = Literal["gloo", "nccl", "mpi"]
"""The torch.distributed backends of `distbench comm` (kinds.commbench.BACKENDS)."""


@dataclass(frozen=True, kw_only=True)
class ConvergeSection:
    """A converge point's run (converge.loop.run): the target, the budget, the LR plan, the evaluation
    interval, the decoded data and the strategy's Distribution (None: the framework's single device)."""

    target_accuracy: float
    max_epochs: int
    max_steps: int | None = None
    max_time_s: float | None = None
    eval_every_epochs: float
    stop_at_target: bool = False
    lr: dict
    """converge.lr.plan's LR plan: the rule, base and peak LR, the warmup (its keys are the rule's)."""
    cache: str = ""
    distribution: str | None = None


@dataclass(frozen=True, kw_only=True)
class CommSection:
    """An all-reduce benchmark point (`distbench comm`): the backend and each message size in bytes, timed
    over `iters` calls after `warmup`, at most `max_time_per_size` seconds a size."""

    backend: CommBackend
    sizes: tuple[int, ...]
    iters: int
    warmup: int
    max_time_per_size: float

    def __post_init__(self):
        object.__setattr__(self, "sizes", tuple(self.sizes))


@dataclass(frozen=True, kw_only=True)
class InferSection:
    """An inference point (`distbench infer`): every batch size its one worker runs."""

    batch_sizes: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "batch_sizes", tuple(self.batch_sizes))


@dataclass(frozen=True, kw_only=True)
class ProfileSection:
    """A point asked to be profiled after its timed window (profile.request.with_profiling): how many steps,
    and where its trace file goes (None: a breakdown without a trace file)."""

    steps: int
    trace_dir: str | None = None


@dataclass(frozen=True, kw_only=True)
class RaySection:
    """A Ray Train point's cluster: the address its driver joins (None: a local head) and, when planned per node
    on that cluster, its placement (run.raycluster.Placement.to_dict: nodes, per_node, strategy, cpus, gpus)."""

    address: str | None = None
    placement: dict | None = None


FLAGS = ("not_applicable", "two_stage", "tiny_collective")
"""PointConfig fields stored under `extra` by their own names when set."""


def to_extra(cfg) -> dict:
    """The sections and flags of a PointConfig as the `extra` object of its JSON (only those it carries)."""
    out: dict = {}
    if cfg.not_applicable:
        out["not_applicable"] = list(cfg.not_applicable)
    if cfg.ray is not None:
        if cfg.ray.address is not None:
            out["ray_address"] = cfg.ray.address
        if cfg.ray.placement is not None:
            out["ray_placement"] = dict(cfg.ray.placement)
    if cfg.comm_bench is not None:
        c = cfg.comm_bench
        out.update(backend=c.backend, sizes=list(c.sizes), iters=c.iters, warmup=c.warmup)
        out["max_time_per_size"] = c.max_time_per_size
    if cfg.infer is not None:
        out["batch_sizes"] = list(cfg.infer.batch_sizes)
    if cfg.converge is not None:
        out["converge"] = asdict(cfg.converge)
    if cfg.profiling is not None:
        out["profile"] = asdict(cfg.profiling)
    if cfg.two_stage:
        out["two_stage"] = True
    if cfg.tiny_collective:
        out["tiny_collective"] = True
    return out


_COMM_KEYS = tuple(f.name for f in fields(CommSection))


def from_extra(extra: dict | None) -> dict:
    """PointConfig fields from the `extra` object of a config's JSON (a record of any version); ValueError
    naming a key it does not know."""
    extra = dict(extra or {})
    out: dict = {}
    if "not_applicable" in extra:
        out["not_applicable"] = tuple(extra.pop("not_applicable"))
    address, placement = extra.pop("ray_address", None), extra.pop("ray_placement", None)
    if address is not None or placement is not None:
        out["ray"] = RaySection(address=address, placement=placement)
    if any(k in extra for k in _COMM_KEYS):
        out["comm_bench"] = CommSection(**{k: extra.pop(k) for k in _COMM_KEYS})
    if "batch_sizes" in extra:
        out["infer"] = InferSection(batch_sizes=extra.pop("batch_sizes"))
    if "converge" in extra:
        out["converge"] = ConvergeSection(**extra.pop("converge"))
    if "profile" in extra:
        out["profiling"] = ProfileSection(**extra.pop("profile"))
    for flag in ("two_stage", "tiny_collective"):
        if extra.pop(flag, False):
            out[flag] = True
    if extra:
        raise ValueError(f"unknown config extra keys: {', '.join(sorted(extra))}")
    return out

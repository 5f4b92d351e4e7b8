"""The options of a converge run. Its points (kinds.plans.plan_converge): (strategy, N, seed), each a PointConfig whose
`converge` section (core.sections.ConvergeSection) carries the target, the budget, the LR rule, the data cache and the strategy's Distribution,
run by the strategy's own launcher with the converge worker of its framework (Strategy.converge_module) in place
of its benchmark worker."""

from __future__ import annotations

from dataclasses import dataclass

from distbench.core.strategies import STRATEGIES, Strategy
from distbench.core.workload import Workload

SUPPORTED = tuple(s.name for s in STRATEGIES.values() if s.converge_module)
"""Strategies whose Distribution the converge workers drive (Strategy.converge_module)."""


@dataclass(frozen=True, kw_only=True)
class ConvergeOptions(Workload):
    """A Workload (model, device and the training section, core.workload.OPTIMIZER, taken whole; `seed` is the
    first seed) plus converge's own settings."""

    strategies: tuple[Strategy, ...]
    gpus: tuple[int, ...]
    seeds: int
    target_accuracy: float
    batch_size: int
    """Per device (weak scaling): the global batch is batch_size x N; the reference batch of the LR rule is
    batch_size (the 1-device global batch)."""
    lr: float
    lr_scaling: str
    warmup_epochs: float
    max_epochs: int
    max_steps: int | None
    max_time_s: float | None
    eval_every_epochs: float
    stop_at_target: bool
    threads: int | None = None
    """CPU workers: intra-op threads per worker (None: the machine's cores divided among the N workers)."""

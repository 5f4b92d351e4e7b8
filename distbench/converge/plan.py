"""The points of a converge run: (strategy, N, seed), each a PointConfig whose `extra['converge']` carries the
target, the budget, the LR rule and the data cache, run by the strategy's own launcher with the converge worker
of its framework in place of its benchmark worker."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from distbench.config import PointConfig
from distbench.converge import lr as lr_rules
from distbench.strategies import Strategy

WORKERS = {"torch": "converge_torch", "tf": "converge_tf"}
SUPPORTED = ("torch", "ddp", "fsdp", "horovod-torch", "tf", "mirrored", "horovod-tf")
"""Strategies whose Distribution the converge workers drive (distbench/workers/converge_*.py)."""


@dataclass(frozen=True, kw_only=True)
class ConvergeOptions:
    model: str
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
    momentum: float = 0.9
    first_seed: int = 0
    threads: int | None = None
    """CPU workers: intra-op threads per worker (None: the machine's cores divided among the N workers)."""


def converge_strategy(strategy: Strategy) -> Strategy:
    """The strategy with its framework's converge worker as the module its launcher starts."""
    return dataclasses.replace(strategy, module=WORKERS[strategy.framework])


def point_configs(
    opts: ConvergeOptions, *, device: str, cores: int, cache: str, image_size: int, num_classes: int
) -> list[tuple[Strategy, PointConfig]]:
    """Every (strategy, N, seed) point, seeds outermost: each seed runs every (strategy, N) before the next seed,
    so a drift of the machine's load over the sweep falls on every strategy alike rather than on the ones that
    happen to run first; baselines at N=1 only."""
    out = []
    for seed in range(opts.first_seed, opts.first_seed + opts.seeds):
        for strategy in opts.strategies:
            for n in opts.gpus:
                if strategy.baseline and n != 1:
                    continue
                plan = lr_rules.plan(opts.lr_scaling, opts.lr, opts.batch_size, opts.batch_size * n, opts.warmup_epochs)
                settings = {
                    "target_accuracy": opts.target_accuracy,
                    "max_epochs": opts.max_epochs,
                    "max_steps": opts.max_steps,
                    "max_time_s": opts.max_time_s,
                    "eval_every_epochs": opts.eval_every_epochs,
                    "stop_at_target": opts.stop_at_target,
                    "lr": plan,
                    "cache": cache,
                }
                cfg = PointConfig(
                    strategy=strategy.name,
                    model=opts.model,
                    world_size=n,
                    device=device,
                    per_device_batch=opts.batch_size,
                    image_size=image_size,
                    num_classes=num_classes,
                    lr=plan["base_lr"],
                    momentum=opts.momentum,
                    seed=seed,
                    threads_per_worker=(opts.threads or max(1, cores // n)) if device == "cpu" else 1,
                    tf32=False,
                    extra={"converge": settings},
                )
                out.append((converge_strategy(strategy), cfg))
    return out

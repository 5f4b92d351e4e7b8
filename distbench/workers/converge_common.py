"""What the two converge workers (converge_torch.py, converge_tf.py) share: run the framework-free converge loop
(distbench.converge.loop) with the worker's step and evaluation, and emit rank 0's record."""

from __future__ import annotations

from typing import Callable

from distbench.workers import common


def run_and_emit(
    cfg,
    out_path,
    *,
    framework: str,
    rank: int,
    world: int,
    data: tuple,
    train_step: Callable,
    evaluate: Callable[[], tuple[float, float]],
    barrier: Callable[[], None],
    agree: Callable[[float], float],
    distribution: str,
    record: dict,
) -> dict:
    """Run the loop on the training split of `data` (read_cache's x_train, y_train, x_val, y_val, meta) and, on
    rank 0, emit the record: `record` holds the framework's fields (params, backend, runtime, math_mode).
    Returns the loop's result."""
    from distbench.converge import loop

    x_tr, _, x_va, _, meta = data
    result = loop.run(
        cfg.converge,
        train_samples=len(x_tr),
        per_device_batch=cfg.per_device_batch,
        world=world,
        seed=cfg.seed,
        val_samples=len(x_va),
        train_step=train_step,
        evaluate=evaluate,
        barrier=barrier,
        agree=agree,
    )
    result.update(val_samples=len(x_va), train_samples=len(x_tr), data=meta, distribution=distribution)
    if rank == 0:
        common.emit(cfg, out_path, framework=framework, status="ok", step_times=[], converge=result, **record)
    return result

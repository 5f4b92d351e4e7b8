"""Learning-rate rules for large batches, recorded in every converge record.

`linear` (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): multiply the learning rate by k = global batch /
reference batch, reaching it after a linear warmup from the reference LR (their gradual warmup: 5 epochs at
ImageNet scale), the default under weak scaling. `sqrt`: multiply by sqrt(k) (Krizhevsky 2014, "One weird
trick"; Hoffer et al. 2017), same warmup. `none`: the reference LR at every batch. After the warmup the LR is
constant.
"""

from __future__ import annotations

import math

RULES = ("linear", "sqrt", "none")


def scale_factor(rule: str, base_batch: int, global_batch: int) -> float:
    if rule not in RULES:
        raise ValueError(f"--lr-scaling must be one of {', '.join(RULES)}, got {rule!r}")
    if base_batch < 1 or global_batch < 1:
        raise ValueError("batch sizes must be >= 1")
    k = global_batch / base_batch
    return {"linear": k, "sqrt": math.sqrt(k), "none": 1.0}[rule]


def plan(rule: str, base_lr: float, base_batch: int, global_batch: int, warmup_epochs: float) -> dict:
    """The rule and the resulting LR (what every record keeps)."""
    factor = scale_factor(rule, base_batch, global_batch)
    return {
        "rule": rule,
        "base_lr": base_lr,
        "base_batch": base_batch,
        "global_batch": global_batch,
        "factor": factor,
        "peak_lr": base_lr * factor,
        "warmup_epochs": warmup_epochs if factor != 1.0 else 0.0,
        "schedule": "linear warmup from base_lr to peak_lr, then constant"
        if factor != 1.0 and warmup_epochs > 0
        else "constant",
    }


def lr_at(lr_plan: dict, step: int, steps_per_epoch: int) -> float:
    """The LR of training step `step` (0-based): linear from base_lr at step 0 to peak_lr at the end of the
    warmup, then peak_lr."""
    warmup_steps = int(round(lr_plan["warmup_epochs"] * steps_per_epoch))
    if warmup_steps <= 0 or step >= warmup_steps:
        return lr_plan["peak_lr"]
    base, peak = lr_plan["base_lr"], lr_plan["peak_lr"]
    return base + (peak - base) * step / warmup_steps

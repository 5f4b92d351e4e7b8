"""The converge training loop, framework-free: the worker modules (distbench/workers/converge_torch.py,
converge_tf.py) supply one training step and the evaluation; this runs the epochs in the seeded order,
the LR schedule, the evaluations, the clocks and the stopping rules, the same for every strategy.

Clocks: training time runs from a barrier to the end of the last step before an evaluation and another
barrier (the slowest rank's), summed over the stretches between evaluations; evaluation time is kept apart.
Time, steps and epochs to target are interpolated between the two evaluations around the crossing (crossing).
Every stopping decision is taken from values every rank agrees on (an all-reduced flag), so no rank leaves
the loop alone.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from distbench.converge import data
from distbench.converge import lr as lr_rules
from distbench.core import phases
from distbench.core.sections import ConvergeSection


def crossing(before: dict, after: dict, target: float, error_floor: float) -> dict:
    """When the validation accuracy crossed the target between two evaluations (curve points): steps, epochs
    and training seconds interpolated between them, linearly in log(1 - accuracy) (the error taken to decay
    exponentially within one evaluation interval), the error floored at error_floor (0.5 / validation samples:
    half a sample, so an accuracy of exactly 1 is not a jump). The first evaluation at or above the target alone
    (a step function of the evaluation grid) gives every seed that crosses in the same interval the same time, a
    biased speedup and an interval that collapses; linear interpolation in the accuracy is biased late on concave
    curves: tests/test_converge.py and benchmarks/converge_ci.py simulate all three. At the initial evaluation,
    or where the accuracy did not rise, the later evaluation's values. train_s_bracket: the training seconds of
    the two evaluations (the crossing lies between them, whatever the curve's shape)."""
    a0, a1 = before["val_accuracy"], after["val_accuracy"]

    def log_error(a):
        return math.log(max(1.0 - a, error_floor))

    if not (a0 < target <= a1) or log_error(a1) >= log_error(a0):
        f = 1.0
    else:
        f = (log_error(target) - log_error(a0)) / (log_error(a1) - log_error(a0))
    f = min(1.0, max(0.0, f))

    def at(key):
        return before[key] + f * (after[key] - before[key])

    return {
        "step": at("step"),
        "epoch": at("epoch"),
        "train_s": at("train_s"),
        "eval_step": after["step"],
        "train_s_bracket": [before["train_s"], after["train_s"]],
    }


def run(
    settings: ConvergeSection,
    *,
    train_samples: int,
    per_device_batch: int,
    world: int,
    seed: int,
    val_samples: int,
    train_step: Callable[[object, int, float], float],
    evaluate: Callable[[], tuple[float, float]],
    barrier: Callable[[], None],
    agree: Callable[[float], float],
) -> dict:
    """settings: PointConfig.converge (target, budget, LR plan, evaluation interval).
    train_step(epoch order, step within the epoch, lr) -> this rank's loss; evaluate() -> (accuracy, loss) on
    the whole validation split (val_samples samples); agree(x) -> x averaged over the ranks."""
    global_batch = per_device_batch * world
    spe = data.steps_per_epoch(train_samples, global_batch)
    if spe < 1:
        raise ValueError(
            f"the training split has {train_samples} samples: too few for one global batch of {global_batch}"
        )
    plan = settings.lr
    every = max(1, int(round(spe * settings.eval_every_epochs)))
    max_steps = min(settings.max_steps or math.inf, settings.max_epochs * spe)
    max_time = settings.max_time_s or math.inf
    target = settings.target_accuracy
    curve: list[dict] = []
    train_s = eval_s = first_step_s = 0.0
    step, epoch, order = 0, -1, None
    reached: dict | None = None
    loss = math.nan
    reason = None

    def evaluation():
        nonlocal eval_s
        t0 = time.perf_counter()
        acc, vloss = evaluate()
        eval_s += time.perf_counter() - t0
        point = {
            "step": step,
            "epoch": step / spe,
            "train_s": train_s - first_step_s,
            "val_accuracy": acc,
            "val_loss": vloss,
            "train_loss": loss,
        }
        curve.append(point)
        phases.progress({**point, "eval_s": eval_s})  # the parent shows it while the run goes on
        return acc

    floor = 0.5 / max(1, val_samples)
    if evaluation() >= target:  # the initial accuracy (step 0) already at the target: reached before training
        reached = crossing(curve[0], curve[0], target, floor)
        reached["with_first"] = 0.0
        if settings.stop_at_target:
            reason = "target"
    while reason is None:
        barrier()
        t0 = time.perf_counter()
        goal = min(step + every, max_steps)
        while step < goal:
            if step // spe != epoch:
                epoch = step // spe
                order = data.epoch_order(train_samples, seed, epoch)
            loss = train_step(order, step % spe, lr_rules.lr_at(plan, step, spe))
            step += 1
            if step == 1:  # the first step apart: tracing, lazy initialization, the wrapper's first-step setup
                barrier()
                first_step_s = time.perf_counter() - t0
        barrier()
        train_s += time.perf_counter() - t0
        acc = evaluation()
        diverged = agree(0.0 if math.isfinite(loss) else 1.0) > 0
        if reached is None and acc >= target and not diverged:
            reached = crossing(curve[-2], curve[-1], target, floor)
            reached["with_first"] = reached["train_s"] + first_step_s
        out_of_time = agree(1.0 if train_s >= max_time else 0.0) > 0
        if diverged:
            reason = "diverged"
        elif reached is not None and settings.stop_at_target:
            reason = "target"
        elif step >= settings.max_epochs * spe:
            reason = "max_epochs"
        elif step >= max_steps:
            reason = "max_steps"
        elif out_of_time:
            reason = "max_time"
    return {
        "target_accuracy": target,
        "reached": reached is not None,
        "result": (
            "did not converge within the budget"
            if reached is None
            else "reached the target at the initial evaluation, before any training (the target is too low)"
            if reached["eval_step"] == 0
            else "reached the target"
        ),
        "steps_to_target": reached["step"] if reached else None,
        "eval_step_at_target": reached["eval_step"] if reached else None,
        "train_s_bracket": reached["train_s_bracket"] if reached else None,
        "epochs_to_target": reached["epoch"] if reached else None,
        "train_s_to_target": reached["train_s"] if reached else None,
        "train_s_to_target_with_first_step": reached["with_first"] if reached else None,
        "first_step_s": first_step_s,
        "stop_reason": reason,
        "steps": step,
        "epochs": step / spe,
        "steps_per_epoch": spe,
        "eval_every_steps": every,
        "train_s": train_s,
        "eval_s": eval_s,
        "final_accuracy": curve[-1]["val_accuracy"],
        "best_accuracy": max(p["val_accuracy"] for p in curve),
        "throughput": (step - 1) * global_batch / (train_s - first_step_s)
        if step > 1 and train_s > first_step_s
        else None,
        "curve": curve,
        "lr": plan,
        "clock": "training: barrier to barrier around the steps between evaluations (slowest rank), summed; "
        "evaluation excluded and reported apart (eval_s); time to target and throughput exclude the first step "
        "(tracing, lazy initialization: first_step_s), train_s_to_target_with_first_step includes it; time, steps and "
        "epochs to target interpolated (linearly in log(1 - accuracy), the error floored at half a validation sample) "
        "between the evaluations around the crossing (eval_step_at_target: the first evaluation at or above the "
        "target; train_s_bracket: the training seconds of the two)",
    }

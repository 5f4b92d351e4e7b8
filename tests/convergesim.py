"""Simulated converge runs: the coverage and bias of the time-to-target speedup interval under the three ways of
reading the time to target off the evaluation grid, and the error rates of the equivalence test.

One run (seed): it crosses the target after e* epochs, e* = E x exp(N(0, sd_epochs)), at c seconds per epoch,
c = C x exp(N(0, sd_pace)); its validation accuracy follows a curve of one family through (e*, target), read
every `grid` epochs with N(0, sd_acc) evaluation noise. Strategy A (the baseline) needs E_A epochs (default 0.45)
at C = 1 s; strategy B needs 1.6x the epochs (a larger global batch) at 1.3x the pace: the true time-to-target
speedup (ratio of geometric means) is 1.3 / 1.6. The grid (0.25 epoch) puts most seeds of a side in the same
interval, as the issue saw on the digits MLP; E_A down to 0.1 puts the baseline's crossing in the first or second
evaluation interval, where the interpolation from the initial accuracy fails.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from distbench.converge import loop, summary

FAMILIES = ("exponential", "power", "sigmoid")
READINGS = ("grid", "linear", "interpolated")
VAL_SAMPLES = 2400
"""The shapes' validation split: the interpolation's error floor is half a sample of it."""
TARGET = 0.9
TRUE_SPEEDUP = 1.3 / 1.6


def curve(family: str, e_star: float, a_inf: float = 0.98):
    """Accuracy against epochs through (e_star, TARGET): exponential saturation to a_inf, a power-law error
    0.9 (1 + e/tau)^-1, or a logistic rise from 0.1 to a_inf (slow start, midpoint at 0.6 e_star)."""
    if family == "exponential":
        tau = e_star / -math.log(1 - TARGET / a_inf)
        return lambda e: a_inf * (1 - math.exp(-e / tau))
    if family == "power":
        tau = e_star / (0.9 / (1 - TARGET) - 1)
        return lambda e: 1 - 0.9 / (1 + e / tau)
    if family == "sigmoid":
        m = 0.6 * e_star
        s = (e_star - m) / math.log((TARGET - 0.1) / (a_inf - TARGET))
        return lambda e: 0.1 + (a_inf - 0.1) / (1 + math.exp(-(e - m) / s))
    raise ValueError(family)


def one_run(rng, family, epochs, pace, *, grid, sd_epochs, sd_pace, sd_acc) -> dict:
    """(true time, grid time, linear-in-accuracy time, the loop's interpolated time) of one seed."""
    e_star = epochs * math.exp(rng.normal(0, sd_epochs))
    c = pace * math.exp(rng.normal(0, sd_pace))
    acc = curve(family, e_star)
    before = {"step": 0, "epoch": 0.0, "train_s": 0.0, "val_accuracy": acc(0.0)}
    every = 1
    k = 1
    while True:
        e = k * grid
        after = {"step": k, "epoch": e, "train_s": e * c, "val_accuracy": acc(e) + rng.normal(0, sd_acc)}
        if after["val_accuracy"] >= TARGET:
            a0, a1 = before["val_accuracy"], after["val_accuracy"]
            f = (TARGET - a0) / (a1 - a0) if a1 > a0 and a0 < TARGET else 1.0
            linear = before["train_s"] + min(1.0, max(0.0, f)) * (after["train_s"] - before["train_s"])
            cross = loop.crossing(before, after, TARGET, 0.5 / VAL_SAMPLES)
            conv = {
                "train_s_to_target": cross["train_s"],
                "train_s_bracket": cross["train_s_bracket"],
                "eval_step_at_target": cross["eval_step"],
                "eval_every_steps": every,
            }
            return {
                "true": e_star * c,
                "grid": after["train_s"],
                "linear": linear,
                "interpolated": cross["train_s"],
                "bounds": summary.time_bounds(conv),
            }
        before, k = after, k + 1


def speedup_coverage(
    family: str,
    trials: int,
    *,
    seeds: int = 5,
    grid: float = 0.25,
    sd_epochs: float = 0.02,
    sd_pace: float = 0.03,
    sd_acc: float = 0.0,
    epochs_a: float = 0.45,
    rng_seed: int = 1,
) -> dict:
    """Per reading: the share of trials whose 95% speedup interval (summary.welch_log_ratio) covers the true
    speedup, and the mean relative bias of its centre. "summary": the interval distbench reports
    (summary.speedup_interval: the early runs' evaluation intervals), its coverage over the trials that got one and
    "given", the share that did."""
    rng = np.random.default_rng(rng_seed)
    hits = dict.fromkeys(READINGS, 0)
    bias: dict[str, list[float]] = {k: [] for k in READINGS}
    kw = {"grid": grid, "sd_epochs": sd_epochs, "sd_pace": sd_pace, "sd_acc": sd_acc}
    given = covered = 0
    for _ in range(trials):
        a = [one_run(rng, family, epochs_a, 1.0, **kw) for _ in range(seeds)]
        b = [one_run(rng, family, epochs_a * 1.6, 1 / 1.3, **kw) for _ in range(seeds)]
        for reading in READINGS:
            ci = summary.welch_log_ratio([r[reading] for r in a], [r[reading] for r in b])
            hits[reading] += ci["low"] <= TRUE_SPEEDUP <= ci["high"]
            bias[reading].append(ci["ratio"] / TRUE_SPEEDUP - 1)
        ci, _ = summary.speedup_interval([r["bounds"] for r in a], [r["bounds"] for r in b])
        if ci is not None:
            given += 1
            covered += ci["low"] <= TRUE_SPEEDUP <= ci["high"]
    out = {k: {"coverage": hits[k] / trials, "bias": statistics.fmean(bias[k])} for k in READINGS}
    out["summary"] = {"coverage": covered / given if given else None, "given": given / trials}
    return out


def equivalence_rates(
    true_diff: float,
    trials: int,
    *,
    seeds: int = 5,
    sd: float = 0.004,
    paired_sd: float = 0.0,
    margin: float = summary.EQUIVALENCE_MARGIN,
    rng_seed: int = 2,
) -> dict:
    """Share of trials given each verdict when strategy B's final accuracy is A's + true_diff. Unpaired
    (paired_sd 0): A and B each N(0.95, sd) per seed. Paired: B = A + true_diff + N(0, paired_sd) per seed (the
    same initialization and data order; paired_sd: what the strategy itself adds)."""
    rng = np.random.default_rng(rng_seed)
    counts = {v: 0 for v in (*summary.EQUIVALENCE_VERDICTS, None)}
    for _ in range(trials):
        a = list(0.95 + rng.normal(0, sd, seeds))
        if paired_sd:
            b = [x + true_diff + rng.normal(0, paired_sd) for x in a]
        else:
            b = list(0.95 + true_diff + rng.normal(0, sd, seeds))
        test = summary.tost(b, a, margin, paired=bool(paired_sd))
        counts[test["verdict"] if test else None] += 1
    return {k: v / trials for k, v in counts.items() if k is not None}

"""Held-out checks: fit on the smallest N, predict every larger measured N, score the model against the naive
guess; calibration of the interval terms; the measurement that would narrow an interval most."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from distbench.predict.model import CROSSING_SD, MODEL_ERROR_PER_DOUBLING, StepTimeModel, build_model
from distbench.predict.sources import Observed, Series


def holdout(
    series: Series,
    intra,
    inter,
    *,
    keep: int | None = None,
    algorithm: str = "auto",
    bucket_bytes: float | None = None,
    model_error: float = MODEL_ERROR_PER_DOUBLING,
    crossing_sd: float = CROSSING_SD,
) -> list[dict]:
    """Fit on the smallest `keep` distinct N (default: all but the largest, at least 2) and predict every larger
    measured N, beside the naive guess (per-device throughput of the largest fitted N)."""
    ns = sorted({p.n for p in series.points})
    explicit = keep is not None
    keep = keep or len(ns) - 1
    if keep < (1 if explicit else 2) or keep >= len(ns):
        return []  # keep=1 only when asked: one measured N fits nothing (every tier spans its range)
    fitted_on = ns[:keep]
    train = [p for p in series.points if p.n in fitted_on]
    model = build_model(
        series,
        intra,
        inter,
        algorithm=algorithm,
        bucket_bytes=bucket_bytes,
        points=train,
        model_error=model_error,
        crossing_sd=crossing_sd,
    )
    checks = []
    for p in series.points:
        if p.n > fitted_on[-1]:
            thr, lo, hi = model.interval(p.n)
            naive = model.naive(p.n)
            err, naive_err = thr / p.throughput - 1, naive / p.throughput - 1
            checks.append(
                {
                    "n": p.n,
                    "nodes": p.nodes,
                    "fitted_on": fitted_on,
                    "measured": p.throughput,
                    "predicted": thr,
                    "low": lo,
                    "high": hi,
                    "error": err,
                    "naive": naive,
                    "naive_error": naive_err,
                    "beats_naive": _beats(err, naive_err),
                    "covered": lo <= p.throughput <= hi,
                    "extrapolation": p.n / fitted_on[-1],
                    "crosses_nodes": model.crosses(p.n),
                    "doublings": math.log2(p.n / fitted_on[-1]),
                }
            )
    return checks


def _beats(err: float, naive_err: float) -> bool:
    """Strictly closer than the naive guess: a tie (no communication, no spread: the model IS the naive guess)
    is not a win."""
    return abs(err) < abs(naive_err) and not math.isclose(abs(err), abs(naive_err), rel_tol=1e-9, abs_tol=1e-12)


def own_error_per_doubling(checks: Sequence[dict]) -> float:
    vals = [abs(math.log(1 + c["error"])) / math.log2(c["n"] / max(c["fitted_on"])) for c in checks]
    return max(vals, default=0.0)


def score(checks: Sequence[dict]) -> dict:
    """Median and worst |error| (all, and at >= 4x extrapolation), share beating naive, coverage."""
    if not checks:
        return {"points": 0}
    err = [abs(c["error"]) for c in checks]
    naive = [abs(c["naive_error"]) for c in checks]
    far = [abs(c["error"]) for c in checks if c["extrapolation"] >= 4]
    return {
        "points": len(checks),
        "median_error": float(np.median(err)),
        "max_error": float(max(err)),
        "median_error_4x": float(np.median(far)) if far else None,
        "max_error_4x": float(max(far)) if far else None,
        "points_4x": len(far),
        "naive_median_error": float(np.median(naive)),
        "beats_naive": sum(c["beats_naive"] for c in checks) / len(checks),
        "coverage": sum(c["covered"] for c in checks) / len(checks),
    }


def verdict_lines(checks: Sequence[dict], who: str = "this sweep") -> list[str]:
    """What the held-out checks say, naming it when the model does not beat the naive guess."""
    s = score(checks)
    if not s["points"]:
        return []
    lines = [
        f"held out on {who}: model median |error| {s['median_error']:.1%} (worst {s['max_error']:.1%}), naive guess "
        f"{s['naive_median_error']:.1%}; the model beats naive on {s['beats_naive']:.0%} of {s['points']} point(s); "
        f"95% intervals cover {s['coverage']:.0%}"
    ]
    ties = sum(math.isclose(abs(c["error"]), abs(c["naive_error"]), rel_tol=1e-9, abs_tol=1e-12) for c in checks)
    if ties == len(checks):
        lines.append(
            "  the model IS the naive guess on these points (no communication or spread to model): nothing to beat"
        )
    elif s["beats_naive"] < 0.5 or s["median_error"] > s["naive_median_error"]:
        lines.append(
            "  WARNING: on these points the model does NOT beat the naive guess (per-device throughput of the largest "
            "measured N): prefer the naive column, or measure more N"
        )
    return lines


def next_measurement(model: StepTimeModel, series: Series, intra, inter, target: int, **kw) -> dict | None:
    """The one measurement that narrows the 95% interval at N=target most, assuming it lands on today's
    prediction: a point at a larger N on one node, a point on two nodes, or a `distbench comm` across nodes."""
    _, lo0, hi0 = model.interval(target)
    half0 = math.log(hi0 / lo0) / 2
    g = series.per_node
    top = max(p.n for p in series.points)
    options = []
    candidates = []
    if top < g:
        candidates.append((min(g, 2 * top), f"measure N={min(g, 2 * top)} on one node"))
    if target > g and not model.tiers["inter"].fitted and inter is not None:
        candidates.append((2 * g, f"measure 2 nodes (N={2 * g})"))
    elif top >= g and target > 2 * top:
        candidates.append((2 * top, f"measure N={2 * top} ({math.ceil(2 * top / g)} nodes)"))
    base = [p for p in series.points if p.n in model.fitted_ns]
    for n, what in candidates:
        synth = Observed(n, math.ceil(n / g), model.batch(n), model.throughput(n), None)
        m2 = build_model(series, intra, inter, points=[*base, synth], model_error=model.model_error, **kw)
        _, lo, hi = m2.interval(target)
        options.append((math.log(hi / lo) / 2, what))
    if target > g and inter is not None and not inter.measured and not model.tiers["inter"].fitted:
        measured = replace(inter, measured=True, source="distbench comm across 2 nodes")
        m2 = build_model(series, intra, measured, points=base, model_error=model.model_error, **kw)
        _, lo, hi = m2.interval(target)
        options.append((math.log(hi / lo) / 2, "run `distbench comm` across 2 nodes (measures the inter-node link)"))
    if not options:
        return None
    half, what = min(options)
    return {
        "what": what,
        "target_n": target,
        "half_width_now": math.expm1(half0),
        "half_width_after": math.expm1(half),
    }


def calibrate(checks: Sequence[dict]) -> tuple[float, float]:
    """(model error per doubling, node-crossing sd) from held-out checks: the root mean square of the log error
    per doubling over all checks, then the root mean square excess of the node-crossing checks over it."""
    logs = [(math.log(1 + c["error"]), c["doublings"], c["crosses_nodes"]) for c in checks if c["doublings"] > 0]
    if not logs:
        return MODEL_ERROR_PER_DOUBLING, CROSSING_SD
    e = math.sqrt(float(np.mean([(r / d) ** 2 for r, d, _ in logs])))
    excess = [r**2 - (e * d) ** 2 for r, d, cross in logs if cross]
    c = math.sqrt(max(0.0, float(np.mean(excess)))) if excess else 0.0
    return e, c

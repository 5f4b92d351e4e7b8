"""Held-out checks: fit on the smallest N, predict every larger measured N, score the model against the naive
guess; calibration of the interval terms; the measurement that would narrow an interval most."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from distbench.predict.fit import build_model
from distbench.predict.model import (
    CROSSING_BIAS,
    CROSSING_SD,
    MODEL_BIAS_PER_DOUBLING,
    MODEL_ERROR_PER_DOUBLING,
    StepTimeModel,
)
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
    model_bias: float = MODEL_BIAS_PER_DOUBLING,
    crossing_sd: float = CROSSING_SD,
    crossing_bias: float = CROSSING_BIAS,
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
        model_bias=model_bias,
        crossing_sd=crossing_sd,
        crossing_bias=crossing_bias,
    )
    checks = []
    for p in series.points:
        if p.n > fitted_on[-1]:
            checks.append(check_row(model, p, fitted_on, model.crosses(p.n)))
    return checks


NO_WORSE_MARGIN = 0.02
"""A prediction is "no worse than the naive guess" when its |error| is at most the naive guess's + 2 points."""
BEATS_MARGIN = 0.005
"""A prediction "beats the naive guess" only when its |error| is at least half a point below the naive guess's:
a 0.01-point win (the model reduced to the naive guess plus a sliver of forced communication) is a tie."""


def check_row(model, p: Observed, fitted_on: list[int], crosses: bool) -> dict:
    """One held-out check: the prediction at p.n from a model fitted on `fitted_on`, its interval, the naive guess
    beside it and how each did against the measurement."""
    thr, lo, hi = model.interval(p.n)
    naive = model.naive(p.n)
    err, naive_err = thr / p.throughput - 1, naive / p.throughput - 1
    return {
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
        "half_width": (hi - lo) / 2 / thr,
        "extrapolation": p.n / fitted_on[-1],
        "crosses_nodes": crosses,
        "doublings": math.log2(p.n / fitted_on[-1]),
    }


def _beats(err: float, naive_err: float) -> bool:
    """Closer than the naive guess by at least BEATS_MARGIN (half a percentage point)."""
    return abs(naive_err) - abs(err) >= BEATS_MARGIN - 1e-12


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
        "naive_max_error": float(max(naive)),
        "beats_naive": sum(_beats(c["error"], c["naive_error"]) for c in checks) / len(checks),
        "median_margin": float(np.median([n - e for e, n in zip(err, naive)])),
        "no_worse_than_naive": sum(e <= n + NO_WORSE_MARGIN for e, n in zip(err, naive)) / len(checks),
        "coverage": sum(c["covered"] for c in checks) / len(checks),
        "median_half_width": float(np.median([c["half_width"] for c in checks])) if "half_width" in checks[0] else None,
    }


def verdict_lines(checks: Sequence[dict], who: str = "this sweep") -> list[str]:
    """What the held-out checks say, naming it when the model does not beat the naive guess."""
    s = score(checks)
    if not s["points"]:
        return []
    lines = [
        f"held out on {who}: model median |error| {s['median_error']:.1%} (worst {s['max_error']:.1%}), naive guess "
        f"{s['naive_median_error']:.1%}; median margin over naive {100 * s['median_margin']:+.2f} points; the model "
        f"beats naive (by >= {100 * BEATS_MARGIN:g} points) on {s['beats_naive']:.0%} of {s['points']} point(s); "
        f"95% intervals cover {s['coverage']:.0%}"
    ]
    ties = sum(abs(abs(c["error"]) - abs(c["naive_error"])) < BEATS_MARGIN for c in checks)
    if ties == len(checks):
        lines.append(
            f"  the model is within {100 * BEATS_MARGIN:g} points of the naive guess on every point (little "
            "communication or spread to model): it neither beats nor loses to it"
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
    if target > g and not model.tiers["inter"].exercised and inter is not None:
        candidates.append((2 * g, f"measure 2 nodes (N={2 * g})"))
    elif top >= g and target > 2 * top:
        candidates.append((2 * top, f"measure N={2 * top} ({math.ceil(2 * top / g)} nodes)"))
    base = [p for p in series.points if p.n in model.fitted_ns]
    for n, what in candidates:
        synth = Observed(n, math.ceil(n / g), model.batch(n), model.throughput(n), None)
        m2 = build_model(series, intra, inter, points=[*base, synth], model_error=model.model_error, **kw)
        _, lo, hi = m2.interval(target)
        options.append((math.log(hi / lo) / 2, what))
    if target > g and inter is not None and not inter.measured and not model.tiers["inter"].exercised:
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


def calibrate(checks: Sequence[dict], crossing: Sequence[dict] = ()) -> tuple[float, float, float, float]:
    """(error per doubling, bias per doubling, crossing sd, crossing bias) from held-out checks. Bias and spread
    apart: the bias per doubling is the mean log error per doubling (positive: the model over-predicts), the
    error the root mean square around it. `crossing`: checks from one measured node to several; their log error
    less the bias per doubling gives the crossing bias (its mean) and sd (its spread beyond the error per
    doubling)."""
    per = [math.log(1 + c["error"]) / c["doublings"] for c in checks if c["doublings"] > 0]
    if not per:
        return MODEL_ERROR_PER_DOUBLING, MODEL_BIAS_PER_DOUBLING, CROSSING_SD, CROSSING_BIAS
    bias = float(np.mean(per))
    e = float(np.sqrt(np.mean([(r - bias) ** 2 for r in per])))
    rest = [(math.log(1 + c["error"]) - bias * c["doublings"], c["doublings"]) for c in crossing if c["crosses_nodes"]]
    if not rest:
        return e, bias, 0.0, 0.0
    c_bias = float(np.mean([r for r, _ in rest]))
    excess = float(np.mean([(r - c_bias) ** 2 - (e * d) ** 2 for r, d in rest]))
    return e, bias, math.sqrt(max(0.0, excess)), c_bias

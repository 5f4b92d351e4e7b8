"""Building a StepTimeModel from a measured series, and fitting the bandwidths the data identify (the rest
come from the links, with their ranges carried into the interval): distbench.predict.model holds the model."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from distbench.core.errors import BadInput
from distbench.predict.links import Link, buckets_for, traffic_factor
from distbench.predict.model import (
    BACKWARD_SHARE,
    CHI2_95,
    CROSSING_BIAS,
    CROSSING_SD,
    DEFAULT_MEASUREMENT_SE,
    GRID,
    MODEL_BIAS_PER_DOUBLING,
    MODEL_ERROR_PER_DOUBLING,
    NOMINAL_EFFICIENCY,
    UNKNOWN_BUCKET_BYTES,
    WANT_RANGE,
    StepTimeModel,
    Tier,
    anchor,
    bandwidth_range,
    extrapolated,
    pace_spread,
    unknown_bucket,
)
from distbench.predict.sources import Observed, Series


def build_model(
    series: Series,
    intra: Link | None,
    inter: Link | None,
    *,
    algorithm: str = "auto",
    bucket_bytes: float | None = None,
    points: Sequence[Observed] | None = None,
    model_error: float = MODEL_ERROR_PER_DOUBLING,
    model_bias: float = MODEL_BIAS_PER_DOUBLING,
    crossing_sd: float = CROSSING_SD,
    crossing_bias: float = CROSSING_BIAS,
    traffic_of: str | None = None,
    base: StepTimeModel | None = None,
) -> StepTimeModel:
    """Fit the model on `points` (default: all of the series). `traffic_of` / `base`: the what-if of another
    strategy's traffic on `base`'s fitted workload (its compute, achieved bandwidths and straggler term)."""
    points = sorted(points if points is not None else series.points, key=lambda p: p.n)
    strategy = traffic_of or series.strategy
    traffic, _ = traffic_factor(strategy)
    ref_n = points[-1].n
    ref = [p for p in points if p.n == ref_n]
    tiers = {}
    n_buckets = buckets_for(strategy, series.grad_bytes, bucket_bytes or unknown_bucket(strategy))
    message = series.grad_bytes / n_buckets if series.grad_bytes else None
    for name, link in (("intra", intra), ("inter", inter)):
        lo, hi = bandwidth_range(link, message)
        source = "measured" if link is not None and link.measured else "profile"
        tiers[name] = Tier(name, link, link.bandwidth if link else math.inf, lo, hi, hi, source, span=(hi, hi))
    beta_lo, beta_hi = BACKWARD_SHARE
    model = StepTimeModel(
        series=series,
        a=0.0,
        ref_n=ref_n,
        tiers=tiers,
        algorithm=algorithm,
        sigma=series.rank_sd or 0.0,
        pace_sd=pace_spread(series.pace_gap, series.pace_n),
        fitted_ns=sorted({p.n for p in points}),
        anchor_se=float(np.mean([p.se if p.se is not None else DEFAULT_MEASUREMENT_SE for p in ref])),
        model_error=model_error,
        model_bias=model_bias,
        crossing_sd=crossing_sd,
        crossing_bias=crossing_bias,
        buckets=n_buckets,
        traffic=traffic,
        strategy=strategy,
        beta=beta_hi,
        beta_span=(beta_lo, beta_hi),
        beta_source="assumed",
        ref_points=ref,
    )
    for name, link in (("intra", intra), ("inter", inter)):
        if extrapolated(link, message):
            model.warnings.append(
                f"the {name}-node link was measured on messages up to {link.largest_bytes / 2**20:.3g} MiB, the "
                f"gradients move in {message / 2**20:.3g} MiB messages: its bandwidth there is extrapolated, so its "
                f"range reaches {NOMINAL_EFFICIENCY[1] / NOMINAL_EFFICIENCY[0]:g}x up (measure larger sizes with "
                "`distbench comm --sizes` to narrow it)"
            )
    if any(p.se is None for p in ref):
        model.anchor_se_source = f"assumed {DEFAULT_MEASUREMENT_SE:.0%}: the anchor point has no CI"
    if not bucket_bytes and unknown_bucket(strategy) and series.grad_bytes:
        model.bucket_span = (1, model.buckets)
        model.bucket_source = (
            f"not known for {strategy}: from {UNKNOWN_BUCKET_BYTES / 2**20:g} MiB buckets (the registry's smallest) "
            "to one message"
        )
    elif bucket_bytes:
        model.bucket_source = "--bucket-mb"
    model.bucket_span = model.bucket_span if model.bucket_span != (1, 1) else (model.buckets, model.buckets)
    if base is not None:  # the what-if: the same workload, another strategy's bytes and buckets
        model.a, model.sigma, model.ref_n, model.pace_sd = base.a, base.sigma, base.ref_n, base.pace_sd
        model.anchor_se, model.model_error, model.model_bias = base.anchor_se, base.model_error, base.model_bias
        model.crossing_sd, model.crossing_bias = base.crossing_sd, base.crossing_bias
        model.beta, model.beta_span, model.beta_source = base.beta, base.beta_span, base.beta_source
        model.base, model.ref_points = base, base.ref_points
        model.anchor_se_source, model.model_error_source = base.anchor_se_source, base.model_error_source
        model.one_device, model.loss_per_doubling, model.loss_crossing = (
            base.one_device,
            base.loss_per_doubling,
            base.loss_crossing,
        )  # from one device: the same host terms and interval
        for name, t in model.tiers.items():
            b = base.tiers[name]
            t.bw, t.span, t.source, t.exercised, t.identified = b.bw, b.span, b.source, b.exercised, b.identified
        return model
    for name, t in tiers.items():
        t.exercised = (
            any(model.transfer(p.n, nodes=p.nodes)[0 if name == "intra" else 1] > 0 for p in points)
            and len({p.n for p in points}) >= 2
        )
    _fit(model, points, ref)
    return model


def _sse(model: StepTimeModel, points: Sequence[Observed], ref: Sequence[Observed], bi: float, be: float) -> float:
    a = anchor(model, ref, bw_intra=bi, bw_inter=be)
    if a <= 0:
        return math.inf
    model.a = a
    return sum(
        math.log(model.step_time(p.n, bw_intra=bi, bw_inter=be, nodes=p.nodes) / p.step_time) ** 2 for p in points
    )


def _fit(model: StepTimeModel, points: Sequence[Observed], ref: Sequence[Observed]) -> None:
    ti, te = model.tiers["intra"], model.tiers["inter"]
    if model.measured_window() and model.bucket_span[0] == model.bucket_span[1]:  # the hidden time a sweep measured
        model.beta_source = f"measured (overlap {model.series.overlap:.2f}: the window is the time it hid)"
        model.beta_span = (model.beta, model.beta)
    elif model.series.overlap is not None and model.buckets > 1:
        model.beta_source = (
            f"assumed (the measured overlap {model.series.overlap:.2f} leaves only the last bucket exposed: it "
            "bounds the window from below only)"
        )
    free = [t for t in (ti, te) if t.exercised and math.isfinite(t.hi)]
    grids = {t.name: np.geomspace(t.lo, t.hi, GRID) for t in free}
    gi = grids.get("intra", [ti.hi])
    ge = grids.get("inter", [te.hi])
    table = np.full((len(gi), len(ge)), math.inf)
    for i, bi in enumerate(gi):
        for j, be in enumerate(ge):
            table[i, j] = _sse(model, points, ref, bi, be)
    if not np.isfinite(table).any():
        raise BadInput(
            f"{model.series.strategy} ({model.series.workload}): even the fastest link the figures allow leaves no "
            "compute time at the largest measured N: check the link figures (--link, --link-bw, --link-latency, "
            "--comm) and the throughput column"
        )
    noise = CHI2_95 * float(np.mean([(p.se if p.se is not None else DEFAULT_MEASUREMENT_SE) ** 2 for p in points]))
    best = float(np.nanmin(table))
    accept = table <= best + noise
    i, j = np.unravel_index(int(np.argmin(table)), table.shape)
    for t, axis, grid, idx in ((ti, 1, gi, i), (te, 0, ge, j)):
        if t not in free:
            t.bw, t.span = t.hi, (t.lo, t.hi)  # not constrained: closest to the naive guess, its range in the interval
            continue
        ok = accept.any(axis=axis)
        t.identified = not ok.all()
        if not t.identified:
            t.bw, t.span = t.hi, (t.lo, t.hi)
            continue
        t.source = "fitted"
        t.at_bound = idx in (0, len(grid) - 1)
        t.bw = float(grid[idx])
        accepted = [float(g) for g, keep in zip(grid, ok) if keep]
        # pinned at the slow end, the data ask for more loss than communication can be: the whole range; at the
        # fast end (or inside) the values the data accept
        t.span = (t.lo, t.hi) if idx == 0 else (min(accepted), max(accepted))
    for t, grid, idx in ((ti, gi, i), (te, ge, j)):
        if t.fitted and not t.at_bound:
            t.bw = _refine(model, points, ref, t, grid, idx)
    model.a = anchor(model, ref)
    _wanted(model, points, ref)
    others = [p for p in points if p.n != model.ref_n]
    if len(others) > 1:
        resid = [math.log(model.step_time(p.n, nodes=p.nodes) / p.step_time) for p in others]
        model.resid_se = float(np.sqrt(np.mean(np.square(resid))))


def _refine(model, points, ref, tier: Tier, grid, idx: int) -> float:
    """The grid's best interior value refined by golden sections in log bandwidth between its neighbours (the
    other tier held at its grid best)."""
    other = model.tiers["inter" if tier.name == "intra" else "intra"]

    def cost(logb: float) -> float:
        kw = {tier.name: math.exp(logb), other.name: other.bw}
        return _sse(model, points, ref, kw["intra"], kw["inter"])

    lo, hi = math.log(grid[idx - 1]), math.log(grid[idx + 1])
    g = (math.sqrt(5) - 1) / 2
    c, d = hi - g * (hi - lo), lo + g * (hi - lo)
    fc, fd = cost(c), cost(d)
    for _ in range(40):
        if fc < fd:
            hi, d, fd = d, c, fc
            c = hi - g * (hi - lo)
            fc = cost(c)
        else:
            lo, c, fc = c, d, fd
            d = lo + g * (hi - lo)
            fd = cost(d)
    best = (lo + hi) / 2
    return float(math.exp(best)) if cost(best) <= cost(math.log(grid[idx])) else float(grid[idx])


def _wanted(model: StepTimeModel, points: Sequence[Observed], ref: Sequence[Observed]) -> None:
    """Where a fitted bandwidth sits at a bound: what the data would ask for without it (a warning, never used)."""
    for t in model.tiers.values():
        if not (t.fitted and t.at_bound and t.link is not None):
            continue
        other = model.tiers["inter" if t.name == "intra" else "intra"]
        wide = np.geomspace(t.nominal_bw * WANT_RANGE[0], t.nominal_bw * WANT_RANGE[1], 121)

        def cost(b, t=t, other=other):
            kw = {t.name: b, other.name: other.bw}
            return _sse(model, points, ref, kw["intra"], kw["inter"])

        costs = [cost(b) for b in wide]
        k = int(np.argmin(costs))
        want = float(wide[k])
        if not (t.lo <= want <= t.hi):
            t.wanted, t.wanted_beyond = want, k in (0, len(wide) - 1)
        side = "slower" if t.bw <= t.lo * (1 + 1e-9) else "faster"
        why = (
            "the lost efficiency is not (all) communication: a one-device effect, memory, data loading or the wrong "
            "link; the interval spans the whole range"
            if side == "slower"
            else "communication hides better than the window allows, or the link is faster than its figure"
        )
        asked = ""
        if t.wanted is not None:
            edge = ("<=" if side == "slower" else ">=") if t.wanted_beyond else ""
            asked = f"; the unbounded fit asks for {edge}"
            asked += f"{t.wanted / 1e9:.3g} GB/s"
        model.warnings.append(
            f"{t.name}-node: the fitted achieved bandwidth sits at its {'lower' if side == 'slower' else 'upper'} "
            f"bound, {t.bw / 1e9:.3g} GB/s (plausible {t.lo / 1e9:.3g}..{t.hi / 1e9:.3g} GB/s against "
            f"{t.nominal_bw / 1e9:.3g} GB/s nominal){asked}: {why}"
        )
    model.a = anchor(model, ref)

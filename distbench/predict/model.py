"""The step-time model: every parameter is physical, measured where it can be, bounded where it is fitted.

    t(N) = a * b(N)                                   compute (seconds per sample x per-device batch)
         + x_intra * C_intra(N) + x_inter * C_inter(N) exposed communication per tier
         + sigma * m(N)                               waiting for the slowest of N ranks
    throughput(N) = N * b(N) / t(N)

C_tier is the nominal alpha-beta time of the strategy's traffic on that tier (links.py). x_tier is the
exposed share of it, x = (1 - h) * f: h the measured overlap, f >= 1 how much slower than nominal the link
runs. f is bounded (NOMINAL_F on a nominal link, MEASURED_F on one measured by `distbench comm`), so a
fitted x implies an effective bandwidth B / x that is printed and must be plausible; where the data ask
for more, the model clips and warns. With no measured overlap, h may be anything up to H_MAX.

`a` is anchored at the largest measured N (where the workload already runs as it will at larger N), so the
model predicts only what changes beyond it: more communication, a new tier, more ranks to wait for.
sigma is the measured per-rank step-time spread (never fitted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Sequence

import numpy as np

from distbench import analysis as an
from distbench.errors import BadInput
from distbench.predict.links import Link, buckets_for, tier_times, traffic_factor
from distbench.predict.sources import Observed, Series

NOMINAL_F = (1.0, 4.0)
"""A nominal (profile) link delivers between its full rate and a quarter of it to the collective: NCCL
all-reduce bus bandwidth reaches 70-95% of NVLink / InfiniBand line rate; 4x slower than nominal is
beyond any healthy link and means the loss is not communication."""
MEASURED_F = (1 / 1.5, 1.5)
"""A link measured with `distbench comm` is what the collective gets: only bucketing and contention move it."""
H_MAX = 0.9
"""Unmeasured overlap: at most 90% of the communication hides behind compute (the last bucket never can)."""
MODEL_ERROR_PER_DOUBLING = 0.026
"""Standard deviation of log throughput added per doubling of N beyond the largest fitted N; calibrated on
the held-out published points of tests/data (docs/prediction.md), checked leave-one-source-out."""
CROSSING_SD = 0.0
"""Extra standard deviation of log throughput for a prediction that crosses from one node to several without
any measured multi-node point, on top of the plausible range of the unmeasured inter-node link (which the
interval always spans). Calibrated (validate.calibrate) on the published one-node-to-many-node points: their
errors stay within the model error per doubling, so the calibration gives 0; the range term remains."""
DEFAULT_MEASUREMENT_SE = 0.02
"""Relative standard error assumed for a measured throughput with no CI (published tables)."""
GRID = 41
WANT_RANGE = (1e-3, 1e3)
"""Where the unbounded fit is looked for (a warning only): 1000x the nominal time is 1/1000 of the link."""


@dataclass
class Tier:
    name: str
    link: Link | None
    nominal_bw: float
    lo: float
    hi: float
    x: float
    fitted: bool
    wanted: float | None = None
    """the unbounded best fit, when it lies outside [lo, hi]."""
    wanted_beyond: bool = False
    """the unbounded fit sits at the edge of its search (WANT_RANGE): it asks for that much or more."""

    def bandwidth(self, x: float | None = None) -> float:
        """the effective bandwidth x implies (if nothing were hidden)."""
        x = self.x if x is None else x
        return math.inf if x <= 0 else self.nominal_bw / x


@dataclass
class StepTimeModel:
    series: Series
    a: float
    ref_n: int
    tiers: dict[str, Tier]
    comm_fn: object
    sigma: float
    fitted_ns: list[int]
    anchor_se: float
    model_error: float
    crossing_sd: float
    buckets: int
    traffic: float
    resid_se: float | None
    warnings: list[str] = field(default_factory=list)

    def batch(self, n: int) -> float:
        return per_device_batch(self.series, n)

    def parts(self, n: int, x_intra: float | None = None, x_inter: float | None = None) -> dict[str, float]:
        ci, ce = self.comm_fn(n)
        xi = self.tiers["intra"].x if x_intra is None else x_intra
        xe = self.tiers["inter"].x if x_inter is None else x_inter
        return {
            "compute_s": self.a * self.batch(n),
            "comm_intra_s": xi * ci,
            "comm_inter_s": xe * ce,
            "straggler_s": straggler(self.sigma, n),
        }

    def step_time(self, n: int, **xs) -> float:
        return sum(self.parts(n, **xs).values())

    def throughput(self, n: int, **xs) -> float:
        return n * self.batch(n) / self.step_time(n, **xs)

    def naive(self, n: int) -> float:
        """Per-device throughput stays what it was at the largest measured N."""
        ref = [p for p in self.series.points if p.n == self.ref_n and p.n in self.fitted_ns]
        return n * float(np.mean([p.throughput / p.n for p in ref]))

    def crosses(self, n: int) -> bool:
        return n > self.series.per_node and not self.tiers["inter"].fitted

    def sd(self, n: int) -> float:
        doublings = max(0.0, math.log2(n / self.ref_n))
        cross = self.crossing_sd if self.crosses(n) else 0.0
        return math.sqrt(self.anchor_se**2 + (self.model_error * doublings) ** 2 + cross**2)

    def interval(self, n: int) -> tuple[float, float, float]:
        """(throughput, 95% low, 95% high): every tier not fitted on measured points spans its plausible range."""
        thr = self.throughput(n)
        corners = [thr]
        ranges = {k: (t.lo, t.hi) for k, t in self.tiers.items() if not t.fitted}
        for xi in ranges.get("intra", (None,)):
            for xe in ranges.get("inter", (None,)):
                corners.append(self.throughput(n, x_intra=xi, x_inter=xe))
        sd = self.sd(n)
        return thr, min(corners) * math.exp(-an.Z95 * sd), max(corners) * math.exp(an.Z95 * sd)


def expected_max(n: int) -> float:
    """m(n): the expected maximum of n standard normal draws, by Blom's approximation Phi^-1((n - 0.375) /
    (n + 0.25)): within 5% of the exact value at n = 2 and 1% from n = 8 on (tests/test_predict_model.py
    checks it against numerical integration). It grows like sqrt(2 ln n), which overstates it 2x at n = 2 and
    still by 23% at n = 64."""
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25)) if n > 1 else 0.0


def straggler(sigma: float, n: int) -> float:
    """Expected wait for the slowest of n ranks whose step times spread with sd sigma: sigma m(n)."""
    return sigma * expected_max(n) if sigma and n > 1 else 0.0


def per_device_batch(series: Series, n: int) -> float:
    if series.scaling == "strong":
        ref = series.points[0]
        return ref.per_device_batch * ref.n / n
    return series.points[-1].per_device_batch


def bounds(link: Link | None, overlap: float | None) -> tuple[float, float]:
    """Plausible range of the exposed share x = (1 - h) f on a tier."""
    f_lo, f_hi = MEASURED_F if link is not None and link.measured else NOMINAL_F
    if overlap is None:
        return (1 - H_MAX) * f_lo, f_hi
    return max(1e-3, (1 - overlap)) * f_lo, max(1e-3, (1 - overlap)) * f_hi


def build_model(
    series: Series,
    intra: Link | None,
    inter: Link | None,
    *,
    algorithm: str = "auto",
    bucket_bytes: float | None = None,
    points: Sequence[Observed] | None = None,
    model_error: float = MODEL_ERROR_PER_DOUBLING,
    crossing_sd: float = CROSSING_SD,
    traffic_of: str | None = None,
    base: StepTimeModel | None = None,
) -> StepTimeModel:
    """Fit the model on `points` (default: all of the series). `traffic_of` / `base`: the what-if of another
    strategy's traffic on `base`'s fitted workload (its compute, exposed shares and straggler term)."""
    points = sorted(points if points is not None else series.points, key=lambda p: p.n)
    strategy = traffic_of or series.strategy
    traffic, _ = traffic_factor(strategy)
    buckets = buckets_for(strategy, series.grad_bytes, bucket_bytes)
    size = (series.grad_bytes or 0.0) * traffic

    def comm(n: int) -> tuple[float, float]:
        if n <= 1 or not size:
            return 0.0, 0.0
        return tier_times(
            size, n, series.per_node, intra, inter, algorithm=algorithm, buckets=buckets, strategy=strategy
        )

    sigma = series.rank_sd or 0.0
    ref_n = points[-1].n
    ref = [p for p in points if p.n == ref_n]
    anchor_se = float(np.mean([p.se if p.se is not None else DEFAULT_MEASUREMENT_SE for p in ref]))
    tiers = {}
    for name, link in (("intra", intra), ("inter", inter)):
        lo, hi = bounds(link, series.overlap)
        nominal = link.bandwidth if link else math.inf
        has = [p for p in points if comm(p.n)[0 if name == "intra" else 1] > 0]
        fitted = bool(has) and len({p.n for p in points}) >= 2 and base is None
        tiers[name] = Tier(name, link, nominal, lo, hi, math.sqrt(lo * hi), fitted)
    model = StepTimeModel(
        series,
        0.0,
        ref_n,
        tiers,
        comm,
        sigma,
        sorted({p.n for p in points}),
        anchor_se,
        model_error,
        crossing_sd,
        buckets,
        traffic,
        None,
    )
    if base is not None:  # the what-if: the same workload, another strategy's bytes
        model.a, model.sigma = base.a, base.sigma
        for name, t in model.tiers.items():
            t.x, t.fitted, t.lo, t.hi = (
                base.tiers[name].x,
                base.tiers[name].fitted,
                base.tiers[name].lo,
                base.tiers[name].hi,
            )
        model.ref_n, model.anchor_se, model.model_error = base.ref_n, base.anchor_se, base.model_error
        model.crossing_sd = base.crossing_sd
        return model
    _fit(model, points, ref)
    return model


def _anchor(model: StepTimeModel, ref: Sequence[Observed], xi: float, xe: float) -> float:
    parts = model.parts(model.ref_n, x_intra=xi, x_inter=xe)
    other = parts["comm_intra_s"] + parts["comm_inter_s"] + parts["straggler_s"]
    return float(np.mean([(p.step_time - other) / p.per_device_batch for p in ref]))


def _sse(model: StepTimeModel, points: Sequence[Observed], ref: Sequence[Observed], xi: float, xe: float) -> float:
    a = _anchor(model, ref, xi, xe)
    if a <= 0:
        return math.inf
    model.a = a
    return sum(math.log(model.step_time(p.n, x_intra=xi, x_inter=xe) / p.step_time) ** 2 for p in points)


def _golden(f, lo: float, hi: float, x0: float, step: float, iters: int = 40) -> float:
    """Minimise f on [x0 / step, x0 * step] within [lo, hi] by golden sections in log x."""
    a, b = math.log(max(lo, x0 / step)), math.log(min(hi, x0 * step))
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(math.exp(d))
    best = min((f(x0), x0), (f(math.exp((a + b) / 2)), math.exp((a + b) / 2)))
    return best[1]


def _fit(model: StepTimeModel, points: Sequence[Observed], ref: Sequence[Observed]) -> None:
    ti, te = model.tiers["intra"], model.tiers["inter"]
    grid_i = np.geomspace(ti.lo, ti.hi, GRID) if ti.fitted else [ti.x]
    grid_e = np.geomspace(te.lo, te.hi, GRID) if te.fitted else [None]
    best = (math.inf, ti.x, te.x)
    for xi in grid_i:
        for xe in grid_e:
            xe_ = xi if xe is None else xe  # fit intra with the inter share following it (only matters if measured)
            sse = _sse(model, points, ref, xi, xe_)
            if sse < best[0] - 1e-15:
                best = (sse, xi, xe_)
    if math.isfinite(best[0]):  # refine the grid's best: golden sections in log x, one tier at a time
        step = (ti.hi / ti.lo) ** (1 / (GRID - 1)) if ti.fitted else 1.0
        xi, xe = best[1], best[2]
        for _ in range(3):
            if ti.fitted:
                xi = _golden(lambda v: _sse(model, points, ref, v, v if not te.fitted else xe), ti.lo, ti.hi, xi, step)
                xe = xe if te.fitted else xi
            if te.fitted:
                xe = _golden(lambda v: _sse(model, points, ref, xi, v), te.lo, te.hi, xe, step)
        sse = _sse(model, points, ref, xi, xe)
        if sse <= best[0]:
            best = (sse, xi, xe)
    if not math.isfinite(best[0]):
        raise BadInput(
            f"{model.series.strategy} ({model.series.workload}): even the least communication the link allows "
            "leaves no compute time at the largest measured N: check the link figures (--link, --link-bw, "
            "--link-latency, --comm) and the throughput column"
        )
    ti.x = float(best[1])
    te.x = float(min(te.hi, max(te.lo, best[2])))
    # what the data would ask for without the bounds: a warning, never a figure used
    for tier, other in ((ti, te), (te, ti)):
        if not tier.fitted:
            continue
        wide = np.geomspace(*WANT_RANGE, 121)
        key = "x_intra" if tier.name == "intra" else "x_inter"

        def cost(x, tier=tier, other=other, key=key):
            xs = {key: x, ("x_inter" if key == "x_intra" else "x_intra"): other.x}
            return _sse(model, points, ref, xs["x_intra"], xs["x_inter"])

        costs = [cost(x) for x in wide]
        want = float(wide[int(np.argmin(costs))])
        if min(costs) < best[0] * 0.5 - 1e-12 and not (tier.lo <= want <= tier.hi):
            tier.wanted, tier.wanted_beyond = want, want in (wide[0], wide[-1])
    model.a = _anchor(model, ref, ti.x, te.x)
    others = [p for p in points if p.n != model.ref_n]
    if len(others) > 1:
        resid = [math.log(model.step_time(p.n) / p.step_time) for p in others]
        model.resid_se = float(np.sqrt(np.mean(np.square(resid))))
    for tier in (ti, te):
        if tier.wanted is None or tier.link is None:
            continue
        side = "more" if tier.wanted > tier.hi else "less"
        why = (
            "the lost efficiency is not (all) communication: a one-device effect, memory, data loading or the"
            " wrong link"
            if side == "more"
            else "communication hides better than the bounds allow, or the link is faster than its figure"
        )
        bw = tier.bandwidth(tier.wanted) / 1e9
        if tier.wanted_beyond:  # the edge of the search: that much or more
            asked = f"x {'>=' if side == 'more' else '<='} {tier.wanted:.3g}, an effective {bw:.3g} GB/s or "
            asked += "less" if side == "more" else "more"
        else:
            asked = f"x = {tier.wanted:.3g}, an effective {bw:.3g} GB/s"
        model.warnings.append(
            f"{tier.name}-node: the measured points ask for {side} exposed communication than is physical "
            f"({asked} against {tier.nominal_bw / 1e9:.3g} GB/s nominal; plausible {tier.lo:.2g}..{tier.hi:.2g}): "
            f"{why}; kept at {tier.x:.3g}"
        )

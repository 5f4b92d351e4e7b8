"""The step-time model: overlap as time, every parameter a physical quantity with a unit and a source.

    t(N) = a * b(N)                                   compute (seconds per sample x per-device batch)
         + exposed(N)                                 communication past the end of compute (pipeline.py)
         + sigma * m(N)                               waiting for the slowest of N ranks' step-to-step jitter
         + s_p * m(N)                                 waiting for the slowest rank's own pace (a persistent gap)
    throughput(N) = N * b(N) / t(N)  x  exp(-host loss per doubling, from one device only)

exposed(N) comes from the bucket pipeline (pipeline.py): each bucket is reduced once it is ready during backward
and the link is free, at the alpha-beta cost of the strategy's traffic over both tiers (links.py: ring inside a
node, hierarchical / ring / tree across nodes) at the ACHIEVED bandwidth of each tier (GB/s) and the link's
latency. Backward lasts beta * a * b(N) (beta: backward share of the compute, assumed, measured by a profile, or
the hidden time a sweep measured, scaled with compute). With k equal buckets ready at equal steps (the default
timeline) the pipeline is max(T / k, T - W), W = beta * a * b(N) * (1 - 1/k); a timeline from the model's
per-layer FLOPs or a one-device profile places the buckets where the gradients are ready.

What the data identify is fitted (a tier's achieved bandwidth, where measured points exercise that tier and the
fit's sum of squares rejects part of its plausible range); what they do not is taken at the value of its
plausible range closest to the naive guess (the physics forces the rest), and its whole range enters the interval.
A fit pinned at a bound says the lost efficiency is not (all) communication: a warning, and the range enters the
interval too. `a` is anchored at the largest measured N, so with no communication and no spread the prediction
IS the naive guess. From one measured device (single.py) nothing is fitted: every range enters the interval.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Sequence

import numpy as np

from distbench import analysis as an
from distbench.core.strategies import STRATEGIES
from distbench.predict import pipeline
from distbench.predict.links import Link, tier_times
from distbench.predict.sources import Observed, Series

NOMINAL_EFFICIENCY = (0.25, 1.0)
"""Achieved share of a nominal (profile, --link-bw) link's figure, its payload rate (framing.py), a collective gets:
up to the full rate (NCCL's all-reduce bus bandwidth reaches 70-95% of NVLink / InfiniBand line rate, TCP about 90%
of Ethernet's line rate, whose payload rate is 94% of it), down to a quarter (beyond that the link is not healthy,
or the loss is not communication)."""
MEASURED_EFFICIENCY = (1 / 1.5, 1.5)
"""A link measured with `distbench comm` is what the collective gets: only bucketing and contention move it."""
BACKWARD_SHARE = (0.5, 2 / 3)
"""Share of the step's compute that is backward: the backward pass costs about twice the forward (gradients of
the weights and of the inputs), 2/3 of forward + backward; at least half once the optimizer, data and
kernel-launch time that cannot overlap are counted. Assumed (not fitted): the window W uses it."""
MODEL_ERROR_PER_DOUBLING = 0.022
"""Standard deviation of log throughput per doubling of N beyond the largest fitted N, around the bias below.
Calibrated (validate.calibrate) on the tuning sources only (tests/data/predict_sources.csv, role = tune); the
scores in docs/prediction.md are on the other sources."""
MODEL_BIAS_PER_DOUBLING = 0.023
"""Mean log over-prediction per doubling (prediction above the truth when positive), calibrated with the spread
above. The point prediction is not moved by it; the interval extends by it on its side only (asymmetric)."""
CROSSING_SD = 0.055
"""Extra standard deviation of log throughput for a prediction that crosses from one node to several with no
measured multi-node point (the inter-node tier unconstrained), on top of its bandwidth range; calibrated with
CROSSING_BIAS on the tuning sources' one-node-to-several checks (validate.calibrate)."""
CROSSING_BIAS = -0.023
"""Mean log over-prediction of such a crossing, beyond the bias per doubling; on its side of the interval only."""
DEFAULT_MEASUREMENT_SE = 0.02
"""Relative standard error assumed for a measured throughput with no CI (published tables)."""
CHI2_95 = 3.841
"""A parameter value is rejected by the data when it raises the fit's sum of squared log errors by more than
CHI2_95 x the measurement variance (the profile-likelihood 95% region)."""
GRID = 49
UNKNOWN_BUCKET_BYTES = min(s.bucket_bytes for s in STRATEGIES.values() if s.bucket_bytes)
"""Smallest bucket the strategy registry knows (DDP's 25 MiB). A strategy the registry does not know (a published
table's own framework) and no --bucket-mb: its bucketing is a RANGE, from buckets of this size to one message;
the point prediction takes the smallest buckets (closest to the naive guess), the interval spans the range."""
WANT_RANGE = (1e-3, 1e1)
"""Where the unbounded fit is looked for (a warning only): 1/1000 to 10x the link's figure."""


@dataclass
class Tier:
    name: str
    link: Link | None
    nominal_bw: float
    """bytes/s: the link's figure (profile, --link-bw, comm fit)."""
    lo: float
    hi: float
    """bytes/s: the plausible range of the achieved bandwidth."""
    bw: float
    """bytes/s: the achieved bandwidth used."""
    source: str = "assumed"
    """fitted | measured | profile | assumed: where the value comes from."""
    exercised: bool = False
    """some measured point moves traffic over this tier."""
    identified: bool = False
    """the data reject part of the plausible range."""
    at_bound: bool = False
    span: tuple[float, float] = (0.0, 0.0)
    """the values the interval spans."""
    wanted: float | None = None
    """the unbounded best fit (bytes/s), when it lies outside [lo, hi]."""
    wanted_beyond: bool = False

    @property
    def fitted(self) -> bool:
        return self.source == "fitted"


@dataclass
class StepTimeModel:
    series: Series
    a: float
    ref_n: int
    tiers: dict[str, Tier]
    algorithm: str
    sigma: float
    fitted_ns: list[int]
    anchor_se: float
    model_error: float
    model_bias: float
    crossing_sd: float
    crossing_bias: float
    buckets: int
    traffic: float
    strategy: str
    beta: float
    beta_span: tuple[float, float]
    beta_source: str
    resid_se: float | None = None
    warnings: list[str] = field(default_factory=list)
    bucket_span: tuple[int, int] = (1, 1)
    """bucket counts the interval spans (a range only where the strategy's bucketing is not known)."""
    bucket_source: str = "registry"
    anchor_se_source: str = "measured: the anchor point's CI"
    model_error_source: str = "calibrated on the tuning sources"
    ref_points: list = field(default_factory=list)
    """the measured points at ref_n: every corner of the interval is re-anchored on them."""
    base: "StepTimeModel | None" = None
    """a what-if's fitted model: its corners take the compute the base's anchor implies."""
    timeline: pipeline.Timeline | None = None
    """When each bucket's gradients are ready during backward (None: k equal buckets at equal steps)."""
    pace_sd: float = 0.0
    """seconds: the spread of the ranks' own paces (a persistent gap g measured at N0 gives g / m(N0))."""
    loss_per_doubling: float = 0.0
    """From one device only: share of throughput lost per doubling of the devices sharing one host to what no link
    explains (shared host resources, clocks), calibrated on the tuning sources; 0 when several N are measured (the
    anchor holds it)."""
    loss_crossing: float = 0.0
    """From one device only: the further share lost where N first spans several nodes, calibrated likewise."""
    one_device: bool = False
    """Predicted from one device (single.py). Two things follow. The loss no link explains and the residual per
    doubling count the doublings of the devices sharing one host (min(N, devices per node)): host resources are
    per node, and what more nodes add is the inter-node link (the pipeline) and the crossing terms. And nothing
    is fitted, so the parameters' spans and the calibrated residual are independent uncertainties whose 95%
    half-widths (in log throughput) add in quadrature; with several points measured the worst corner is widened
    by the residual (stacked), as calibrated there."""

    def batch(self, n: int) -> float:
        return per_device_batch(self.series, n)

    def transfer(
        self,
        n: int,
        bw_intra: float | None = None,
        bw_inter: float | None = None,
        buckets: int | None = None,
        share: float = 1.0,
        nodes: int | None = None,
    ) -> tuple[float, float]:
        """(intra, inter) seconds to move `share` of the step's traffic in `buckets` equal buckets at the given
        achieved bandwidths; `nodes`: a measured point's own node count, where it packed more devices on a node
        than the prediction's devices per node."""
        size = (self.series.grad_bytes or 0.0) * self.traffic * share
        if n <= 1 or not size:
            return 0.0, 0.0
        links = []
        for name, bw in (("intra", bw_intra), ("inter", bw_inter)):
            t = self.tiers[name]
            if t.link is None:
                links.append(None)
                continue
            links.append(Link(t.bw if bw is None else bw, t.link.latency, t.link.source, t.link.measured))
        per_node = max(self.series.per_node, math.ceil(n / nodes)) if nodes else self.series.per_node
        return tier_times(
            size,
            n,
            per_node,
            *links,
            algorithm=self.algorithm,
            buckets=buckets or self.buckets,
            strategy=self.strategy,
        )

    def timeline_for(self, k: int) -> pipeline.Timeline:
        """The bucket timeline: the model's own where its bucket count is asked for, else k uniform buckets."""
        if self.timeline is not None and k == self.timeline.buckets:
            return self.timeline
        return pipeline.uniform(k)

    def backward_span(self, n: int, beta: float | None = None, bw_intra=None, bw_inter=None, buckets=None) -> float:
        """Seconds of backward compute the buckets are produced over: the backward share of the compute; or, where
        the sweep measured an overlap h that left more than the last bucket exposed, the time it hid at the
        largest measured N (h x the transfer there) scaled with the compute per step, spread over the backward
        after the first bucket (an overlap that left only the tail exposed bounds the window from below only: the
        backward share is used)."""
        k = buckets or self.buckets
        if k <= 1:
            return 0.0
        compute = self.a * self.batch(n)
        if self.measured_window(k):  # the measured exposure is more than the tail: W = h T_ref
            ref_compute = self.a * self.batch(self.ref_n)
            hidden = self.series.overlap * sum(self.transfer(self.ref_n, bw_intra, bw_inter, k))
            return hidden * compute / ref_compute / (1 - 1 / k) if ref_compute > 0 else 0.0
        return (self.beta if beta is None else beta) * compute

    def window(self, n: int, beta: float | None = None, bw_intra=None, bw_inter=None, buckets=None) -> float:
        """Seconds of backward compute after the first of k equal buckets is ready (what the closed form hides)."""
        k = buckets or self.buckets
        return self.backward_span(n, beta, bw_intra, bw_inter, k) * (1 - 1 / k) if k > 1 else 0.0

    def measured_window(self, k: int | None = None) -> bool:
        """The sweep measured an overlap h that left more than the last of k buckets exposed (h < 1 - 1/k): the
        window is the time it hid. A higher h only bounds the window from below: the assumed share is used."""
        k = k or self.buckets
        h = self.series.overlap
        return h is not None and k > 1 and h < 1 - 1 / k

    def exposed(
        self, n: int, bw_intra=None, bw_inter=None, beta=None, buckets=None, nodes=None
    ) -> tuple[float, float, float]:
        """(exposed seconds, intra transfer, inter transfer) from the bucket pipeline."""
        k = buckets or self.buckets
        ti, te = self.transfer(n, bw_intra, bw_inter, k, nodes=nodes)
        total = ti + te
        if total <= 0:
            return 0.0, ti, te
        tl = self.timeline_for(k)
        if tl.equal:
            cost = lambda share: total * share  # noqa: E731  (equal buckets: each costs its share of the total)
        else:
            cost = lambda share: sum(self.transfer(n, bw_intra, bw_inter, 1, share, nodes))  # noqa: E731
        span = self.backward_span(n, beta, bw_intra, bw_inter, k)
        return pipeline.exposed(tl, span, cost), ti, te

    def parts(self, n: int, bw_intra=None, bw_inter=None, beta=None, buckets=None, nodes=None) -> dict[str, float]:
        exposed, ti, te = self.exposed(n, bw_intra, bw_inter, beta, buckets, nodes)
        total = ti + te
        return {
            "compute_s": self.a * self.batch(n),
            "comm_intra_s": exposed * ti / total if total else 0.0,
            "comm_inter_s": exposed * te / total if total else 0.0,
            "straggler_s": straggler(self.sigma, n),
            "slow_rank_s": straggler(self.pace_sd, n),
        }

    def host_loss(self, n: int) -> float:
        """Log throughput lost at n to what no link explains (from one device only; 0 otherwise)."""
        loss = self.loss_per_doubling * self.host_doublings(n)
        return loss + (self.loss_crossing if self.crosses(n) else 0.0)

    def step_time(self, n: int, **kw) -> float:
        return sum(self.parts(n, **kw).values())

    def throughput(self, n: int, **kw) -> float:
        return n * self.batch(n) / self.step_time(n, **kw) * math.exp(-self.host_loss(n))

    def naive(self, n: int) -> float:
        """Per-device throughput stays what it was at the largest measured N."""
        ref = [p for p in self.series.points if p.n == self.ref_n and p.n in self.fitted_ns]
        return n * float(np.mean([p.throughput / p.n for p in ref]))

    def crosses(self, n: int) -> bool:
        return n > self.series.per_node and not self.tiers["inter"].exercised

    def doublings(self, n: int) -> float:
        return max(0.0, math.log2(n / self.ref_n))

    def host_doublings(self, n: int) -> float:
        """Doublings the per-doubling terms count: of N (several points measured), or, from one device, of the
        devices sharing one host, min(N, devices per node)."""
        if not self.one_device:
            return self.doublings(n)
        return max(0.0, math.log2(min(n, max(self.series.per_node, self.ref_n)) / self.ref_n))

    def sd(self, n: int) -> float:
        cross = self.crossing_sd if self.crosses(n) else 0.0
        return math.sqrt(self.anchor_se**2 + (self.model_error * self.host_doublings(n)) ** 2 + cross**2)

    def bias(self, n: int) -> float:
        """Calibrated mean log over-prediction at n (positive: the truth tends to lie below the prediction)."""
        return self.model_bias * self.doublings(n) + (self.crossing_bias if self.crosses(n) else 0.0)

    def anchor_at(self, bw_intra=None, bw_inter=None, beta=None, buckets=None) -> float:
        """Compute per sample (s) that reproduces the measured anchor point at these parameter values (<= 0: the
        values leave no compute time there, so the measured point rules them out)."""
        if self.base is not None:  # a what-if: the base's workload at the base's own traffic and buckets
            return self.base.anchor_at(bw_intra, bw_inter, beta)
        if not self.ref_points:
            return self.a
        keep = self.a
        try:
            return anchor(self, self.ref_points, bw_intra=bw_intra, bw_inter=bw_inter, beta=beta, buckets=buckets)
        finally:
            self.a = keep

    def corner_values(self, n: int) -> list[tuple[float, float]]:
        """(throughput at n, compute per sample) at every corner of the parameters' spans (each tier's
        bandwidth, the backward share, the bucket count), each corner RE-ANCHORED: its compute is what reproduces
        the measured point at the largest measured N with that corner's communication, so every corner passes
        through the anchor point. Corners the anchor rules out (no compute time left) are dropped."""
        spans = [self.tiers["intra"].span, self.tiers["inter"].span, self.beta_span, sorted(set(self.bucket_span))]
        out = [(self.throughput(n), self.a)]
        keep = self.a
        try:
            for bi, be, beta, k in itertools.product(*spans):
                kw = {"bw_intra": bi or None, "bw_inter": be or None, "beta": beta, "buckets": k}
                a = self.anchor_at(**kw)
                if a <= 0:
                    continue
                self.a = a
                out.append((self.throughput(n, **kw), a))
                self.a = keep
        finally:
            self.a = keep
        return out

    def corners(self, n: int) -> list[float]:
        return [thr for thr, _ in self.corner_values(n)]

    def compute_limit(self, n: int, values: list[tuple[float, float]] | None = None) -> float:
        """Throughput at n with no communication and no waiting, at the fastest compute any corner's anchor
        allows, widened by the anchor's own measurement error: n / a x exp(1.96 se). Compute per sample is the
        same at every N (the model's assumption, weak and strong scaling), so nothing predicts above it."""
        values = values if values is not None else self.corner_values(n)
        return n / min(a for _, a in values) * math.exp(an.Z95 * self.anchor_se)

    def interval(self, n: int) -> tuple[float, float, float]:
        """(throughput, 95% low, 95% high): the parameters' spans (each corner re-anchored), then the calibrated
        bias (on its side only) and spread per doubling, and the anchor's own error; the high side capped at the
        compute-only limit (no communication, no waiting)."""
        thr = self.throughput(n)
        values = self.corner_values(n)
        low, high = self._bounds(n, thr, [t for t, _ in values])
        return thr, low, max(thr, min(high, self.compute_limit(n, values)))

    def _bounds(self, n: int, thr: float, corners: list[float]) -> tuple[float, float]:
        """The interval before the compute-only cap: the corners' extremes widened by the residual (stacked), or
        both combined in quadrature on each side (one device: independent uncertainties)."""
        sd, shift = self.sd(n), self.bias(n)
        if not self.one_device:
            return min(corners) * math.exp(-an.Z95 * sd - max(0.0, shift)), max(corners) * math.exp(
                an.Z95 * sd + max(0.0, -shift)
            )
        down = math.hypot(math.log(thr / min(corners)), an.Z95 * sd)
        up = math.hypot(math.log(max(corners) / thr), an.Z95 * sd)
        return thr * math.exp(-down - max(0.0, shift)), thr * math.exp(up + max(0.0, -shift))

    def capped(self, n: int) -> bool:
        """The interval's high side would pass the compute-only limit (it is cut there)."""
        values = self.corner_values(n)
        return self._bounds(n, self.throughput(n), [t for t, _ in values])[1] > self.compute_limit(n, values)


def expected_max(n: int) -> float:
    """m(n): the expected maximum of n standard normal draws, by Blom's approximation Phi^-1((n - 0.375) /
    (n + 0.25)): within 5% of the exact value at n = 2 and 1% from n = 8 on (tests/test_predict_model.py
    checks it against numerical integration). It grows like sqrt(2 ln n), which overstates it 2x at n = 2 and
    still by 23% at n = 64."""
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25)) if n > 1 else 0.0


def straggler(sigma: float, n: int) -> float:
    """Expected wait for the slowest of n ranks whose step times spread with sd sigma: sigma m(n). The same for
    the ranks' own paces: a persistent gap g at N0 (slowest rank's mean step less the ranks' mean) is the
    expected max of N0 pace draws, so their spread is g / m(N0) and the gap at n is g m(n) / m(N0)."""
    return sigma * expected_max(n) if sigma and n > 1 else 0.0


def pace_spread(gap: float | None, n0: int) -> float:
    """The spread of the ranks' own paces (s) from the pace gap measured at n0 ranks: gap / m(n0)."""
    return gap / expected_max(n0) if gap and gap > 0 and n0 > 1 else 0.0


def unknown_bucket(strategy: str) -> float | None:
    """Where the registry does not know the strategy: the smallest bucket of the range (None: it knows)."""
    return None if strategy in STRATEGIES else UNKNOWN_BUCKET_BYTES


def per_device_batch(series: Series, n: int) -> float:
    if series.scaling == "strong":
        ref = series.points[0]
        return ref.per_device_batch * ref.n / n
    return series.points[-1].per_device_batch


EXTRAPOLATED_SIZE = 4
"""A measured link whose messages were all more than this many times smaller than the ones the gradients move in
(a `distbench comm` sweep of small sizes) says little about the large ones: per-message costs the fit folds into
its bandwidth, and pipelining small messages cannot fill, make large messages faster. Its range then reaches up
as far as a nominal figure's does (NOMINAL_EFFICIENCY's ratio, 4x), with a warning."""


def extrapolated(link: Link | None, message_bytes: float | None) -> bool:
    """Whether a measured link's bandwidth is applied to messages far larger than any it timed."""
    big = link is not None and link.measured and link.largest_bytes and message_bytes
    return bool(big and message_bytes > EXTRAPOLATED_SIZE * link.largest_bytes)


def bandwidth_range(link: Link | None, message_bytes: float | None = None) -> tuple[float, float]:
    """Plausible achieved bandwidth (bytes/s) of a link, for messages of `message_bytes` (None: not known)."""
    if link is None or math.isinf(link.bandwidth):
        return (math.inf, math.inf)
    lo, hi = MEASURED_EFFICIENCY if link.measured else NOMINAL_EFFICIENCY
    if extrapolated(link, message_bytes):
        hi = lo * NOMINAL_EFFICIENCY[1] / NOMINAL_EFFICIENCY[0]
    return link.bandwidth * lo, link.bandwidth * hi


def anchor(model: StepTimeModel, ref: Sequence[Observed], **kw) -> float:
    """Compute per sample at the largest measured N: its step time less what the other terms take there. The
    window depends on the compute, so the anchor is found by a few fixed-point steps."""
    a = float(np.mean([p.step_time / p.per_device_batch for p in ref]))
    nodes = min((p.nodes or 0 for p in ref), default=0) or None  # the tiers the anchor point itself used
    for _ in range(30):
        model.a = a
        parts = model.parts(model.ref_n, nodes=nodes, **kw)
        other = parts["comm_intra_s"] + parts["comm_inter_s"] + parts["straggler_s"] + parts["slow_rank_s"]
        new = float(np.mean([(p.step_time - other) / p.per_device_batch for p in ref]))
        if new <= 0:
            return new
        if abs(new - a) <= 1e-12 * a:
            a = new
            break
        a = new
    return a

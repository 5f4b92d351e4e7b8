"""Prediction from one measured device (N=1) and the links: nothing is fitted, every input says where it came from.

  compute per sample    the measured point (at N=1 nothing is communicated: its whole step is compute)
  gradient bytes        the points (grad_bytes), --grad-bytes, or the model's parameter count (layers.py)
  bucket layout         the strategy registry's bucket size (or --bucket-mb), over the model's parameters in the
                        order backward produces their gradients where the model is known (layers.py), else k
                        equal buckets
  ready times           the model's per-layer FLOPs (layers.py) where the model is tabulated there, else equal
                        steps of backward (assumed)
  links                 --link / --link-bw / --comm: each tier at the middle of its plausible achieved range
                        (the geometric mean of NOMINAL_EFFICIENCY: half the nominal figure), the range in the
                        interval

The bucket pipeline (pipeline.py) gives the exposed communication at every N. What no link explains -- shared
host resources (PCIe root complex, CPU data loading, memory bandwidth), clocks -- is a loss per doubling of the
devices sharing one host (min(N, devices per node): each node brings its own host) and a further loss where N
first spans several nodes, both calibrated on the tuning sources' one-device checks (tests/data/predict_sources.csv,
role tune) and bounded to [0, MAX_HOST_LOSS] per doubling; their spread is the interval's model error, combined in
quadrature with the spans of the links and the backward share (independent uncertainties; nothing is fitted). The
scores in docs/prediction.md are on the other sources.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from distbench.core.errors import BadInput
from distbench.core.strategies import STRATEGIES
from distbench.predict import layers, pipeline
from distbench.predict.fit import build_model
from distbench.predict.links import Link, default_bucket_bytes
from distbench.predict.model import StepTimeModel
from distbench.predict.sources import Observed, Series
from distbench.predict.validate import check_row

HOST_LOSS_PER_DOUBLING = 0.02
"""Mean log throughput lost per doubling of the devices sharing one host that the links do not explain, from one
device (calibrated on the tuning sources' one-device checks; bounded to [0, MAX_HOST_LOSS])."""
HOST_LOSS_CROSSING = 0.024
"""The further mean log loss where N first spans several nodes (calibrated likewise; bounded to
[0, MAX_HOST_LOSS])."""
SINGLE_ERROR_PER_DOUBLING = 0.016
"""Standard deviation of log throughput per doubling of the devices sharing one host, around the point prediction
from one device."""
SINGLE_CROSSING_SD = 0.0
"""Extra standard deviation where N first spans several nodes, from one device."""
MAX_HOST_LOSS = 0.1
"""At most 10% of throughput per doubling (beyond it the loss is a fault, not scaling)."""


def one_device_timeline(series: Series, bucket_bytes: float | None) -> pipeline.Timeline | None:
    """The bucket timeline from the model's per-layer FLOPs (None: the model is not tabulated, or the strategy's
    bucketing is not known: k equal buckets at equal steps)."""
    size = bucket_bytes or default_bucket_bytes(series.strategy)
    if not series.model or (size is None and series.strategy not in STRATEGIES):
        return None
    return layers.flops_timeline(series.model, size, series.image_size, series.seq_len, series.model_size)


def one_device_sources(series: Series, model: StepTimeModel, intra, inter, bucket_bytes) -> list[str]:
    """Where each input of a prediction from one device came from."""
    tl = model.timeline_for(model.buckets)
    size = bucket_bytes or default_bucket_bytes(series.strategy)
    lines = [
        f"compute per sample {model.a * 1e3:.4g} ms: measured (the N=1 point; nothing is communicated there)",
        f"gradient bytes {series.grad_bytes:,.0f}: the points (or --grad-bytes)",
        f"bucket layout: {model.buckets} bucket(s) of "
        + (
            f"{size / 2**20:g} MiB ({'--bucket-mb' if bucket_bytes else 'the strategy registry'})"
            if size
            else "one message"
        )
        + (" over the model's layers in backward order" if model.timeline is not None else ", equal in size"),
        f"ready times: {tl.source}",
        f"backward share {model.beta:.2f}: {model.beta_source} (range {model.beta_span[0]:.2f}..{model.beta_span[1]:.2f})",
    ]
    for name, link in (("intra", intra), ("inter", inter)):
        if link is not None:
            t = model.tiers[name]
            lines.append(
                f"{name}-node link: {link.describe()}; achieved {t.bw / 1e9:.3g} GB/s (the middle of "
                f"{t.lo / 1e9:.3g}..{t.hi / 1e9:.3g}, the range in the interval)"
            )
    lines.append(
        f"what no link explains: {model.loss_per_doubling:.1%} per doubling of the devices sharing a host (up to "
        f"{model.series.per_node} a node), {model.loss_crossing:.1%} more across nodes (calibrated on the tuning "
        "sources' one-device checks)"
    )
    return lines


def timeline_doc(model: StepTimeModel) -> dict:
    """The bucket timeline the prediction used: per bucket its ready fraction of backward and share of bytes."""
    tl = model.timeline_for(model.buckets)
    return {"source": tl.source, "ready": list(tl.ready), "shares": list(tl.shares)}


def single_points(series: Series) -> list[Observed]:
    return [p for p in series.points if p.n == 1]


def build_single(
    series: Series,
    intra: Link | None,
    inter: Link | None,
    *,
    algorithm: str = "auto",
    bucket_bytes: float | None = None,
    timeline: pipeline.Timeline | None = None,
    backward_share: tuple[float, float, str] | None = None,
    loss: float = HOST_LOSS_PER_DOUBLING,
    loss_crossing: float = HOST_LOSS_CROSSING,
    error: float = SINGLE_ERROR_PER_DOUBLING,
    crossing_sd: float = SINGLE_CROSSING_SD,
) -> StepTimeModel:
    """The model from the N=1 point(s) of `series`: `timeline` the bucket ready times (None: k equal buckets at
    equal steps), `backward_share` (value, low..high, source) where a profile measured it."""
    ref = single_points(series)
    if not ref:
        raise BadInput(f"{series.strategy} ({series.workload}): no point at N=1 to predict from one device")
    if intra is None:
        raise BadInput(
            "a single measured point (N=1) needs the links: pass --link PROFILE, --link-bw intra=GBPS "
            "--link-latency intra=US or --comm SWEEP"
        )
    model = build_model(
        series,
        intra,
        inter,
        algorithm=algorithm,
        bucket_bytes=bucket_bytes,
        points=ref,
        model_error=error,
        model_bias=0.0,
        crossing_sd=crossing_sd,
        crossing_bias=0.0,
    )
    for t in model.tiers.values():
        if math.isfinite(t.hi):
            t.bw = math.sqrt(t.lo * t.hi)  # the middle of the plausible range, in log bandwidth
            t.source = "profile (from one device: the middle of its plausible range)"
    if timeline is not None:
        timeline.check()
        model.timeline = timeline
        model.buckets = timeline.buckets
        model.bucket_span = (timeline.buckets, timeline.buckets)
    if backward_share is not None:
        value, lo, hi, source = backward_share
        model.beta, model.beta_span, model.beta_source = value, (lo, hi), source
    model.loss_per_doubling = min(MAX_HOST_LOSS, max(0.0, loss))
    model.loss_crossing = min(MAX_HOST_LOSS, max(0.0, loss_crossing))
    model.model_error_source = (
        "calibrated on the tuning sources' one-device checks; per doubling of the devices sharing a host, in "
        "quadrature with the spans of the links and the backward share"
    )
    model.one_device = True
    model.warnings = [w for w in model.warnings if "bound" not in w]
    return model


def holdout_single(series: Series, intra, inter, **kw) -> list[dict]:
    """From the N=1 point(s), every larger measured N, beside the linear guess (N x the one-device throughput)."""
    if not single_points(series):
        return []
    model = build_single(series, intra, inter, **kw)
    out = []
    for p in series.points:
        if p.n <= 1:
            continue
        out.append(dict(check_row(model, p, [1], p.n > series.per_node), host_doublings=model.host_doublings(p.n)))
    return out


def calibrate_single(checks: Sequence[dict]) -> tuple[float, float, float, float]:
    """(loss per doubling, crossing loss, error per doubling, crossing sd) from one-device checks made with no
    loss and no spread, by robust statistics (median; spread 1.4826 x the median absolute deviation): within a
    node, the median log over-prediction per doubling is the loss and the spread around it the error; across
    nodes, what is left after the loss per doubling of the devices on one host (host_doublings) gives the crossing
    loss (its median) and sd (its spread beyond the error per doubling). Robust because a one-device point can be anomalous (a tuning table's BERT
    seq 128 on DGX-2 speeds up 5.5x from 1 to 4 GPUs): a mean would let one such point set the constants."""
    within = [math.log(1 + c["error"]) / c["doublings"] for c in checks if not c["crosses_nodes"]]
    if not within:
        return 0.0, 0.0, 0.0, 0.0
    loss = float(np.median(within))
    e = MAD_SD * float(np.median([abs(r - loss) for r in within]))
    host = [(c, c.get("host_doublings", c["doublings"])) for c in checks if c["crosses_nodes"]]
    rest = [(math.log(1 + c["error"]) - loss * d, d) for c, d in host]
    if not rest:
        return loss, 0.0, e, 0.0
    c_loss = float(np.median([r for r, _ in rest]))
    spread = MAD_SD * float(np.median([abs(r - c_loss) for r, _ in rest]))
    d = float(np.median([d for _, d in rest]))
    return loss, c_loss, e, math.sqrt(max(0.0, spread**2 - (e * d) ** 2))


MAD_SD = 1.4826
"""The median absolute deviation times this estimates a normal standard deviation."""

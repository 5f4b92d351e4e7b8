"""Links and the alpha-beta cost of moving a strategy's gradient traffic over them.

A link is a bandwidth (bytes/s, one direction, per GPU inside a node, per node between nodes) and a latency
per hop. Figures come from a `distbench comm` sweep (fitted: measured), the sweep's own standalone
all-reduce (measured), a named profile or --link-bw/--link-latency (nominal). A fitted figure outside the
physically possible range is a warning and is never used as a figure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from distbench import analysis as an
from distbench.core.errors import BadInput
from distbench.core.strategies import STRATEGIES, Strategy
from distbench.predict.framing import ETHERNET, NONE, Framing, line_rate, parse_framing
from distbench.predict.linkprofiles import get_profile

ALGORITHMS = ("auto", "ring", "tree", "hierarchical")
MIN_LATENCY_S = 1e-7
"""A fitted latency below 0.1 us is below any software-to-software hop (NVLink peer copies are ~1 us):
the data did not resolve it; the latency term is dropped and a warning says so."""
MAX_BANDWIDTH = 5e12
"""A fitted bandwidth above 5 TB/s per rank is beyond every link in linkprofiles (NVLink 5: 0.9 TB/s
one way); it means the timings did not resolve the bandwidth term."""

TRAFFIC = {name: s.traffic for name, s in STRATEGIES.items() if s.traffic[0] != 1.0}
"""Bytes on the wire relative to a ring all-reduce of the gradients, where a strategy moves more than it
(Strategy.traffic, in the registry: its pattern and the source of the factor)."""
DEFAULT_TRAFFIC = Strategy.__dataclass_fields__["traffic"].default


def traffic_factor(strategy: str) -> tuple[float, str]:
    return TRAFFIC.get(strategy, DEFAULT_TRAFFIC)


def default_bucket_bytes(name: str) -> int | None:
    """The registry's bucket / fusion size (None: one message, or a strategy distbench does not know)."""
    s = STRATEGIES.get(name)
    return s.bucket_bytes if s else None


def reduces_to_one(name: str) -> bool:
    s = STRATEGIES.get(name)
    return bool(s and s.reduce_to_one)


def buckets_for(strategy: str, grad_bytes: float | None, bucket_bytes: float | None = None) -> int:
    size = bucket_bytes or default_bucket_bytes(strategy)
    return max(1, math.ceil(grad_bytes / size)) if size and grad_bytes else 1


@dataclass
class Link:
    bandwidth: float
    """bytes/s, one direction (per GPU inside a node; per node between nodes)."""
    latency: float
    """seconds per hop."""
    source: str
    measured: bool
    warnings: list[str] = field(default_factory=list)
    largest_bytes: float | None = None
    """The largest message the measurement timed (a measured link): beyond it the bandwidth is extrapolated."""
    line_rate: float | None = None
    """bytes/s the link's rate counts, frames and all (a profile, `--link-bw` in bit/s); `bandwidth` is its payload
    share (framing.py)."""
    framing: Framing = NONE

    def describe(self) -> str:
        bw = "inf" if math.isinf(self.bandwidth) else f"{self.bandwidth / 1e9:.3g} GB/s"
        if self.line_rate is not None and self.framing.kind != "none":
            bw += f" payload = {self.framing.share:.1%} of {bit_rate(self.line_rate)} ({self.framing.describe()})"
        lat = "latency not resolved" if any("latency" in w for w in self.warnings) else f"{self.latency * 1e6:.3g} us"
        return f"{bw}, {lat} ({'measured' if self.measured else 'nominal'}: {self.source})"


def bit_rate(bytes_per_s: float) -> str:
    """A rate in bytes/s as bits per second: `100 Mbit/s`, `10 Gbit/s`."""
    bits = bytes_per_s * 8
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.4g} {unit}"
    return f"{bits:.4g} bit/s"


def ring_allreduce_time(size: float, n: int, link: Link) -> float:
    """2(n-1)/n * S/B + 2(n-1) * alpha (reduce-scatter + all-gather around a ring)."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * size / link.bandwidth + 2 * (n - 1) * link.latency


def tree_allreduce_time(size: float, n: int, link: Link) -> float:
    """Pipelined reduce + broadcast over a binary tree: 2 ceil(log2 n) * alpha + 2 S/B."""
    if n <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(n)) * link.latency + 2 * size / link.bandwidth


def tier_times(
    size: float,
    n: int,
    per_node: int,
    intra: Link | None,
    inter: Link | None,
    *,
    algorithm: str = "auto",
    buckets: int = 1,
    strategy: str = "",
) -> tuple[float, float]:
    """(intra-node seconds, inter-node seconds) to all-reduce `size` bytes in `buckets` equal buckets."""
    if n <= 1:
        return 0.0, 0.0
    chunk = size / buckets
    if reduces_to_one(strategy):
        # DataParallel: gradients reduced onto GPU 0 and weights broadcast back over GPU 0's link
        return buckets * (2 * (n - 1) * (chunk / intra.bandwidth + intra.latency)), 0.0
    multi = n > per_node
    if multi and algorithm in ("auto", "hierarchical"):
        # ring reduce-scatter + all-gather among the g GPUs of a node, then a ring all-reduce between the nodes
        nodes = math.ceil(n / per_node)
        return buckets * ring_allreduce_time(chunk, per_node, intra), buckets * ring_allreduce_time(chunk, nodes, inter)
    fn = tree_allreduce_time if algorithm == "tree" else ring_allreduce_time
    if not multi:
        return buckets * fn(chunk, n, intra), 0.0
    # a flat ring or tree over several nodes runs at the slower link's pace: all of it is inter-node time
    slow = Link(min(intra.bandwidth, inter.bandwidth), max(intra.latency, inter.latency), "", False)
    return 0.0, buckets * fn(chunk, n, slow)


def allreduce_time(size, n, per_node, intra, inter, *, algorithm="auto", buckets=1, strategy="") -> float:
    """Both tiers together (seconds)."""
    return sum(tier_times(size, n, per_node, intra, inter, algorithm=algorithm, buckets=buckets, strategy=strategy))


# -- fitted links
def _nnls2(rows: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Least squares for two non-negative coefficients (drop one to 0 when it comes out negative)."""
    sol = np.linalg.lstsq(rows, target, rcond=None)[0]
    if (sol >= 0).all():
        return sol
    candidates = [np.zeros(2), np.zeros(2)]
    for keep, candidate in enumerate(candidates):
        col = rows[:, keep]
        denom = float(col @ col)
        candidate[keep] = max(0.0, float(col @ target) / denom) if denom > 0 else 0.0
    return min(candidates, key=lambda s: float(np.sum((rows @ s - target) ** 2)))


def fit_link(samples: Iterable[tuple[int, float, float, int]], source: str) -> Link | None:
    """alpha and B from (ranks, bytes, seconds, buckets) all-reduce timings with the ring model, minimising
    the relative error. A latency or bandwidth the timings do not resolve is a warning, not a figure."""
    samples = [s for s in samples if s[0] > 1 and s[2] > 0]
    if not samples:
        return None
    rows = np.array([[2 * (n - 1) / n * size / t, 2 * (n - 1) * k / t] for n, size, t, k in samples])
    inv_bw, alpha = _nnls2(rows, np.ones(len(samples)))
    if inv_bw <= 0 or 1 / inv_bw > MAX_BANDWIDTH:
        return None  # the bandwidth term is not resolved: no figure at all (callers say what is missing)
    warnings = []
    if alpha < MIN_LATENCY_S:
        warnings.append(
            f"fitted latency {alpha * 1e6:.2g} us is below any real hop ({MIN_LATENCY_S * 1e6:g} us): the timings "
            "do not resolve the latency; its term is left out (measure smaller messages to resolve it)"
        )
        alpha = 0.0
    return Link(1 / inv_bw, float(alpha), source, True, warnings, max(float(s[1]) for s in samples))


def links_from_comm(records: Sequence[dict], sweep_id: str) -> dict[str, Link]:
    """Intra-node (nodes == 1) and inter-node (nodes > 1: ring over the nodes) links from `distbench comm`
    records (their per-size median times)."""
    out = {}
    for tier, want in (("intra", lambda m: m <= 1), ("inter", lambda m: m > 1)):
        samples = []
        for r in records:
            m = int(an.num(r.get("nodes")) or 1)
            if r.get("status") != "ok" or not want(m):
                continue
            n = m if m > 1 else int(an.num(r.get("world_size")) or 1)
            samples += [
                (n, float(s), float(t), 1) for s, t in zip(r.get("sizes_bytes") or [], r.get("time_median_s") or [])
            ]
        link = fit_link(samples, f"distbench comm sweep {sweep_id}")
        if link:
            out[tier] = link
    return out


def link_from_allreduce(records: Sequence[dict], strategy: str) -> Link | None:
    """The sweep's own standalone all-reduce of the gradients (allreduce_s at N > 1 on one node)."""
    samples = []
    for r in records:
        size, seconds = an.num(r.get("grad_bytes")), an.num(r.get("allreduce_s"))
        nodes = int(an.num(r.get("nodes")) or 1)
        if r.get("status") == "ok" and r.get("strategy") == strategy and nodes == 1 and size and seconds:
            samples.append((int(an.num(r["world_size"])), size, seconds, buckets_for(strategy, size)))
    return fit_link(samples, f"the sweep's standalone all-reduce of the {strategy} gradients")


# -- links named on the command line
_TIER = re.compile(r"^\s*(intra|inter)\s*=\s*(.+)$", re.I)


def _tiered(values: Sequence[str], default_tier: Callable[[str], str] = lambda v: "intra") -> dict[str, str]:
    out = {}
    for v in values:
        m = _TIER.match(v)
        tier, value = (m.group(1).lower(), m.group(2).strip()) if m else (default_tier(v), v.strip())
        out[tier] = value
    return out


def explicit_links(
    profiles: Sequence[str], bws: Sequence[str], lats: Sequence[str], nics_per_node: int, framings: Sequence[str] = ()
) -> dict[str, Link]:
    """--link [TIER=]NAME, --link-bw TIER=GBPS|RATE, --link-latency TIER=US (a bare value is intra),
    --link-framing TIER=KIND[:MTU]. A link's bandwidth is its payload rate: a profile's line rate or a `--link-bw`
    in bit/s (`100mbit`) times its framing's payload share (framing.py; Ethernet unless --link-framing says
    otherwise); a `--link-bw` in GB/s is the payload rate itself unless --link-framing names a framing."""
    out: dict[str, Link] = {}
    for tier, name in _tiered(profiles, lambda v: get_profile(v).tier).items():
        p = get_profile(name)
        k = nics_per_node if tier == "inter" else 1
        out[tier] = Link(
            p.bandwidth_gbps * 1e9 * k,
            p.latency_us * 1e-6,
            f"profile {p.name}: {p.description}" + (f", x{k} NICs" if k > 1 else ""),
            False,
            line_rate=p.bandwidth_gbps * 1e9 * k,
            framing=Framing(p.framing),
        )
    bw = {t: _rate(v) for t, v in _tiered(bws).items()}
    lat = {t: _positive(v, "--link-latency", "us", zero=True) for t, v in _tiered(lats).items()}
    for tier in set(bw) | set(lat):
        base = out.get(tier)
        if base is None and (tier in bw) != (tier in lat):
            has, needs, unit = (
                ("--link-bw", "--link-latency", "US") if tier in bw else ("--link-latency", "--link-bw", "GBPS")
            )
            raise BadInput(f"{has} {tier}=... needs {needs} {tier}={unit} too (or a --link profile)")
        rate, framing = bw[tier] if tier in bw else (base.line_rate or base.bandwidth, base.framing)
        out[tier] = Link(
            rate,
            lat[tier] * 1e-6 if tier in lat else base.latency,
            "--link-bw/--link-latency",
            False,
            line_rate=rate,
            framing=framing,
        )
    for tier, spec in _framed(framings).items():
        if tier not in out:
            raise BadInput(
                f"--link-framing {tier}={spec}: no {tier}-node rate to apply it to: pass --link {tier}=PROFILE or "
                f"--link-bw {tier}=RATE (a measured link is already the payload rate)"
            )
        out[tier].framing = parse_framing(spec, f"{tier}={spec}")
    for link in out.values():
        if link.line_rate is not None:
            link.bandwidth = link.line_rate * link.framing.share
    return out


def _framed(values: Sequence[str]) -> dict[str, str]:
    out = {}
    for v in values:
        m = _TIER.match(v)
        if not m:
            raise BadInput(f"--link-framing: {v!r} names no tier: write TIER=KIND[:MTU], e.g. inter=ethernet")
        out[m.group(1).lower()] = m.group(2).strip()
    return out


def _rate(text: str) -> tuple[float, Framing]:
    """A `--link-bw` value: bytes/s and the framing it implies (bit/s: a line rate, Ethernet; GB/s: payload)."""
    rate = line_rate(text)
    if rate is not None and 0 < rate < math.inf:
        return rate, ETHERNET
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if math.isnan(x) or x <= 0 or math.isinf(x):
        raise BadInput(
            f"--link-bw: {text!r} is not a positive number of GB/s (payload) or a line rate in kbit, mbit, gbit or "
            "tbit (bits/s, e.g. 100mbit)"
        )
    return x * 1e9, NONE


def _positive(text: str, flag: str, unit: str, zero: bool = False, allow_inf: bool = False) -> float:
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if math.isnan(x) or x < 0 or (x == 0 and not zero) or (math.isinf(x) and not allow_inf):
        raise BadInput(f"{flag}: {text!r} is not a {'non-negative' if zero else 'positive'} number of {unit}")
    return x

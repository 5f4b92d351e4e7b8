"""`distbench predict`: throughput, speedup, efficiency, epoch time and cost at device counts nobody ran.

The model, per strategy and workload (docs/prediction.md has the long version):

    step time t(N) = a * b(N)  +  kappa * (1 - h) * T_comm(N)
    throughput(N)  = N * b(N) / t(N)

b(N) is the per-device batch (weak scaling: fixed; strong: the global batch divided by N) and `a` the
compute seconds per sample on one device. T_comm is an alpha-beta model of the all-reduce of the
measured gradient bytes (ring, tree or hierarchical; in the strategy's buckets, each paying the
latency terms). h is the hidden share, the measured overlap; kappa is a free scale on the
communication term (how far the nominal link model is from what the strategy really exposes). `a`
and kappa >= 0 are fitted by least squares on the relative step-time error of the measured points.

Prediction intervals (95%, on log throughput): a parametric bootstrap over the measured points (each
throughput redrawn from its own CI, or from the fit's residual spread when there is none) refitted
each time, plus a model error that grows with each doubling of N past the largest measured N
(MODEL_ERROR_PER_DOUBLING, or the sweep's own leave-largest-out error when larger).
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import re
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from distbench import analysis as an
from distbench.errors import BadInput
from distbench.linkprofiles import get_profile
from distbench.strategies import STRATEGIES

MODEL_ERROR_PER_DOUBLING = 0.03
"""Standard deviation of the log-throughput model error added per doubling of N beyond the largest
fitted N. The median held-out error on the published tables in tests/data (docs/prediction.md) is
1.7% per doubling, so 3% is a little wider than typical; predict() uses the sweep's own
leave-largest-out error per doubling when that is larger."""
DEFAULT_MEASUREMENT_SE = 0.02
"""Relative standard error assumed for a measured throughput with no CI and no residual spread."""
BOOTSTRAP = 300
ALGORITHMS = ("auto", "ring", "tree", "hierarchical")
CSV_REQUIRED = ("strategy", "world_size", "per_device_batch", "throughput")
CSV_OPTIONAL = tuple(
    "model nodes scaling global_batch framework status grad_bytes overlap overlap_raw throughput_ci_low "
    "throughput_ci_high device".split()
)


def default_bucket_bytes(name: str) -> int | None:
    """The registry's bucket / fusion size (None: one message, or a strategy distbench does not know)."""
    s = STRATEGIES.get(name)
    return s.bucket_bytes if s else None


def reduces_to_one(name: str) -> bool:
    s = STRATEGIES.get(name)
    return bool(s and s.reduce_to_one)


# -- links and the alpha-beta cost models
@dataclass
class Link:
    bandwidth: float
    """bytes/s, one direction (per GPU inside a node; per node between nodes)."""
    latency: float
    """seconds per hop."""
    source: str
    measured: bool

    def describe(self) -> str:
        bw = "inf" if math.isinf(self.bandwidth) else f"{self.bandwidth / 1e9:.3g} GB/s"
        return f"{bw}, {self.latency * 1e6:.3g} us ({'measured' if self.measured else 'assumed'}: {self.source})"


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


def allreduce_time(
    size: float,
    n: int,
    per_node: int,
    intra: Link | None,
    inter: Link | None,
    *,
    algorithm: str = "auto",
    buckets: int = 1,
    strategy: str = "",
) -> float:
    """Time to all-reduce `size` bytes in `buckets` equal buckets (each pays the latency terms)."""
    if n <= 1:
        return 0.0
    chunk = size / buckets
    if reduces_to_one(strategy):
        # DataParallel: gradients reduced onto GPU 0 and weights broadcast back over GPU 0's link
        return buckets * (2 * (n - 1) * (chunk / intra.bandwidth + intra.latency))
    multi = n > per_node
    if multi and algorithm in ("auto", "hierarchical"):
        # a ring reduce-scatter and all-gather inside each node of g = per_node GPUs, and a ring all-reduce
        # between the nodes: each GPU's shard S/g goes out through the node's network, g at once, S per node
        nodes = math.ceil(n / per_node)
        return buckets * (ring_allreduce_time(chunk, per_node, intra) + ring_allreduce_time(chunk, nodes, inter))
    link = intra
    if multi:  # a flat ring or tree over several nodes runs at the slower link's pace
        link = Link(min(intra.bandwidth, inter.bandwidth), max(intra.latency, inter.latency), "", False)
    fn = tree_allreduce_time if algorithm == "tree" else ring_allreduce_time
    return buckets * fn(chunk, n, link)


# -- the inputs
@dataclass
class Observed:
    n: int
    nodes: int
    per_device_batch: float
    throughput: float
    se: float | None
    """standard error of log throughput, from the point's 95% CI (None: no CI)."""

    @property
    def step_time(self) -> float:
        return self.n * self.per_device_batch / self.throughput


@dataclass
class Series:
    """One strategy on one workload: its measured points and what the model needs."""

    workload: str
    strategy: str
    framework: str
    scaling: str
    points: list[Observed]
    grad_bytes: float | None
    overlap: float | None
    overlap_note: str
    baseline_throughput: float | None
    baseline_name: str
    per_node: int


def _int(value, default=None):
    x = an.num(value)
    return default if x is None else int(x)


def _observed(r: dict) -> Observed:
    ci = an.throughput_ci(r)
    se = None if ci is None or ci[1] <= ci[0] else an.log_se(ci)
    return Observed(
        _int(r["world_size"]), _int(r.get("nodes"), 1), an.num(r.get("per_device_batch")), an.num(r["throughput"]), se
    )


def _hidden_share(records: Sequence[dict]) -> tuple[float | None, str]:
    """The median measured overlap over the points at N > 1: the raw value (1 - exposed / standalone
    all-reduce) clipped to [0, 1], saying so when it had to be clipped."""
    raws = []
    for r in records:
        raw = an.num(r.get("overlap_raw"))
        raw = an.num(r.get("overlap")) if raw is None else raw
        if raw is not None and _int(r.get("world_size"), 1) > 1:
            raws.append(raw)
    if not raws:
        return None, "not measured (no overlap in the points): assumed 0; the fitted kappa absorbs any hiding"
    med = float(np.median(raws))
    note = f"measured: median overlap {med:.2f} over {len(raws)} point(s)"
    if med < 0:
        note += (
            " (negative: synchronized steps lost more than a standalone all-reduce takes, e.g. contention;"
            " taken as 0 hidden)"
        )
    elif med > 1:
        note += " (above 1 within the noise; taken as fully hidden)"
    return min(1.0, max(0.0, med)), note


def series_from_records(
    records: Sequence[dict],
    *,
    from_csv: bool = False,
    strategies: Sequence[str] | None = None,
    per_node: int | None = None,
) -> list[Series]:
    """Successful training points grouped into (workload, strategy) series, baselines kept aside."""
    ok = [r for r in records if (r.get("status") or "ok") == "ok" and not an.is_comm(r) and an.num(r.get("throughput"))]
    if from_csv:
        groups = _csv_groups(ok)
    else:
        workloads = an.group_by_workload(ok)
        groups = {an.workload_label(k, workloads): v for k, v in workloads.items()}
    out = []
    for label, pts in groups.items():
        bases = {r.get("framework"): r for r in pts if an.is_baseline(r)}
        by_strategy: dict[str, list[dict]] = {}
        for r in pts:
            if not an.is_baseline(r) and (not strategies or str(r["strategy"]) in strategies):
                by_strategy.setdefault(str(r["strategy"]), []).append(r)
        for strategy, spts in by_strategy.items():
            obs = sorted(map(_observed, spts), key=lambda o: (o.n, o.nodes))
            grads = [g for g in (an.num(r.get("grad_bytes")) for r in spts) if g]
            overlap, note = _hidden_share(spts)
            base = bases.get(spts[0].get("framework"))
            one = next((o for o in obs if o.n == 1), None)
            if base is not None:
                base_thr, base_name = an.num(base["throughput"]), f"{base['strategy']} baseline (measured)"
            elif one is not None:
                base_thr, base_name = one.throughput, f"{strategy} at N=1 (no separate baseline)"
            else:
                base_thr, base_name = obs[0].throughput / obs[0].n, f"{strategy} at N={obs[0].n} divided by N"
            out.append(
                Series(
                    workload=label,
                    strategy=strategy,
                    framework=str(spts[0].get("framework") or ""),
                    scaling=str(spts[0].get("scaling") or "weak"),
                    points=obs,
                    grad_bytes=grads[-1] if grads else None,
                    overlap=overlap,
                    overlap_note=note,
                    baseline_throughput=base_thr,
                    baseline_name=base_name,
                    per_node=per_node or max(o.n // max(1, o.nodes) for o in obs),
                )
            )
    return out


def _csv_groups(rows: Sequence[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for r in rows:
        scaling = r.get("scaling") or "weak"
        batch = an.num(r.get("global_batch") if scaling == "strong" else r.get("per_device_batch"))
        label = f"{r.get('model') or 'workload'} ({scaling} scaling" + (f", batch {batch:g})" if batch else ")")
        groups.setdefault(label, []).append(r)
    return groups


def read_csv(path: str | Path) -> list[dict]:
    """Rows of a points CSV (`distbench results export --csv` or hand-written: CSV_REQUIRED columns)."""
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            columns = reader.fieldnames or []
    except OSError as exc:
        raise BadInput(f"--csv {path}: {exc.strerror or exc}") from None
    missing = [c for c in CSV_REQUIRED if c not in columns]
    if missing:
        raise BadInput(
            f"--csv {path} lacks column(s) {', '.join(missing)} (needs {', '.join(CSV_REQUIRED)}; "
            f"optional {', '.join(CSV_OPTIONAL)})"
        )
    out = []
    for i, row in enumerate(rows, start=2):
        r = {k: v for k, v in row.items() if k and v not in ("", None)}  # an empty cell is an absent field
        for k in ("world_size", "per_device_batch", "throughput"):
            if an.num(r.get(k)) is None and (r.get("status") or "ok") == "ok":
                raise BadInput(f"--csv {path} line {i}: {k} is not a number ({r.get(k)!r})")
        out.append(r)
    return out


# -- interconnect figures
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
    """alpha and B from (ranks, bytes, seconds, buckets) all-reduce timings with the ring model,
    minimising the relative error (so small and large messages both count)."""
    samples = [s for s in samples if s[0] > 1 and s[2] > 0]
    if not samples:
        return None
    rows = np.array([[2 * (n - 1) / n * size / t, 2 * (n - 1) * k / t] for n, size, t, k in samples])
    inv_bw, alpha = _nnls2(rows, np.ones(len(samples)))
    return Link(1 / inv_bw, float(alpha), source, True) if inv_bw > 0 else None


def links_from_comm(records: Sequence[dict], sweep_id: str) -> dict[str, Link]:
    """Intra-node (nodes == 1) and inter-node (nodes > 1: ring over the nodes) links from `distbench comm`
    records (their per-size median times)."""
    out = {}
    for tier, want in (("intra", lambda m: m <= 1), ("inter", lambda m: m > 1)):
        samples = []
        for r in records:
            m = _int(r.get("nodes"), 1)
            if r.get("status") != "ok" or not want(m):
                continue
            n = m if m > 1 else _int(r.get("world_size"), 1)
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
        if (
            r.get("status") == "ok"
            and r.get("strategy") == strategy
            and _int(r.get("nodes"), 1) == 1
            and size
            and seconds
        ):
            samples.append((_int(r["world_size"]), size, seconds, buckets_for(strategy, size)))
    return fit_link(samples, f"the sweep's standalone all-reduce of the {strategy} gradients")


def buckets_for(strategy: str, grad_bytes: float | None, bucket_bytes: float | None = None) -> int:
    size = bucket_bytes or default_bucket_bytes(strategy)
    return max(1, math.ceil(grad_bytes / size)) if size and grad_bytes else 1


_TIER = re.compile(r"^\s*(intra|inter)\s*=\s*(.+)$", re.I)


def _tiered(values: Sequence[str], default_tier: Callable[[str], str] = lambda v: "intra") -> dict[str, str]:
    out = {}
    for v in values:
        m = _TIER.match(v)
        tier, value = (m.group(1).lower(), m.group(2).strip()) if m else (default_tier(v), v.strip())
        out[tier] = value
    return out


def explicit_links(
    profiles: Sequence[str], bws: Sequence[str], lats: Sequence[str], nics_per_node: int
) -> dict[str, Link]:
    """--link [TIER=]NAME, --link-bw TIER=GBPS, --link-latency TIER=US (a bare value is intra)."""
    out: dict[str, Link] = {}
    for tier, name in _tiered(profiles, lambda v: get_profile(v).tier).items():
        p = get_profile(name)
        k = nics_per_node if tier == "inter" else 1
        out[tier] = Link(
            p.bandwidth_gbps * 1e9 * k,
            p.latency_us * 1e-6,
            f"profile {p.name}: {p.description}" + (f", x{k} NICs" if k > 1 else ""),
            False,
        )
    bw = {t: _positive(v, "--link-bw", "GB/s", allow_inf=True) for t, v in _tiered(bws).items()}
    lat = {t: _positive(v, "--link-latency", "us", zero=True) for t, v in _tiered(lats).items()}
    for tier in set(bw) | set(lat):
        base = out.get(tier)
        if base is None and (tier in bw) != (tier in lat):
            has, needs, unit = (
                ("--link-bw", "--link-latency", "US") if tier in bw else ("--link-latency", "--link-bw", "GBPS")
            )
            raise BadInput(f"{has} {tier}=... needs {needs} {tier}={unit} too (or a --link profile)")
        out[tier] = Link(
            bw[tier] * 1e9 if tier in bw else base.bandwidth,
            lat[tier] * 1e-6 if tier in lat else base.latency,
            "--link-bw/--link-latency",
            False,
        )
    return out


def _positive(text: str, flag: str, unit: str, zero: bool = False, allow_inf: bool = False) -> float:
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if math.isnan(x) or x < 0 or (x == 0 and not zero) or (math.isinf(x) and not allow_inf):
        raise BadInput(f"{flag}: {text!r} is not a {'non-negative' if zero else 'positive'} number of {unit}")
    return x


# -- fitting
@dataclass
class Fit:
    a: float
    """compute seconds per sample on one device."""
    kappa: float
    comm: Callable[[int], float]
    """exposed-communication model before kappa: (1 - h) * T_comm(N)."""
    fitted_ns: list[int]
    resid_se: float | None

    def step_time(self, n: int, per_device_batch: float) -> float:
        return self.a * per_device_batch + self.kappa * self.comm(n)


def fit_points(points: Sequence[Observed], comm: Callable[[int], float]) -> Fit:
    """Least squares of the relative step-time error over (a, kappa), both >= 0."""
    t = np.array([p.step_time for p in points])
    c = np.array([comm(p.n) for p in points])
    rows = np.column_stack([[p.per_device_batch for p in points], c]) / t[:, None]
    a, kappa = _nnls2(rows, np.ones(len(points)))
    if not np.any(c > 0):
        kappa = 1.0  # no communication anywhere in the model: kappa cannot matter
    if a <= 0:
        raise BadInput("the measured points imply no compute time (a <= 0): check the throughput column")
    resid = np.log(t / (a * rows[:, 0] * t + kappa * c))
    dof = len(points) - 2
    resid_se = float(np.sqrt(np.sum(resid**2) / dof)) if dof > 0 else None
    return Fit(float(a), float(kappa), comm, sorted(p.n for p in points), resid_se)


def per_device_batch(series: Series, n: int) -> float:
    if series.scaling == "strong":
        ref = series.points[0]
        return ref.per_device_batch * ref.n / n
    return series.points[-1].per_device_batch


@dataclass
class Model:
    series: Series
    fit: Fit
    buckets: int
    model_error: float
    boot: list[Fit] = field(default_factory=list)

    def throughput(self, n: int, fit: Fit | None = None) -> float:
        b = per_device_batch(self.series, n)
        return n * b / (fit or self.fit).step_time(n, b)

    def interval(self, n: int) -> tuple[float, float, float]:
        """(throughput, 95% low, 95% high)."""
        thr = self.throughput(n)
        boot_var = float(np.var(np.log([self.throughput(n, f) for f in self.boot]))) if self.boot else 0.0
        doublings = max(0.0, math.log2(n / max(self.fit.fitted_ns)))
        sd = math.sqrt(boot_var + (self.model_error * doublings) ** 2)
        return thr, thr * math.exp(-an.Z95 * sd), thr * math.exp(an.Z95 * sd)


def comm_model(
    series: Series, intra: Link | None, inter: Link | None, algorithm: str, bucket_bytes: float | None
) -> tuple[Callable[[int], float], int]:
    grad = series.grad_bytes
    buckets = buckets_for(series.strategy, grad, bucket_bytes)
    hidden = series.overlap or 0.0

    def exposed(n: int) -> float:
        if n <= 1 or not grad:
            return 0.0
        return (1 - hidden) * allreduce_time(
            grad, n, series.per_node, intra, inter, algorithm=algorithm, buckets=buckets, strategy=series.strategy
        )

    return exposed, buckets


def build_model(
    series: Series,
    intra: Link | None,
    inter: Link | None,
    *,
    algorithm: str = "auto",
    bucket_bytes: float | None = None,
    points: Sequence[Observed] | None = None,
    model_error: float = MODEL_ERROR_PER_DOUBLING,
    seed: int = 0,
    bootstrap: int = BOOTSTRAP,
) -> Model:
    points = list(points if points is not None else series.points)
    comm, buckets = comm_model(series, intra, inter, algorithm, bucket_bytes)
    fit = fit_points(points, comm)
    rng = np.random.default_rng(seed)
    spread = fit.resid_se or DEFAULT_MEASUREMENT_SE
    boot = []
    for _ in range(bootstrap):
        redrawn = [
            replace(p, throughput=p.throughput * math.exp(rng.normal(0, p.se if p.se is not None else spread)))
            for p in points
        ]
        try:
            boot.append(fit_points(redrawn, comm))
        except BadInput:
            pass  # a redraw that implies no compute time is left out
    return Model(series, fit, buckets, model_error, boot)


# -- validation
def holdout(
    series: Series, intra, inter, *, keep: int | None = None, algorithm: str = "auto", bucket_bytes: float | None = None
) -> list[dict]:
    """Fit on the smallest `keep` distinct N (default: all but the largest) and predict every larger
    measured N: [{'n', 'measured', 'predicted', 'low', 'high', 'error'}]."""
    ns = sorted({p.n for p in series.points})
    keep = keep or len(ns) - 1
    if keep < 2 or keep >= len(ns):
        return []
    fitted_on = ns[:keep]
    train = [p for p in series.points if p.n in fitted_on]
    model = build_model(series, intra, inter, algorithm=algorithm, bucket_bytes=bucket_bytes, points=train)
    checks = []
    for p in series.points:
        if p.n > fitted_on[-1]:
            thr, lo, hi = model.interval(p.n)
            checks.append(
                {
                    "n": p.n,
                    "nodes": p.nodes,
                    "fitted_on": fitted_on,
                    "measured": p.throughput,
                    "predicted": thr,
                    "low": lo,
                    "high": hi,
                    "error": thr / p.throughput - 1,
                    "covered": lo <= p.throughput <= hi,
                }
            )
    return checks


def own_error_per_doubling(checks: Sequence[dict]) -> float:
    vals = [abs(math.log(1 + c["error"])) / math.log2(c["n"] / max(c["fitted_on"])) for c in checks]
    return max(vals, default=0.0)


# -- the prediction
def target_counts(series: Sequence[Series], gpus: Sequence[int] | None) -> list[int]:
    if gpus:
        return sorted(set(gpus))
    top = max(p.n for s in series for p in s.points)
    return [top * 2**k for k in range(1, 5)]


def predict(
    series: Sequence[Series],
    links: dict[str, Link],
    link_per_series: Callable[[Series], Link | None],
    *,
    gpus: Sequence[int] | None,
    algorithm: str = "auto",
    bucket_bytes: float | None = None,
    epoch_samples: int | None = None,
    target_throughput: float | None = None,
    epoch_time: float | None = None,
    gpu_hour_price: float | None = None,
) -> dict:
    """The whole prediction document (JSON-able). Raises BadInput for what cannot be predicted."""
    if not series:
        raise BadInput("no successful training points to predict from")
    ns = target_counts(series, gpus)
    out_series = []
    for s in series:
        measured_ns = ", ".join(str(p.n) for p in s.points)
        if len({p.n for p in s.points}) < 2:
            raise BadInput(
                f"{s.strategy} ({s.workload}) has fewer than two successful points at different N "
                f"(N = {measured_ns}): nothing to fit"
            )
        if not s.grad_bytes:
            raise BadInput(f"{s.strategy} ({s.workload}): no gradient size in the points; pass --grad-bytes")
        intra = links.get("intra") or link_per_series(s)
        if intra is None:
            raise BadInput(
                f"no intra-node link figure for {s.strategy}: pass --comm SWEEP, --link PROFILE or "
                "--link-bw intra=GBPS --link-latency intra=US"
            )
        inter = links.get("inter")
        needs_inter = [n for n in ns if n > s.per_node] + [p.n for p in s.points if p.nodes > 1]
        if needs_inter and inter is None:
            raise BadInput(
                f"N={needs_inter[0]} spans several nodes ({s.per_node} devices per node) but there is no "
                "inter-node figure: pass --link inter=PROFILE, --link-bw inter=GBPS --link-latency "
                "inter=US or a multi-node --comm sweep"
            )
        if reduces_to_one(s.strategy) and needs_inter:
            raise BadInput("dp (DataParallel) runs in one process on one node: ask for N up to --gpus-per-node")
        checks = holdout(s, intra, inter, algorithm=algorithm, bucket_bytes=bucket_bytes)
        model_error = max(MODEL_ERROR_PER_DOUBLING, own_error_per_doubling(checks))
        model = build_model(s, intra, inter, algorithm=algorithm, bucket_bytes=bucket_bytes, model_error=model_error)
        fit = model.fit
        rows = []
        for n in ns:
            thr, lo, hi = model.interval(n)
            b = per_device_batch(s, n)
            speedup = [x / s.baseline_throughput for x in (thr, lo, hi)]
            row = {
                "n": n,
                "nodes": math.ceil(n / s.per_node),
                **_bounds("throughput", thr, lo, hi),
                **_bounds("speedup", *speedup),
                "per_device_batch": b,
                "exposed_comm_s": fit.kappa * fit.comm(n),
                "step_time_s": fit.step_time(n, b),
                **_bounds("efficiency", *(x / n for x in speedup)),
            }
            if epoch_samples:  # the epoch's low bound comes from the throughput's high bound
                epoch = [epoch_samples / x for x in (thr, hi, lo)]
                row.update(_bounds("epoch_s", *epoch))
                if gpu_hour_price is not None:
                    row.update(_bounds("epoch_cost", *(x / 3600 * n * gpu_hour_price for x in epoch)))
            rows.append(row)
        entry = {
            "workload": s.workload,
            "strategy": s.strategy,
            "scaling": s.scaling,
            "per_node": s.per_node,
            "measured": [
                {"n": p.n, "nodes": p.nodes, "throughput": p.throughput, "fitted": model.throughput(p.n)}
                for p in s.points
            ],
            "predicted": rows,
            "validation": checks,
            "parameters": {
                "compute_s_per_sample": fit.a,
                "kappa": fit.kappa,
                "buckets": model.buckets,
                "hidden_share": s.overlap,
                "model_error_per_doubling": model_error,
                "bootstrap_fits": len(model.boot),
            },
            "inputs": {
                "measured": [
                    f"throughput at N = {measured_ns}",
                    f"gradient bytes {s.grad_bytes:.4g}",
                    f"hidden share: {s.overlap_note}",
                    f"speedup baseline: {s.baseline_name}",
                ],
                "links": {"intra": intra.describe(), "inter": inter.describe() if inter else None},
                "assumed": _assumptions(s, model, algorithm, bucket_bytes),
            },
        }
        # Without an inter-node figure (or for dp, one process) the search stays on one node.
        limit = s.per_node if inter is None or reduces_to_one(s.strategy) else 65536
        if target_throughput is not None:
            entry["gpus_for_throughput"] = _needed(model, s, lambda thr: thr >= target_throughput, limit)
        if epoch_samples and epoch_time is not None:
            entry["gpus_for_epoch_time"] = _needed(model, s, lambda thr: epoch_samples / thr <= epoch_time, limit)
        out_series.append(entry)
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpus": ns,
        "algorithm": algorithm,
        "epoch_samples": epoch_samples,
        "target_throughput": target_throughput,
        "epoch_time": epoch_time,
        "gpu_hour_price": gpu_hour_price,
        "series": out_series,
    }


def _bounds(name: str, value: float, low: float, high: float) -> dict[str, float]:
    return {name: value, f"{name}_low": low, f"{name}_high": high}


def _assumptions(s: Series, model: Model, algorithm: str, bucket_bytes) -> list[str]:
    default_bucket = default_bucket_bytes(s.strategy)
    if bucket_bytes:
        bucket_size = f" ({bucket_bytes / 2**20:g} MiB, --bucket-mb)"
    else:
        bucket_size = f" ({default_bucket / 2**20:g} MiB default)" if default_bucket else " (one message)"
    return [
        f"compute per sample is the same at every N ({s.scaling} scaling: per-device batch "
        + ("fixed" if s.scaling != "strong" else "= global batch / N")
        + ")",
        f"all-reduce algorithm: {algorithm} (auto = ring on one node, hierarchical across nodes)",
        f"{model.buckets} bucket(s) of the gradients{bucket_size}",
        f"devices per node: {s.per_node}",
        f"the fitted communication scale kappa = {model.fit.kappa:.3g} holds at every N and on every tier",
    ]


def _needed(model: Model, s: Series, ok: Callable[[float], bool], limit: int = 65536) -> dict:
    """Smallest N among powers of two and power-of-two node counts whose predicted throughput meets the
    goal, and the smallest whose 95% lower bound does."""
    best = conservative = None
    for n in sorted({n for k in range(17) for n in (2**k, s.per_node * 2**k) if n <= limit}):
        thr, lo, _ = model.interval(n)
        if best is None and ok(thr):
            best = n
        if conservative is None and ok(lo):
            conservative = n
            break
    return {"n": best, "n_at_lower_bound": conservative, "searched_up_to": limit}


# -- the store
def save(store, sweep_id: str | None, command: str, document: dict) -> int:
    """One row in the `predictions` table (never in points: measured tables stay measured)."""
    from distbench import __version__

    return store._write(
        "save a prediction",
        lambda: (
            store.conn.execute(
                "INSERT INTO predictions (sweep_id, created, command, version, prediction_json) VALUES (?, ?, ?, ?, ?)",
                (sweep_id, document["created"], command, __version__, json.dumps(document, default=str)),
            ).lastrowid
        ),
    )


def latest_for(store_path: str, sweep_id: str) -> dict | None:
    """The newest stored prediction made from this sweep, or None (also for stores without the table)."""
    import sqlite3

    if not store_path or not Path(store_path).exists():
        return None
    try:
        with closing(sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)) as conn:
            row = conn.execute(
                "SELECT id, command, prediction_json FROM predictions WHERE sweep_id = ? ORDER BY id DESC LIMIT 1",
                (sweep_id,),
            ).fetchone()
    except sqlite3.Error:
        return None
    if row is None:
        return None
    return {**json.loads(row[2]), "prediction_id": row[0], "command": row[1]}


# -- presenting
def _pi(value: float, low: float, high: float, fmt: str | Callable[[float], str]) -> str:
    """'value [low, high]', formatted with a format spec or a function."""
    text = fmt if callable(fmt) else lambda x: format(x, fmt)
    return f"{text(value)} [{text(low)}, {text(high)}]"


def _row_pi(row: dict, key: str, fmt: str | Callable[[float], str]) -> str:
    return _pi(row[key], row[f"{key}_low"], row[f"{key}_high"], fmt)


def table_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """One row per predicted (strategy, N): PREDICTED values with their 95% prediction intervals."""
    multi = len({s["workload"] for s in doc["series"]}) > 1
    has_epoch, has_cost = bool(doc.get("epoch_samples")), doc.get("gpu_hour_price") is not None
    headers = (["workload"] if multi else []) + [
        "strategy",
        "N",
        "nodes",
        "predicted throughput [95% PI]",
        "speedup [95% PI]",
        "efficiency [95% PI]",
    ]
    if has_epoch:
        headers.append(f"time per epoch of {doc['epoch_samples']:,} samples")
        if has_cost:
            headers.append(f"cost per epoch at {doc['gpu_hour_price']:g}/GPU-hour")
    rows = []
    for s in doc["series"]:
        for p in s["predicted"]:
            cells = ([s["workload"]] if multi else []) + [
                s["strategy"],
                str(p["n"]),
                str(p["nodes"]),
                _row_pi(p, "throughput", ".4g"),
                _row_pi(p, "speedup", ".3g"),
                _row_pi(p, "efficiency", ".0%"),
            ]
            if has_epoch:
                cells.append(_row_pi(p, "epoch_s", an.format_duration))
                if has_cost:
                    cells.append(_row_pi(p, "epoch_cost", ".2f"))
            rows.append(cells)
    return headers, rows


def validation_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    headers = ["strategy", "held out", "fitted on N", "measured", "predicted [95% PI]", "error", "inside PI"]
    rows = [
        [
            s["strategy"],
            f"N={c['n']}",
            ", ".join(map(str, c["fitted_on"])),
            f"{c['measured']:.4g}",
            _pi(c["predicted"], c["low"], c["high"], ".4g"),
            f"{c['error']:+.1%}",
            "yes" if c["covered"] else "no",
        ]
        for s in doc["series"]
        for c in s["validation"]
    ]
    return headers, rows


def summary_lines(doc: dict) -> list[str]:
    lines = []
    for s in doc["series"]:
        par, links = s["parameters"], s["inputs"]["links"]
        lines.append(
            f"{s['strategy']} ({s['workload']}): compute {par['compute_s_per_sample'] * 1e3:.4g} ms/sample, "
            f"kappa {par['kappa']:.3g}, {par['buckets']} bucket(s); intra link {links['intra']}"
            + (f"; inter link {links['inter']}" if links["inter"] else "")
        )
        lines += [f"  {what}: " + "; ".join(s["inputs"][what]) for what in ("measured", "assumed")]
        for key, what in (
            ("gpus_for_throughput", f"{doc.get('target_throughput')} samples/s"),
            ("gpus_for_epoch_time", f"an epoch within {an.format_duration(doc.get('epoch_time') or 0)}"),
        ):
            hit = s.get(key)
            if hit:
                lines.append(
                    f"  devices for {what}: "
                    + (f"{hit['n']} predicted" if hit["n"] else f"not reached up to N={hit.get('searched_up_to')}")
                    + (
                        f", {hit['n_at_lower_bound']} with the 95% lower bound"
                        if hit["n_at_lower_bound"]
                        else ", not reached at the 95% lower bound"
                    )
                )
        if not s["validation"]:
            lines.append("  leave-largest-N-out: needs at least 3 measured N")
    lines.append(
        "intervals: 95% prediction intervals = bootstrap refits over the measured points' own spread + a "
        "model error per doubling of N beyond the largest fitted N (docs/prediction.md)"
    )
    errors = [abs(c["error"]) for s in doc["series"] for c in s["validation"]]
    if errors:
        lines.append(
            f"leave-largest-N-out on this sweep: median |error| {np.median(errors):.1%}, worst {max(errors):.1%}"
        )
    return lines


def plot(doc: dict):
    """Measured points (filled markers, solid lines) and predicted ones (hollow markers, dashed lines,
    shaded 95% prediction interval): never the same style."""
    from matplotlib.figure import Figure
    from distbench.report import _mpl, _n_axis, _render

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    ns = []
    for s in doc["series"]:
        mx, px = ([p["n"] for p in s[k]] for k in ("measured", "predicted"))
        (measured,) = ax.plot(
            mx, [m["throughput"] for m in s["measured"]], "o-", label=_mpl(f"{s['strategy']} measured")
        )
        color = measured.get_color()  # the next colour of the cycle, shared by the strategy's predicted line
        pred = {k: [p[k] for p in s["predicted"]] for k in ("throughput", "throughput_low", "throughput_high")}
        ax.plot(px, pred["throughput"], "o--", mfc="none", color=color, label=_mpl(f"{s['strategy']} predicted"))
        ax.fill_between(px, pred["throughput_low"], pred["throughput_high"], color=color, alpha=0.15)
        ns += mx + px
    _n_axis(ax, ns)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title("Measured (filled) and predicted (hollow, dashed, 95% PI shaded)")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _render(fig, "predicted", "Predicted throughput")


PREDICTION_NOTE = (
    "PREDICTED, not measured: from `distbench predict` (alpha-beta communication model fitted on this "
    "sweep's measured points; docs/prediction.md). These rows are never part of the measured tables "
    "above. Intervals are 95% prediction intervals."
)

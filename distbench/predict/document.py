"""The prediction document (JSON-able): per series the predicted rows beside the naive guess, the fitted
physical parameters with what they imply, held-out scores, warnings, what to measure next and the what-ifs."""

from __future__ import annotations

import datetime as _dt
import math
from typing import Callable, Sequence

from distbench.core import mfu
from distbench.core.errors import BadInput
from distbench.predict.fit import build_model
from distbench.predict.links import Link, default_bucket_bytes, reduces_to_one, traffic_factor
from distbench.predict.model import StepTimeModel, per_device_batch
from distbench.predict.profiled import pick_record, profile_timeline
from distbench.predict.single import build_single, one_device_sources, one_device_timeline, timeline_doc
from distbench.predict.sources import Series
from distbench.predict.validate import holdout, next_measurement, own_error_per_doubling, score, verdict_lines
from distbench.predict.whatif import link_what_ifs
from distbench.run import devices


def physical_cores() -> int:
    """The physical cores of the CPUs this process may use (CPU workers share them): the same count `scale`
    sizes its CPU workers by (hyperthreads share a core's execution units)."""
    return mfu.physical_cores(devices.cpu_cores())


def target_counts(series: Sequence[Series], gpus: Sequence[int] | None) -> list[int]:
    if gpus:
        return sorted(set(gpus))
    top = max(p.n for s in series for p in s.points)
    return [top * 2**k for k in range(1, 5)]


def _check_inputs(s: Series, ns, intra, inter) -> None:
    measured_ns = ", ".join(str(p.n) for p in s.points)
    if {p.n for p in s.points} == {1} and intra is None:
        raise BadInput(
            f"{s.strategy} ({s.workload}): a single measured point (N=1) needs the links: pass --link PROFILE, "
            "--link-bw intra=GBPS --link-latency intra=US or --comm SWEEP"
        )
    if len({p.n for p in s.points}) < 2 and {p.n for p in s.points} != {1}:
        raise BadInput(
            f"{s.strategy} ({s.workload}) has fewer than two successful points at different N "
            f"(N = {measured_ns}): nothing to fit (measure another --gpus count, or leave it out with --strategy)"
        )
    if not s.grad_bytes:
        raise BadInput(f"{s.strategy} ({s.workload}): no gradient size in the points; pass --grad-bytes")
    if intra is None:
        raise BadInput(
            f"no intra-node link figure for {s.strategy}: pass --comm SWEEP, --link PROFILE or "
            "--link-bw intra=GBPS --link-latency intra=US"
        )
    needs_inter = [n for n in ns if n > s.per_node] + [p.n for p in s.points if p.nodes > 1]
    if needs_inter and inter is None:
        raise BadInput(
            f"N={needs_inter[0]} spans several nodes ({s.per_node} devices per node) but there is no "
            "inter-node figure: pass --link inter=PROFILE, --link-bw inter=GBPS --link-latency "
            "inter=US or a multi-node --comm sweep"
            + (" (from one device, --gpus-per-node says how many devices a node has)" if s.per_node == 1 else "")
        )
    if reduces_to_one(s.strategy) and needs_inter:
        raise BadInput("dp (DataParallel) runs in one process on one node: ask for N up to --gpus-per-node")


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
    what_if: Sequence[str] = (),
    cores: int | None = None,
    what_if_links: Sequence = (),
    profile_records: Sequence[dict] | None = None,
) -> dict:
    """The whole prediction document (`profile_records`: a `distbench profile` sweep's points, whose one-device
    trace gives the bucket ready times of a prediction from one device). Raises BadInput for what cannot be
    predicted."""
    if not series:
        raise BadInput(
            "no successful training points to predict from (SWEEP or --csv: no row with status ok and a throughput)"
        )
    ns_all = target_counts(series, gpus)
    out_series, warnings = [], []
    for s in series:
        ns = ns_all
        who = s.strategy if sum(x.strategy == s.strategy for x in series) == 1 else f"{s.strategy} ({s.workload})"
        if s.device == "cpu":
            limit = cores or physical_cores()
            beyond = [n for n in ns if n > limit]
            if beyond:
                warnings.append(
                    f"{who}: N={', '.join(map(str, beyond))} not predicted: CPU workers share this machine's "
                    f"{limit} physical cores, so beyond {limit} workers compute per sample is not constant"
                )
            contended = sorted({p.n for p in s.points if p.n > limit})
            if contended:
                warnings.append(
                    f"{who}: measured N={', '.join(map(str, contended))} ran more CPU workers than the "
                    f"{limit} physical cores: their compute per sample is contended, and the fit takes it for "
                    "communication or waiting (the exposed share and anchor are biased); measure at most "
                    f"N={limit}"
                )
            ns = [n for n in ns if n <= limit]
            if not ns:
                asked = "--gpus: every requested N" if gpus else "every default N (2x to 16x the largest measured)"
                raise BadInput(
                    f"{asked} exceeds the {limit} physical cores the CPU workers of {s.strategy} share; "
                    f"predict at most N={limit} (--gpus)"
                )
        intra = links.get("intra") or link_per_series(s)
        inter = links.get("inter")
        _check_inputs(s, ns, intra, inter)
        kw = {"algorithm": algorithm, "bucket_bytes": bucket_bytes}
        one = {p.n for p in s.points} == {1}
        if one:
            timeline, share = one_device_timeline(s, bucket_bytes), None
            if profile_records is not None:
                record = pick_record(profile_records, s.model, "--profile")
                timeline, beta = profile_timeline(record, bucket_bytes or default_bucket_bytes(s.strategy), "--profile")
                share = (beta, beta, beta, f"measured by the profile ({beta:.2f} of the profiled step)")
            model = build_single(s, intra, inter, timeline=timeline, backward_share=share, **kw)
            checks = []
        else:
            if profile_records is not None:
                warnings.append(f"{who}: --profile is used from one device only; {len(s.points)} points are measured")
            checks = holdout(s, intra, inter, **kw)
            model = build_model(s, intra, inter, **kw)
        own = own_error_per_doubling(checks)
        if own > model.model_error:
            model.model_error_source = (
                f"this sweep's own leave-largest-N-out error per doubling (above the shipped {model.model_error:.3g} "
                "calibrated on the tuning sources)"
            )
            model.model_error = own
        for link in (intra, inter):
            warnings += [f"{who}: {w}" for w in (link.warnings if link else [])]
        warnings += [f"{who}: {w}" for w in model.warnings]
        rows = [_row(model, s, n, epoch_samples, gpu_hour_price) for n in ns]
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
            "validation_score": score(checks),
            "verdict": verdict_lines(checks),
            "parameters": _parameters(model),
            "inputs": {
                "measured": [
                    f"throughput at N = {', '.join(str(p.n) for p in s.points)}",
                    f"gradient bytes {s.grad_bytes:,.0f}",
                    f"hidden share: {s.overlap_note}",
                    f"rank step-time spread: {s.rank_sd_note}",
                    f"speedup baseline: {s.baseline_name}",
                ],
                "links": {"intra": intra.describe(), "inter": inter.describe() if inter else None},
                "assumed": _assumptions(s, model, algorithm, bucket_bytes),
                "from_one_device": one_device_sources(s, model, intra, inter, bucket_bytes) if one else None,
            },
            "bucket_timeline": timeline_doc(model),
            "next_measurement": None if one else next_measurement(model, s, intra, inter, max(ns), **kw),
            "what_if": _what_ifs(model, s, intra, inter, ns, what_if, kw) + link_what_ifs(model, what_if_links, ns),
        }
        limit = s.per_node if inter is None or reduces_to_one(s.strategy) else 65536
        if target_throughput is not None:
            entry["gpus_for_throughput"] = _needed(model, s, lambda thr: thr >= target_throughput, limit)
        if epoch_samples and epoch_time is not None:
            entry["gpus_for_epoch_time"] = _needed(model, s, lambda thr: epoch_samples / thr <= epoch_time, limit)
        out_series.append(entry)
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpus": ns_all,
        "algorithm": algorithm,
        "epoch_samples": epoch_samples,
        "target_throughput": target_throughput,
        "epoch_time": epoch_time,
        "gpu_hour_price": gpu_hour_price,
        "warnings": warnings,
        "series": out_series,
        "order_checks": order_checks(out_series),
    }


def _row(model: StepTimeModel, s: Series, n: int, epoch_samples, gpu_hour_price) -> dict:
    thr, lo, hi = model.interval(n)
    b = per_device_batch(s, n)
    speedup = [x / s.baseline_throughput for x in (thr, lo, hi)]
    parts = model.parts(n)
    row = {
        "n": n,
        "nodes": math.ceil(n / s.per_node),
        **_bounds("throughput", thr, lo, hi),
        "naive_throughput": model.naive(n),
        **_bounds("speedup", *speedup),
        "per_device_batch": b,
        "compute_s": parts["compute_s"],
        "exposed_comm_s": parts["comm_intra_s"] + parts["comm_inter_s"],
        "slow_rank_s": parts["slow_rank_s"],
        "capped_at_compute_limit": model.capped(n),
        "straggler_s": parts["straggler_s"],
        "host_loss_s": sum(parts.values()) * math.expm1(model.host_loss(n)),
        "step_time_s": sum(parts.values()) * math.exp(model.host_loss(n)),
        "crosses_nodes_unmeasured": model.crosses(n),
        **_bounds("efficiency", *(x / n for x in speedup)),
    }
    if epoch_samples:  # the epoch's low bound comes from the throughput's high bound
        epoch = [epoch_samples / x for x in (thr, hi, lo)]
        row.update(_bounds("epoch_s", *epoch))
        if gpu_hour_price is not None:
            row.update(_bounds("epoch_cost", *(x / 3600 * n * gpu_hour_price for x in epoch)))
    return row


def _gbps(x: float) -> float | None:
    return None if x is None or math.isinf(x) else x / 1e9


def _parameters(model: StepTimeModel) -> dict:
    """Every parameter as a physical quantity: value, unit, where it came from, the range the interval spans."""
    tiers = {}
    for name, t in model.tiers.items():
        tiers[name] = {
            "achieved_gbps": _gbps(t.bw),
            "range_gbps": [_gbps(t.lo), _gbps(t.hi)],
            "interval_spans_gbps": [_gbps(t.span[0]), _gbps(t.span[1])],
            "nominal_gbps": _gbps(t.nominal_bw),
            "latency_us": None if t.link is None else t.link.latency * 1e6,
            "line_rate_gbps": None if t.link is None else _gbps(t.link.line_rate),
            "framing": None if t.link is None else t.link.framing.describe(),
            "payload_share": None if t.link is None else t.link.framing.share,
            "source": t.source,
            "exercised_by_measured_points": t.exercised,
            "identified": t.identified,
            "at_bound": t.at_bound,
            "unbounded_fit_wanted_gbps": _gbps(t.wanted),
        }
    s = model.series
    return {
        "compute_s_per_sample": model.a,
        "anchored_at_n": model.ref_n,
        "tiers": tiers,
        "backward_share": model.beta,
        "backward_share_range": list(model.beta_span),
        "backward_share_source": model.beta_source,
        "straggler_sigma_s": model.sigma,
        "straggler_source": "measured" if s.rank_sd else "not measured",
        "slow_rank_pace_sd_s": model.pace_sd,
        "slow_rank_source": s.pace_note,
        "host_loss_per_doubling": model.loss_per_doubling,
        "host_loss_crossing": model.loss_crossing,
        "buckets": model.buckets,
        "bucket_range": list(model.bucket_span),
        "bucket_source": model.bucket_source,
        "bucket_mib": (s.grad_bytes or 0) * model.traffic / model.buckets / 2**20,
        "anchor_se": model.anchor_se,
        "anchor_se_source": model.anchor_se_source,
        "model_error_source": model.model_error_source,
        "crossing_sd": model.crossing_sd,
        "crossing_bias": model.crossing_bias,
        "traffic_factor": model.traffic,
        "hidden_share": s.overlap,
        "model_error_per_doubling": model.model_error,
        "model_bias_per_doubling": model.model_bias,
        "fit_residual_se": model.resid_se,
    }


def parameter_lines(par: dict) -> list[str]:
    """Each parameter with its unit and source (measured / profile / fitted / assumed)."""
    lines = [
        f"compute per sample {par['compute_s_per_sample'] * 1e3:.4g} ms (measured: anchored at N={par['anchored_at_n']})"
    ]
    for name, t in par.get("tiers", {}).items():
        if t.get("achieved_gbps") is None:
            continue
        src = t["source"]
        if src != "fitted" and "from one device" not in src:
            src += " (not constrained by the measured points: the value closest to the naive guess)"
        text = (
            f"{name}-node achieved bandwidth {t['achieved_gbps']:.3g} GB/s [{src}; plausible "
            f"{t['range_gbps'][0]:.3g}..{t['range_gbps'][1]:.3g} GB/s of {t['nominal_gbps']:.3g} nominal; the interval "
            f"spans {t['interval_spans_gbps'][0]:.3g}..{t['interval_spans_gbps'][1]:.3g}], latency {t['latency_us']:.3g} us"
        )
        if t.get("at_bound"):
            text += " -- AT ITS BOUND"
        lines.append(text)
    share = par.get("backward_share_range") or [par.get("backward_share")] * 2
    buckets = par.get("bucket_range") or [par["buckets"]] * 2
    spans = f"; the interval spans {buckets[0]}..{buckets[1]}" if buckets[0] != buckets[1] else ""
    lines.append(
        f"backward share {par['backward_share']:.2f} [{par['backward_share_source']}; range {share[0]:.2f}..{share[1]:.2f}], "
        f"{par['buckets']} bucket(s) of {par['bucket_mib']:.3g} MiB [{par.get('bucket_source', 'registry')}{spans}], "
        f"straggler sigma {par.get('straggler_sigma_s', 0) * 1e3:.3g} ms [{par.get('straggler_source', 'measured')}]"
    )
    if "anchor_se" in par:
        lines.append(
            f"interval terms: anchor error {par['anchor_se']:.1%} [{par['anchor_se_source']}]; model error "
            f"{par['model_error_per_doubling']:.3g} per doubling of N [{par['model_error_source']}]; bias "
            f"{par['model_bias_per_doubling']:+.3g} per doubling, crossing to unmeasured nodes sd "
            f"{par['crossing_sd']:.3g} and bias {par['crossing_bias']:+.3g} [calibrated on the tuning sources, "
            "docs/prediction.md]"
        )
    return lines


def _what_ifs(model: StepTimeModel, s: Series, intra, inter, ns, what_if: Sequence[str], kw: dict) -> list[dict]:
    out = []
    for other in what_if:
        if other == s.strategy:
            continue
        m = build_model(s, intra, inter, traffic_of=other, base=model, **kw)
        rows = []
        for n in ns:
            thr, lo, hi = m.interval(n)
            rows.append({"n": n, **_bounds("throughput", thr, lo, hi)})
        at_measured = {str(p.n): m.throughput(p.n) for p in s.points}
        out.append(
            {
                "strategy": other,
                "traffic": traffic_factor(other)[1],
                "assumes": f"{s.strategy}'s fitted compute, straggler spread, achieved link bandwidths and backward "
                f"share carry over to {other}'s traffic and buckets; {other}'s own overlap is not measured",
                "buckets": m.buckets,
                "predicted": rows,
                "at_measured_n": at_measured,
            }
        )
    return out


def order_checks(entries: Sequence[dict]) -> list[dict]:
    """Where two strategies of one workload were both measured at the same N, and a what-if of one predicts
    the other: does the predicted order match the measured order?"""
    checks = []
    by_workload: dict[str, dict[str, dict]] = {}
    for e in entries:
        by_workload.setdefault(e["workload"], {})[e["strategy"]] = e
    for workload, group in by_workload.items():
        for name, e in group.items():
            own = {m["n"]: m for m in e["measured"]}
            for w in e.get("what_if", []):
                other = group.get(w["strategy"])
                if not other:
                    continue
                theirs = {m["n"]: m["throughput"] for m in other["measured"]}
                for key, predicted_other in w.get("at_measured_n", {}).items():
                    n = int(key)
                    if n > 1 and n in own and n in theirs:
                        predicted = own[n]["fitted"] > predicted_other
                        measured = own[n]["throughput"] > theirs[n]
                        checks.append(
                            {
                                "workload": workload,
                                "n": n,
                                "pair": [name, w["strategy"]],
                                "agrees": predicted == measured,
                            }
                        )
    return checks


def _bounds(name: str, value: float, low: float, high: float) -> dict[str, float]:
    return {name: value, f"{name}_low": low, f"{name}_high": high}


def _assumptions(s: Series, model: StepTimeModel, algorithm: str, bucket_bytes) -> list[str]:
    default_bucket = default_bucket_bytes(s.strategy)
    if bucket_bytes:
        bucket_size = f" ({bucket_bytes / 2**20:g} MiB, --bucket-mb)"
    else:
        bucket_size = f" ({default_bucket / 2**20:g} MiB default)" if default_bucket else " (one message)"
    inter = model.tiers["inter"]
    inter_text = (
        "fitted on measured multi-node points"
        if inter.fitted
        else "not constrained by measured points: the link's figure, its plausible range "
        f"{inter.lo / 1e9:.3g}..{inter.hi / 1e9:.3g} GB/s in the interval"
        if inter.link is not None
        else "none (one node)"
    )
    return [
        f"compute per sample is the same at every N, taken at N={model.ref_n} ({s.scaling} scaling: per-device batch "
        + ("fixed" if s.scaling != "strong" else "= global batch / N")
        + ")",
        f"all-reduce algorithm: {algorithm} (auto = ring on one node, hierarchical across nodes)",
        f"{model.buckets} bucket(s) of the gradients{bucket_size}; traffic {model.traffic:g}x an all-reduce",
        f"devices per node: {s.per_node}",
        "exposed communication: the bucket pipeline (each bucket reduced once ready and the link is free; "
        f"ready times {model.timeline_for(model.buckets).source})",
        f"inter-node achieved bandwidth: {inter_text}",
    ]


def _needed(model: StepTimeModel, s: Series, ok: Callable[[float], bool], limit: int = 65536) -> dict:
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

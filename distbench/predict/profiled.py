"""Bucket ready times measured by a one-device `distbench profile`: its trace's gradient accumulations.

In a profiled step, backward accumulates each parameter tensor's gradient once (torch's AccumulateGrad, one
event per tensor, in the order backward produces them). Walking those events in time order from the model's last
layer back (layers.tensors_per_layer says how many tensors each layer holds), a layer is ready when its last
tensor's accumulation ends; the backward span runs from the first backward operation's start to the last
accumulation's end. The ready fraction of a layer is its ready time's share of that span, averaged over the
profiled steps; the backward share is the span over the profiled step (the mean over steps). Buckets fill with
the layers' bytes in that order (layers.flops_timeline's rule)."""

from __future__ import annotations

import statistics
from typing import Sequence

from distbench.core.errors import BadInput
from distbench.predict import layers, pipeline
from distbench.profile import breakdown
from distbench.profile.trace import load_trace

ACCUMULATE = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
BACKWARD = "autograd::engine::evaluate_function: "


def _step_ready(events: list[dict], start: float, end: float, counts: Sequence[int]) -> tuple[list[float], float]:
    """(ready fraction per layer in backward order, backward share) of one profiled step."""
    inside = [e for e in events if e.get("ph") == "X" and start <= float(e.get("ts", -1)) <= end]
    acc = sorted((float(e["ts"]) + float(e.get("dur", 0)) for e in inside if e.get("name") == ACCUMULATE))
    if len(acc) != sum(counts):
        raise ValueError(f"{len(acc)} gradient accumulations in a profiled step, the model has {sum(counts)} tensors")
    first = min(float(e["ts"]) for e in inside if str(e.get("name", "")).startswith(BACKWARD))
    span = acc[-1] - first
    out, i = [], 0
    for k in reversed(counts):
        i += k
        out.append((acc[i - 1] - first) / span if span > 0 else 1.0)
    return out, span / (end - start)


def profile_timeline(record: dict, bucket_bytes: float | None, flag: str) -> tuple[pipeline.Timeline, float]:
    """(timeline, backward share) from a profiled one-device record (its trace file). BadInput naming `flag`
    where the record or its trace cannot give them."""
    name = str(record.get("model") or "")
    cfg = record.get("config") if isinstance(record.get("config"), dict) else {}
    side, seq = record.get("image_size") or cfg.get("image_size"), record.get("seq_len") or cfg.get("seq_len")
    counts, table = layers.tensors_per_layer(name), layers.model_layers(name, side, seq)
    if not counts or not table:
        raise BadInput(f"{flag}: no layer table for the profiled model {name!r} (distbench/predict/layers.py)")
    path = record.get("profile_trace")
    if not path:
        raise BadInput(f"{flag}: the profiled point kept no trace file ({record.get('profile_note') or 'no path'})")
    try:
        events = breakdown.events_of(load_trace(path))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{flag}: its trace {path} cannot be read: {exc}") from None
    fractions, shares = [], []
    for start, end in breakdown.step_windows(events):
        try:
            f, share = _step_ready(events, start, end, counts)
        except ValueError as exc:
            raise BadInput(f"{flag}: {exc} (not a torch trace of {name}?)") from None
        fractions.append(f)
        shares.append(share)
    if not fractions:
        raise BadInput(f"{flag}: the trace {path} has no profiled step")
    ready = [statistics.fmean(col) for col in zip(*fractions)]
    ready = [max(ready[: i + 1]) for i in range(len(ready))]  # non-decreasing in backward order
    sizes = [4.0 * p for _, p, _ in reversed(table)]
    tl = pipeline.merge(ready, sizes, bucket_bytes or float("inf"))
    source = f"profile ({name}: {len(fractions)} profiled step(s), {sum(counts)} gradient accumulations)"
    return pipeline.Timeline(tl.ready, tl.shares, source), statistics.fmean(shares)


def pick_record(records: Sequence[dict], model: str, flag: str) -> dict:
    """The profiled one-device point of `model`; a profile of another model is an error."""
    profiled = [r for r in records if r.get("profile_trace") and int(r.get("world_size") or 0) == 1]
    if not profiled:
        raise BadInput(f"{flag}: that sweep has no profiled one-device point with a trace")
    same = [r for r in profiled if r.get("model") == model]
    if model and not same:
        others = ", ".join(sorted({str(r.get("model")) for r in profiled}))
        raise BadInput(f"{flag}: a profile of {others}, the points are {model}: profile the same model")
    return (same or profiled)[0]

"""Small helpers on one stored result record: its numbers, its kind, its keys and names, and grouping records
into curves (one workload, one strategy). Pure functions of the record dicts; nothing here reads the store."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from distbench.core.config import PointKey, point_key, swept_batch
from distbench.core.strategies import STRATEGIES
from distbench.core.workload import Measurement
from distbench.results.kind import RecordKind, record_kind

CV_NOISY = Measurement.noisy_cv  # --noisy-cv's default, declared in core/workload.py
"""Step-time coefficient of variation above which a point counts as noisy (when the record has no `noisy`)."""


def num(value) -> float | None:
    """A finite float, or None (for missing, NaN, non-numeric and boolean values)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def is_comm(record: dict) -> bool:
    """A communication micro-benchmark record (`distbench comm`), not a training point."""
    return record_kind(record) is RecordKind.COMM


def is_verify(record: dict) -> bool:
    """A `distbench verify` run (k steps compared with one device, no warmup), not a scaling measurement."""
    return record_kind(record) is RecordKind.VERIFY


def is_baseline(record: dict) -> bool:
    strategy = STRATEGIES.get(str(record.get("strategy")))
    return bool(strategy and strategy.baseline)


def baseline_for(record: dict, points: Iterable[dict]) -> dict | None:
    """The (last) successful single-device baseline of the record's framework and workload, if measured."""
    return next(
        (
            r
            for r in reversed(list(points))
            if is_baseline(r)
            and r.get("status") == "ok"
            and r.get("framework") == record.get("framework")
            and workload_key(r) == workload_key(record)
        ),
        None,
    )


def tokens_per_s(r: dict, per_device: bool = False) -> float | None:
    """Tokens per second of a token model's point: samples/s x the sequence length (per device: / N)."""
    seq, throughput = (r.get("config") or {}).get("seq_len"), num(r.get("throughput"))
    if not seq or throughput is None:
        return None
    return throughput * seq / ((r.get("world_size") or 1) if per_device else 1)


def token_fields(r: dict) -> dict:
    """A token model's point in tokens (none for an image model): the sequence length (tokens per sample),
    tokens/s in total and per device (samples/s x the sequence length), beside its MFU."""
    seq = (r.get("config") or {}).get("seq_len")
    if not seq:
        return {}
    return {
        "seq_len": seq,
        "tokens_per_s": tokens_per_s(r),
        "tokens_per_s_per_device": tokens_per_s(r, per_device=True),
        "mfu": r.get("mfu"),
    }


def is_noisy(record: dict) -> bool:
    """Flagged `noisy` by the measurement, or (when the record has no flag) step-time CV above CV_NOISY."""
    if record.get("noisy") is not None:
        return bool(record["noisy"])
    cv = num(record.get("step_time_cv"))
    return cv is not None and cv > CV_NOISY


def record_key(record: dict) -> PointKey:
    return point_key(record.get("strategy"), record.get("config") or record)


def workload_key(record: dict) -> tuple:
    """Everything but strategy, N and nodes: points with equal keys lie on one set of scaling curves."""
    key = record_key(record)
    return key.workload, key.batch


def workload_label(key: tuple, among: Iterable[tuple] = ()) -> str:
    """'resnet50 (weak scaling, batch 8)', plus every other workload field whose value differs among
    the keys in `among` (e.g. 'precision bf16'), so groups that differ only there are told apart (a field
    without a value, e.g. no seq_len, is left out rather than printed as None)."""
    workload, batch = key
    fields = dict(workload)
    others = [dict(w) for w, _ in among]
    details = [f"{fields['scaling']} scaling"] if fields.get("scaling") else []
    details += [f"batch {batch}"] if batch else []
    details += [  # a field left unset is not named: the other keys' values already tell them apart
        f"{name} {value}"
        for name, value in workload
        if name not in ("model", "scaling") and value is not None and any(o.get(name) != value for o in others)
    ]
    model = fields.get("model")
    return f"{model} ({', '.join(details)})" if details else str(model)


def series_name(record: dict) -> str:
    """A strategy's curve: 'ddp', or 'ddp (2 nodes)' for its points spread over 2 nodes."""
    nodes = int(record.get("nodes") or (record.get("config") or {}).get("nodes") or 1)
    threads = (record.get("config") or {}).get("baseline_threads")
    return (
        str(record.get("strategy"))
        + (f" ({nodes} nodes)" if nodes > 1 else "")
        + (f" ({threads} thread{'s' if threads != 1 else ''}, per-core reference)" if threads else "")
        + (" (fp16 weights and communication)" if record.get("precision_note") else "")  # deepspeed amp
    )


def point_axes(record: dict, among: Iterable[dict] = ()) -> list[str]:
    """What sets a point apart from the others of its sweep beyond strategy, N and nodes: 'batch B' when the
    records `among` hold more than one swept batch size, and 'seq S' for a point with a sequence length (a
    language model's tokens per sample: samples/s at two lengths are not the same work)."""
    config = record.get("config") or {}
    batches = {swept_batch(r.get("config") or r) for r in among}
    axes = [f"batch {swept_batch(config or record)}"] if len(batches) > 1 else []
    return axes + ([f"seq {config['seq_len']}"] if config.get("seq_len") else [])


def point_name(record: dict) -> str:
    return f"{series_name(record)} N={record.get('world_size')}"


def group_by_workload(points: Iterable[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for r in points:
        groups.setdefault(workload_key(r), []).append(r)
    return groups


def by_strategy(points: Iterable[dict]) -> dict[str, list[dict]]:
    """series_name (strategy, with its node count when > 1) -> its points sorted by N. The points
    should share one workload (group_by_workload); at a repeated N the later point wins."""
    out: dict[str, dict[int, dict]] = {}
    for r in points:
        out.setdefault(series_name(r), {})[int(r.get("world_size") or 0)] = r
    return {s: [pts[n] for n in sorted(pts)] for s, pts in out.items()}


def device_word(points: Sequence[dict]) -> str:
    return "CPU workers" if any(r.get("device") == "cpu" for r in points) else "GPUs"

"""A record's optional measurement fields read as numbers: the step split into compute, overlapped and exposed
communication (comm_breakdown), and per-point telemetry scalars (telemetry_values)."""

from __future__ import annotations

from distbench.analysis.records import num

COMM_FIELDS = ("comm_overhead", "exposed_comm_s", "allreduce_s", "grad_bytes", "overlap", "data_wait_fraction")


def comm_breakdown(record: dict) -> dict | None:
    """Split the headline step (time_per_step_s: comm_overhead's denominator, so step x overhead = exposed) into
    compute alone, compute overlapped with communication, and exposed communication (seconds), from
    whichever of exposed_comm_s / comm_overhead / allreduce_s / overlap exist."""
    step = num(record.get("time_per_step_s")) or num((record.get("comm_split") or {}).get("step_s"))
    overhead = num(record.get("comm_overhead"))
    exposed = num(record.get("exposed_comm_s"))
    if exposed is None and overhead is not None and step:
        exposed = overhead * step
    if exposed is None or not step:
        return None
    exposed = max(0.0, exposed)  # for display: the record keeps the raw (possibly negative) value
    allreduce, overlap = num(record.get("allreduce_s")), num(record.get("overlap"))
    if allreduce is not None:
        hidden = max(0.0, allreduce - exposed)
    elif overlap is not None and overlap < 1:
        hidden = exposed * overlap / (1 - overlap)
    else:
        hidden = 0.0
    exposed = min(exposed, step)
    hidden = min(hidden, step - exposed)
    return {
        "step_s": step,
        "compute_only_s": step - exposed - hidden,
        "overlapped_s": hidden,
        "exposed_s": exposed,
        "overlap": overlap,
        "comm_overhead": overhead,
        "allreduce_s": allreduce,
    }


def has_comm_fields(record: dict) -> bool:
    """Has a communication or input-pipeline measurement (grad_bytes alone is a size, not a measurement)."""
    return any(num(record.get(k)) is not None for k in COMM_FIELDS if k != "grad_bytes")


TELEMETRY_META = {"window", "samples", "source", "sources", "interval_s", "t", "pids"}
"""Telemetry keys that describe the sampling, not the point."""


def telemetry_values(record: dict) -> dict[str, float]:
    """Scalar telemetry per point: per-GPU / per-worker lists or {worker: value} dicts become their
    maximum; sampling metadata (window, sample count) is left out."""
    tel = record.get("telemetry")
    if not isinstance(tel, dict):
        return {}
    out = {}
    unscoped = int(record.get("nodes") or 1) > 1 and not tel.get("energy_scope")
    for key, value in tel.items():
        if key in TELEMETRY_META or (key == "energy_per_sample_j" and unscoped):
            continue  # (older multi-node records divided one node's energy by every node's samples)
        if isinstance(value, dict):
            value = list(value.values())
        elif isinstance(value, bool):
            value = float(value)
        values = [v for v in map(num, value if isinstance(value, (list, tuple)) else [value]) if v is not None]
        if values:
            out[key] = max(values)

    return out

"""What a record (or a sweep) measured, and how a point ended: the one place that reads a record's kind.

The runner stamps `kind` on every record it commits, and every command that measures stores its sweep's
kind in the sweep's options. Records and sweeps stored before the stamp have none: `record_kind` and
`sweep_kind` derive it from the fields they had, so old stores read the same."""

from __future__ import annotations

from enum import Enum


class _Text(str, Enum):
    """Its members print and format as their stored text (as enum.StrEnum's do)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class RecordKind(_Text):
    """A record's or a sweep's kind; the value is the stored text."""

    TRAINING = "training"
    """A training point of a scaling curve (scale, run, slurm, k8s, profile)."""
    BASELINE_REFERENCE = "baseline-reference"
    """An extra single-device CPU baseline on a thread count of its own (PointConfig.baseline_threads), the
    reference of per-core efficiency: a training run, not a point of the scaling curves."""
    FIT = "fit"
    """A `distbench fit` sweep (its points are training points at several batch sizes)."""
    VERIFY = "verify"
    COMM = "comm"
    INFERENCE = "inference"
    CONVERGE = "converge"


class Status(_Text):
    """How a point ended; the value is the stored text (records, store columns, output)."""

    OK = "ok"
    SKIPPED = "skipped"
    FAILED = "failed"
    TIMEOUT = "timeout"
    OOM = "oom"
    INTERRUPTED = "interrupted"


def record_kind(record: dict) -> RecordKind:
    """The record's stamped kind; for a record stored without one, what its fields say."""
    stamped = record.get("kind")
    if stamped in _VALUES:
        return RecordKind(stamped)
    config = record.get("config") or {}
    if str(record.get("strategy", "")).startswith("comm") or "busbw_gbps" in record:
        return RecordKind.COMM
    if config.get("verify"):
        return RecordKind.VERIFY
    if record.get("converge") or (config.get("extra") or {}).get("converge"):
        return RecordKind.CONVERGE
    if (config or record).get("baseline_threads") is not None:
        return RecordKind.BASELINE_REFERENCE
    return RecordKind.TRAINING


def sweep_kind(options: dict) -> RecordKind | None:
    """A sweep's kind from its stored options; a training sweep stored without one is known by its
    `sweep_options` (or, older, `replay`); None: not known."""
    stamped = options.get("kind")
    if stamped in _VALUES:
        return RecordKind(stamped)
    if "sweep_options" in options or "replay" in options:
        return RecordKind.TRAINING
    return None


_VALUES = {k.value for k in RecordKind}

"""Records from saved `kubectl logs` output: every line holding RECORD_MARKER (a pod's prefix or a
timestamp before it is fine) carries one point's record as JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

from distbench.results.record import SCHEMA_VERSION

RECORD_MARKER = "distbench-record: "
LOG_SUFFIXES = (".log", ".txt")


def record_line(record: dict) -> str:
    """How a pod prints its point's record (distbench.k8s.job), one line."""
    return RECORD_MARKER + json.dumps(record, separators=(",", ":"), sort_keys=True)


def records_from_log(path: str | os.PathLike) -> tuple[list[tuple[str, dict]], list[tuple[str, str]]]:
    """([(name, record)], [(name, why ignored)]) of one saved log; a name is FILE:LINE."""
    found, ignored = [], []
    path = Path(path)
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            _, marker, text = line.partition(RECORD_MARKER)
            if not marker:
                continue
            name = f"{path.name}:{number}"
            try:
                record = json.loads(text)
            except ValueError as exc:
                ignored.append((name, f"not a whole record (a truncated log line?): {exc}"))
                continue
            if not isinstance(record, dict) or record.get("schema") != SCHEMA_VERSION:
                ignored.append((name, f"not a distbench result record (schema {SCHEMA_VERSION})"))
                continue
            found.append((name, record))
    return found, ignored

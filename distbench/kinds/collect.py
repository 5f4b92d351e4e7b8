"""`distbench collect`: merge a folder of result records into the results store, once, and say which
points failed or are missing. The records come from Slurm jobs (their manifest), Kubernetes pods (a volume
folder or saved `kubectl logs`) or the JSON a point is saved as when the store cannot be written."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path

from distbench import __version__
from distbench.core.errors import BadInput
from distbench.core.strategies import FRAMEWORK_BASELINE
from distbench.results.kubelogs import LOG_SUFFIXES, records_from_log  # saved `kubectl logs` of k8s sweeps
from distbench.results.record import read_record

MANIFEST_KIND = "distbench-slurm-manifest"
"""The `kind` of the manifest a Slurm sweep writes beside its records (distbench.slurm.render)."""
LOG_TAIL_LINES = 15


@dataclass
class CollectReport:
    sweep_id: str | None
    added: list[dict] = field(default_factory=list)
    present: list[dict] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, dict]] = field(default_factory=list)
    """(file name, record) of every record whose status is not ok or skipped."""
    missing: list[dict] = field(default_factory=list)
    """Manifest points with no record yet."""


def stable_record_id(data: bytes) -> str:
    """The id of a record that has none: from its file's content, so collecting twice finds it."""
    return "sha256-" + hashlib.sha256(data).hexdigest()[:32]


def _baseline_for(record: dict, records: list[dict]) -> dict | None:
    base = FRAMEWORK_BASELINE.get(record.get("framework"))
    same = [
        r
        for r in records
        if (r.get("strategy"), r.get("status"), r.get("model"), r.get("device"))
        == (base, "ok", record.get("model"), record.get("device"))
    ]
    return same[-1] if same else None


def collect_records(directory: str | os.PathLike, store, *, command: str | None = None) -> CollectReport:
    """Merge every record JSON file directly in `directory` into `store`, in one new sweep; a record
    already there (same record_id, else the stable id of its content) is not added again."""
    from distbench.kinds.measure import combine_repeats
    from distbench.kinds.sweep import derive

    folder = Path(directory)
    if folder.is_file() and folder.suffix in LOG_SUFFIXES:  # one saved `kubectl logs` file
        files, logs = [], [folder]
    elif folder.is_dir():
        files = sorted(folder.glob("*.json"))
        logs = sorted(p for p in folder.iterdir() if p.suffix in LOG_SUFFIXES and p.is_file())
    else:
        raise BadInput(f"DIRECTORY {directory} is not a folder of result records (nor a saved log: *.log, *.txt)")
    entries: list[tuple[str, dict]] = []
    report = CollectReport(sweep_id=None)
    manifests = []
    for path in files:
        try:
            data = path.read_bytes()
            doc = json.loads(data)
        except (OSError, ValueError) as exc:
            report.ignored.append((path.name, f"unreadable: {exc}"))
            continue
        if isinstance(doc, dict) and doc.get("kind") == MANIFEST_KIND:
            manifests.append(doc)
            continue
        try:
            record = read_record(path)
        except (ValueError, OSError) as exc:
            report.ignored.append((path.name, str(exc).replace(f"{path}: ", "")))
            continue
        if not record.get("record_id"):
            record["record_id"] = stable_record_id(data)
        entries.append((path.name, record))
    for path in logs:
        found, bad = records_from_log(path)
        report.ignored += bad
        for name, record in found:
            record["record_id"] = record.get("record_id") or stable_record_id(
                json.dumps(record, sort_keys=True).encode()
            )
            entries.append((name, record))
    records = [r for _, r in entries]
    new: list[tuple[str, dict]] = []
    seen: set[str] = set()
    for name, record in entries:
        rid = record["record_id"]
        if rid in seen or store.has_record(rid):
            report.present.append(record)
        else:
            new.append((name, record))
        seen.add(rid)
        if record.get("status") not in ("ok", "skipped"):
            report.failed.append((name, record))
    if new:
        env = next((r.get("environment") for _, r in new if isinstance(r.get("environment"), dict)), {}) or {}
        from distbench.core import envinfo

        report.sweep_id = store.start_sweep(
            command=command or f"distbench collect {shlex.quote(str(directory))}",
            version=__version__,
            git_sha=env.get("distbench_git_sha") or envinfo.git_sha(),
            env=env,
            options={"collect": str(folder.resolve()), "files": [n for n, _ in new]},
            notes=[f"collected {len(new)} record(s) from {folder.resolve()} on {socket.gethostname()}"],
        )
        status = "interrupted"
        try:
            baselines = set(FRAMEWORK_BASELINE.values())  # first, so the others' speedups can use them
            for name, record in sorted(new, key=lambda e: (e[1].get("strategy") not in baselines, e[0])):
                if record.get("status") == "ok" and record.get("step_times_s"):
                    record = combine_repeats([record])
                    record.pop("repeats", None)
                base = _baseline_for(record, records)
                record = derive(record, {record.get("framework"): base} if base else {})
                record["sweep_id"] = report.sweep_id
                record["collected_from"] = name
                record["point_id"] = store.add_point(report.sweep_id, record)
                report.added.append(record)
            status = "complete"
        finally:
            store.finish_sweep(report.sweep_id, status)
    have = {(r.get("strategy"), r.get("world_size"), r.get("nodes", 1)) for r in records}
    for doc in manifests:
        for p in doc.get("points", []):
            if (p.get("strategy"), p.get("world_size"), p.get("nodes")) not in have:
                report.missing.append(p)
    return report


def tail_lines(text: str | None, n: int = LOG_TAIL_LINES) -> list[str]:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[-n:]

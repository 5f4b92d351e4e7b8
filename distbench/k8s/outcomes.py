"""Each node's outcome of a multi-node point on Kubernetes, and the point's first failure.

Every node's wrapper (distbench.k8s.job) publishes how its own launch ended before it exits: a file
`outcomes/node<K>.json` in the point's work folder on the results volume, and one line on its log
(OUTCOME_MARKER). A node that failed exits non-zero after publishing, so Kubernetes stops the point's other
pods (the Job fails at backoffLimit 0 and terminates its running pods; JobSet, at maxRestarts 0, fails and
deletes its remaining jobs): node rank 0 then gets SIGTERM while blocked in a collective. Node rank 0 reads
every outcome and its record names the first node that failed on its own, with that node's cause, not
its own SIGTERM.

`volume_record`: what `k8s-job collect` (the reader pod of `distbench k8s --apply`) prints for a point whose
pods are gone: node rank 0's published record, or, when node 0 never published one, a record built from the
outcomes the other nodes left on the volume.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from distbench.core.config import PointConfig
from distbench.results.record import base_record, read_record, write_record
from distbench.core.strategies import get_strategy
from distbench.core.failures import is_secondary

OUTCOME_MARKER = "distbench-node-outcome: "
OUTCOME_WAIT_S = 20.0
"""How long node rank 0 waits for the other nodes' outcomes once its own launch did not end well (a node that
failed first published before it exited, so before Kubernetes stopped node 0)."""


def outcome_path(work: Path, node_rank: str) -> Path:
    return Path(work) / "outcomes" / f"node{node_rank}.json"


def node_outcome(node_rank: str, record: dict, returncode: int | None, stopped: str | None, node: str | None) -> dict:
    """How one node's launch ended: its status and reason (as its record would say), exit status, what stopped
    it (timeout, sigterm or None), its Kubernetes node and the wall-clock time it ended."""
    return {
        "node_rank": str(node_rank),
        "node": node,
        "status": record.get("status"),
        "reason": record.get("reason"),
        "returncode": returncode,
        "stopped": stopped,
        "ended_at": time.time(),
    }


def publish_outcome(work: Path, outcome: dict, echo=print) -> None:
    write_record(outcome_path(work, outcome["node_rank"]), outcome)
    echo(OUTCOME_MARKER + json.dumps(outcome, sort_keys=True, separators=(",", ":")))


def read_outcomes(work: Path, nodes: int, wait_s: float = 0.0) -> list[dict]:
    """The published outcomes, waiting up to wait_s for all `nodes` of them; sorted by node rank."""
    folder, deadline = Path(work) / "outcomes", time.monotonic() + wait_s
    while True:
        found = {}
        for path in sorted(folder.glob("node*.json")) if folder.is_dir() else []:
            try:
                outcome = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            found[str(outcome.get("node_rank"))] = outcome
        if len(found) >= nodes or time.monotonic() >= deadline:
            return sorted(found.values(), key=lambda o: int(o["node_rank"]) if o["node_rank"].isdigit() else -1)
        time.sleep(0.5)


def is_consequence(outcome: dict) -> bool:
    """A node stopped by Kubernetes (SIGTERM), or one whose error is a peer going away: not a root cause."""
    return (
        outcome.get("stopped") == "sigterm"
        or outcome.get("status") == "interrupted"
        or is_secondary(outcome.get("reason"))
    )


def first_failure(outcomes: list[dict]) -> dict | None:
    """The node that failed first on its own (a consequence only when no node has a cause of its own)."""
    failed = [o for o in outcomes if o.get("status") not in ("ok", None)]
    if not failed:
        return None
    return min(failed, key=lambda o: (is_consequence(o), o.get("ended_at") or 0.0))


def failure_reason(outcome: dict) -> str:
    where = f" (Kubernetes node {outcome['node']})" if outcome.get("node") else ""
    return f"on node rank {outcome['node_rank']}{where}, the first node to fail: {outcome.get('reason') or outcome['status']}"


def name_first_failure(record: dict, outcomes: list[dict], own_rank: str | None = "0") -> dict:
    """The record (node `own_rank`'s) with every node's outcome and, when the point did not end well, the
    status and reason of the first node that failed (a record's own cause stays as its node wrote it)."""
    kubernetes = record.setdefault("kubernetes", {})
    kubernetes["outcomes"] = outcomes
    first = first_failure(outcomes)
    if first is None or record.get("status") == "ok":
        return record
    kubernetes["first_failure"] = {k: first.get(k) for k in ("node_rank", "node", "status", "reason")}
    if first["node_rank"] != own_rank:
        record.update(status=first["status"], reason=failure_reason(first))
    return record


def volume_record(records: Path, job: str, nodes: int, wait_s: float) -> dict | None:
    """Node rank 0's record of `job` on the volume (waiting up to wait_s for it: node 0 publishes within its
    grace period), else one built from the nodes' outcomes and the point's config (None: no node ran)."""
    path, deadline = Path(records) / f"{job}.json", time.monotonic() + wait_s
    while True:
        try:
            return read_record(path)
        except (OSError, ValueError):
            if time.monotonic() >= deadline:
                break
            time.sleep(1.0)
    work = Path(records) / "work" / job
    outcomes = read_outcomes(work, nodes)
    try:
        cfg = PointConfig.from_json((work / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not outcomes:
        return None
    strategy = get_strategy(cfg.strategy)
    missing = nodes - len(outcomes)
    record = base_record(
        cfg.to_dict(),
        strategy=strategy.name,
        framework=strategy.framework,
        status="failed",
        reason=f"node rank 0 published no record, and {missing} of {nodes} node(s) published no outcome",
    )
    record["kubernetes"] = {"job": job, "outcomes": outcomes}
    name_first_failure(record, outcomes, own_rank=None)
    write_record(path, record)
    return record

"""Each node's outcome of a multi-node point on Kubernetes, and the point's first failure.

Every node's wrapper (distbench.k8s.job) publishes how its own launch ended before it exits: a file
`outcomes/node<K>.json` in the point's work folder on the results volume, and one line on its log
(OUTCOME_MARKER). A node that failed exits non-zero after publishing, so Kubernetes stops the point's other
pods (the Job fails at backoffLimit 0 and terminates its running pods; JobSet, at maxRestarts 0, fails and
deletes its remaining jobs): node rank 0 then gets SIGTERM while blocked in a collective. Node rank 0 reads
every outcome and its record names the first node that failed on its own, with that node's cause, not
its own SIGTERM.

Every pod of one rendering of the sweep carries the same run id (RUN_ID_ENV, from K8sSettings.run_id) and
stamps its outcome and record with it; a rerun under the same --name writes to the same folder, so the
readers (node rank 0, `k8s-job collect`) ignore anything stamped with another run id, or with none.

`volume_record`: what `k8s-job collect` (the reader pod of `distbench k8s --apply`) prints for a point whose
pods are gone: node rank 0's published record, or, when node 0 never published one, a record built from the
outcomes the other nodes left on the volume.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from distbench.core.config import PointConfig
from distbench.core.failures import is_secondary
from distbench.core.strategies import get_strategy
from distbench.results.record import base_record, read_record, write_record

OUTCOME_MARKER = "distbench-node-outcome: "
RUN_ID_ENV = "DISTBENCH_RUN_ID"
OUTCOME_WAIT_S = 20.0
"""How long node rank 0 waits for the other nodes' outcomes once its own launch did not end well (a node that
failed first published before it exited, so before Kubernetes stopped node 0)."""


def outcome_path(work: Path, node_rank: str) -> Path:
    return Path(work) / "outcomes" / f"node{node_rank}.json"


def node_outcome(
    node_rank: str, record: dict, returncode: int | None, stopped: str | None, node: str | None, run_id: str | None
) -> dict:
    """How one node's launch ended: its status and reason (as its record would say), exit status, what stopped
    it (timeout, sigterm or None), its Kubernetes node, the wall-clock time it ended and the run it belongs to."""
    return {
        "run_id": run_id,
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


def same_run(stamp: str | None, run_id: str | None) -> bool:
    """Whether something stamped `stamp` belongs to run `run_id` (a reader with no run id takes anything)."""
    return not run_id or stamp == run_id


def read_outcomes(work: Path, nodes: int, wait_s: float = 0.0, run_id: str | None = None) -> list[dict]:
    """The outcomes run `run_id` published (another run's are ignored), waiting up to wait_s for all `nodes` of
    them; sorted by node rank."""
    folder, deadline = Path(work) / "outcomes", time.monotonic() + wait_s
    while True:
        found = {}
        for path in sorted(folder.glob("node*.json")) if folder.is_dir() else []:
            try:
                outcome = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(outcome, dict) and same_run(outcome.get("run_id"), run_id):
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


def missing_ranks(outcomes: list[dict], nodes: int) -> list[str]:
    """The node ranks (0..nodes-1) that published no outcome."""
    found = {str(o.get("node_rank")) for o in outcomes}
    return [str(k) for k in range(nodes) if str(k) not in found]


def unpublished(missing: list[str]) -> str:
    return f"node rank(s) {', '.join(missing)} published no outcome"


def name_first_failure(record: dict, outcomes: list[dict], own_rank: str | None = "0", nodes: int = 0) -> dict:
    """The record (node `own_rank`'s) with every node's outcome and, when the point did not end well, the
    status and reason of the first node that failed (a record's own cause stays as its node wrote it), and
    which of its `nodes` node ranks published no outcome."""
    kubernetes = record.setdefault("kubernetes", {})
    kubernetes["outcomes"] = outcomes
    if record.get("status") == "ok":  # (node 0 does not wait for the others' outcomes then)
        return record
    missing = missing_ranks(outcomes, nodes)
    if missing:
        kubernetes["no_outcome"] = missing
    first = first_failure(outcomes)
    if first is not None:
        kubernetes["first_failure"] = {k: first.get(k) for k in ("node_rank", "node", "status", "reason")}
        if first["node_rank"] != own_rank:
            record.update(status=first["status"], reason=failure_reason(first))
    if missing and own_rank is not None:
        record["reason"] = f"{record.get('reason') or record.get('status')}; {unpublished(missing)}"
    return record


def record_run(record: dict) -> str | None:
    """The run id a record was stamped with (None: none)."""
    kubernetes = record.get("kubernetes")
    return kubernetes.get("run_id") if isinstance(kubernetes, dict) else None


def runs_on_volume(records: Path, job: str) -> list[str]:
    """The run ids stamped on what the volume holds of `job` (its record and its nodes' outcomes), sorted."""
    found = []
    try:
        found.append(record_run(read_record(Path(records) / f"{job}.json")))
    except (OSError, ValueError):
        pass
    folder = Path(records) / "work" / job / "outcomes"
    for path in sorted(folder.glob("node*.json")) if folder.is_dir() else []:
        try:
            outcome = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(outcome, dict):
            found.append(outcome.get("run_id"))
    return sorted({r for r in found if isinstance(r, str) and r})


def volume_record(records: Path, job: str, nodes: int, wait_s: float, run_id: str | None = None) -> dict | None:
    """Node rank 0's record of `job` from run `run_id` on the volume (waiting up to wait_s for it: node 0
    publishes within its grace period; another run's record is ignored), else one built from this run's
    outcomes and the point's config (None: no node of this run published anything)."""
    path, deadline = Path(records) / f"{job}.json", time.monotonic() + wait_s
    while True:
        try:
            record = read_record(path)
        except (OSError, ValueError):
            record = None
        if record is not None and same_run(record_run(record), run_id):
            return record
        if time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    work = Path(records) / "work" / job
    outcomes = read_outcomes(work, nodes, run_id=run_id)
    try:
        cfg = PointConfig.from_json((work / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not outcomes:
        return None
    strategy = get_strategy(cfg.strategy)
    missing = missing_ranks(outcomes, nodes)
    record = base_record(
        cfg.to_dict(),
        strategy=strategy.name,
        framework=strategy.framework,
        status="failed",
        reason="node rank 0 published no record" + (f", and {unpublished(missing)}" if missing else ""),
    )
    record["kubernetes"] = {"job": job, "run_id": run_id, "outcomes": outcomes}
    name_first_failure(record, outcomes, own_rank=None, nodes=nodes)
    write_record(path, record)
    return record

"""`distbench k8s --apply`: run a written sweep on the cluster kubectl points at, one point at a time (so
that no two points share nodes), and bring the records back.

For each point file, in sweep order: `kubectl create` it, wait until its job has finished (a condition
Complete, Succeeded or Failed is True), save its pods' logs (`kubectl logs --prefix`, where each point
prints its record) under the sweep's folder, and go on. It stops at the first point that does not finish
well: kubectl failing (no cluster, a refused object), a job that Failed (a pod that could not run: the
in-pod wrapper itself records a failed launch and ends well), or one not finished within the point's
deadline plus --apply-slack (suspended, or waiting for quota). The records of the points that ran are
collected into the store either way.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from distbench.k8s.manifests import K8sSettings, PointObjects, deadline

DONE = ("Complete", "Succeeded")
FAILED = "Failed"
CONDITIONS = '{.status.conditions[?(@.status=="True")].type}'


class ApplyFailed(Exception):
    """The sweep stopped at a point (the message names it and what to look at)."""


@dataclass
class Kubectl:
    binary: str = "kubectl"
    namespace: str | None = None
    calls: list[list[str]] = field(default_factory=list)

    def __call__(self, *args: str, timeout_s: float = 120.0) -> str:
        argv = [self.binary, *(["-n", self.namespace] if self.namespace else []), *args]
        self.calls.append(argv)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except FileNotFoundError:
            raise ApplyFailed(f"{self.binary} is not installed (or not on PATH): --apply runs kubectl") from None
        except subprocess.TimeoutExpired:
            raise ApplyFailed(f"`{' '.join(argv)}` did not answer in {timeout_s:.0f}s") from None
        if proc.returncode != 0:
            why = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
            raise ApplyFailed(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {why[:300]}")
        return proc.stdout


def wait_for(kubectl: Kubectl, ref: str, limit_s: float, poll_s: float) -> str:
    """The job's final condition (DONE or FAILED), polling every poll_s; ApplyFailed past limit_s."""
    started = time.monotonic()
    while True:
        conditions = kubectl("get", ref, "-o", f"jsonpath={CONDITIONS}").split()
        if FAILED in conditions:
            return FAILED
        if any(c in DONE for c in conditions):
            return "Complete"
        if time.monotonic() - started > limit_s:
            raise ApplyFailed(
                f"{ref} has not finished after {limit_s:.0f}s (suspended, or waiting for quota or nodes?): "
                f"see `kubectl describe {ref}`"
            )
        time.sleep(poll_s)


def apply_sweep(
    shared: Path | None,
    points: list[tuple[Path, PointObjects]],
    settings: K8sSettings,
    logs: Path,
    *,
    kubectl: Kubectl,
    slack_s: float,
    poll_s: float = 10.0,
    echo=print,
) -> list[Path]:
    """Create, wait for and save the logs of each point in order; the saved logs (one per point that ran).
    Raises ApplyFailed (after saving that point's logs where it ran) at the first point that went wrong."""
    logs.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    if shared is not None:
        kubectl("apply", "-f", str(shared))
    for i, (path, po) in enumerate(points, 1):
        created = kubectl("create", "-f", str(path), "-o", "name").split()
        if not created:
            raise ApplyFailed(f"`kubectl create -f {path}` named no object")
        ref = created[-1]  # the job (a TrainJob's file holds its runtime first)
        echo(f"[{i}/{len(points)}] {po.point.key}: created {ref}, waiting")
        try:
            outcome = wait_for(kubectl, ref, deadline(settings) + slack_s, poll_s)
        finally:
            selector = f"distbench.io/sweep={settings.name},distbench.io/point={po.point.key}"
            log = logs / f"{po.name}.log"
            try:
                text = kubectl(
                    "logs", "-l", selector, "--tail=-1", "--prefix", f"--max-log-requests={po.point.nodes + 4}"
                )
            except ApplyFailed as exc:
                echo(f"  could not save the logs of {po.name}: {exc}")
            else:
                log.write_text(text)
                saved.append(log)
        echo(f"  {po.point.key}: {outcome}")
        if outcome == FAILED:
            raise ApplyFailed(
                f"{ref} Failed (a pod could not run: image, scheduling or its deadline): see `kubectl describe {ref}`"
                f"; stopped before the remaining {len(points) - i} point(s)"
            )
    return saved

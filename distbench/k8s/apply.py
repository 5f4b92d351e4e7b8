"""`distbench k8s --apply`: run a written sweep on the cluster kubectl points at, one point at a time (so
that no two points share nodes), and bring the records back.

For each point file, in sweep order: `kubectl create` it, wait until its job has finished (a condition
Complete, Succeeded or Failed is True), save its pods' logs (`kubectl logs --prefix`, where each point
prints its record) under the sweep's folder, and go on. A job that Failed is what a failing node leaves
(its wrapper published its outcome and exited non-zero; Kubernetes then stopped the other pods, and the
failed Job's pods, with their logs, are deleted): the point's record is read from the results volume by a
reader pod (`k8s-job collect`, distbench.k8s.outcomes) and saved beside the logs, and the sweep goes on.
It stops when kubectl fails (no cluster, a refused object), when a Failed point left nothing on the volume
(no node ran: the image, scheduling or its deadline), or when a point has not finished within its
deadline plus --apply-slack (suspended, or waiting for quota). The records of the points that ran are
collected into the store either way.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from distbench.k8s.manifests import GRACE_S, MOUNTS, PointObjects, deadline, metadata, volumes
from distbench.k8s.outcomes import RUN_ID_ENV
from distbench.k8s.render import to_yaml
from distbench.k8s.settings import K8sSettings, k8s_arg
from distbench.results.kubelogs import RECORD_MARKER

DONE = ("Complete", "Succeeded")
FAILED = "Failed"
CONDITIONS = '{.status.conditions[?(@.status=="True")].type}'
READER_WAIT_S = GRACE_S + 60
"""How long the reader pod waits for node rank 0's record (node 0 publishes within its grace period)."""
READER_SUFFIX = "-collect"


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
        if outcome == FAILED and not (log.exists() and RECORD_MARKER in log.read_text(errors="replace")):
            read = read_volume(kubectl, po, settings, logs, poll_s)
            if read is None:
                raise ApplyFailed(
                    f"{ref} Failed and none of its nodes left an outcome on the volume (no pod ran: image, "
                    f"scheduling or its deadline): see `kubectl describe {ref}`; stopped before the remaining "
                    f"{len(points) - i} point(s)"
                )
            saved.append(read)
            echo(f"  {po.point.key}: record read from the volume ({read.name})")
    return saved


def run_id_of(objects) -> str | None:
    """The run id (RUN_ID_ENV) in the containers' environment of a point's objects, as written to its file
    (None: the objects carry none)."""
    if isinstance(objects, dict):
        if objects.get("name") == RUN_ID_ENV and isinstance(objects.get("value"), str):
            return objects["value"]
        objects = list(objects.values())
    if isinstance(objects, list):
        for item in objects:
            if (found := run_id_of(item)) is not None:
                return found
    return None


def reader_pod(settings: K8sSettings, po: PointObjects) -> dict:
    """A pod that prints a point's record from the results volume (`k8s-job collect`), for a point whose
    own pods, and their logs, are gone."""
    argv = [settings.python, "-m", "distbench.cli", "k8s-job", "collect", "--records", settings.records]
    argv += ["--job", po.name, "--nodes", str(po.point.nodes), "--wait", f"{READER_WAIT_S:g}"]
    run_id = run_id_of(po.objects)
    if run_id:  # the reader ignores what a previous run of this job's name left on the volume
        argv += ["--run-id", run_id]
    container = {"name": "collect", "image": settings.image, "command": [k8s_arg(a) for a in argv]}
    container["volumeMounts"] = MOUNTS[:1]
    spec: dict = {"restartPolicy": "Never", "containers": [container], "volumes": volumes(settings)[:1]}
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in settings.image_pull_secrets]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata(settings, po.name + READER_SUFFIX), "spec": spec}


def read_volume(kubectl: Kubectl, po: PointObjects, settings: K8sSettings, logs: Path, poll_s: float) -> Path | None:
    """Run the reader pod of a Failed point, save what it printed (logs/<job>-volume.log) and delete it; the
    saved file, or None when it found no record and no outcome (exit 1) or did not finish in time."""
    path = logs.parent / "collect" / f"{po.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_yaml([reader_pod(settings, po)], [f"distbench sweep {settings.name}: reads {po.name}'s record"]))
    ref = kubectl("create", "-f", str(path), "-o", "name").split()[-1]
    try:
        started = time.monotonic()
        while kubectl("get", ref, "-o", "jsonpath={.status.phase}").strip() not in ("Succeeded", "Failed"):
            if time.monotonic() - started > READER_WAIT_S + 600:
                raise ApplyFailed(
                    f"{ref}, the reader of {po.name}'s record, has not finished: see `kubectl describe {ref}`"
                )
            time.sleep(poll_s)
        text = kubectl("logs", ref, "--tail=-1")
    finally:
        try:
            kubectl("delete", ref, "--wait=false")
        except ApplyFailed:
            pass
    if RECORD_MARKER not in text:
        return None
    saved = logs / f"{po.name}-volume.log"
    saved.write_text(text)
    return saved

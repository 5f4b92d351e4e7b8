"""Inside a pod: what `distbench k8s-job run` (distbench/commands/k8s_job.py) does in every generated job's container.

It writes the point's config (threads from --threads, else the pod's CPUs divided among its workers),
runs the launch command (torchrun / horovodrun / the worker) under --timeout in its own process group,
copies its output to the pod's log and to a log file on the results volume, and on node rank 0 publishes
the point's record twice: as a file on the results volume and as one line on stdout (RECORD_MARKER), so
`distbench collect` can read it from the volume or from saved `kubectl logs`.

Every pod of the point (Horovod's sshd pods through `k8s-job sshd`) notes the Kubernetes node it runs on
in the point's work folder; node rank 0 puts them all in the record, and refuses (status 'failed') a
multi-node point whose pods shared a node. Node rank 0 exits 0 once the record is published: the record
carries the outcome, and nothing is left for Kubernetes to retry. Every other node of a torchrun point
publishes its own outcome (distbench.k8s.outcomes) and exits with its launch's status, so a failing node
fails the Job and Kubernetes stops the others; node rank 0's record names the first node that failed."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import click

from distbench.core import phases
from distbench.core.config import PointConfig
from distbench.core.strategies import get_strategy
from distbench.k8s.fabric import network_fields
from distbench.k8s.outcomes import (
    OUTCOME_WAIT_S,
    RUN_ID_ENV,
    name_first_failure,
    node_outcome,
    outcome_path,
    publish_outcome,
    read_outcomes,
    same_run,
)
from distbench.kinds.measure import NOISY_CV
from distbench.results import stats
from distbench.results.kubelogs import record_line
from distbench.results.record import write_record
from distbench.run.devices import cpu_cores
from distbench.run.launch import log_tail, outcome_record
from distbench.run.launchers import TORCHRUN

LAUNCHER_ROLE = "launcher"
POD_WAIT_S = 30.0
"""After the launch, how long node rank 0 waits for every pod's node note (all were written before it ran)."""
KILL_GRACE_S = 30.0


def kubernetes_info(job: str, node_rank: str, environ: dict | None = None) -> dict:
    env = os.environ if environ is None else environ
    info = {"job": job, "node_rank": node_rank}
    for key, var in (
        ("pod", "DISTBENCH_POD_NAME"),
        ("namespace", "DISTBENCH_POD_NAMESPACE"),
        ("node", "DISTBENCH_NODE_NAME"),
    ):
        if env.get(var):
            info[key] = env[var]
    return info


def note_pod(work: Path, node_rank: str, environ: dict | None = None) -> None:
    """pods/<host>.json in the point's work folder: this pod, its Kubernetes node and node rank (the host
    name is the pod's stable name within its job, so a rerun overwrites its own note)."""
    env = os.environ if environ is None else environ
    info = {"pod": env.get("DISTBENCH_POD_NAME") or os.uname().nodename, "node": env.get("DISTBENCH_NODE_NAME")}
    info["run_id"] = env.get(RUN_ID_ENV) or None
    write_record(work / "pods" / f"{node_rank}-{os.uname().nodename}.json", {**info, "node_rank": node_rank})


def pods_of(work: Path, nodes: int, wait_s: float = POD_WAIT_S, run_id: str | None = None) -> list[dict]:
    """Every pod's note of run `run_id` (see note_pod; another run's are ignored), waiting up to wait_s for
    `nodes` of them (a launcher pod that runs no rank, mpi-operator's, is listed but not counted)."""
    folder, deadline = work / "pods", time.monotonic() + wait_s
    while True:
        pods = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                pod = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(pod, dict) and same_run(pod.get("run_id"), run_id):
                pods.append(pod)
        if len(ranked(pods)) >= nodes or time.monotonic() >= deadline:
            return sorted(pods, key=lambda p: str(p.get("node_rank")))
        time.sleep(1.0)


def ranked(pods: list[dict]) -> list[dict]:
    return [p for p in pods if p.get("node_rank") != LAUNCHER_ROLE]


def shared_node(pods: list[dict], nodes: int) -> str | None:
    """Why a multi-node point is not what it claims: its pods ran on fewer nodes than asked (None: fine)."""
    if nodes <= 1:
        return None
    seen = [p.get("node") for p in ranked(pods)]
    if len(seen) < nodes or None in seen:
        return f"only {len(seen)} of its {nodes} pods said which node they ran on; the nodes are not known"
    distinct = sorted(set(seen))
    if len(distinct) < nodes:
        return (
            f"its {nodes} pods ran on {len(distinct)} node(s) ({', '.join(distinct)}): a {nodes}-node point "
            "measured on fewer nodes does not measure the network between them"
        )
    return None


def private_key_copy(source: str, target: str) -> None:
    """The operator's ssh key as a 0600 file of our own: ssh refuses a key its owner's group can read."""
    Path(target).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(Path(source).read_bytes())
    os.chmod(target, 0o600)


def run_sshd(*, records: str, job: str, argv: list[str]) -> None:
    """A Horovod node pod: note its node, then become sshd (exec: sshd is the container's process)."""
    note_pod(Path(records) / "work" / job, "sshd")
    os.execv(argv[0], argv)


class Launch:
    """The launch command in its own process group, its output to `log` and to our stdout; stopped on
    the timeout or on SIGTERM (the pod being deleted), the whole group with it."""

    def __init__(self, argv: list[str], env: dict, log: Path, timeout_s: float):
        self.stopped: str | None = None
        log.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.log = open(log, "ab")
        self.timer = threading.Timer(timeout_s, self.stop, args=("timeout",))
        self.timer.daemon = True
        self.timer.start()

    def stop(self, why: str) -> None:
        if self.stopped is None:
            self.stopped = why
        for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def wait(self) -> int:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self.log.write(line)
            self.log.flush()
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
        rc = self.proc.wait()
        self.timer.cancel()
        self.log.close()
        return rc


def run_point(
    *,
    config_json: str,
    key: str,
    job: str,
    records: str,
    per_node: int,
    threads: int,
    node_rank: str,
    launcher: str,
    timeout_s: float,
    argv: list[str],
    nodes: int = 1,
    noisy_cv: float = NOISY_CV,
    network: str | None = None,
    ssh_key: str | None = None,
    ssh_identity: str | None = None,
    launcher_pod: bool = False,
) -> int:
    cfg = PointConfig.from_json(config_json)
    run_id = os.environ.get(RUN_ID_ENV) or None  # the rendering's token, shared by every pod of this run
    threads = threads or max(1, cpu_cores() // max(1, per_node))
    cfg = dataclasses.replace(cfg, threads_per_worker=threads)
    work = Path(records) / "work" / job
    result = work / "result.json"
    write_record(work / "config.json", cfg.to_dict())  # the path the launch command names; atomic
    if node_rank == "0":  # a previous run of a job of this name: its result, and its record on the volume
        result.unlink(missing_ok=True)
        (Path(records) / f"{job}.json").unlink(missing_ok=True)
    note_pod(work, LAUNCHER_ROLE if launcher_pod else node_rank)
    outcome_path(work, node_rank).unlink(missing_ok=True)  # a previous run's
    log = Path(records) / "logs" / f"{job}-node{node_rank}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    rank_dir = work / f"ranks-node{node_rank}"  # the ranks' phase marks and exit notes, as in a local launch
    rank_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), DISTBENCH_RANK_DIR=str(rank_dir))
    start, started_at = time.monotonic(), time.time()
    stopped = None
    try:
        if ssh_key and ssh_identity:
            private_key_copy(ssh_key, ssh_identity)
        launch = Launch(argv, env, log, timeout_s)
    except OSError as exc:  # the image lacks the launcher (or the key): a failed record, not a traceback
        with open(log, "a") as fh:
            where = f": {exc.filename}" if exc.filename and exc.filename != argv[0] else ""
            fh.write(f"[distbench] cannot start {argv[0]}: {exc.strerror or exc}{where}\n")
        rc = 127
    else:
        stop = lambda *_: threading.Thread(target=launch.stop, args=("sigterm",)).start()  # noqa: E731
        previous = signal.signal(signal.SIGTERM, stop)
        try:
            rc = launch.wait()
        finally:
            signal.signal(signal.SIGTERM, previous)
        stopped = launch.stopped
    status = reason = None
    if stopped == "timeout":
        _, where = phases.during(rank_dir, started_at)
        status, reason = "timeout", f"timed out after {timeout_s:g}s (--timeout) {where}"
    elif stopped == "sigterm":
        status, reason = "interrupted", "the pod was stopped by SIGTERM (deleted, preempted or past its deadline)"
    strategy = get_strategy(cfg.strategy)
    if node_rank != "0":  # this node's own outcome, published before the pod ends (non-zero when it failed)
        if rc == 0 and stopped is None:
            own = {"status": "ok", "reason": None}
        else:  # this node's ranks wrote no result: the cause comes from their exit notes and the tail
            own = outcome_record(
                cfg, strategy, work / f"no-result-node{node_rank}", rc, log_tail(log), status=status,
                reason=reason, rank_dir=rank_dir,
            )  # fmt: skip
        outcome = node_outcome(node_rank, own, rc, stopped, os.environ.get("DISTBENCH_NODE_NAME"), run_id)
        publish_outcome(work, outcome, echo=click.echo)
        return rc if rc != 0 or own["status"] == "ok" else 1
    # global rank 0 runs here (static rendezvous; horovodrun's first host), so its record exists by now
    pods = pods_of(work, nodes, run_id=run_id)
    record = outcome_record(cfg, strategy, result, rc, log_tail(log), status=status, reason=reason, rank_dir=rank_dir)
    each_node = nodes > 1 and launcher == TORCHRUN.name  # every node runs this wrapper (Horovod's run sshd)
    if each_node:  # every node's outcome; the record names the first node that failed
        mine = node_outcome(node_rank, record, rc, stopped, os.environ.get("DISTBENCH_NODE_NAME"), run_id)
        publish_outcome(work, mine, echo=click.echo)
        wait_s = 0.0 if record.get("status") == "ok" else OUTCOME_WAIT_S
        outcomes = read_outcomes(work, nodes, wait_s, run_id=run_id)
    cv = stats.step_stats(record["step_times_s"], 1, None)["step_time_cv"] if record.get("step_times_s") else None
    if record.get("status") == "ok" and cv is not None:  # --noisy-cv, as scale flags it (measure.repeat_fields)
        record["noisy"] = cv > noisy_cv
    record["launch"] = {
        "argv": list(argv),
        "returncode": rc,
        "wall_s": time.monotonic() - start,
        "launcher": launcher,
        "workdir": str(work),
        "log": str(log),
    }
    record["kubernetes"] = {
        **kubernetes_info(job, node_rank),
        "run_id": run_id,
        "pods": pods,
        "nodes": sorted({p["node"] for p in pods if p.get("node")}),
    }
    if network:  # what carried the gradients, from NCCL's log: RDMA only where it says NET/IB
        record["kubernetes"].update(network_fields(network, log.read_text(errors="replace")))
    if each_node:
        name_first_failure(record, outcomes, nodes=nodes)
    if (shared := shared_node(pods, nodes)) and record.get("status") == "ok":
        record.update(status="failed", reason=f"refused: {shared}")
    if "environment" not in record:
        try:
            from distbench.core import envinfo

            record["environment"] = envinfo.capture_environment()
        except Exception as exc:  # noqa: BLE001 - the record matters more than its environment
            record["environment"] = {"error": f"{type(exc).__name__}: {exc}"}
    write_record(Path(records) / f"{job}.json", record)
    click.echo(record_line(record))
    click.echo(f"distbench: {key}: {record['status']}" + (f" ({record['reason']})" if record.get("reason") else ""))
    return 0  # published: the record holds the outcome, and a pod that exits 0 is not retried

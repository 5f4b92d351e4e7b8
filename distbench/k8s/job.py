"""Inside a pod: what `distbench k8s-job run` (distbench/commands/k8s_job.py) does in every generated job's container.

It writes the point's config (threads from --threads, else the pod's CPUs divided among its workers),
runs the launch command (torchrun / horovodrun / the worker) under --timeout in its own process group,
copies its output to the pod's log and to a log file on the results volume, and on node rank 0 publishes
the point's record twice: as a file on the results volume and as one line on stdout (RECORD_MARKER), so
`distbench collect` can read it from the volume or from saved `kubectl logs`."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import click

from distbench.config import PointConfig
from distbench.k8s.collect import record_line
from distbench.launch import log_tail, outcome_record
from distbench.plan import cpu_cores
from distbench.record import write_record
from distbench.strategies import get_strategy

RESULT_WAIT_S = 120.0
"""After the launch exits 0, how long node rank 0 waits for rank 0's record (rank 0 may run on another pod)."""
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
) -> int:
    cfg = PointConfig.from_json(config_json)
    threads = threads or max(1, cpu_cores() // max(1, per_node))
    cfg = dataclasses.replace(cfg, threads_per_worker=threads)
    work = Path(records) / "work" / job
    result = work / "result.json"
    write_record(work / "config.json", cfg.to_dict())  # the path the launch command names; atomic
    if node_rank == "0":
        result.unlink(missing_ok=True)  # a previous run of a job of this name
    log = Path(records) / "logs" / f"{job}-node{node_rank}.log"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    start = time.monotonic()
    stopped = None
    try:
        launch = Launch(argv, env, log, timeout_s)
    except OSError as exc:  # the image lacks the launcher: a failed record, not a traceback
        with open(log, "a") as fh:
            fh.write(f"[distbench] cannot start {argv[0]}: {exc.strerror or exc}\n")
        rc = 127
    else:
        stop = lambda *_: threading.Thread(target=launch.stop, args=("sigterm",)).start()  # noqa: E731
        previous = signal.signal(signal.SIGTERM, stop)
        try:
            rc = launch.wait()
        finally:
            signal.signal(signal.SIGTERM, previous)
        stopped = launch.stopped
    if node_rank != "0":
        return rc
    waited = time.monotonic()
    while rc == 0 and not result.exists() and time.monotonic() - waited < RESULT_WAIT_S:
        time.sleep(1.0)
    status = reason = None
    if stopped == "timeout":
        status, reason = "timeout", f"timed out after {timeout_s:g}s (--timeout)"
    elif stopped == "sigterm":
        status, reason = "interrupted", "the pod was stopped by SIGTERM (deleted, preempted or past its deadline)"
    strategy = get_strategy(cfg.strategy)
    record = outcome_record(cfg, strategy, result, rc, log_tail(log), status=status, reason=reason)
    record["launch"] = {
        "argv": list(argv),
        "returncode": rc,
        "wall_s": time.monotonic() - start,
        "launcher": launcher,
        "workdir": str(work),
        "log": str(log),
    }
    record["kubernetes"] = kubernetes_info(job, node_rank)
    if "environment" not in record:
        try:
            from distbench import envinfo

            record["environment"] = envinfo.capture_environment()
        except Exception as exc:  # noqa: BLE001 - the record matters more than its environment
            record["environment"] = {"error": f"{type(exc).__name__}: {exc}"}
    write_record(Path(records) / f"{job}.json", record)
    click.echo(record_line(record))
    click.echo(f"distbench: {key}: {record['status']}" + (f" ({record['reason']})" if record.get("reason") else ""))
    return rc

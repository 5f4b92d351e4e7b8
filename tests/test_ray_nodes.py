"""Ray points placed per node on a local Ray cluster of two nodes: two raylets on this machine (a head and a
second `ray start --address`, each with two CPUs, on loopback, in a temp folder of their own). A point of
one node's size (N=2) runs on one node although a worker would fit on each, a two-node point (N=4) on two,
a point that fits neither way (N=3) is refused in one line; each record lists the nodes its workers ran on. The head and the second node are stopped, with every
process of their sessions, at the end: nothing outlives the test."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from distbench.results.store import Store
from distbench.run import raycluster
from tests.conftest import DISTBENCH, ROOT, quick, require

START_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session(sid: int) -> list[int]:
    alive = []
    for proc in psutil.process_iter(["pid", "status"]):
        with contextlib.suppress(ProcessLookupError, PermissionError, psutil.Error):
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
    return alive


def _stop(procs: list[subprocess.Popen]) -> list[int]:
    """SIGTERM each `ray start --block` (its session), then SIGKILL what is left of the sessions; the
    pids still alive after 20 s (none, when all went)."""
    for proc in reversed(procs):  # the second node first, then the head
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=15)
    deadline = time.monotonic() + 20
    while (left := [pid for p in procs for pid in _session(p.pid)]) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    return [pid for p in procs for pid in _session(p.pid)]


@pytest.fixture
def two_node_cluster():
    ray = str(Path(sys.executable).parent / "ray")
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="dbray2n-", dir="/tmp")  # Ray's socket paths must stay short
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}")
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=2", "--num-gpus=0", "--disable-usage-stats"]
    common.append(f"--temp-dir={temp}")
    procs: list[subprocess.Popen] = []

    def start(args: list[str], log: str) -> None:
        procs.append(
            subprocess.Popen(
                [ray, "start", *args, *common],
                stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(temp, log), "wb"),
                env=env,
                start_new_session=True,
            )
        )

    address = f"127.0.0.1:{port}"
    try:
        start(["--head", f"--port={port}", "--include-dashboard=false"], "head.log")
        deadline = time.monotonic() + START_S
        while not _accepts(port):
            assert procs[0].poll() is None and time.monotonic() < deadline, _tail(temp, "head.log")
            time.sleep(0.2)
        start([f"--address={address}"], "node2.log")
        while len(nodes := _nodes(address)) < 2:
            assert procs[1].poll() is None and time.monotonic() < deadline, _tail(temp, "node2.log")
            time.sleep(1.0)
        yield address, nodes
    finally:
        left = _stop(procs)
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"Ray processes outlived the test: {left}"


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(temp: str, name: str) -> str:
    with contextlib.suppress(OSError):
        return Path(temp, name).read_text(errors="replace")[-2000:]
    return "no log"


def _nodes(address: str) -> tuple:
    with contextlib.suppress(Exception):
        return raycluster.cluster_nodes.__wrapped__(address, 60.0)
    return ()


@pytest.mark.slow
@require("torch", "ray")
def test_ray_points_run_on_the_nodes_they_were_planned_on(tmp_path, two_node_cluster):
    address, nodes = two_node_cluster
    db = tmp_path / "r.db"
    runs = {}
    for n in (2, 4, 3):
        args = ["run", "--strategy", "ray-ddp", "--gpus", str(n), "--ray-address", address, *quick(device="cpu")]
        runs[n] = subprocess.run(
            [*DISTBENCH, *args, "--results", str(db)],
            capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
            env=dict(os.environ, DISTBENCH_NO_LOCAL_SLURM="1"),
        )  # fmt: skip
        assert runs[n].returncode == 0, runs[n].stdout[-3000:] + runs[n].stderr[-3000:]
    with Store(db) as store:
        by_n = {p["world_size"]: p for sweep in store.sweeps(3) for p in store.points(sweep["id"])}
    ids = {n["node_id"] for n in nodes}
    two, four, three = by_n[2], by_n[4], by_n[3]
    assert two["status"] == "ok" and four["status"] == "ok", (two.get("reason"), four.get("reason"))
    # one node's size: both workers on one raylet (PACK could have spread them, one CPU free on each)
    assert two["engine"]["placement"]["strategy"] == "STRICT_PACK" and two["nodes"] == 1
    assert len(two["engine"]["node_ids"]) == 1 and set(two["engine"]["node_ids"]) <= ids
    assert len({w["node_id"] for w in two["engine"]["workers"]}) == 1
    assert four["engine"]["placement"]["per_node"] == 2 and four["nodes"] == 2
    assert set(four["engine"]["node_ids"]) == ids  # two workers on each raylet
    assert sorted([w["node_id"] for w in four["engine"]["workers"]].count(i) for i in ids) == [2, 2]
    assert two["engine"]["restarts"] == 0 == four["engine"]["restarts"]
    assert three["status"] == "skipped"
    assert three["reason"] == (
        f"cannot be placed on the Ray cluster at {address}: N=3 CPUs is neither within one node nor a multiple "
        "of one node's CPUs over that many nodes (its nodes' CPUs: 2 x 2)"
    )
    said = " ".join((runs[3].stdout + runs[3].stderr).split())  # notes wrap at the terminal's width
    assert three["reason"] in said  # said whole, wrapped at words (the progress line shortens it)

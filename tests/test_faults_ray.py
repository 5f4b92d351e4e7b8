"""The fault suite for ray-ddp (tests/test_faults.py's harness): a SIGKILLed Ray Train worker, and SIGTERM to
distbench during a Ray point. Both end as recorded points with nothing of Ray left running (checked by the
test's environment tag, which the local Ray head and its workers inherit) and no Ray temp folder left."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.conftest import require
from tests.test_faults import LONG, Sweep, wait_gone

pytestmark = [pytest.mark.slow, require("torch", "ray")]


def ray_worker(sweep: Sweep, rank: int, timeout_s: float = 180) -> int:
    """The pid of Ray Train worker `rank`, from the file it writes into the point's rank folder on start."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in sweep.db.parent.rglob(f"ray-worker-{rank}.json"):
            try:
                return json.loads(path.read_text())["pid"]
            except (OSError, ValueError):
                pass
        if sweep.proc.poll() is not None:
            pytest.fail(f"distbench ended before Ray's workers started: {sweep.proc.stderr.read()[-3000:]}")
        time.sleep(0.2)
    pytest.fail(f"Ray Train worker {rank} did not start within {timeout_s}s")


def ray_process_names(tag: str) -> dict[int, str]:
    """{pid: name} of the live processes (psutil) whose environment holds the test's tag."""
    import psutil

    found = {}
    for p in psutil.process_iter(["name"]):
        try:
            if p.environ().get("DISTBENCH_FAULT_TAG") == tag and p.status() != psutil.STATUS_ZOMBIE:
                found[p.pid] = p.info["name"]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def ray_temp_dirs() -> set[str]:
    from distbench.workers.ray_ddp import TEMP_PREFIX

    return {p for p in os.listdir("/tmp") if p.startswith(TEMP_PREFIX)}


def test_kill_9_of_one_ray_worker_names_the_rank_and_leaves_no_ray_process(tmp_path, sweeps):  # noqa: F811
    before = ray_temp_dirs()
    sweep = Sweep(tmp_path, ["run", "--strategy", "ray-ddp", "--gpus", "2", *LONG])
    sweeps.append(sweep)
    pid = ray_worker(sweep, 1)
    # the tag reaches Ray's own processes, so "none left" below is not vacuous
    assert {"raylet", "gcs_server"} <= set(ray_process_names(sweep.tag).values())
    time.sleep(1.0)
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    rc, _, err = sweep.finish(timeout_s=240)
    assert rc == 1, err[-3000:]  # its one point failed: exit 1 with a one-line summary
    assert "no point succeeded: 1 of 1 point(s) ran" in err
    assert "Traceback" not in err
    [point] = sweep.points()
    print(
        f"\n[fault] ray-ddp: kill -9 of Ray worker rank 1: {point['status']} {point['reason']!r} "
        f"(distbench ended {time.monotonic() - killed:.1f}s after the kill)"
    )
    assert point["status"] == "failed", point
    assert point["reason"].startswith(f"rank 1 died: its Ray worker process (pid {pid}) ended without an error"), point
    left, gone_s = wait_gone(sweep.tag)
    assert not left, f"Ray processes outlived the point: {left}"
    assert not ray_process_names(sweep.tag)
    assert ray_temp_dirs() <= before


def test_sigterm_to_distbench_during_a_ray_point_is_interrupted_and_stops_the_head(tmp_path, sweeps):  # noqa: F811
    before = ray_temp_dirs()
    sweep = Sweep(tmp_path, ["run", "--strategy", "ray-ddp", "--gpus", "2", *LONG])
    sweeps.append(sweep)
    ray_worker(sweep, 1)
    time.sleep(1.0)
    sweep.proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    rc, _, err = sweep.finish(timeout_s=60)
    left, gone_s = wait_gone(sweep.tag)
    print(
        f"\n[fault] ray-ddp: SIGTERM to distbench: exit {rc} after {time.monotonic() - sent:.1f}s, "
        f"every process gone {gone_s:.1f}s after exit"
    )
    assert not left, f"Ray processes outlived the sweep after SIGTERM: {left}"
    assert not ray_process_names(sweep.tag)
    assert rc == 128 + signal.SIGTERM, err[-2000:]
    assert "Traceback" not in err
    stopped = sweep.points()
    assert [{**p, "reason": None} for p in stopped] == [
        {"strategy": "ray-ddp", "world_size": 2, "status": "interrupted", "reason": None}
    ]
    assert stopped[0]["reason"].startswith("stopped by SIGTERM during "), stopped  # + the phase (distbench.core.phases)
    assert sweep.sweep_row()["status"] == "interrupted"
    assert ray_temp_dirs() <= before

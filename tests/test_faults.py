"""The fault suite: what clusters do to jobs, done to real sweeps on CPU workers.

Every process a test starts carries a tag in its environment (DISTBENCH_FAULT_TAG, inherited by the
launchers and every rank), so "no process of the sweep is left" is checked by that tag, never by a
process name; only processes the test started are ever signalled, by pid or process group.
Each test is bounded in time. The seconds each fault took to be detected are printed (pytest -s) and
summarised in docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.builders import point_config
from tests.conftest import DISTBENCH, require

pytestmark = pytest.mark.slow

TORCH = require("torch")
HOROVOD_TORCH = require("torch", "horovod.torch")
HOROVOD_TF = require("tensorflow", "horovod.tensorflow")

# Points that measure until --max-time: long enough to be hit mid-measurement, short enough for CI.
LONG = [
    "--model",
    "resnet18",
    "--image-size",
    "32",
    "--batch-size",
    "2",
    "--warmup",
    "1",
    "--steps",
    "5",
    "--target-ci",
    "0.001%",
    "--max-time",
    "4",
    "--no-comm",
    "--telemetry-interval",
    "0",
    "--device",
    "cpu",
]


def tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds this test's tag."""
    found = []
    needle = f"DISTBENCH_FAULT_TAG={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
        except OSError:
            continue
        found.append(int(entry))
    return found


def wait_gone(tag: str, within_s: float = 15.0) -> tuple[list[int], float]:
    """(processes still alive after `within_s`, seconds until the last one was gone)."""
    start = time.monotonic()
    while time.monotonic() - start < within_s:
        left = tagged(tag)
        if not left:
            return [], time.monotonic() - start
        time.sleep(0.2)
    return tagged(tag), within_s


class Sweep:
    """A `distbench` command run in its own session, with a tag every descendant inherits."""

    def __init__(self, tmp_path: Path, args: list[str], limits: str | None = None):
        self.tag = uuid.uuid4().hex
        self.db = tmp_path / "results.db"
        self.records = tmp_path / "records"
        argv = [*DISTBENCH, *args, "--results", str(self.db)]
        if limits:
            argv = ["bash", "-c", f'{limits} && exec "$@"', "bash", *argv]
        env = dict(os.environ, DISTBENCH_FAULT_TAG=self.tag, TMPDIR=str(tmp_path))
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def ranks(self, strategy_module: str, n: int, timeout_s: float = 120) -> dict[int, int]:
        """{rank: pid} of the worker processes of the running point, once all `n` exist."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = {}
            for pid in tagged(self.tag):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as fh:
                        argv = fh.read().split(b"\0")
                    with open(f"/proc/{pid}/environ", "rb") as fh:
                        env = dict(v.split(b"=", 1) for v in fh.read().split(b"\0") if b"=" in v)
                except OSError:
                    continue
                if strategy_module.encode() in argv and b"distbench.core.rankguard" not in argv:
                    rank = env.get(b"RANK", env.get(b"HOROVOD_RANK", b"0"))
                    found[int(rank)] = pid
            if len(found) == n:
                return found
            if self.proc.poll() is not None:
                pytest.fail(f"distbench ended before its ranks started: {self.proc.stderr.read()[-3000:]}")
            time.sleep(0.2)
        pytest.fail(f"{n} ranks of {strategy_module} did not start within {timeout_s}s")

    def finish(self, timeout_s: float = 300) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            pytest.fail(f"distbench did not finish within {timeout_s}s: {err[-3000:]}")
        return self.proc.returncode, out, err

    def cleanup(self) -> list[int]:
        """Kill (by pid) whatever of this sweep is still alive; return those pids."""
        left = tagged(self.tag)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left

    def points(self) -> list[dict]:
        con = sqlite3.connect(self.db)
        con.row_factory = sqlite3.Row
        rows = [dict(r) for r in con.execute("SELECT strategy, world_size, status, reason FROM points ORDER BY id")]
        con.close()
        return rows

    def sweep_row(self) -> dict:
        con = sqlite3.connect(self.db)
        con.row_factory = sqlite3.Row
        [row] = [dict(r) for r in con.execute("SELECT id, status, notes_json FROM sweeps")]
        con.close()
        return row


def _strategy_module(strategy: str) -> str:
    return {
        "ddp": "torch_ddp",
        "horovod-torch": "horovod_torch",
        "horovod-tf": "horovod_tf",
    }[strategy]


PARENT_CASES = [
    pytest.param("ddp", signal.SIGTERM, marks=TORCH, id="ddp-SIGTERM"),
    pytest.param("ddp", signal.SIGINT, marks=TORCH, id="ddp-SIGINT"),
    pytest.param("ddp", signal.SIGKILL, marks=TORCH, id="ddp-SIGKILL"),
    pytest.param("horovod-torch", signal.SIGTERM, marks=HOROVOD_TORCH, id="horovod-torch-SIGTERM"),
    pytest.param("horovod-torch", signal.SIGINT, marks=HOROVOD_TORCH, id="horovod-torch-SIGINT"),
    pytest.param("horovod-torch", signal.SIGKILL, marks=HOROVOD_TORCH, id="horovod-torch-SIGKILL"),
]


@pytest.mark.parametrize("strategy,sig", PARENT_CASES)
def test_a_signal_to_distbench_mid_point_leaves_no_process_and_keeps_finished_points(tmp_path, sweeps, strategy, sig):
    sweep = Sweep(tmp_path, ["scale", "--gpus", "2", "--strategy", strategy, *LONG])
    sweeps.append(sweep)
    sweep.ranks(_strategy_module(strategy), 2)  # the baseline point is finished; this one is running
    time.sleep(1.0)
    if sig == signal.SIGINT:  # Ctrl-C reaches the terminal's whole foreground process group
        os.killpg(sweep.proc.pid, sig)
    else:  # scancel / timeout / a time limit signal the job's main process
        sweep.proc.send_signal(sig)
    sent = time.monotonic()
    rc, _, err = sweep.finish(timeout_s=60)
    left, gone_s = wait_gone(sweep.tag)
    print(
        f"\n[fault] {strategy}: {sig.name} to distbench: exit {rc} after {time.monotonic() - sent:.1f}s, "
        f"every process gone {gone_s:.1f}s after exit"
    )
    assert not left, f"processes outlived the sweep after {sig.name}: {left}"
    points = sweep.points()
    assert points[0]["strategy"] == "torch" and points[0]["status"] == "ok"  # the finished baseline is kept
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL
        return
    assert rc == 128 + sig, err[-2000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    row = sweep.sweep_row()
    assert last == (
        f"Interrupted by {sig.name}: every finished point is kept in sweep {row['id']} ({sweep.db}), "
        f"marked 'interrupted'; finish it with: distbench scale --resume {row['id']} --results {sweep.db}"
    )
    assert row["status"] == "interrupted"
    assert f"interrupted by {sig.name}" in json.loads(row["notes_json"])
    # the baselines (and, on CPU workers, the per-core baseline) finished before; the running point:
    stopped = [p for p in points if p["status"] != "ok"]
    assert [{**p, "reason": None} for p in stopped] == [
        {"strategy": strategy, "world_size": 2, "status": "interrupted", "reason": None}
    ]
    assert stopped[0]["reason"].startswith(f"stopped by {sig.name} during "), stopped  # + the phase it was in


RANK_CASES = [
    pytest.param("ddp", marks=TORCH),
    pytest.param("horovod-torch", marks=HOROVOD_TORCH),
    pytest.param("horovod-tf", marks=HOROVOD_TF),
]


@pytest.mark.parametrize("strategy", RANK_CASES)
def test_kill_9_of_one_rank_names_the_rank_and_the_signal_and_the_sweep_goes_on(tmp_path, sweeps, strategy):
    # the baseline and the per-core baseline, then the point that loses a rank
    sweep = Sweep(tmp_path, ["scale", "--gpus", "2", "--strategy", strategy, *LONG])
    sweeps.append(sweep)
    ranks = sweep.ranks(_strategy_module(strategy), 2, timeout_s=240)
    time.sleep(1.0)
    os.kill(ranks[1], signal.SIGKILL)
    killed = time.monotonic()
    rc, out, err = sweep.finish(timeout_s=300)
    assert rc == 0, err[-3000:]
    assert "Traceback" not in err
    points = sweep.points()
    [broken] = [p for p in points if p["strategy"] == strategy and p["world_size"] == 2]
    assert broken["status"] == "failed", broken
    assert broken["reason"] == "rank 1 killed (SIGKILL)"
    # The sweep went on to its end (exit 0) and kept every other point.
    assert [p["status"] for p in points if p is not broken] == ["ok"] * (len(points) - 1) == ["ok", "ok"]
    line = next(ln for ln in err.splitlines() if f"{strategy} N=2" in ln and "failed" in ln)
    print(
        f"\n[fault] {strategy}: kill -9 of rank 1: recorded as {broken['reason']!r} "
        f"(sweep ended {time.monotonic() - killed:.1f}s after the kill); {line!r}"
    )
    assert not wait_gone(sweep.tag)[0]


@TORCH
def test_a_stopped_rank_times_out_and_every_process_goes(tmp_path, sweeps):
    sweep = Sweep(
        tmp_path, ["run", "--strategy", "ddp", "--gpus", "2", *LONG[:-1], "cpu", "--max-time", "60", "--timeout", "25"]
    )
    sweeps.append(sweep)
    ranks = sweep.ranks(_strategy_module("ddp"), 2)
    time.sleep(2.0)
    os.kill(ranks[1], signal.SIGSTOP)
    rc, out, err = sweep.finish(timeout_s=120)
    assert rc == 1, err[-3000:]  # its one point failed: exit 1 with a one-line summary
    assert "no point succeeded: 1 of 1 point(s) ran (1 timeout)" in err
    [point] = sweep.points()
    assert point["status"] == "timeout"
    assert point["reason"].startswith("timed out after 25s (--timeout) during ")  # + the phase (distbench.core.phases)
    left, gone_s = wait_gone(sweep.tag)
    assert not left


@TORCH
def test_running_out_of_cpu_memory_is_recorded_oom(tmp_path, sweeps):
    # vgg16 at 224 px, batch 64: its activations need several GB; the address-space limit lets the
    # worker start (torch imported) but not allocate them, so torch's CPU allocator itself fails.
    sweep = Sweep(
        tmp_path,
        [
            "run",
            "--strategy",
            "ddp",
            "--gpus",
            "2",
            "--model",
            "vgg16",
            "--image-size",
            "224",
            "--batch-size",
            "64",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--target-ci",
            "0",
            "--no-comm",
            "--telemetry-interval",
            "0",
            "--device",
            "cpu",
            "--timeout",
            "120",
        ],
        limits="ulimit -v 6000000",
    )
    sweeps.append(sweep)
    started = time.monotonic()
    rc, out, err = sweep.finish(timeout_s=200)
    assert rc == 1, err[-3000:]  # its one point failed: exit 1 with a one-line summary
    assert "no point succeeded: 1 of 1 point(s) ran (1 oom)" in err
    [point] = sweep.points()
    print(
        f"\n[fault] CPU OOM under ulimit -v: {point['status']} after {time.monotonic() - started:.1f}s: "
        f"{point['reason']}"
    )
    assert point["status"] == "oom", point
    assert "can't allocate memory" in point["reason"]


@HOROVOD_TORCH
def test_an_oom_on_a_non_zero_rank_is_oom_within_seconds_not_a_timeout(tmp_path):
    from distbench.core.strategies import Strategy
    from distbench.run.launch import run_point
    from distbench.run.launchers import HOROVODRUN

    broken = Strategy(
        name="horovod-torch",
        framework="torch",
        module="tests.fault_workers.horovod_oom_rank1",
        launcher=HOROVODRUN.name,
    )
    cfg = point_config("horovod-torch", 2, image_size=32, steps=50, warmup=1, threads_per_worker=1, target_ci=0.0)
    started = time.monotonic()
    record = run_point(broken, cfg, tmp_path, timeout_s=600)
    took = time.monotonic() - started
    print(f"\n[fault] horovod-torch: OOM on rank 1 only: {record['status']} after {took:.1f}s: {record['reason']}")
    assert record["status"] == "oom", record.get("stderr_tail", "")[-3000:]
    assert record["reason"].startswith("rank 1 exited with status 3: RuntimeError: ")
    assert "can't allocate memory" in record["reason"]
    assert took < 120


GUARD_CASES = [
    pytest.param("ddp", "torchrun saw local rank 1 end: killed by SIGKILL", marks=TORCH, id="ddp"),
    pytest.param(
        "horovod-torch",
        "horovodrun saw process 1 end: exit status 137 (128 + SIGKILL))",
        marks=HOROVOD_TORCH,
        id="horovod-torch",
    ),
]


@pytest.mark.parametrize("strategy, launcher_saw", GUARD_CASES)
def test_kill_9_of_a_rank_guard_says_the_cause_is_unknown_and_names_the_silent_rank(
    tmp_path, sweeps, strategy, launcher_saw
):
    """Rank 1's guard dies (and with it, by the parent-death signal, its worker): rank 1 writes no report,
    rank 0 only sees its peer go away. The reason must not name that consequence as the cause."""
    sweep = Sweep(tmp_path, ["run", "--strategy", strategy, "--gpus", "2", *LONG])
    sweeps.append(sweep)
    worker = sweep.ranks(_strategy_module(strategy), 2, timeout_s=240)[1]
    with open(f"/proc/{worker}/stat", "rb") as fh:
        guard = int(fh.read().rsplit(b")", 1)[1].split()[1])
    with open(f"/proc/{guard}/cmdline", "rb") as fh:
        assert b"distbench.core.rankguard" in fh.read().split(b"\0")
    time.sleep(1.0)
    os.kill(guard, signal.SIGKILL)
    rc, out, err = sweep.finish(timeout_s=300)
    assert rc in (0, 1), err[-3000:]
    assert "Traceback" not in err
    [point] = sweep.points()
    assert point["status"] == "failed", point
    assert point["reason"].startswith(f"cause unknown: rank 1 left no report ({launcher_saw}"), point["reason"]
    # rank 0: killed (SIGTERM) by the launcher's teardown, or its own peer-went-away error
    assert "; on record only a consequence: rank 0 " in point["reason"], point["reason"]
    print(f"\n[fault] {strategy}: kill -9 of rank 1's rank guard: recorded as {point['reason']!r}")
    assert not wait_gone(sweep.tag)[0]

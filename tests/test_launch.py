"""Builder tests: what would run for each launcher, without running it; and the executor's failure paths."""

import os
import sys

import pytest

from distbench.core import failures
from distbench.core.strategies import STRATEGIES, Strategy
from distbench.run.launch import build_command, run_point
from distbench.run.launchers import PROCESS
from tests.builders import tiny_config


def _cfg(strategy="ddp", n=2, device="cpu"):
    return tiny_config(strategy, n, model="resnet50", device=device)


def test_process_launcher_runs_the_worker_module():
    argv, env = build_command(STRATEGIES["torch"], _cfg("torch", 1), "c.json", "r.json", base_env={})
    # Every rank runs under the rank guard, which runs the worker module with the same Python.
    assert argv == [
        sys.executable,
        "-m",
        "distbench.core.rankguard",
        sys.executable,
        "-m",
        "distbench.workers",
        "torch_single",
        "--config",
        "c.json",
        "--out",
        "r.json",
    ]
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_torchrun_launcher():
    argv, _ = build_command(STRATEGIES["ddp"], _cfg("ddp", 4), "c.json", "r.json", base_env={})
    assert argv[0].endswith("torchrun")
    assert argv[1:4] == ["--standalone", "--nnodes=1", "--nproc_per_node=4"]
    assert argv[4:10] == ["-m", "distbench.core.rankguard", sys.executable, "-m", "distbench.workers", "torch_ddp"]


def test_horovodrun_launcher_uses_gloo_on_localhost():
    argv, _ = build_command(STRATEGIES["horovod-tf"], _cfg("horovod-tf", 2), "c.json", "r.json", base_env={})
    assert argv[0].endswith("horovodrun")
    assert argv[1:6] == ["-np", "2", "-H", "localhost:2", "--gloo"]
    assert argv[-7:] == ["-m", "distbench.workers", "horovod_tf", "--config", "c.json", "--out", "r.json"]


def test_cuda_env_leaves_gpus_visible():
    _, env = build_command(
        STRATEGIES["ddp"], _cfg("ddp", 2, device="cuda"), "c", "r", base_env={"CUDA_VISIBLE_DEVICES": "0,1"}
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"


def classify_failure(returncode: int | None, stderr_tail: str) -> str:
    """'oom' when the output shows memory ran out, else 'failed' (a bare SIGKILL is not evidence)."""
    return failures.classify(None, stderr_tail=stderr_tail, returncode=returncode)[0]


def test_classify_failure():
    assert classify_failure(1, "RuntimeError: CUDA out of memory. Tried to allocate") == "oom"
    assert classify_failure(-9, "") == "failed"  # a SIGKILL alone is no evidence of memory
    assert (
        classify_failure(
            1,
            "RuntimeError: [enforce fail at alloc_cpu.cpp:121] . DefaultCPUAllocator: "
            "can't allocate memory: you tried to allocate 822083584 bytes",
        )
        == "oom"
    )
    assert classify_failure(137, "Killed") == "failed"
    assert classify_failure(1, "ValueError: boom") == "failed"


def test_a_crashing_worker_is_recorded_failed_with_its_stderr(tmp_path):
    broken = Strategy(name="broken", framework="torch", module="does_not_exist", launcher=PROCESS.name)
    record = run_point(broken, _cfg("torch", 1), tmp_path, timeout_s=120)
    assert record["status"] == "failed"
    assert "No module named distbench.workers.does_not_exist" in record["stderr_tail"]
    assert record["reason"].startswith("rank 0 exited with status 1: ")
    assert record["reason"].endswith("No module named distbench.workers.does_not_exist")
    assert record["launch"]["returncode"] == 1


def test_a_hanging_point_times_out_and_its_tree_is_killed(tmp_path, monkeypatch):
    import distbench.run.launch as launch

    monkeypatch.setattr(
        launch, "build_command", lambda *a, **k: ([sys.executable, "-c", "import time; time.sleep(60)"], {})
    )
    record = run_point(STRATEGIES["torch"], _cfg("torch", 1), tmp_path, timeout_s=1)
    assert record["status"] == "timeout"
    assert record["reason"].startswith("timed out after 1s (--timeout) during ")  # + the phase (distbench.core.phases)
    assert record["launch"]["wall_s"] < 30


def test_failure_summary_prefers_the_workers_exception_over_the_launchers():
    from distbench.core.failures import failure_summary

    tail = (
        "[0]<stderr>:Traceback (most recent call last):\n"
        "[0]<stderr>:TypeError: zero_grad() got an unexpected keyword argument\n"
        "Traceback (most recent call last):\n"
        "RuntimeError: Horovod detected that one or more processes exited with non-zero status\n"
        "Exit code: 1\n"
    )
    assert failure_summary(tail) == "TypeError: zero_grad() got an unexpected keyword argument"
    assert failure_summary("nothing here\n") is None
    torchrun_tail = (
        "[rank1]: AttributeError: 'X' object has no attribute 'zero_grad'\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
    )
    assert failure_summary(torchrun_tail) == "AttributeError: 'X' object has no attribute 'zero_grad'"


@pytest.mark.slow
def test_ranks_hung_in_teardown_after_the_record_is_written_are_stopped_and_the_record_kept(tmp_path):
    """The work is done and rank 0 wrote the record; a destructor that never returns must not turn the
    point into a timeout: distbench stops the ranks FAILURE_GRACE_S later and keeps the record."""
    import time

    import distbench.run.launch as launch

    hung = Strategy(
        name="torch", framework="torch", module="tests.fault_workers.hang_after_record", launcher=PROCESS.name
    )
    started = time.monotonic()
    record = run_point(hung, _cfg("torch", 1), tmp_path, timeout_s=120)
    assert record["status"] == "ok", record.get("reason")
    assert record["step_times_s"] == [0.1, 0.1, 0.1]
    assert "hung in teardown" in record["launch_note"]
    assert time.monotonic() - started < launch.FAILURE_GRACE_S + 30


def test_a_workers_record_is_named_by_the_registry_not_by_the_worker(tmp_path):
    """A worker module does not name its strategy: the record carries the name the parent's config gives it."""
    import pathlib
    import re

    from distbench.results.record import read_record
    from distbench.workers import common

    for path in pathlib.Path(common.__file__).parent.glob("*.py"):
        assert not re.search(r"^STRATEGY\b", path.read_text(), re.M), path.name
    cfg = _cfg("any-registered-name", n=1)
    out = tmp_path / "record.json"
    common.emit(cfg, str(out), framework="torch", status="skipped", reason="test")
    assert read_record(str(out))["strategy"] == "any-registered-name"


def test_a_rank_that_fails_after_the_record_is_written_keeps_the_measurement(tmp_path):
    """Rank 0 writes the record after gathering every rank's measurements, so a rank that aborts later (a
    destructor at interpreter exit: 'terminate called without an active exception') broke nothing that was
    measured: the point stays ok, with a note naming what happened and the tail kept."""
    from distbench.results.record import base_record, write_record
    from distbench.run.launch import outcome_record

    cfg = _cfg("ddp", 2)
    ok = base_record(cfg.to_dict(), strategy="ddp", framework="torch", status="ok")
    ok["step_times_s"] = [0.1, 0.1, 0.1]
    write_record(tmp_path / "result.json", ok)
    tail = "terminate called without an active exception\n"
    record = outcome_record(cfg, STRATEGIES["ddp"], tmp_path / "result.json", -6, tail)
    assert record["status"] == "ok" and record["step_times_s"] == [0.1, 0.1, 0.1]
    assert record["launch_note"].startswith("a rank failed in teardown, after rank 0 wrote the record")
    assert "SIGABRT" in record["launch_note"] and record["teardown_tail"] == tail


def _wakeups() -> int:
    """Context switches of the calling thread so far (each sleep that ends is one)."""
    with open("/proc/thread-self/status") as fh:
        return sum(int(line.split()[1]) for line in fh if "ctxt_switches" in line)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfd and /proc/thread-self are Linux's")
def test_waiting_for_a_launcher_sleeps_in_the_kernel_and_wakes_at_its_exit():
    """Issue 34: distbench's wait for a point (Popen.wait with a 0.2 s timeout) woke about 45 times a second
    on the cores the measured workers use. It now sleeps on a pidfd: a handful of wakeups over 1.5 s, and the
    launcher's exit still ends the wait at once, long before the look's timeout."""
    import subprocess
    import time

    from distbench.run.launch import ExitWaiter

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    waiter = ExitWaiter(proc)
    try:
        before, started = _wakeups(), time.monotonic()
        codes = [waiter.wait(0.5) for _ in range(2)]  # two looks while it runs
        code = waiter.wait(30.0)  # then its exit
        waited, woke = time.monotonic() - started, _wakeups() - before
    finally:
        waiter.close()
        proc.kill()
        proc.wait()
    assert codes[0] is None and code == 0
    assert waited < 15  # woken by the exit, not by the 30 s look's end
    assert woke <= 10, f"{woke} wakeups while waiting {waited:.1f} s"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfd and /proc/thread-self are Linux's")
def test_the_rank_guard_watches_the_distbench_process_without_waking():
    """The rank guard's watch of the distbench process: it polled /proc every 0.5 s beside the measured rank;
    now it sleeps on a pidfd until that process is gone (and a start time that does not match counts as gone)."""
    import subprocess
    import time

    from distbench.core import rankguard

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    try:
        ticks = rankguard.start_ticks(proc.pid)
        before, started = _wakeups(), time.monotonic()
        rankguard.wait_until_gone(proc.pid, ticks)
        waited, woke = time.monotonic() - started, _wakeups() - before
    finally:
        proc.kill()
        proc.wait()
    assert 0.5 < waited < 15
    assert woke <= 5, f"{woke} wakeups while watching for {waited:.1f} s"
    started = time.monotonic()
    rankguard.wait_until_gone(os.getpid(), "1")  # this process, but not the one that started at tick 1
    assert time.monotonic() - started < 1

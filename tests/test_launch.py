"""Builder tests: what would run for each launcher, without running it; and the executor's failure paths."""

import sys


import pytest

from distbench.config import PointConfig
from distbench.launchers import PROCESS
from distbench.launch import build_command, classify_failure, run_point
from distbench.strategies import STRATEGIES, Strategy


def _cfg(strategy="ddp", n=2, device="cpu"):
    return PointConfig(
        strategy=strategy,
        model="resnet50",
        world_size=n,
        device=device,
        per_device_batch=2,
        image_size=32,
        steps=2,
        warmup=1,
        threads_per_worker=1,
    )


def test_process_launcher_runs_the_worker_module():
    argv, env = build_command(STRATEGIES["torch"], _cfg("torch", 1), "c.json", "r.json", base_env={})
    # Every rank runs under the rank guard, which runs the worker module with the same Python.
    assert argv == [
        sys.executable,
        "-m",
        "distbench.rankguard",
        sys.executable,
        "-m",
        "distbench.workers.torch_single",
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
    assert argv[4:9] == ["-m", "distbench.rankguard", sys.executable, "-m", "distbench.workers.torch_ddp"]


def test_horovodrun_launcher_uses_gloo_on_localhost():
    argv, _ = build_command(STRATEGIES["horovod-tf"], _cfg("horovod-tf", 2), "c.json", "r.json", base_env={})
    assert argv[0].endswith("horovodrun")
    assert argv[1:6] == ["-np", "2", "-H", "localhost:2", "--gloo"]
    assert argv[-6:] == ["-m", "distbench.workers.horovod_tf", "--config", "c.json", "--out", "r.json"]


def test_cuda_env_leaves_gpus_visible():
    _, env = build_command(
        STRATEGIES["ddp"], _cfg("ddp", 2, device="cuda"), "c", "r", base_env={"CUDA_VISIBLE_DEVICES": "0,1"}
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"


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
    broken = Strategy(name="broken", framework="torch", module="does_not_exist", launcher=PROCESS)
    record = run_point(broken, _cfg("torch", 1), tmp_path, timeout_s=120)
    assert record["status"] == "failed"
    assert "No module named distbench.workers.does_not_exist" in record["stderr_tail"]
    assert record["reason"].startswith("rank 0 exited with status 1: ")
    assert record["reason"].endswith("No module named distbench.workers.does_not_exist")
    assert record["launch"]["returncode"] == 1


def test_a_hanging_point_times_out_and_its_tree_is_killed(tmp_path, monkeypatch):
    import distbench.launch as launch

    monkeypatch.setattr(
        launch, "build_command", lambda *a, **k: ([sys.executable, "-c", "import time; time.sleep(60)"], {})
    )
    record = run_point(STRATEGIES["torch"], _cfg("torch", 1), tmp_path, timeout_s=1)
    assert record["status"] == "timeout"
    assert record["reason"] == "timed out after 1s (--timeout)"
    assert record["launch"]["wall_s"] < 30


def test_failure_summary_prefers_the_workers_exception_over_the_launchers():
    from distbench.launch import failure_summary

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

    import distbench.launch as launch

    hung = Strategy(name="torch", framework="torch", module="tests.fault_workers.hang_after_record", launcher=PROCESS)
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

    from distbench.workers import common
    from distbench.record import read_record

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
    from distbench.launch import outcome_record
    from distbench.record import base_record, write_record

    cfg = _cfg("ddp", 2)
    ok = base_record(cfg.to_dict(), strategy="ddp", framework="torch", status="ok")
    ok["step_times_s"] = [0.1, 0.1, 0.1]
    write_record(tmp_path / "result.json", ok)
    tail = "terminate called without an active exception\n"
    record = outcome_record(cfg, STRATEGIES["ddp"], tmp_path / "result.json", -6, tail)
    assert record["status"] == "ok" and record["step_times_s"] == [0.1, 0.1, 0.1]
    assert record["launch_note"].startswith("a rank failed in teardown, after rank 0 wrote the record")
    assert "SIGABRT" in record["launch_note"] and record["teardown_tail"] == tail

"""Root causes, rank guards and signals, without any framework: tiny Python programs stand in for ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from distbench.core import failures, rankguard
from tests.builders import point_config


def _report(rank, returncode, ended, error=None, sig=None):
    return {"rank": rank, "returncode": returncode, "signal": sig, "ended": ended, "error": error}


def test_the_root_cause_is_the_first_rank_to_fail_on_its_own_account():
    killed = _report(1, -9, 10.0, sig="SIGKILL")
    survivor = _report(0, 1, 10.4, error="RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer")
    assert failures.root_cause([killed, survivor]) is killed
    assert failures.describe(killed) == "rank 1 killed (SIGKILL)"
    # The survivor noticed first (its report is older), but it only says its peer went away.
    assert failures.root_cause([dict(survivor, ended=9.0), killed])["rank"] == 1
    # Ranks the launcher terminated after the first failure are consequences too.
    oom = _report(1, 1, 5.0, error="RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1")
    teardown = _report(0, -15, 5.2, sig="SIGTERM")
    assert failures.root_cause([oom, teardown]) is oom
    assert failures.classify(oom) == ("oom", None)
    assert failures.root_cause([_report(0, 0, 1.0)]) is None


def test_oom_needs_evidence_a_sigkill_alone_is_killed():
    killed = _report(1, -9, 1.0, sig="SIGKILL")
    assert failures.classify(killed) == ("failed", None)
    assert failures.classify(killed, oom_before=3, oom_after=3) == ("failed", None)
    status, note = failures.classify(killed, oom_before=3, oom_after=4)
    assert status == "oom" and note.startswith("possibly the kernel OOM killer")
    # "Killed" printed by a launcher is not a memory message; allocator messages are.
    assert failures.classify(None, stderr_tail="Killed\nExit code: 137", returncode=137) == ("failed", None)
    for text in (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor",
        "MemoryError",
        "terminate called after throwing an instance of 'std::bad_alloc'",
    ):
        assert failures.classify(None, stderr_tail=text)[0] == "oom", text


def test_rank_reports_are_read_from_the_rank_folder_in_order_of_ending(tmp_path):
    (tmp_path / "exit-0.json").write_text(json.dumps(_report(0, 1, 2.0)))
    (tmp_path / "exit-1.json").write_text(json.dumps(_report(1, 3, 1.0)))
    (tmp_path / "error-1.json").write_text(json.dumps({"rank": 1, "error": "MemoryError: boom"}))
    (tmp_path / "exit-2.json").write_text("{half a fi")  # a torn file is skipped, never fatal
    reports = failures.rank_reports(tmp_path)
    assert [r["rank"] for r in reports] == [1, 0]
    assert reports[0]["error"] == "MemoryError: boom"
    assert failures.first_failure(tmp_path)["rank"] == 1
    assert failures.rank_reports(tmp_path / "missing") == []


def _guard(tmp_path, code: str, env: dict | None = None, **kw):
    full = dict(os.environ, DISTBENCH_RANK_DIR=str(tmp_path), RANK="3", **(env or {}))
    return subprocess.Popen(
        [sys.executable, "-m", "distbench.core.rankguard", sys.executable, "-c", code], env=full, **kw
    )


def test_the_guard_reports_exit_status_and_signal_and_passes_the_status_on(tmp_path):
    proc = _guard(tmp_path, "import sys; sys.exit(7)")
    assert proc.wait(timeout=30) == 7
    report = json.loads((tmp_path / "exit-3.json").read_text())
    assert (report["rank"], report["returncode"], report["signal"]) == (3, 7, None)
    proc = _guard(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert proc.wait(timeout=30) == 128 + 9
    assert json.loads((tmp_path / "exit-3.json").read_text())["signal"] == "SIGKILL"


def test_the_guard_forwards_sigterm_to_the_worker(tmp_path):
    ready = tmp_path / "ready"
    proc = _guard(tmp_path, f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(60)")
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + 15
    assert json.loads((tmp_path / "exit-3.json").read_text())["signal"] == "SIGTERM"


def test_the_guard_kills_its_worker_when_the_distbench_process_is_gone(tmp_path):
    # A stand-in "distbench" that dies at once: the guard must notice and kill its worker.
    parent = subprocess.Popen([sys.executable, "-c", "pass"])
    parent.wait()
    ticks = "1"  # not the dead process's start time: even a reused pid would not count as alive
    started = time.monotonic()
    proc = _guard(
        tmp_path,
        "import time; time.sleep(60)",
        env={"DISTBENCH_PARENT_PID": str(parent.pid), "DISTBENCH_PARENT_START": ticks},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.wait(timeout=30) == 128 + 9
    assert time.monotonic() - started < 10
    assert "is gone; killing the worker" in proc.stderr.read()


def test_liveness_is_tied_to_the_start_time_not_just_the_pid():
    me = os.getpid()
    assert rankguard.alive(me, rankguard.start_ticks(me))
    assert not rankguard.alive(me, "0")
    assert rankguard.parent_env(me) == {
        "DISTBENCH_PARENT_PID": str(me),
        "DISTBENCH_PARENT_START": rankguard.start_ticks(me),
    }


@pytest.mark.parametrize(
    "rank_vars,expected", [({"RANK": "2"}, 2), ({"HOROVOD_RANK": "5"}, 5), ({"SLURM_PROCID": "1"}, 1), ({}, 0)]
)
def test_rank_of_reads_every_launchers_variable(rank_vars, expected):
    assert rankguard.rank_of(rank_vars) == expected


def test_a_reason_with_rich_markup_characters_prints_as_text(capsys):
    from rich.console import Console

    from distbench.analysis.output import print_summary

    record = {
        "strategy": "ddp",
        "world_size": 2,
        "status": "failed",
        "reason": "rank 0 exited with status 1: RuntimeError: [/opt/gloo/pair.cc:534] Connection closed [bold]",
    }
    console = Console(width=400, color_system=None)
    with console.capture() as cap:
        print_summary(console, [record], [], "s1", "r.db")
    # the table says 'failed [1]'; the reason, listed under it, keeps its brackets as text
    assert "failed [1]" in cap.get()
    assert (
        "[1] ddp N=2: rank 0 exited with status 1: RuntimeError: [/opt/gloo/pair.cc:534] Connection closed [bold]"
        in cap.get()
    )


def test_sigterm_during_a_command_exits_143_with_one_line(tmp_path):
    # `distbench models` is quick; a SIGTERM raised into it must come out as the documented line.
    script = (
        "import os, signal, sys\n"
        "from distbench import cli\n"
        "orig = cli.cli.main\n"
        "def main(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return orig(*a, **k)\n"
        "cli.cli.main = main\n"
        "sys.exit(cli.main(['models']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 143
    assert proc.stderr.strip() == "Interrupted by SIGTERM: no sweep was running; nothing was lost."


TORCHRUN_SUMMARY = """[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:4711: Connection reset by peer
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
launchers/torch_ddp.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-25_18:40:01
  host      : node
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 4242)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_18:40:00
  host      : node
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4243) (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4243
============================================================
"""


def test_launcher_exit_summaries_say_how_each_rank_ended():
    seen = failures.launcher_exits(TORCHRUN_SUMMARY)
    assert seen[1] == ("torchrun saw local rank 1 end: killed by SIGKILL", "SIGKILL")
    assert seen[0] == ("torchrun saw local rank 0 end: exit status 1", None)
    hvd = "[0]<stderr>:RuntimeError: Connection reset by peer\nProcess 1 exit with status code 137.\n"
    assert failures.launcher_exits(hvd) == {
        1: ("horovodrun saw process 1 end: exit status 137 (128 + SIGKILL)", "SIGKILL")
    }
    assert failures.launcher_exits("") == {}


def test_only_consequences_on_record_means_the_cause_is_unknown_and_the_silent_rank_is_named(tmp_path):
    """Rank 1's rank guard was killed (no exit-1.json); rank 0 only says its peer went away."""
    from distbench.core.strategies import STRATEGIES
    from distbench.run.launch import outcome_record

    survivor = _report(0, 1, 2.0, error="RuntimeError: [pair.cc:534] Read error: Connection reset by peer")
    (tmp_path / "exit-0.json").write_text(json.dumps(survivor))
    (tmp_path / "error-0.json").write_text(json.dumps({"rank": 0, "error": survivor["error"]}))
    assert failures.only_consequences([survivor]) and failures.silent_ranks([survivor], 2) == [1]
    # torchrun may tear rank 0 down before it notices its peer is gone: a teardown signal is a consequence too
    assert failures.only_consequences([_report(0, -15, 2.0, sig="SIGTERM")])
    assert not failures.only_consequences([_report(0, 1, 2.0, error="ValueError: bad shape")])
    # a collective library aborts a survivor that lost its peer (Horovod: gloo::IoException -> std::terminate)
    aborted = _report(0, -6, 2.0, sig="SIGABRT")
    lost_peer = (
        "terminate called after throwing an instance of 'gloo::IoException'\n  what():  Connection closed by peer"
    )
    assert failures.only_consequences([aborted], lost_peer)
    assert not failures.only_consequences([aborted], "Fatal Python error: Segmentation fault")  # an abort of its own
    cfg = point_config("ddp", 2)
    rec = outcome_record(cfg, STRATEGIES["ddp"], tmp_path / "none.json", 1, TORCHRUN_SUMMARY, rank_dir=tmp_path)
    assert rec["status"] == "failed"
    assert rec["reason"] == (
        "cause unknown: rank 1 left no report (torchrun saw local rank 1 end: killed by SIGKILL); on record only "
        "a consequence: rank 0 exited with status 1: RuntimeError: [pair.cc:534] Read error: Connection reset by peer"
    )
    # horovodrun prints its exit lines to stdout; without any summary the reason still says it does not know
    rec = outcome_record(
        cfg,
        STRATEGIES["ddp"],
        tmp_path / "none.json",
        1,
        "",
        rank_dir=tmp_path,
        launcher_tail="Process 1 exit with status code 137.",
    )
    assert rec["reason"].startswith(
        "cause unknown: rank 1 left no report (horovodrun saw process 1 end: exit status 137"
    )
    rec = outcome_record(cfg, STRATEGIES["ddp"], tmp_path / "none.json", 1, "", rank_dir=tmp_path)
    assert "rank 1 left no report (its launcher's exit summary does not say how it ended)" in rec["reason"]
    # a SIGKILL seen by the launcher while this cgroup's OOM-kill count rose: oom, with the note
    rec = outcome_record(
        cfg, STRATEGIES["ddp"], tmp_path / "none.json", 1, TORCHRUN_SUMMARY, rank_dir=tmp_path, oom_counts=(2, 3)
    )
    assert rec["status"] == "oom" and "possibly the kernel OOM killer" in rec["reason"]
    # a rank with an error of its own stays the root cause, silent ranks or not
    (tmp_path / "error-0.json").write_text(json.dumps({"rank": 0, "error": "ValueError: bad shape"}))
    rec = outcome_record(cfg, STRATEGIES["ddp"], tmp_path / "none.json", 1, TORCHRUN_SUMMARY, rank_dir=tmp_path)
    assert rec["reason"] == "rank 0 exited with status 1: ValueError: bad shape"

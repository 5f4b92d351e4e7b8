"""The phase guard (issue 30, defect 1): a point that overruns or is stopped says which phase it was in (launch
and imports, model build, warmup, measuring, teardown), in its one-line reason and its record's stopped_phase."""

import json
import signal
import sys

import pytest

from distbench.core import phases
from distbench.core.strategies import STRATEGIES
from tests.builders import point_config


def _cfg():
    return point_config("torch", 1, model="linear", steps=2, warmup=1)


def test_marks_are_rank_0s_and_each_phase_is_timed(tmp_path):
    env = {"DISTBENCH_RANK_DIR": str(tmp_path)}
    phases.mark("model build", env, now=114.0)
    phases.mark("warmup", {**env, "RANK": "1"}, now=115.0)  # other ranks mark nothing
    phases.mark("warmup", env, now=117.0)
    phases.mark("no such phase", env, now=118.0)
    assert json.loads((tmp_path / phases.FILE).read_text()) == [["model build", 114.0], ["warmup", 117.0]]
    assert phases.during(tmp_path, started=100.0, now=138.4) == (
        "warmup",
        "during warmup, 21 s into it (launch and imports 14 s, model build 3 s)",
    )
    # in-process variants enter warmup and measuring again: each phase's time is summed
    phases.mark("measuring", env, now=120.0)
    phases.mark("warmup", env, now=130.0)
    phases.mark("measuring", env, now=131.0)
    assert phases.during(tmp_path, 100.0, 135.0)[1] == (
        "during measuring, 4 s into it (launch and imports 14 s, model build 3 s, warmup 4 s, measuring 10 s)"
    )


def test_no_marks_means_launch_and_imports(tmp_path):
    assert phases.during(tmp_path / "missing", 10.0, 52.0) == (
        "launch and imports",
        "during launch and imports, 42 s into it",
    )
    phases.mark("warmup", {})  # no rank folder (a worker run by hand): nothing, no error


SLOW_WARMUP = (
    "import os, time\n"
    "from distbench.core import phases\n"
    "phases.mark('model build'); time.sleep(0.3)\n"
    "phases.mark('warmup'); time.sleep(60)\n"  # the slow fake phase
)


def test_a_point_that_overruns_its_warmup_says_so(tmp_path, monkeypatch):
    import distbench.run.launch as launch

    monkeypatch.setattr(launch, "build_command", lambda *a, **k: ([sys.executable, "-c", SLOW_WARMUP], {}))
    record = launch.run_point(STRATEGIES["torch"], _cfg(), tmp_path, timeout_s=3)
    assert record["status"] == "timeout" and record["stopped_phase"] == "warmup"
    reason = record["reason"]
    assert reason.startswith("timed out after 3s (--timeout) during warmup, ") and "\n" not in reason
    assert "s into it (launch and imports " in reason and ", model build 0 s)" in reason


def test_a_signal_names_the_phase_the_point_was_stopped_in(tmp_path, monkeypatch):
    import time

    import distbench.run.launch as launch
    from distbench.run.signals import Interrupted

    monkeypatch.setattr(launch, "build_command", lambda *a, **k: ([sys.executable, "-c", SLOW_WARMUP], {}))

    def stopped_while_waiting(proc, *a, **k):
        while (
            not (tmp_path / "ranks" / phases.FILE).exists()
            or "warmup" not in (tmp_path / "ranks" / phases.FILE).read_text()
        ):
            time.sleep(0.05)
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(launch, "_wait", stopped_while_waiting)
    with pytest.raises(Interrupted) as info:
        launch.run_point(STRATEGIES["torch"], _cfg(), tmp_path, timeout_s=30)
    phase, where = info.value.distbench_phase
    assert phase == "warmup" and where.startswith("during warmup, 0 s into it (launch and imports ")


def test_the_runner_puts_the_phase_in_the_interrupted_points_reason(tmp_path):
    from distbench.results.store import Store
    from distbench.run import runner
    from distbench.run.signals import Interrupted
    from tests.test_runner import _fake_measure, _point

    def measure(point, workdir):
        if point.config.world_size == 2:
            exc = Interrupted(signal.SIGTERM)
            exc.distbench_phase = ("warmup", "during warmup, 21 s into it (launch and imports 14 s, model build 3 s)")
            raise exc
        return _fake_measure()(point, workdir)

    with pytest.raises(Interrupted):
        with runner.new_sweep(str(tmp_path / "r.db"), "test", {"kind": "test"}, [], command="distbench test") as sweep:
            sweep.run([_point(1), _point(2)], runner.Kind(measure))
    with Store(tmp_path / "r.db") as store:
        points = store.points(store.sweeps()[0]["id"])
    assert points[1]["reason"] == (
        "stopped by SIGTERM during warmup, 21 s into it (launch and imports 14 s, model build 3 s)"
    )
    assert points[1]["status"] == "interrupted"

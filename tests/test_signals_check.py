"""A termination signal whose Interrupted was raised inside a finalizer (where Python prints and ignores
exceptions) is not lost: signals.check raises it where the next piece of work starts."""

import os
import signal
import subprocess

import pytest

from distbench.run import signals
from tests.builders import point_config


class _Finalized:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)
        sum(range(100))  # the Python-level handler runs here, inside __del__, and its exception is ignored


def test_a_signal_lost_in_a_finalizer_is_raised_at_the_next_check(capsys):
    with signals.handled():
        _Finalized()  # dropped at once: its __del__ receives the signal
        with pytest.raises(signals.Interrupted) as info:
            signals.check()
    assert info.value.signum == signal.SIGINT
    signals.check()  # outside the command: nothing is pending
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception ignored" not in err  # kept quietly, not printed


def test_no_signal_no_interruption():
    with signals.handled():
        signals.check()


def test_the_runner_starts_no_point_after_a_lost_signal(tmp_path):
    from distbench.core.strategies import STRATEGIES
    from distbench.run import runner
    from distbench.run.plan import PlannedPoint

    cfg = point_config("torch", 1, model="mlp")
    measured = []
    kind = runner.Kind(measure=lambda point, workdir: measured.append(point) or {})
    with signals.handled():
        _Finalized()
        with pytest.raises(signals.Interrupted):
            runner.run_points([PlannedPoint(STRATEGIES["torch"], cfg)], None, None, kind, workdir=tmp_path)
    assert measured == []


_fire_at_fork = {"on": False}


def _after_fork_in_parent():
    if _fire_at_fork["on"]:
        _fire_at_fork["on"] = False
        signal.raise_signal(signal.SIGINT)
        sum(range(100))  # the handler runs inside this at-fork hook: Python ignores its exception


os.register_at_fork(after_in_parent=_after_fork_in_parent)


def test_a_signal_lost_in_an_at_fork_hook_while_a_launcher_is_forked_is_raised_after_it(capsys):
    """What a CI run showed: Ctrl-C landing while Popen forked a point's launcher ran the handler inside
    logging's at-fork hook, and the sweep went on."""
    with signals.handled():
        _fire_at_fork["on"] = True
        proc = subprocess.Popen(["true"], preexec_fn=lambda: None)  # preexec_fn: the at-fork hooks run
        proc.wait()
        with pytest.raises(signals.Interrupted):
            signals.check()
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception ignored" not in err

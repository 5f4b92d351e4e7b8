"""Repeats, CIs, noise flags and adaptive stopping."""
import pytest

from distbench import stats
from distbench.config import PointConfig
from distbench.launchers.common import measure
from distbench.measure import combine_repeats
from distbench.record import base_record


def _rec(times, status="ok"):
    r = base_record({"world_size": 2, "per_device_batch": 4}, strategy="ddp", framework="torch", status=status)
    r["step_times_s"] = list(times)
    return r


def test_combine_repeats_median_and_ci_over_repeats():
    runs = [_rec([0.1] * 5), _rec([0.2] * 5), _rec([0.1] * 5)]
    r = combine_repeats(runs)
    assert r["throughput"] == pytest.approx(80.0)  # median of 80, 40, 80
    assert r["throughput_ci_low"] <= r["throughput"] <= r["throughput_ci_high"]
    assert r["ci_method"] == "bootstrap over 3 repeats (median)"
    assert len(r["step_times_s"]) == 15 and len(r["repeats"]) == 3


def test_combine_single_repeat_bootstraps_steps_and_flags_noise():
    r = combine_repeats([_rec([0.1, 0.1, 0.1, 0.3, 0.1])], noisy_cv=0.1)
    assert r["ci_method"] == "bootstrap over 5 steps"
    assert r["throughput_ci_low"] < r["throughput_ci_high"]
    assert r["noisy"] is True
    quiet = combine_repeats([_rec([0.1, 0.1001, 0.0999, 0.1, 0.1])], noisy_cv=0.1)
    assert quiet["noisy"] is False


def test_a_failed_repeat_fails_the_point_with_its_reason():
    bad = _rec([], status="timeout")
    bad["reason"] = "timed out after 5s (--timeout)"
    r = combine_repeats([_rec([0.1, 0.1]), bad])
    assert r["status"] == "timeout"
    assert r["reason"] == "repeat 2 of 2: timed out after 5s (--timeout)"


def test_bootstrap_ci_contains_the_point_estimate():
    times = [0.1, 0.11, 0.09, 0.1, 0.12, 0.1]
    lo, hi = stats.bootstrap_throughput_ci(times, 8)
    point = 8 * len(times) / sum(times)
    assert lo < point < hi
    assert stats.relative_ci_half_width([1.0, 1.0, 1.0]) == 0.0
    assert stats.relative_ci_half_width([1.0]) == float("inf")


def _cfg(**kw):
    base = dict(strategy="torch", model="resnet18", world_size=1, device="cpu", per_device_batch=1, steps=5,
                warmup=2)
    base.update(kw)
    return PointConfig(**base)


def test_measure_excludes_warmup_and_runs_fixed_steps():
    calls = []
    times, out, stopping = measure(lambda: calls.append(1) or len(calls), lambda o: None, _cfg())
    assert len(calls) == 7 and len(times) == 5 and out == 7
    assert stopping["rule"] == "fixed_steps"


def test_measure_stops_when_the_ci_target_is_met():
    import time

    times, _, stopping = measure(lambda: time.sleep(0.005), lambda o: None, _cfg(target_ci=0.5, max_time_s=10))
    assert stopping["rule"] == "target_ci_met" and len(times) == 5


def test_measure_gives_up_at_max_time():
    import itertools
    import time

    sleeps = itertools.cycle([0.0, 0.004])
    times, _, stopping = measure(lambda: time.sleep(next(sleeps)), lambda o: None,
                                 _cfg(target_ci=0.0001, max_time_s=0.05))
    assert stopping["rule"] == "max_time"
    assert len(times) > 5 and stopping["ci_half_width"] > 0.0001

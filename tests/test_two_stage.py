"""Every run of an in-process order (A T B T A) has the same rule: a length fixed before it starts. The first A is
sized by a pilot (Stein's two-stage rule, workers/common.measure_two_stage); stopping it adaptively biased its
mean against the fixed-length runs beside it, and the split takes differences of those means."""

import math
import random
import statistics
import time

import pytest

from distbench.results import stats
from distbench.workers import common
from tests.builders import point_config


def _cfg(**kw):
    return point_config("ddp", 2, **{"per_device_batch": 1, "steps": 20, "warmup": 1, **kw})


def test_only_the_first_synchronized_run_of_an_order_is_sized_by_a_pilot():
    runs = common.segment_configs(_cfg(nosync_order="ATBTA", target_ci=0.02))
    flags = [(letter, bool(c.extra.get(common.TWO_STAGE)), c.target_ci) for letter, c in runs]
    assert flags[0] == ("A", True, 0.02)
    assert all(not two and ci == 0.0 for _, two, ci in flags[1:])
    assert not common.segment_configs(_cfg(target_ci=0.02))[0][1].extra.get(common.TWO_STAGE)  # no split: adaptive


def _fake_clock(monkeypatch, draw):
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    return lambda: clock.__setitem__(0, clock[0] + draw())


def test_the_window_runs_the_steps_its_pilot_planned(monkeypatch):
    rng = random.Random(3)
    step = _fake_clock(monkeypatch, lambda: 0.01 * math.exp(rng.gauss(0, 0.3)))
    looks = []

    def gather(obj):
        looks.append(None if obj is None else len(obj[0]))
        return [obj]

    cfg = _cfg(world_size=1, target_ci=0.01, extra={common.TWO_STAGE: True}, max_time_s=0)
    times, _, stopping = common.measure(step, lambda o: None, cfg, gather)
    plan = stopping["two_stage"]
    assert plan["pilot_steps"] == stats.PILOT_STEPS == len(plan["pilot_step_times_s"])
    ci = stats.step_time_ci(plan["pilot_step_times_s"])
    expected, why = stats.two_stage_steps(
        ci, stats.PILOT_STEPS, sum(plan["pilot_step_times_s"]), 0.01, stats.PILOT_STEPS, cfg.max_steps, 0
    )
    assert why == "target" and stopping["rule"] == "two_stage"
    assert len(times) == plan["steps"] == expected > stats.PILOT_STEPS
    assert plan["pilot_ci_half_width"] == pytest.approx(ci["rel_half_width"])
    # the window's own steps decide nothing: after the pilot's look, only the window's barrier and its end
    assert looks == [None, stats.PILOT_STEPS, None]


def test_the_plan_is_capped_by_the_step_cap_and_the_time_limit():
    ci = {"rel_half_width": 0.10}
    assert stats.two_stage_steps(ci, 150, 1.5, 0.01, 150, 100_000, 0) == (15000, "target")
    assert stats.two_stage_steps(ci, 150, 1.5, 0.01, 150, 2000, 0) == (2000, "max_steps")
    assert stats.two_stage_steps(ci, 150, 1.5, 0.01, 150, 100_000, 60) == (6000, "max_time")  # 60 s at 10 ms
    assert stats.two_stage_steps({"rel_half_width": 0.001}, 150, 1.5, 0.01, 300, 2000, 0) == (300, "target")
    assert stats.two_stage_steps(None, 150, 1.5, 0.01, 150, 2000, 60) == (2000, "max_steps")  # no CI: the cap


def _bias(monkeypatch, two_stage: bool, trials: int, seed: int) -> tuple[float, float]:
    """(relative bias of the window's mean step time against the known true mean, its standard error): steps of
    10 ms with 3% noise, 1% of them 11 times longer (a preemption, a collector pause)."""
    rng = random.Random(seed)

    def draw() -> float:
        x = 0.01 * (1 + 0.03 * rng.gauss(0, 1))
        return 11 * x if rng.random() < 0.01 else x

    step = _fake_clock(monkeypatch, draw)
    extra = {common.TWO_STAGE: True} if two_stage else {}
    cfg = _cfg(world_size=1, steps=20, warmup=0, target_ci=0.05, extra=extra, max_steps=9600, max_time_s=0)
    means = [statistics.fmean(common.measure(step, lambda o: None, cfg)[0]) for _ in range(trials)]
    true = 0.01 * 1.1
    return statistics.fmean(means) / true - 1, statistics.stdev(means) / true / math.sqrt(trials)


def test_adaptive_stopping_biases_the_mean_and_the_two_stage_window_does_not(monkeypatch):
    """A run that happened to draw few slow steps has a low mean and a narrow CI, so the first look that meets the
    target picks it: the adaptive window's mean comes out low (about -0.5% here). The two-stage window is sized
    before its steps are drawn: its mean is unbiased (noisier when the pilot drew no slow step and sized it
    short: that is spread, not bias). Deterministic (a seeded fake clock); judged in standard errors."""
    for seed in (11, 12):
        adaptive, se_a = _bias(monkeypatch, False, 400, seed)
        two_stage, se_t = _bias(monkeypatch, True, 400, seed)
        assert adaptive < -0.003 and adaptive / se_a < -3  # the defect the fix removes
        assert abs(two_stage / se_t) < 2.5

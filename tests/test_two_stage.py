"""Every run of an in-process order (A T B T A) has the same rule: a length fixed before it starts. The first A is
sized from the time budget and a pilot's mean pace (workers/stop_loop.measure_two_stage), never from the noise of the
steps; stopping it adaptively biased its mean against the fixed-length runs beside it, and the split takes
differences of those means."""

import math
import random
import statistics
import time

import pytest

from distbench.results import stats
from distbench.workers import common
from distbench.workers import stopping as stop_loop
from tests.builders import point_config


def _cfg(**kw):
    return point_config("ddp", 2, **{"per_device_batch": 1, "steps": 20, "warmup": 1, **kw})


def test_only_the_first_synchronized_run_of_an_order_is_sized_by_a_pilot():
    runs = common.segment_configs(_cfg(nosync_order="ATBTA", target_ci=0.02))
    flags = [(letter, c.two_stage, c.target_ci) for letter, c in runs]
    assert flags[0] == ("A", True, 0.02)
    assert all(not two and ci == 0.0 for _, two, ci in flags[1:])
    assert not common.segment_configs(_cfg(target_ci=0.02))[0][1].two_stage  # no split: adaptive


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

    cfg = _cfg(world_size=1, target_ci=0.01, two_stage=True, max_time_s=30, max_steps=100_000)
    times, _, stopping = stop_loop.measure(step, lambda o: None, cfg, gather)
    plan = stopping["two_stage"]
    assert plan["pilot_steps"] == stats.PILOT_STEPS == len(plan["pilot_step_times_s"])
    expected, why = stats.two_stage_steps(stats.PILOT_STEPS, plan["pilot_s"], 20, cfg.max_steps, 30)
    assert why == "max_time" and plan["sized_by"] == "max_time" and stopping["rule"] == "two_stage"
    assert len(times) == plan["steps"] == expected == int((30 - plan["pilot_s"]) * stats.PILOT_STEPS / plan["pilot_s"])
    assert plan["pilot_ci_half_width"] == pytest.approx(
        stats.step_time_ci(plan["pilot_step_times_s"])["rel_half_width"]
    )
    assert plan["pilot_s"] == pytest.approx(sum(plan["pilot_step_times_s"]))
    # the pilot: --steps (20), a look, its other 130 steps, a look at all 150; then the window's barrier and
    # nothing else: its own steps decide nothing
    assert looks == [None, 20, None, 150, None]


def test_max_time_bounds_the_pilot_and_the_window(monkeypatch):
    """--max-time 20 s at 0.125 s a step: the pilot stops at a tenth of it (16 steps), the window takes what is
    left (144 steps), not 150 pilot steps."""
    step = _fake_clock(monkeypatch, lambda: 0.125)
    cfg = _cfg(world_size=1, steps=4, warmup=0, target_ci=0.02, two_stage=True, max_time_s=20)
    times, _, stopping = stop_loop.measure(step, lambda o: None, cfg)
    assert stopping["two_stage"]["pilot_steps"] == 16 and len(times) == 144
    assert stopping["rule"] == "two_stage" and stopping["two_stage"]["sized_by"] == "max_time"
    assert stopping["two_stage"]["pilot_ci_half_width"] is None  # 16 steps: no CI, and none is needed
    assert sum(times) + stopping["two_stage"]["pilot_s"] == pytest.approx(20.0)


def test_the_window_follows_the_budget_and_the_pilots_pace_not_its_noise():
    assert stats.two_stage_steps(150, 1.5, 10, 100_000, 61.5) == (6000, "max_time")  # 60 s left at 10 ms
    assert stats.two_stage_steps(150, 1.5, 10, 2000, 61.5) == (2000, "max_steps")
    assert stats.two_stage_steps(150, 1.5, 10, 100_000, 1.6) == (10, "max_time")  # --steps at the least
    assert stats.two_stage_steps(150, 1.5, 10, 2000, 0) == (2000, "max_steps")  # no time limit: the step cap
    assert stats.two_stage_pilot_steps(10, 1.0, 0) == stats.PILOT_STEPS - 10
    assert stats.two_stage_pilot_steps(10, 1.0, 40) == 30  # a tenth of 40 s at 0.1 s a step: 40 in all
    assert stats.two_stage_pilot_steps(10, 1.0, 4) == 0


def _bias(monkeypatch, two_stage: bool, trials: int, seed: int, max_time_s: float = 0) -> tuple[float, float]:
    """(relative bias of the window's mean step time against the known true mean, its standard error): steps of
    10 ms with 3% noise, 1% of them 11 times longer (a preemption, a collector pause)."""
    rng = random.Random(seed)

    def draw() -> float:
        x = 0.01 * (1 + 0.03 * rng.gauss(0, 1))
        return 11 * x if rng.random() < 0.01 else x

    step = _fake_clock(monkeypatch, draw)
    cfg = _cfg(
        world_size=1, steps=20, warmup=0, target_ci=0.05, two_stage=two_stage, max_steps=9600, max_time_s=max_time_s
    )
    means = [statistics.fmean(stop_loop.measure(step, lambda o: None, cfg)[0]) for _ in range(trials)]
    true = 0.01 * 1.1
    return statistics.fmean(means) / true - 1, statistics.stdev(means) / true / math.sqrt(trials)


def test_adaptive_stopping_biases_the_mean_and_the_two_stage_window_does_not(monkeypatch):
    """A run that happened to draw few slow steps has a low mean and a narrow CI, so the first look that meets the
    target picks it: the adaptive window's mean comes out low (about -0.5% here). The two-stage window is sized
    before its steps are drawn, from the budget (6.6 s, about 600 steps) and the pilot's mean pace: its mean is
    unbiased. Deterministic (a seeded fake clock); judged in standard errors."""
    for seed in (11, 12):
        adaptive, se_a = _bias(monkeypatch, False, 400, seed)
        two_stage, se_t = _bias(monkeypatch, True, 1200, seed, max_time_s=6.6)
        assert adaptive < -0.003 and adaptive / se_a < -3  # the defect the fix removes
        assert abs(two_stage / se_t) < 2.5 and abs(two_stage) < abs(adaptive) / 2

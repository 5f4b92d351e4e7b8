"""Every run of an in-process order (A T B T A) has the same rule: a length fixed before it starts. The first A is
sized by a pilot (Stein's two-stage rule, workers/stopping.measure_two_stage); stopping it adaptively biased its
mean against the fixed-length runs beside it, and the split takes differences of those means."""

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
    flags = [(letter, bool(c.extra.get(stop_loop.TWO_STAGE)), c.target_ci) for letter, c in runs]
    assert flags[0] == ("A", True, 0.02)
    assert all(not two and ci == 0.0 for _, two, ci in flags[1:])
    assert not common.segment_configs(_cfg(target_ci=0.02))[0][1].extra.get(stop_loop.TWO_STAGE)  # no split: adaptive


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

    cfg = _cfg(world_size=1, target_ci=0.01, extra={stop_loop.TWO_STAGE: True}, max_time_s=0)
    times, _, stopping = stop_loop.measure(step, lambda o: None, cfg, gather)
    plan = stopping["two_stage"]
    assert plan["pilot_steps"] == stats.PILOT_STEPS == len(plan["pilot_step_times_s"])
    ci = stats.step_time_ci(plan["pilot_step_times_s"])
    expected, why = stats.two_stage_steps(ci, stats.PILOT_STEPS, plan["pilot_s"], 0.01, 20, cfg.max_steps, 0)
    assert why == "target" and stopping["rule"] == "two_stage"
    assert len(times) == plan["steps"] == expected > stats.PILOT_STEPS
    assert plan["pilot_ci_half_width"] == pytest.approx(ci["rel_half_width"])
    assert plan["pilot_s"] == pytest.approx(sum(plan["pilot_step_times_s"]))
    # the pilot: --steps (20), a look, its other 130 steps, a look at all 150; then the window's barrier and
    # nothing else: its own steps decide nothing
    assert looks == [None, 20, None, 150, None]


def test_max_time_bounds_the_pilot_and_the_window(monkeypatch):
    """--max-time 2 s at 0.1 s a step: the pilot stops at half of it (10 steps), the window takes what is left
    (10 steps, under the 150 a CI needs, as adaptive stopping would have run out of time), not 150 each."""
    step = _fake_clock(monkeypatch, lambda: 0.1)
    cfg = _cfg(world_size=1, steps=5, warmup=0, target_ci=0.02, extra={stop_loop.TWO_STAGE: True}, max_time_s=2)
    times, _, stopping = stop_loop.measure(step, lambda o: None, cfg)
    assert stopping["two_stage"]["pilot_steps"] == 10 and len(times) == 10
    assert stopping["rule"] == "max_time" and stopping["two_stage"]["pilot_ci_half_width"] is None
    assert sum(times) + stopping["two_stage"]["pilot_s"] == pytest.approx(2.0)


def test_the_plan_is_capped_by_the_step_cap_and_the_time_limit():
    ci = {"rel_half_width": 0.10, "batches": stats.MAX_BATCHES}  # a pilot CI over as many batches as the window's
    assert stats.two_stage_steps(ci, 150, 1.5, 0.01, 10, 100_000, 0) == (15000, "target")
    assert stats.two_stage_steps(ci, 150, 1.5, 0.01, 10, 2000, 0) == (2000, "max_steps")
    assert stats.two_stage_steps(ci, 150, 1.5, 0.01, 10, 100_000, 61.5) == (6000, "max_time")  # 60 s left at 10 ms
    assert stats.two_stage_steps(ci, 150, 1.5, 0.01, 10, 100_000, 1.6) == (10, "max_time")  # --steps at the least
    tight = {"rel_half_width": 0.001, "batches": stats.MAX_BATCHES}
    assert stats.two_stage_steps(tight, 150, 1.5, 0.01, 10, 2000, 0) == (stats.MIN_CI_STEPS, "target")  # a CI
    assert stats.two_stage_steps(None, 150, 1.5, 0.01, 10, 2000, 60) == (2000, "max_steps")  # no CI: the caps
    # 5 pilot batches: their t quantile (4 df) is wider than the window's (19 df), so the pilot needs fewer steps
    few = stats.two_stage_steps({"rel_half_width": 0.10, "batches": 5}, 150, 1.5, 0.01, 10, 100_000, 0)[0]
    assert few == math.ceil(15000 * (stats.t_crit(19) / stats.t_crit(4)) ** 2)
    assert stats.two_stage_pilot_steps(10, 1.0, 0) == stats.PILOT_STEPS - 10
    assert stats.two_stage_pilot_steps(10, 1.0, 4) == 10  # half of 4 s at 0.1 s a step: 20 in all


def _bias(monkeypatch, two_stage: bool, trials: int, seed: int) -> tuple[float, float]:
    """(relative bias of the window's mean step time against the known true mean, its standard error): steps of
    10 ms with 3% noise, 1% of them 11 times longer (a preemption, a collector pause)."""
    rng = random.Random(seed)

    def draw() -> float:
        x = 0.01 * (1 + 0.03 * rng.gauss(0, 1))
        return 11 * x if rng.random() < 0.01 else x

    step = _fake_clock(monkeypatch, draw)
    extra = {stop_loop.TWO_STAGE: True} if two_stage else {}
    cfg = _cfg(world_size=1, steps=20, warmup=0, target_ci=0.05, extra=extra, max_steps=9600, max_time_s=0)
    means = [statistics.fmean(stop_loop.measure(step, lambda o: None, cfg)[0]) for _ in range(trials)]
    true = 0.01 * 1.1
    return statistics.fmean(means) / true - 1, statistics.stdev(means) / true / math.sqrt(trials)


def test_adaptive_stopping_biases_the_mean_and_the_two_stage_window_does_not(monkeypatch):
    """A run that happened to draw few slow steps has a low mean and a narrow CI, so the first look that meets the
    target picks it: the adaptive window's mean comes out low (about -0.5% here). The two-stage window is sized
    before its steps are drawn: its mean is unbiased (noisier when the pilot drew no slow step and sized it
    short: that is spread, not bias). Deterministic (a seeded fake clock); judged in standard errors."""
    for seed in (11, 12):
        adaptive, se_a = _bias(monkeypatch, False, 400, seed)
        two_stage, se_t = _bias(monkeypatch, True, 1200, seed)
        assert adaptive < -0.003 and adaptive / se_a < -3  # the defect the fix removes
        assert abs(two_stage / se_t) < 2.5 and abs(two_stage) < abs(adaptive) / 2

import math

import pytest

from distbench import stats


def test_percentile_matches_linear_interpolation():
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert stats.percentile(xs, 50) == 3.0
    assert stats.percentile(xs, 0) == 1.0
    assert stats.percentile(xs, 100) == 5.0
    assert stats.percentile(xs, 95) == pytest.approx(4.8)
    assert stats.percentile([2.0], 5) == 2.0


def test_percentile_rejects_bad_input():
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


def test_step_stats_throughput_is_global_samples_over_measured_time():
    s = stats.step_stats([0.5, 0.5, 1.0], global_batch=16)
    assert s["throughput"] == pytest.approx(16 * 3 / 2.0)
    assert s["step_time_median_s"] == 0.5
    assert s["measured_steps"] == 3
    assert s["step_time_p95_s"] == pytest.approx(0.95)
    assert s["step_time_p5_s"] == pytest.approx(0.5)
    assert s["step_time_cv"] == pytest.approx(math.sqrt(1 / 12) / (2 / 3))


def test_step_stats_rejects_empty_and_nonpositive():
    with pytest.raises(ValueError):
        stats.step_stats([], 8)
    with pytest.raises(ValueError):
        stats.step_stats([0.1, 0.0], 8)


def test_speedup_efficiency_wrapper():
    sp = stats.speedup(300.0, 100.0)
    assert sp == 3.0
    assert stats.efficiency(sp, 4) == 0.75
    assert stats.speedup(None, 100.0) is None
    assert stats.speedup(10.0, 0.0) is None
    assert stats.efficiency(None, 2) is None
    assert stats.wrapper_overhead(90.0, 100.0) == pytest.approx(0.10)
    assert stats.wrapper_overhead(110.0, 100.0) == pytest.approx(-0.10)
    with pytest.raises(ValueError):
        stats.efficiency(1.0, 0)


def test_merge_rank_step_times_takes_slowest_rank_per_step():
    assert stats.merge_rank_step_times([[1.0, 2.0, 3.0], [1.5, 1.0, 3.5]]) == [1.5, 2.0, 3.5]
    assert stats.merge_rank_step_times([[1.0, 2.0], [1.0]]) == [1.0]

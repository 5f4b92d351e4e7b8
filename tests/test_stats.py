import math
import statistics

import pytest

from distbench.results import stats


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
    assert s["time_per_step_s"] == pytest.approx(2.0 / 3)
    assert s["step_time_median_s"] == 0.5
    assert s["measured_steps"] == 3
    assert s["step_time_p95_s"] == pytest.approx(0.95)
    assert s["step_time_p5_s"] == pytest.approx(0.5)
    assert s["step_time_cv"] == pytest.approx(math.sqrt(1 / 12) / (2 / 3))
    # with a measured window, throughput is over the window, the distribution over the steps
    w = stats.step_stats([0.5, 0.5, 1.0], global_batch=16, window_s=2.4)
    assert w["throughput"] == pytest.approx(16 * 3 / 2.4) and w["step_time_median_s"] == 0.5


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


def test_window_throughput_is_not_the_sum_of_per_step_maxima():
    # two ranks whose step boundaries are not aligned: both take 3 s in all, but the per-step maxima add up to 4 s
    a, b = [1.0, 2.0], [2.0, 1.0]
    assert sum(stats.merge_rank_step_times([a, b])) == 4.0
    window, thr = stats.window_throughput([[sum(a)], [sum(b)]], 2, 8)
    assert window == 3.0 and thr == pytest.approx(8 * 2 / 3.0)
    # segments (between collectives) each last as long as their slowest rank
    assert stats.window_throughput([[1.0, 2.0], [1.5, 1.0]], 4, 2)[0] == 3.5


def test_t_quantile_matches_tables():
    for df, t in ((1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (29, 2.045), (1000, 1.962)):
        assert stats.t_quantile(0.975, df) == pytest.approx(t, rel=2e-3)
    with pytest.raises(ValueError):
        stats.t_quantile(0.975, 0)


def test_step_time_ci_batch_means_and_minimum_steps():
    assert stats.batch_count(stats.MIN_CI_STEPS - 1) == 0 and stats.batch_count(stats.MIN_CI_STEPS) == 5
    assert stats.batch_count(10_000) == stats.MAX_BATCHES
    assert stats.step_time_ci([0.1] * (stats.MIN_CI_STEPS - 1)) is None
    # 300 steps, 10 batches of 30: batch means 0.1 +/- 0.01 alternately -> sd of batch means known
    times = [0.1 + (0.01 if (i // 30) % 2 else -0.01) for i in range(300)]
    ci = stats.step_time_ci(times)
    assert (ci["batches"], ci["batch_size"], ci["df"]) == (10, 30, 9)
    sd = statistics.stdev([0.09, 0.11] * 5)
    assert ci["half_width"] == pytest.approx(stats.t_quantile(0.975, 9) * sd / math.sqrt(10))
    assert ci["rel_half_width"] == pytest.approx(ci["half_width"] / 0.1)
    # n not a multiple of the batches: the earliest steps are left out
    assert stats.step_time_ci([5.0] + [0.1] * 300)["half_width"] == pytest.approx(0.0, abs=1e-12)


def test_within_run_ci_fields_say_what_they_cover():
    f = stats.within_run_ci([0.1 * (1 + 0.05 * ((i * 7) % 5 - 2)) for i in range(200)], 80.0)
    assert f["throughput_ci_low"] < 80.0 < f["throughput_ci_high"]
    assert f["ci_scope"] == "within-run noise (batch means over 6 batches)"
    assert f["ci_method"] == "batch means: t over 6 batches of 33 steps"
    short = stats.within_run_ci([0.1] * 20, 80.0)
    assert short["throughput_ci_low"] is None and short["ci_note"].startswith(
        f"20 measured steps: a within-run CI needs at least {stats.MIN_CI_STEPS}"
    )


def test_repeats_mean_and_difference_cis():
    g, lo, hi = stats.repeats_ci([100.0, 121.0])
    assert g == pytest.approx(110.0) and lo < 100.0 and hi > 121.0
    assert math.log(hi / g) == pytest.approx(12.706 * math.log(1.1), rel=1e-3)  # sd of logs: sqrt(2) log 1.1
    m, lo, hi = stats.mean_ci([0.01, 0.03, 0.02])
    assert m == pytest.approx(0.02) and lo < 0.02 < hi
    lo, hi = stats.difference_ci(1.0, 0.03, 9, 0.8, 0.04, 9)
    assert lo < 0.2 < hi and hi - 0.2 == pytest.approx(0.2 - lo)
    assert stats.difference_ci(1.0, 0.0, 9, 0.8, 0.0, 9) == (pytest.approx(0.2), pytest.approx(0.2))
    with pytest.raises(ValueError):
        stats.repeats_ci([1.0])


def test_adaptive_looks_are_geometric():
    assert [stats.next_look(n) for n in (0, 20, 599, 600, 1199, 1200, 3000)] == [600, 600, 600, 1200, 1200, 2400, 4800]


def test_rate_ci_maps_the_step_time_interval():
    lo, hi = stats.rate_ci(100.0, 0.1)
    assert lo == pytest.approx(100 / 1.1) and hi == pytest.approx(100 / 0.9)
    assert stats.rate_ci(100.0, 1.5)[1] is None


def test_batch_levels_grow_the_batches_and_keep_at_least_ten():
    assert stats.batch_levels(149) == [] and stats.batch_levels(150) == [5] and stats.batch_levels(300) == [10]
    assert stats.batch_levels(600) == [20, 10] and stats.batch_levels(4800) == [20, 10]


def _ar1(n: int, phi: float, seed: int) -> list[float]:
    import numpy as np

    rng, z, out = np.random.default_rng(seed), 0.0, []
    for e in rng.standard_normal(n):
        z = phi * z + math.sqrt(1 - phi**2) * e
        out.append(0.1 * (1 + 0.05 * z))
    return out


def test_autocorrelated_batch_means_lengthen_the_batches_widen_or_refuse_and_the_record_says_so():
    # independent steps: 20 batches, no note beyond a small widening at most
    ci, note = stats.within_run_step_ci(_ar1(600, 0.0, 1))
    assert ci["batches"] == 20 and (note is None or note.startswith("CI widened x"))
    # phi 0.98 over 600 steps (6 autocorrelation times): merged to 10 batches of 60 and widened, or refused
    merged = refused = 0
    for seed in range(20):
        fields = stats.within_run_ci(_ar1(600, 0.98, seed), 80.0)
        if fields["throughput_ci_low"] is None:
            refused += 1
            assert fields["ci_note"].startswith("no within-run CI: the batch means stay autocorrelated (lag-1 r ")
        elif "10 batches of 60 steps used" in (fields["ci_note"] or ""):
            merged += 1
            assert fields["ci_method"] == "batch means: t over 10 batches of 60 steps"
            assert "CI widened x" in fields["ci_note"]
    assert merged + refused >= 15  # at phi 0.98 the 20 batch means of 30 steps are rarely independent
    # the widening is sqrt((1 + rho) / (1 - rho)), rho the bias-corrected lag-1 r
    ci, _ = stats.within_run_step_ci(_ar1(600, 0.0, 1))
    rho = min(max(ci["lag1"] + (1 + 3 * ci["lag1"]) / 20, 0.0), stats.LAG1_MAX)
    assert ci["widened"] == pytest.approx(math.sqrt((1 + rho) / (1 - rho)))

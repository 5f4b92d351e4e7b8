"""Simulated coverage and bias of distbench's 95% CIs (tests/cisim.py): AR(1) step series with
phi up to 0.8, Student-t(4) noise and slow-step outliers. Each CI must cover the truth in >= 90% of
simulated runs and the throughput estimate be within 0.5% of it; the old rule must fail the check."""

import numpy as np
import pytest

from distbench.results import gatestats, stats
from tests import cisim

# The grid's hardest cases (benchmarks/ci_coverage.py runs all of cv 1-15% x phi 0-0.8 x outliers):
# noisy steps, strong autocorrelation, and 1% of steps slowed by 10 sd.
MODELS = [cisim.SeriesModel(phi=phi, cv=cv) for phi, cv in ((0.0, 0.05), (0.5, 0.15), (0.8, 0.05))] + [
    cisim.SeriesModel(phi=phi, cv=cv, outlier_p=0.01, outlier_scale=10.0)
    for phi, cv in ((0.0, 0.15), (0.0, 0.10), (0.8, 0.10))
]
RUNS = 4000  # coverage's standard error ~0.4%: asserting >= 0.90 is not luck of the seed


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.label())
def test_within_run_ci_covers_at_fixed_and_adaptive_step_counts(model):
    rng = np.random.default_rng(11)
    fixed = cisim.fixed_steps(rng, model, 150, runs=RUNS)
    assert fixed["coverage"] >= 0.90 and abs(fixed["bias"]) <= 0.005, fixed
    adaptive = cisim.adaptive(rng, model, target=0.02, max_steps=2400, runs=RUNS)
    assert adaptive["coverage"] >= 0.90 and abs(adaptive["bias"]) <= 0.005, adaptive


@pytest.mark.parametrize("r", [2, 3, 5])
def test_run_to_run_ci_covers(r):
    res = cisim.repeats(np.random.default_rng(r), cisim.SeriesModel(phi=0.8), r, trials=1500)
    assert res["coverage"] >= 0.90 and abs(res["bias"]) <= 0.005, res


@pytest.mark.parametrize("r", [2, 3, 4])
def test_paired_exposed_comm_ci_covers_with_drift_and_a_steady_trend(r):
    # The machine drifts pair to pair and trends 1% per run: alternating the order (A B, B A, ...)
    # keeps the trend out of the difference; always running A first would not.
    res = cisim.paired_exposed(np.random.default_rng(5), cisim.SeriesModel(phi=0.8), r, trend=0.01, trials=RUNS)
    assert res["coverage"] >= 0.90, res
    assert abs(res["bias"]) <= 0.1, res  # an odd r keeps one pair's trend (-7% of exposed at r=3)
    same_order = cisim.paired_exposed(
        np.random.default_rng(5), cisim.SeriesModel(phi=0.8), r, trend=0.01, alternate=False, trials=RUNS
    )
    assert same_order["bias"] < -0.15  # the trend is read as less communication


def test_t_quantile_is_exact():
    # Exact values (R: qt(0.975, df), qt(0.995, df)).
    for df, q975, q995 in (
        (1, 12.706205, 63.656741),
        (2, 4.302653, 9.924843),
        (3, 3.182446, 5.840909),
        (4, 2.776445, 4.604095),
        (9, 2.262157, 3.249836),
        (19, 2.093024, 2.860935),
        (30, 2.042272, 2.749996),
        (200, 1.971896, 2.600634),
    ):
        assert abs(stats.t_quantile(0.975, df) - q975) < 1e-5, df
        assert abs(stats.t_quantile(0.995, df) - q995) < 1e-5, df
    assert stats.t_quantile(0.025, 4) == -stats.t_quantile(0.975, 4)


def test_the_old_rule_fails_this_check():
    """A normal CI over steps treated as independent, stopping the first time it is within target."""
    res = cisim.naive_adaptive(np.random.default_rng(3), cisim.SeriesModel(phi=0.8), 0.02, max_steps=1200, runs=1500)
    assert res["coverage"] < 0.7


@pytest.mark.parametrize(
    "model",
    [
        cisim.SeriesModel(phi=0.0, cv=0.05),
        cisim.SeriesModel(phi=0.8, cv=0.05),
        cisim.SeriesModel(phi=0.5, cv=0.15, outlier_p=0.05),
    ],
    ids=lambda m: m.label(),
)
def test_throughput_ratio_ci_covers(model):
    """The ratio CIs of `compare` and the report's wrappers section (two runs' batch-means CIs combined
    on the log scale) cover the true ratio at least 90% of the time (nominal 95%)."""
    result = cisim.throughput_ratio(np.random.default_rng(7), model, stats.MIN_CI_STEPS, trials=1000)
    assert result["intervals"] >= 950
    assert result["coverage"] >= 0.90, result


# -- the within-run CI under strong autocorrelation (issue 20 item 4) ----------------------------------------
@pytest.mark.parametrize("phi", [0.9, 0.95, 0.98])
def test_lag1_check_keeps_coverage_of_given_cis_up_to_phi_098(phi):
    """Batch means tested for lag-1 autocorrelation, merged into longer batches, widened or refused: the CIs
    given cover >= 90% up to phi 0.98 at 1200 and 2400 steps (the fixed geometry: 89% at phi 0.98 and 2400);
    at 600 steps about 90% at phi 0.98 (89.7% over 20000 runs: asserted >= 88%, not >= 90%), better than the
    fixed geometry (67% there), and refused more often than not covered."""
    rng = np.random.default_rng(17)
    model = cisim.SeriesModel(phi=phi, cv=0.05, outlier_p=0.01, outlier_scale=10.0)
    for n in (1200, 2400):
        res = cisim.fixed_steps(rng, model, n, runs=2000)
        assert res["coverage"] >= 0.90 and res["given"] >= 0.95, (n, res)
    short, old = cisim.fixed_steps(rng, model, 600, runs=2000), cisim.fixed_batches(rng, model, 600, runs=2000)
    assert short["coverage"] >= 0.88, short  # 89.7% at phi 0.98 over 20000 runs (2000 here: se 0.7%)
    assert short["coverage"] >= old["coverage"] + 0.02 or short["coverage"] >= 0.90, (short, old)
    assert 1 - short["given"] >= (0.9 - short["coverage"]) * short["given"], short


def test_lag1_check_rarely_refuses_independent_steps():
    rng = np.random.default_rng(19)
    for n in (150, 300, 600):
        res = cisim.fixed_steps(rng, cisim.SeriesModel(phi=0.0, cv=0.05), n, runs=RUNS)
        assert res["given"] >= 0.98 and res["coverage"] >= 0.93, (n, res)


# -- the regression gate (`distbench compare`) ---------------------------------------------------------------
GATE_TRIALS = 4000
"""Per cell: a family false alarm near 5% has a Monte Carlo standard error of 0.34% over 4000 comparisons; a rate
is asserted <= 5% + 2 standard errors (a cell truly at 6% or more fails), the full grid is in docs/benchmarks.md
(benchmarks/gate_power.py)."""
SQRT10 = 10**0.5


def _at_most_5pct(rate: float, trials: int = GATE_TRIALS) -> bool:
    return rate <= 0.05 + 2 * (0.05 * 0.95 / trials) ** 0.5


@pytest.mark.parametrize(
    "case",
    [{"hetero": SQRT10, "points": 20}, {"noisy": SQRT10, "points": 10}, {"hetero": SQRT10, "points": 10}],
    ids=["variances spread 10x, 20 points", "one point's variance 10x, 10 points", "spread 10x, 10 points"],
)
def test_gate_family_false_alarm_at_most_5pct_in_the_binding_cells(case):
    """A/A at R = 3, run-to-run sd 3%, Gaussian noise (the law whose cells come out highest in the full grid): the
    share of sweep pairs with any false regression stays <= 5% where the points' noise differs."""
    res = cisim.gate_sweeps(np.random.default_rng(23), r=3, run_sd=0.03, law="normal", trials=GATE_TRIALS, **case)
    assert _at_most_5pct(res["family_false_alarm"]), res


def test_gate_power_80pct_at_sd_3pct_and_r3():
    """A 10% slowdown of one point of 20, R = 3 per side, run-to-run sd 3%, equal Gaussian noise: called a
    regression in >= 80% of comparisons (81% measured over 4000; asserted >= 80% - 2 standard errors)."""
    res = cisim.gate_sweeps(np.random.default_rng(29), r=3, run_sd=0.03, law="normal", effect=0.9, trials=2000)
    assert res["power"] >= 0.80 - 2 * (0.8 * 0.2 / 2000) ** 0.5, res


def test_gate_power_80pct_with_lognormal_noise_at_20_points():
    """The same with skewed (lognormal) noise: its sample variances spread wider than chi-square sampling, which
    the moderation measures on each point's A/B split (gatestats.sampling_excess) instead of taking it for
    differences between the points (80.8% over 16000; asserted >= 80% - 2 standard errors)."""
    res = cisim.gate_sweeps(np.random.default_rng(43), r=3, run_sd=0.03, law="lognormal", effect=0.9, trials=2000)
    assert res["power"] >= 0.80 - 2 * (0.8 * 0.2 / 2000) ** 0.5, res


def test_gate_false_alarms_fall_mostly_on_the_noisiest_point():
    """What docs/methodology.md says of the gate's false alarm: a total over the points, not a bound on each. With
    one point's variance 10x the others' (A/A, R = 3, 20 points, Gaussian) the moderation shrinks that point's
    variance towards the others', so it draws most of the false regressions (60% over 16000 comparisons,
    benchmarks/gate_probes.py), several times its Bonferroni share of the 5%."""
    res = cisim.gate_sweeps(np.random.default_rng(53), r=3, run_sd=0.03, law="normal", noisy=SQRT10)
    per_point = np.asarray(res["per_point"])
    assert per_point[-1] > 0.5 * per_point.sum() and per_point[-1] > 4 * 0.05 / 20, per_point


def test_a_point_with_1_df_keeps_the_cap_for_the_others():
    """One point that lost a repeat (1 df in B) no longer lifts the cap on pooling for the whole sweep: the
    points with 2 df or more keep a prior of at most D0_MAX df, and the family false alarm with 5 of 20 points
    3x noisier stays <= 5%."""
    var = np.full(20, 1e-4) * np.random.default_rng(4).chisquare(2, 20) / 2
    df = np.full(20, 4.0)
    df[0] = 1.0
    _, df_post, _, d0 = gatestats.moderate(var, df)
    assert np.all(df_post[1:] <= gatestats.D0_MAX + df[1:] + 1e-9)
    res = cisim.gate_sweeps(
        np.random.default_rng(31), r=3, run_sd=0.03, law="normal", noisy=3.0, noisy_points=5, one_df_points=1
    )
    assert _at_most_5pct(res["family_false_alarm"]), res


def test_regressions_are_one_sided_and_improvements_a_family_apart():
    """The same |t| is a regression one way and an improvement the other, each at its own Holm family."""
    d = np.array([-0.10, 0.10, 0.0, 0.0])
    p, adj, code = gatestats.verdict_codes(d, np.full(4, 0.02), np.full(4, 30.0), 0.05)
    assert list(code) == [-1, 1, 0, 0]
    assert p[0] == pytest.approx(p[1]) == pytest.approx(stats.t_cdf(-5.0, 30))
    assert adj[0] == pytest.approx(4 * p[0])  # Holm over the 4 points of the regressions' family


def test_the_robust_moderation_keeps_a_noisy_point_out_of_the_prior():
    """One point 20x the others' variance: its prior weight drops (limma robust), the quiet points keep theirs."""
    var = np.full(20, 1e-4) * np.random.default_rng(3).chisquare(2, 20) / 2
    var[-1] = 2e-3
    post, df, s0, d0 = gatestats.moderate(var, np.full(20, 2.0))
    assert df[-1] < df[0] - 1 and df[0] > 2 + 0.9 * min(d0[0], gatestats.D0_MAX)
    assert post[-1] > 0.6 * var[-1]  # shrunk less than half way towards the quiet points


def test_gate_false_alarm_exceeds_5pct_on_a_noise_floor_when_one_point_is_noisier():
    """What compare warns of on a noise floor (compare.MODERATION_CAVEAT): with one df per point, a point 5x
    noisier than the rest is shrunk towards the others' noise and falsely flagged (8-9%, docs/benchmarks.md)."""
    res = cisim.gate_sweeps(np.random.default_rng(37), floor=True, run_sd=0.03, law="normal", noisy=5.0)
    assert res["family_false_alarm"] > 0.06, res


def test_gate_false_alarm_exceeds_5pct_on_a_noise_floor_with_skewed_noise_and_equal_points():
    """The other half of what compare warns of on a noise floor: with skewed (lognormal) run-to-run noise the family
    false alarm exceeds 5% even where every point shares one noise level (6.0% over 4000 and 12000 comparisons,
    docs/benchmarks.md), so the caveat must not say "where one point is much noisier" alone."""
    res = cisim.gate_sweeps(np.random.default_rng(47), floor=True, run_sd=0.03, law="lognormal")
    assert res["family_false_alarm"] > 0.05 + (0.05 * 0.95 / res["trials"]) ** 0.5, res


def test_short_strongly_autocorrelated_runs_carry_a_ci_note():
    """150-300 steps at lag-1 above 0.9: the CI covers 83-86% (simulated here: < 90%), so ci_note says it may
    under-cover; independent steps of the same length get no such note."""
    rng = np.random.default_rng(41)
    model = cisim.SeriesModel(phi=0.98, cv=0.05, outlier_p=0.0, outlier_scale=0.0)
    for n in (150, 300):
        assert cisim.fixed_steps(rng, model, n, runs=2000)["coverage"] < 0.90, n
    steps = cisim.step_series(rng, 1, 200, model)[0]
    assert stats.step_lag1(steps) > 0.9
    note = stats.within_run_ci(list(steps), 1.0)["ci_note"]
    assert "over only 200 steps: this CI may under-cover" in note and "--repeats 2 or more" in note
    iid = cisim.step_series(rng, 1, 200, cisim.SeriesModel(phi=0.0))[0]
    assert "under-cover" not in (stats.within_run_ci(list(iid), 1.0)["ci_note"] or "")

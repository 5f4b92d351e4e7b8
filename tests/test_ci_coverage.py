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


# -- the regression gate (`distbench compare`, issues 20 and 34) ---------------------------------------------
GATE_TRIALS = 2000
"""Per cell in the fast tier (benchmarks/ci_coverage.py runs 20,000): a family false alarm of 5% has a binomial sd
of 0.49% over 2000 comparisons; the rates asserted <= 5% here are 0.5-3.8% over 8000 (docs/benchmarks.md), so
<= 5% holds with 2.5 sd or more to spare, and a cell whose rate were above 5.5% would fail it."""


@pytest.mark.parametrize("law", cisim.NOISE_LAWS)
def test_gate_family_false_alarm_at_most_5pct_and_power_80pct_at_r3(law):
    """A/A: 20 points, R = 3 repeats per side, run-to-run noise Gaussian, t(4) or lognormal, the points' noise
    spread 3x, one point 5x noisier, or 5 of 20 points 3x noisier (robust moderation, d0 capped:
    gatestats.moderate): the share of sweeps with any false regression stays <= 5% (before issue 34, Gaussian
    noise with 5 noisy points: 9.1%); and a 10% regression of a median-noise point is called in >= 80% of
    comparisons (1000 each: sd 1.1% at 86%, the lowest rate measured) at a run-to-run sd of 2%."""
    rng = np.random.default_rng(23)
    for name, case in {"equal": {}, **cisim.GATE_PATTERNS}.items():
        res = cisim.gate_sweeps(rng, r=3, run_sd=0.025, law=law, trials=GATE_TRIALS, **case)
        assert res["family_false_alarm"] <= 0.05, (name, res)
        res = cisim.gate_sweeps(rng, r=3, run_sd=0.02, law=law, effect=0.9, trials=1000, **case)
        assert res["power"] >= 0.80, (name, res)
    if law != "lognormal":  # R = 1 on an A/A floor (1 df per point): skewed noise gives 6% (MODERATION_CAVEAT)
        floor = cisim.gate_sweeps(rng, floor=True, run_sd=0.02, law=law, trials=GATE_TRIALS)
        assert floor["family_false_alarm"] <= 0.05, floor


def test_the_robust_moderation_keeps_a_noisy_point_out_of_the_prior():
    """One point 20x the others' variance: its prior weight drops (limma robust), the quiet points keep theirs."""
    var = np.full(20, 1e-4) * np.random.default_rng(3).chisquare(2, 20) / 2
    var[-1] = 2e-3
    post, df, s0, d0 = gatestats.moderate(var, np.full(20, 2.0))
    assert df[-1] < df[0] - 1 and df[0] > 2 + 0.9 * d0[0]
    assert post[-1] > 0.6 * var[-1]  # shrunk less than half way towards the quiet points


@pytest.mark.parametrize("case", [{"r": 2}, {"floor": True}], ids=["R=2", "R=1 + noise floor"])
def test_gate_false_alarm_exceeds_5pct_below_r3_when_one_point_is_noisier(case):
    """What compare warns of at R = 2 or on a noise floor (compare.MODERATION_CAVEAT): with one or two df per
    point, a point 5x noisier than the rest is shrunk towards the others' noise and falsely flagged; the
    family false alarm is then 8-12% even with the robust moderation (docs/benchmarks.md), not <= 5%."""
    res = cisim.gate_sweeps(np.random.default_rng(37), run_sd=0.02, noisy=5.0, **case)
    assert res["family_false_alarm"] > 0.07, res


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

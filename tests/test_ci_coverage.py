"""Simulated coverage and bias of distbench's 95% CIs (distbench/cisim.py): AR(1) step series with
phi up to 0.8, Student-t(4) noise and slow-step outliers. Each CI must cover the truth in >= 90% of
simulated runs and the throughput estimate be within 0.5% of it; the old rule must fail the check."""
import numpy as np
import pytest

from distbench import cisim

MODELS = [cisim.Model(phi=phi, cv=0.05) for phi in (0.0, 0.5, 0.8)] + [
    cisim.Model(phi=0.8, cv=0.05, outlier_p=0.01, outlier_scale=10.0)]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.label())
def test_within_run_ci_covers_at_fixed_and_adaptive_step_counts(model):
    rng = np.random.default_rng(11)
    fixed = cisim.fixed_steps(rng, model, 150, runs=1500)
    assert fixed["coverage"] >= 0.90 and abs(fixed["bias"]) <= 0.005, fixed
    adaptive = cisim.adaptive(rng, model, target=0.02, max_steps=2400, runs=1500)
    assert adaptive["coverage"] >= 0.90 and abs(adaptive["bias"]) <= 0.005, adaptive


@pytest.mark.parametrize("r", [2, 3, 5])
def test_run_to_run_ci_covers(r):
    res = cisim.repeats(np.random.default_rng(r), cisim.Model(phi=0.8), r, trials=1500)
    assert res["coverage"] >= 0.90 and abs(res["bias"]) <= 0.005, res


def test_paired_exposed_comm_ci_covers():
    res = cisim.paired_exposed(np.random.default_rng(5), cisim.Model(phi=0.8), 3, trials=1500)
    assert res["coverage"] >= 0.90, res


def test_the_old_rule_fails_this_check():
    """A normal CI over steps treated as independent, stopping the first time it is within target."""
    res = cisim.naive_adaptive(np.random.default_rng(3), cisim.Model(phi=0.8), 0.02, max_steps=1200, runs=1500)
    assert res["coverage"] < 0.7

"""`distbench compare`: run-to-run noise (repeats, or an A/A noise floor), t on log throughput with Holm
across the points, regression flagging only beyond that noise and the threshold, "not enough repeats to say"
at R = 1, unmatched points, and the CLI's exit codes (a CI gate). The ratio CIs the report still uses
(analysis.throughput_ratio_ci) are tested here too."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from distbench import analysis as an
from distbench.analysis import load_sweep
from distbench.analysis.compare import (
    MODERATION_CAVEAT,
    NOT_ENOUGH,
    RegressionFound,
    Undecided,
    compare_sweeps,
    gate,
    parse_threshold,
    summary_lines,
)
from distbench.cli import main
from distbench.core.errors import BadInput
from distbench.results import gatestats, stats
from distbench.results.store import Store
from tests import cisim
from tests.builders import add_sweep, point
from tests.conftest import TINY, require, run_cli


# -- CIs ---------------------------------------------------------------------------------------------------
def test_steps_throughput_ci_from_batch_means_covers_the_estimate():
    times = [0.1 * (1 + 0.05 * (((i * 7919) % 13) / 6 - 1)) for i in range(300)]
    thr = 8 * len(times) / sum(times)
    ci = an.steps_throughput_ci(times, thr)
    assert ci[0] < thr < ci[1]
    tight = an.steps_throughput_ci([0.1 * (1 + 0.001 * (((i * 7919) % 13) / 6 - 1)) for i in range(300)], thr)
    assert tight[1] - tight[0] < (ci[1] - ci[0]) / 10  # less spread, narrower CI


def test_steps_ci_needs_enough_steps():
    with pytest.raises(ValueError, match=r"too few steps \(3 < 150\)"):
        an.steps_throughput_ci([0.1, 0.1, 0.1], 80.0)


def test_ratio_ci_from_record_cis_combines_on_the_log_scale():
    lo, hi = an.ratio_ci_from_cis(100.0, (90.0, 110.0), 100.0, (90.0, 110.0))
    assert lo < 1 < hi
    assert math.log(hi) == pytest.approx(math.sqrt(2) * (math.log(110) - math.log(90)) / 2)
    lo, hi = an.ratio_ci_from_cis(100.0, (99.0, 101.0), 80.0, (79.0, 81.0))
    assert hi < 1 and lo < 0.8 < hi


def test_log_se_of_a_t_interval_uses_t_not_z():
    # a run-to-run CI over R = 2 repeats is a t(1) interval: its half width is 12.71 standard errors, not 1.96
    assert an.log_se((math.exp(-12.706205), math.exp(12.706205)), df=1) == pytest.approx(1.0, rel=1e-6)
    assert an.log_se((math.exp(-1.959964), math.exp(1.959964))) == pytest.approx(1.0, rel=1e-6)
    rec = point("ddp", 2, 0.1, repeats=[{"status": "ok", "throughput": 80.0}] * 2, ci_scope="run-to-run (t over 2)")
    assert an.ci_df(rec) == 1 and an.ci_df(point("ddp", 2, 0.1)) is None
    # two t(1) sides: the combined interval is t with Welch-Satterthwaite df 2 (not 3x too wide with z then t)
    t1 = (math.exp(-12.706205), math.exp(12.706205))  # a log-scale standard error of 1 with df 1
    lo, hi = an.ratio_ci_from_cis(1.0, t1, 1.0, (1.0, 1.0), 1, None)
    assert math.log(hi) == pytest.approx(stats.t_crit(1), rel=1e-6)
    lo, hi = an.ratio_ci_from_cis(
        1.0, (math.exp(-12.706205), math.exp(12.706205)), 1.0, (math.exp(-12.706205), math.exp(12.706205)), 1, 1
    )
    assert math.log(hi) == pytest.approx(stats.t_crit(2) * math.sqrt(2), rel=1e-6)


# -- the gate's statistics (distbench.results.gatestats) -----------------------------------------------------------
def test_one_t_cdf_scalar_and_vectorised():
    """stats.t_cdf is the project's one t CDF: the gate's p-values (arrays) and t_quantile (scalars) use it."""
    assert not hasattr(gatestats, "t_cdf")
    ts, dfs = np.array([-2.5, 0.0, 0.3, 4.0]), np.array([1, 2, 3, 4, 7, 30, 200])
    grid = stats.t_cdf(ts[:, None], dfs[None, :])
    for i, t in enumerate(ts):
        for j, df in enumerate(dfs):
            assert grid[i, j] == pytest.approx(stats.t_cdf(float(t), int(df)), abs=1e-15)
    assert isinstance(stats.t_cdf(1.0, 3), float)
    # closed forms: t(1) is Cauchy, t(2) has F(t) = 1/2 + t / (2 sqrt(2 + t^2))
    assert stats.t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-15)
    assert stats.t_cdf(-1.5, 2) == pytest.approx(0.5 - 1.5 / (2 * math.sqrt(2 + 1.5**2)), abs=1e-15)
    for df in (1, 4, 30):
        assert stats.t_cdf(stats.t_crit(df), df) == pytest.approx(0.975, abs=1e-10)
    assert gatestats.two_sided_p(stats.t_crit(4), 4) == pytest.approx(0.05, abs=1e-9)
    assert gatestats.two_sided_p(stats.t_crit(4), 4.9) == pytest.approx(0.05, abs=1e-9)  # Welch df floored
    with pytest.raises(ValueError, match="df must be >= 1"):
        stats.t_cdf(np.array([0.5, 1.0]), np.array([3, 0]))


def test_digamma_trigamma_and_its_inverse_against_closed_forms():
    euler = 0.5772156649015329
    assert gatestats.digamma(np.array([1.0]))[0] == pytest.approx(-euler, abs=1e-10)
    assert gatestats.digamma(np.array([0.5]))[0] == pytest.approx(-euler - 2 * math.log(2), abs=1e-10)
    assert gatestats.trigamma(np.array([1.0]))[0] == pytest.approx(math.pi**2 / 6, abs=1e-9)
    assert gatestats.trigamma(np.array([0.5]))[0] == pytest.approx(math.pi**2 / 2, abs=1e-9)
    y = np.array([0.01, 0.5, 3.0, 100.0])
    assert gatestats.trigamma(gatestats.trigamma_inverse(y)) == pytest.approx(y, rel=1e-12)


def test_holm_adjusted_p_values():
    adj = gatestats.holm_adjusted([0.01, 0.04, math.nan, 0.03])  # m = 3 tested: 0.03, 0.06, 0.06
    assert adj[0] == pytest.approx(0.03) and adj[1] == pytest.approx(0.06) and adj[3] == pytest.approx(0.06)
    assert math.isnan(adj[2])


def test_welch_satterthwaite_and_the_shared_floor():
    d, se, df = gatestats.welch(0.0, 0.04, 2, 1, 0.1, 0.01, 4, 3)
    assert d == pytest.approx(0.1) and se == pytest.approx(math.sqrt(0.02 + 0.0025))
    assert df == pytest.approx(0.0225**2 / (0.02**2 / 1 + 0.0025**2 / 3))
    _, se, df = gatestats.welch(0.0, 0.04, 1, 5, 0.1, 0.04, 1, 5, shared=True)
    assert se == pytest.approx(math.sqrt(0.08)) and df == 5  # one estimate: its own df, not doubled


def test_moderation_pools_equal_variances_and_keeps_unequal_ones_apart():
    rng = np.random.default_rng(0)
    equal = rng.chisquare(2, size=200) / 2 * 1e-4  # 200 points, true variance 1e-4, 2 df each
    post, df, s0, d0 = gatestats.moderate(equal, np.full(200, 2.0))
    assert d0[0] > 6 and s0[0] == pytest.approx(1e-4, rel=0.15) and np.ptp(post) < 0.5 * np.ptp(equal)
    unequal = equal * np.exp(rng.normal(0, 1.5, 200))
    post, df, s0, d0 = gatestats.moderate(unequal, np.full(200, 2.0))
    assert d0[0] < 5 and df.max() < 7  # little pooling: each point keeps most of its own variance
    post, df, _, d0 = gatestats.moderate(np.array([1e-4, 4e-4]), np.array([2.0, 2.0]))
    assert list(post) == pytest.approx([1e-4, 4e-4]) and d0[0] == 0  # 2 points: no moderation


def test_sampling_excess_measures_heavy_tails_from_each_points_two_sides():
    """The spread of log var_a - log var_b holds no differences between the points, only sampling: about 1 under
    the normal law (floored at 1), about 1.33 under the skewed lognormal noise, whatever the points' variances."""
    rng = np.random.default_rng(5)
    scale = np.exp(rng.normal(0, 1.5, 2000))  # the points' variances spread widely: it must not count
    for law, low, high in (("normal", 1.0, 1.08), ("lognormal", 1.22, 1.45)):
        a, b = (scale[:, None] * cisim.run_noise(rng, law, (2000, 3)) for _ in range(2))
        excess = gatestats.sampling_excess(a.var(axis=1, ddof=1), 2.0, b.var(axis=1, ddof=1), 2.0)
        assert low <= excess[0] <= high, (law, excess)
    unequal = gatestats.sampling_excess([1e-4, 9e-4, 1e-4, 1e-4], [2, 2, 2, 1], [1e-2, 1e-4, 1e-4, 1e-4], 2.0)
    assert unequal[0] > 1  # three points with equal df on both sides; the fourth (1 df in B) left out
    assert gatestats.sampling_excess([1e-4, 9e-4], 2.0, [1e-2, 1e-4], 2.0)[0] == 1.0  # fewer than 3: none
    zero = gatestats.sampling_excess([0.0, 1e-4, 2e-4, 1e-4], 2.0, [1e-4, 1e-4, 1e-4, 3e-4], 2.0)
    assert zero[0] == gatestats.EXCESS_MAX  # one variance of 0 does not decide the whole comparison's pooling


def test_sampling_excess_ignores_a_change_of_noise_common_to_all_of_bs_points():
    """B on a busier machine (every point's variance 4x A's) shifts every log var_a - log var_b alike: the estimate,
    centred on their mean, is the same as with B's own variances, so such a change does not read as sampling and
    widen the pooling (uncentred, 4x moved this estimate from 1.01 to 1.78)."""
    rng = np.random.default_rng(8)
    a, b = (0.03 * cisim.run_noise(rng, "normal", (20, 3)) for _ in range(2))
    var_a, var_b = a.var(axis=1, ddof=1), b.var(axis=1, ddof=1)
    same = gatestats.sampling_excess(var_a, 2.0, var_b, 2.0)[0]
    assert gatestats.sampling_excess(var_a, 2.0, 4 * var_b, 2.0)[0] == pytest.approx(same, rel=1e-9)
    assert gatestats.sampling_excess(var_a / 9, 2.0, var_b, 2.0)[0] == pytest.approx(same, rel=1e-9)


def test_a_slowdown_cannot_move_the_moderation_that_judges_it():
    """Each side's variance is about its own mean, so a slowdown of any points of B (here 3 of 12 by 10%) leaves
    the A/B excess, the prior and every point's moderated variance and df as they were: a real change cannot widen
    or narrow the noise it is judged against."""
    rng = np.random.default_rng(9)
    noise = 0.03 * cisim.run_noise(rng, "lognormal", (2, 12, 3))
    logs_a, logs_b = ({(i,): list(side[i]) for i in range(12)} for side in noise)
    slowed = {k: [v + math.log(0.9) for v in vals] if k[0] in (3, 4, 5) else vals for k, vals in logs_b.items()}
    before, after = gatestats.pooled_variances(logs_a, logs_b), gatestats.pooled_variances(logs_a, slowed)
    assert np.array([after[(i,)] for i in range(12)]) == pytest.approx(np.array([before[(i,)] for i in range(12)]))


def test_pooled_variances_moderate_with_the_excess_of_the_two_sides():
    rng = np.random.default_rng(6)
    noise = 0.03 * cisim.run_noise(rng, "t4", (2, 12, 3))
    logs_a, logs_b = ({(i,): list(side[i]) for i in range(12)} for side in noise)
    got = gatestats.pooled_variances(logs_a, logs_b)
    var_a, var_b = noise.var(axis=-1, ddof=1)
    var, df = gatestats.pooled(var_a, 2.0, var_b, 2.0)
    excess = gatestats.sampling_excess(var_a, 2.0, var_b, 2.0)
    assert excess[0] > 1  # these two sides' variances differ more than chi-square sampling makes them
    post, df_post, _, _ = gatestats.moderate(var, np.broadcast_to(df, var.shape), excess)
    assert np.array([got[(i,)] for i in range(12)]) == pytest.approx(np.column_stack([post, df_post]))
    plain, _, _, _ = gatestats.moderate(var, np.broadcast_to(df, var.shape))
    assert not np.allclose(plain, post)


def test_verdict_codes_follow_holm_and_the_threshold():
    d = np.log([0.8, 1.0, 1.02, 1.2, 0.9])
    p, adj, code = gatestats.verdict_codes(d, [0.01, 0.01, 0.001, 0.01, math.nan], [30] * 5, 0.05)
    assert list(code[:4]) == [-1, 0, 2, 1] and math.isnan(code[4])  # regression, within, below threshold, better
    assert adj[0] == pytest.approx(min(1, 4 * p[0]))  # the smallest p of 4 tested, times 4


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125), ("0", 0.0)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize(
    "text,message",
    [
        ("5", "--threshold '5' is ambiguous: write 5% for a percentage or a fraction below 1"),
        ("abc", "--threshold 'abc' is not a percentage (e.g. 5%) or a fraction (e.g. 0.05)"),
        ("-3%", "--threshold '-3%' must be between 0% and 100%"),
    ],
)
def test_parse_threshold_errors(text, message):
    with pytest.raises(BadInput) as exc:
        parse_threshold(text)
    assert str(exc.value) == message


TIGHT, WIDE = (0.99, 1.0, 1.01), (0.7, 0.95, 1.25)


def rep(strategy: str, n: int, step_s: float, factors=TIGHT, **kw) -> dict:
    """A point of len(factors) repeats whose throughputs are the step-time throughput times each factor."""
    thr = 4 * n / step_s
    return point(strategy, n, step_s, repeats=[{"status": "ok", "throughput": thr * f} for f in factors], **kw)


def _pair(tmp_path, r: int = 3):
    f = TIGHT[:r] if r > 1 else (1.0,)
    w = WIDE[:r] if r > 1 else (1.0,)
    tiny = tuple(1 + (v - 1) / 10 for v in f)
    a = [rep("torch", 1, 0.1, f), rep("ddp", 2, 0.1, f), rep("ddp", 4, 0.1, tiny), rep("horovod-torch", 2, 0.1, w)]
    a.append(rep("ddp", 8, 0.1, f))
    b = [
        rep("torch", 1, 0.1, f),
        rep("ddp", 2, 0.125, f),  # -20%: regression
        rep("ddp", 4, 0.098, tiny),  # +2%, tiny spread: beyond the noise, under 5%
        rep("horovod-torch", 2, 0.11, w),  # -9% but the repeats spread +-25%: within noise
        rep("mirrored", 2, 0.1, f, framework="tf"),
    ]
    path = tmp_path / "r.db"
    with Store(path) as store:
        sa, sb = add_sweep(store, a), add_sweep(store, b)
        return path, sa, sb, load_sweep(store, sa), load_sweep(store, sb)


def test_compare_flags_only_beyond_run_to_run_noise_and_threshold(tmp_path):
    _, _, _, a, b = _pair(tmp_path)
    result = compare_sweeps(a, b, threshold=0.05)
    verdicts = {p.key[:2]: p.verdict for p in result.points}
    assert verdicts == {
        ("torch", 1): "within noise",
        ("ddp", 2): "regression",
        ("ddp", 4): "below threshold",
        ("horovod-torch", 2): "within noise",
    }
    reg = next(p for p in result.points if p.key[:2] == ("ddp", 2))
    assert reg.ratio == pytest.approx(0.8) and reg.ci[1] < 1 and reg.p_holm < 0.05 and reg.repeats == (3, 3)
    assert reg.ci_method.startswith(
        "t on log throughput, the variance pooled over A's and B's repeats, R=3 (repeats) vs R=3 (repeats), df "
    )
    assert [k[:2] for k in result.only_a] == [("ddp", 8)]
    assert [k[:2] for k in result.only_b] == [("mirrored", 2)]
    assert [p.key[:2] for p in result.regressions] == [("ddp", 2)]
    # a 25% threshold: the 20% drop is real but not large enough to flag
    assert not compare_sweeps(a, b, threshold=0.25).regressions


def test_one_run_per_side_is_not_enough_to_say(tmp_path):
    _, _, _, a, b = _pair(tmp_path, r=1)
    result = compare_sweeps(a, b)
    assert {p.verdict for p in result.points} == {NOT_ENOUGH} and not result.regressions
    ddp2 = next(p for p in result.points if p.key[:2] == ("ddp", 2))
    assert ddp2.ratio == pytest.approx(0.8) and ddp2.ci is None and ddp2.p_holm is None
    assert ddp2.note == "fewer than 2 successful repeats in A and B"


def test_labels_name_each_points_key_and_failed_repeats_are_not_called_one_run(tmp_path):
    """Five ddp N=2 points that differ in batch size read as five labels, not "ddp N=2" five times; a point of 3
    repeats of which 2 failed has fewer than 2 successful repeats (it did not run once)."""
    a = [rep("ddp", 2, 0.1, (1.0,), batch=b) for b in (1, 2, 4, 8, 16)]
    b = [rep("ddp", 2, 0.1, (1.0,), batch=b) for b in (1, 2, 4, 8)]
    failed = [{"status": "ok", "throughput": 80.0}, {"status": "failed"}, {"status": "failed"}]
    b.append(point("ddp", 2, 0.1, batch=16, repeats=failed))
    with Store(tmp_path / "r.db") as store:
        result = compare_sweeps(load_sweep(store, add_sweep(store, a)), load_sweep(store, add_sweep(store, b)))
    assert result.undecided == [f"ddp N=2 resnet50 (weak scaling, batch {b}) ({NOT_ENOUGH})" for b in (1, 2, 4, 8, 16)]
    [last] = [p for p in result.points if p.key.batch == 16]
    assert last.note == "fewer than 2 successful repeats in A and B"
    assert (
        "5 point(s) with fewer than 2 successful repeats on a side: not enough repeats to say "
        "(--repeats 2+ or --noise-floor)"
    ) in summary_lines(result)


def test_below_r3_the_moderation_caveat_is_said_beside_the_verdict(tmp_path, capsys):
    """At R = 2 (or on a noise floor) one point much noisier than the rest is falsely flagged more than 5% of the
    time (tests/test_ci_coverage.py): compare says so, in the notes (JSON) and the terminal; at R = 3 it does not."""
    path, sa, sb, a, b = _pair(tmp_path, r=2)
    notes = compare_sweeps(a, b).notes
    assert MODERATION_CAVEAT.format(how="R = 2") in notes
    assert notes[-1].startswith("judged at R = 2: the run-to-run variances are moderated across the points, ")
    assert notes[-1].endswith("so confirm a flagged point with --repeats 3 or more")
    assert (
        "exceeds 5% (up to 9%) where one point is much noisier than the rest or the run-to-run noise is skewed"
        in notes[-1]
    )  # tests/test_ci_coverage.py: on a floor skewed noise alone takes it above 5%
    main(["compare", sa, sb, "--results", str(path)])
    assert "note: judged at R = 2: the run-to-run variances are moderated" in capsys.readouterr().out.replace("\n", " ")
    # at R = 2 the caveat alone does not call the 5% the design level (the floor's, or the note on B's noise, do)
    r2 = compare_sweeps(a, b)
    assert not [n for n in r2.notes if "run-to-run noise is about" in n]
    assert [x for x in summary_lines(r2) if x.startswith("run-to-run noise:")][0].endswith("at a family-wise 5%")
    _, _, _, a3, b3 = _pair(tmp_path / "r3", r=3)
    assert not [n for n in compare_sweeps(a3, b3).notes if n.startswith("judged at")]


def _floor_sweeps(tmp_path, shift: float = 0.8):
    """A, C (a second run of A: +-1% per point) and B (ddp N=2 at `shift`), each point run once."""
    names = [("torch", 1), ("ddp", 1), ("ddp", 2), ("ddp", 4), ("horovod-torch", 1), ("horovod-torch", 2)]
    wiggle = (1.01, 0.99, 1.012, 0.988, 1.009, 0.991)
    a = [rep(s, n, 0.1, (1.0,)) for s, n in names]
    c = [rep(s, n, 0.1 * w, (1.0,)) for (s, n), w in zip(names, wiggle)]
    b = [rep(s, n, 0.1 / (shift if (s, n) == ("ddp", 2) else w), (1.0,)) for (s, n), w in zip(names, wiggle[::-1])]
    path = tmp_path / "f.db"
    with Store(path) as store:
        ids = [add_sweep(store, x) for x in (a, c, b)]
        return path, ids, [load_sweep(store, i) for i in ids]


def test_noise_floor_from_an_a_a_sweep_judges_single_runs(tmp_path):
    _, _, (a, c, b) = _floor_sweeps(tmp_path)
    result = compare_sweeps(a, b, floor=c)
    verdicts = {p.key[:2]: p.verdict for p in result.points}
    assert verdicts[("ddp", 2)] == "regression"
    assert all(v == "within noise" for k, v in verdicts.items() if k != ("ddp", 2))
    reg = result.regressions[0]
    assert reg.ci_method.startswith("t on log throughput, one noise floor for both, R=1 (noise floor) vs R=1")
    assert result.to_json()["noise_floor"] == c.id
    assert MODERATION_CAVEAT.format(how="R = 1 with a noise floor") in result.to_json()["notes"]
    [line] = [x for x in summary_lines(result) if x.startswith("run-to-run noise:")]
    assert "at a family-wise 5% (the design level; see the notes), noise floor from" in line
    # the A/A pair alone: nothing flagged
    assert not compare_sweeps(a, c, floor=c).regressions


def test_too_few_steps_do_not_matter_with_repeats(tmp_path):
    with Store(tmp_path / "r.db") as store:
        sa = add_sweep(store, [rep("ddp", 2, 0.1, steps=3)])
        sb = add_sweep(store, [rep("ddp", 2, 0.2, steps=3)])
        [p] = compare_sweeps(load_sweep(store, sa), load_sweep(store, sb)).points
    assert p.verdict == "regression"  # run to run: the repeats, not the 3 steps of each


def test_failures_count_as_regressions(tmp_path):
    a = [rep("ddp", 2, 0.1), rep("ddp", 4, 0.1), point("ddp", 8, status="failed", reason="oom-ish")]
    b = [rep("ddp", 2, 0.1), point("ddp", 4, status="timeout", reason="killed after 900 s"), rep("ddp", 8, 0.1)]
    with Store(tmp_path / "r.db") as store:
        sa, sb = add_sweep(store, a), add_sweep(store, b)
        result = compare_sweeps(load_sweep(store, sa), load_sweep(store, sb))
    by = {p.key[1]: p for p in result.points}
    assert by[2].verdict == "within noise"
    assert by[4].verdict == "failed in B" and by[4].note == "timeout: killed after 900 s"
    assert by[8].verdict == "fixed in B"
    assert [p.key[1] for p in result.regressions] == [4]


# -- CLI ---------------------------------------------------------------------------------------------------
def _run(capsys, args):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compare_cli_exit_1_on_regression_else_0(capsys, tmp_path):
    path, sa, sb, _, _ = _pair(tmp_path)
    code, out, err = _run(capsys, ["compare", sa, sb, "--results", str(path)])
    assert code == 1, err
    assert err == (
        f"Error: 1 regression(s) in {sb} vs {sa} beyond the run-to-run noise and the 5.0% threshold: ddp N=2"
        f" resnet50 (weak scaling, batch 4)\n"
    )
    assert "regression" in out and "only in A (unmatched): ddp N=8 resnet50 batch=4 weak" in out
    assert (
        "1 regression(s), 0 improvement(s) beyond the run-to-run noise and the 5.0% threshold, over 4 matched point(s)"
        in out
    )
    assert "t on log throughput, Holm over 4 tested point(s) (one-sided for regressions) at a family-wise 5%" in out
    code, out, err = _run(capsys, ["compare", sa, sb, "--results", str(path), "--threshold", "25%"])
    assert code == 3  # no regression, but ddp N=8 (only in A) and mirrored (only in B) were not judged
    assert err == (  # a verdict, not an error; the points are listed above it (over 120 columns in one line)
        "no regression found, but 2 point(s) could not be judged (their verdicts above); --allow-undecided accepts "
        "this\n"
    )
    code, out, _ = _run(capsys, ["compare", sa, sb, "--results", str(path), "--threshold", "25%", "--allow-undecided"])
    assert code == 0
    code, out, _ = _run(capsys, ["compare", sa, "latest", "--results", str(path), "--format", "json"])
    assert code == 1
    doc = json.loads(out)
    assert doc["sweep_b"] == sb and doc["regressions"] == 1 and doc["threshold"] == 0.05 and doc["alpha"] == 0.05
    [unmatched] = doc["unmatched_b"]
    assert {
        k: unmatched[k] for k in ("strategy", "world_size", "nodes", "batch", "model", "scaling", "device", "precision")
    } == {
        "strategy": "mirrored",
        "world_size": 2,
        "nodes": 1,
        "batch": 4,
        "model": "resnet50",
        "scaling": "weak",
        "device": "cpu",
        "precision": "fp32",
    }
    reg = next(p for p in doc["points"] if p["verdict"] == "regression")
    assert reg["strategy"] == "ddp" and reg["world_size"] == 2 and reg["ci_high"] < 1
    assert reg["p_holm"] < 0.05 and reg["repeats_a"] == reg["repeats_b"] == 3 and reg["df"] > 1


def test_compare_cli_at_one_repeat_exits_3_undecided_and_says_so(capsys, tmp_path):
    """The gate does not fail open: one run per side and no floor judges nothing (exit 3, not 0)."""
    path, sa, sb, _, _ = _pair(tmp_path, r=1)
    code, out, err = _run(capsys, ["compare", sa, sb, "--results", str(path)])
    assert code == 3, err
    assert err == (
        "no regression found, but 6 point(s) could not be judged (their verdicts above); --allow-undecided accepts "
        "this\n"
    )
    assert "4 point(s) with fewer than 2 successful repeats on a side: not enough repeats to say" in out
    code, _, err = _run(capsys, ["compare", sa, sb, "--results", str(path), "--allow-undecided"])
    assert code == 0, err


def test_points_skipped_or_interrupted_on_a_side_are_undecided(tmp_path):
    """A point interrupted (e.g. in its no-sync variant) or skipped in B is 'not measured': exit 3, not 0;
    a point failed on both sides is a stable result, not undecided."""
    a = [rep("ddp", 2, 0.1), rep("ddp", 4, 0.1), rep("ddp", 8, 0.1, status="oom")]
    b = [rep("ddp", 2, 0.1), rep("ddp", 4, 0.1, status="interrupted"), rep("ddp", 8, 0.1, status="oom")]
    with Store(tmp_path / "r.db") as store:
        sa, sb = add_sweep(store, a), add_sweep(store, b)
        result = compare_sweeps(load_sweep(store, sa), load_sweep(store, sb))
    assert result.undecided == ["ddp N=4 resnet50 (weak scaling, batch 4) (not measured)"]
    with pytest.raises(Undecided) as exc:
        gate(result)
    assert exc.value.exit_code == 3
    assert str(exc.value) == (  # the list would make the line longer than 120 columns: the table lists them
        "no regression found, but 1 point(s) could not be judged (their verdicts above); --allow-undecided accepts this"
    )
    gate(result, allow_undecided=True)  # accepted: no regression


def test_sweeps_far_apart_or_under_another_load_say_so_and_point_to_the_noise_floor(tmp_path):
    """Repeats run back to back inside a sweep: their noise has no drift between sweeps. Two sweeps 18 min
    apart whose CPU GEMM probe (cpu_gemm_peak, measured at every point) moved 25%: the verdict says both and
    points to --noise-floor; the same sweeps started together under the same load say nothing."""
    gemm = lambda f: {"cpu_gemm_peak": {"flops_per_s": f, "size": 1024, "threads": 1}}  # noqa: E731
    a = [rep("ddp", 2, 0.1, **gemm(2.0e10)), rep("ddp", 4, 0.1, **gemm(2.0e10))]
    b = [rep("ddp", 2, 0.1, **gemm(1.5e10)), rep("ddp", 4, 0.1, **gemm(1.5e10))]
    with Store(tmp_path / "r.db") as store:
        sa, sb = add_sweep(store, a), add_sweep(store, b)
        sweep_a, sweep_b = load_sweep(store, sa), load_sweep(store, sb)
    sweep_a.info["started"], sweep_b.info["started"] = "2026-01-01T10:00:00+00:00", "2026-01-01T10:18:00+00:00"
    [note] = [n for n in compare_sweeps(sweep_a, sweep_b).notes if "drifted" in n]
    assert note == (
        "A and B may have drifted apart: they started 18 min apart and the machine's load differed (CPU GEMM probe "
        "20.0 GFLOP/s in A, 15.0 in B, -25%); the run-to-run noise comes from repeats run back to back inside each "
        "sweep and does not include drift between sweeps: judge against an A/A rerun of A with --noise-floor"
    )
    sweep_b.info["started"] = "2026-01-01T10:05:00+00:00"
    for r in sweep_b.points:
        r["cpu_gemm_peak"] = {"flops_per_s": 1.9e10}  # -5%: within DRIFT_LOAD
    assert not [n for n in compare_sweeps(sweep_a, sweep_b).notes if "drifted" in n]


def test_compare_cli_noise_floor(capsys, tmp_path):
    path, (sa, sc, sb), _ = _floor_sweeps(tmp_path)
    code, out, err = _run(capsys, ["compare", sa, sb, "--results", str(path), "--noise-floor", sc])
    assert code == 1 and err.endswith("threshold: ddp N=2 resnet50 (weak scaling, batch 4)\n"), err
    assert f"noise floor from {sc} (A/A)" in " ".join(out.split())  # lines wrap at the width (COLUMNS, else 120)
    code, _, err = _run(capsys, ["compare", sa, sb, "--results", str(path), "--noise-floor", "nope"])
    assert code == 2 and err.startswith("Error: --noise-floor: unknown sweep 'nope'; recent sweeps: ")
    code, _, err = _run(capsys, ["compare", sa, sb, "--results", str(path), "--noise-floor", sa])
    assert code == 2
    assert err == f"Error: --noise-floor {sa!r} is a compared sweep: give a second run of SWEEP_A\n"


def test_a_decoder_comparison_shows_tokens_per_second(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    gpt2 = {"model": "gpt2", "config": {"seq_len": 64}}
    with Store(tmp_path / "r.db") as store:
        sa = add_sweep(store, [rep("torch", 1, 0.1, **gpt2), rep("ddp", 2, 0.1, **gpt2)])
        sb = add_sweep(store, [rep("torch", 1, 0.1, **gpt2), rep("ddp", 2, 0.125, **gpt2)])
    code, out, _ = _run(capsys, ["compare", sa, sb, "--results", str(tmp_path / "r.db")])
    assert code == 1
    lines = out.splitlines()
    assert re.search(r"strategy +N +workload +\(tokens/s\) +\(tokens/s\) +A/B", out) and "samples/s" not in out
    # 2 devices x batch 4 / 0.1 s = 80 samples/s x 64 tokens = 5,120 tokens/s; B at 0.125 s: 4,096
    assert any(
        re.match(r"ddp +2 +gpt2 \(weak scaling, batch 4\) +5,120 +4,096 +3/3 +0\.800 ", line) for line in lines
    ), out
    assert max(len(line.rstrip()) for line in lines) <= 120
    code, out, _ = _run(capsys, ["compare", sa, sb, "--results", str(tmp_path / "r.db"), "--format", "json"])
    ddp = next(p for p in json.loads(out)["points"] if p["strategy"] == "ddp")
    assert (ddp["throughput_a"], ddp["throughput_b"]) == pytest.approx((80.0, 64.0))
    assert (ddp["tokens_per_s_a"], ddp["tokens_per_s_b"]) == pytest.approx((5120.0, 4096.0))
    # an image model's comparison stays in samples/s, with no token fields
    with Store(tmp_path / "i.db") as store:
        ia, ib = (add_sweep(store, [rep("ddp", 2, step)]) for step in (0.1, 0.125))
    code, out, _ = _run(capsys, ["compare", ia, ib, "--results", str(tmp_path / "i.db")])
    assert "(samples/s)" in out and "tokens/s" not in out
    code, out, _ = _run(capsys, ["compare", ia, ib, "--results", str(tmp_path / "i.db"), "--format", "json"])
    assert "tokens_per_s_a" not in json.loads(out)["points"][0]


def test_compare_cli_across_two_stores(capsys, tmp_path):
    with Store(tmp_path / "a.db") as store:
        sa = add_sweep(store, [rep("ddp", 2, 0.1)])
    with Store(tmp_path / "b.db") as store:
        add_sweep(store, [rep("ddp", 2, 0.0999)])
    code, out, err = _run(
        capsys, ["compare", sa, "latest", "--results", str(tmp_path / "a.db"), "--results-b", str(tmp_path / "b.db")]
    )
    assert code == 0, err
    assert "0 regression(s)" in out


def test_compare_cli_errors(capsys, tmp_path):
    with Store(tmp_path / "r.db") as store:
        sa = add_sweep(store, [point("ddp", 2, 0.1)])
        sb = add_sweep(store, [point("ddp", 2, 0.1, model="resnet18")])
    code, out, err = _run(capsys, ["compare", sa, sb, "--results", str(tmp_path / "r.db")])
    assert code == 3  # nothing could be judged: the documented exit 3, a one-line verdict
    assert (
        err
        == "nothing to compare: no point of B matches one of A (the workloads differ: model resnet50 in A, resnet18 in B)\n"
    )
    assert len(err.rstrip("\n")) <= 120 and "strategy" not in out  # no empty table header
    code, _, err = _run(capsys, ["compare", sa, sb, "--results", str(tmp_path / "r.db"), "--allow-undecided"])
    assert code == 0 and err.startswith("nothing to compare")
    code, out, err = _run(capsys, ["compare", sa, "nope", "--results", str(tmp_path / "r.db")])
    assert code == 2 and out == ""
    assert err == f"Error: unknown sweep 'nope'; recent sweeps: {sb}, {sa}\n"
    code, _, err = _run(capsys, ["compare", sa, sb, "--results", str(tmp_path / "r.db"), "--threshold", "5"])
    assert code == 2
    assert err == "Error: --threshold '5' is ambiguous: write 5% for a percentage or a fraction below 1\n"
    # compare has no random draws: a --seed it would ignore is refused, not silently taken
    code, out, err = _run(capsys, ["compare", sa, sb, "--results", str(tmp_path / "r.db"), "--seed", "3"])
    assert (code, out, err) == (2, "", "Error: No such option '--seed'.\n")


# -- the whole workload is the key -------------------------------------------------------------------------
def test_points_at_the_same_n_on_other_nodes_are_separate_points(tmp_path):
    a = [rep("ddp", 8, 0.1), rep("ddp", 8, 0.1, nodes=2)]
    b = [rep("ddp", 8, 0.1), rep("ddp", 8, 0.2, nodes=2)]
    with Store(tmp_path / "r.db") as store:
        sa, sb = add_sweep(store, a), add_sweep(store, b)
        result = compare_sweeps(load_sweep(store, sa), load_sweep(store, sb))
    verdicts = {(p.key.world_size, p.key.nodes): p.verdict for p in result.points}
    assert verdicts == {(8, 1): "within noise", (8, 2): "regression"}  # not one point where the later wins
    assert [p.to_json()["nodes"] for p in result.regressions] == [2]
    with pytest.raises(RegressionFound) as exc:
        gate(result)
    assert str(exc.value).endswith("threshold: ddp (2 nodes) N=8 resnet50 (weak scaling, batch 4)")


def test_workloads_that_differ_are_listed_apart_not_compared(tmp_path, capsys):
    a = [rep("ddp", 2, 0.1), rep("ddp", 4, 0.1)]
    b = [rep("ddp", 2, 0.05, config={"precision": "bf16", "image_size": 128}), rep("ddp", 4, 0.1)]
    path = tmp_path / "r.db"
    with Store(path) as store:
        sa, sb = add_sweep(store, a), add_sweep(store, b)
        result = compare_sweeps(load_sweep(store, sa), load_sweep(store, sb))
    assert [p.key.world_size for p in result.points] == [4]  # only the same workload is compared
    assert result.only_a == [] and result.only_b == []
    [(ka, kb, diffs)] = result.differ
    assert ka.world_size == kb.world_size == 2
    assert diffs == ["image_size 224 in A, 128 in B", "precision fp32 in A, bf16 in B"]
    assert result.to_json()["workloads_differ"][0]["differences"] == diffs
    code = main(["compare", sa, sb, "--results", str(path)])
    out = capsys.readouterr().out
    assert code == 3  # the N=2 point was not judged
    assert (
        "not compared, the workloads differ: ddp N=2 resnet50 batch=4 weak: image_size 224 in A, 128 in B; "
        "precision fp32 in A, bf16 in B"
    ) in " ".join(out.split())  # lines wrap at the width (COLUMNS, else 120)
    assert "compared workload: model resnet50, device cpu, scaling weak, image_size 224" in " ".join(out.split())


def test_gate_uses_the_same_verdicts_as_compare(tmp_path):
    """The simulation's verdict path (gatestats) gives compare's verdicts on the same numbers (one code path)."""
    rng = np.random.default_rng(31)
    a, b = rng.normal(0, 0.02, (6, 3)), rng.normal(0, 0.02, (6, 3))
    b[0] += np.log(0.8)
    sides = (a.var(axis=1, ddof=1), 2.0, b.var(axis=1, ddof=1), 2.0)
    var, df = gatestats.pooled(*sides)
    var, df, _, _ = gatestats.moderate(var, df, gatestats.spread_excess(*sides))
    _, adj, code = gatestats.verdict_codes(b.mean(1) - a.mean(1), np.sqrt(var * 2 / 3), df, 0.05)
    sweeps = []
    with Store(tmp_path / "r.db") as store:
        for logs in (a, b):
            recs = [
                point(
                    "ddp",
                    n + 1,
                    4 * (n + 1) / 40.0 / np.exp(row.mean()),
                    repeats=[{"status": "ok", "throughput": 40.0 * np.exp(v)} for v in row],
                )
                for n, row in enumerate(logs)
            ]
            sweeps.append(load_sweep(store, add_sweep(store, recs)))
    result = compare_sweeps(*sweeps)
    names = {-1: "regression", 0: "within noise", 1: "improvement", 2: "below threshold"}
    assert [p.verdict for p in result.points] == [names[int(c)] for c in code]
    assert [p.p_holm for p in result.points] == pytest.approx(list(adj))
    assert code[0] == -1


def test_gate_uses_the_same_verdicts_as_compare_on_a_noise_floor(tmp_path):
    """R = 1 with an A/A floor: cisim.gate_sweeps' floor path (d^2 / 2 moderated at 1 df, one shared estimate)
    gives compare --noise-floor's verdicts and p-values on the same numbers."""
    rng = np.random.default_rng(41)
    a, c, b = (rng.normal(0, 0.01, 12) for _ in range(3))
    b[0] += np.log(0.8)
    var, df, _, _ = gatestats.moderate((c - a) ** 2 / 2, np.ones(12))
    d, se, dof = gatestats.welch(a, var, 1, df, b, var, 1, df, shared=True)
    _, adj, code = gatestats.verdict_codes(d, se, dof, 0.05)
    sweeps = []
    with Store(tmp_path / "r.db") as store:
        for logs in (a, c, b):
            recs = [point("ddp", n + 1, 4 * (n + 1) / 40.0 / np.exp(v)) for n, v in enumerate(logs)]
            sweeps.append(load_sweep(store, add_sweep(store, recs)))
    result = compare_sweeps(sweeps[0], sweeps[2], floor=sweeps[1])
    names = {-1: "regression", 0: "within noise", 1: "improvement", 2: "below threshold"}
    assert [p.verdict for p in result.points] == [names[int(k)] for k in code]
    assert [p.p_holm for p in result.points] == pytest.approx(list(adj))
    assert code[0] == -1


# -- the sweep's own verdicts (which strategy is ahead, a wrapper's cost) -----------------------------------
def _run_to_run(r: dict, rel: float = 0.01) -> dict:
    """Give a record R = 3 repeats and the run-to-run CI measure.combine_repeats would give (+-rel)."""
    thr = r["throughput"]
    r.update(
        repeats=[{"status": "ok", "throughput": thr * f} for f in (1 - rel, 1.0, 1 + rel)],
        throughput_ci_low=thr * (1 - 3 * rel),
        throughput_ci_high=thr * (1 + 3 * rel),
        ci_scope="run-to-run (t over 3 repeats)",
    )
    return r


def test_sweep_verdicts_from_one_run_each_say_they_are_within_run_only(tmp_path):
    recs = [point("torch", 1, 0.1), point("ddp", 2, 0.1 / 0.9), point("horovod-torch", 2, 0.1 / 0.6)]
    recs += [point("ddp", 1, 0.1 / 0.95)]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    best = an.best_strategy(sweep.scaling_points, sweep)
    assert best["within_run_only"] == ["horovod-torch"] and best["tied"] == []
    summary = an.summarize(sweep)
    assert "Its lead over horovod-torch is beyond the within-run noise only: a point ran once" in summary.best[0]
    ddp = next(line for line in summary.wrapper if line.startswith("ddp"))
    assert ddp.endswith(
        ": beyond the within-run noise only (one run each; --repeats 2 or more for the run-to-run noise)."
    )
    with Store(tmp_path / "r2.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    for r in sweep.points:
        _run_to_run(r)
    best = an.best_strategy(sweep.scaling_points, sweep)
    assert best["within_run_only"] == [] and best["tied"] == []  # run to run: the lead stands


# -- real: two identical sweeps back to back (issue 20's "done means") -------------------------------------
@pytest.mark.slow
@require("torch")
@pytest.mark.parametrize("repeats", [1, 3])
def test_two_identical_sweeps_back_to_back_pass_the_gate(tmp_path, repeats):
    """torch N=1, TINY, run twice into one store, then `compare` the two: exit 0, at R = 1 because one run
    per side is not enough to say, at R = 3 because the difference is within the run-to-run noise."""
    db = str(tmp_path / "r.db")
    for _ in range(2):
        proc = run_cli(
            ["scale", "--gpus", "1", "--strategy", "torch", "--device", "cpu", "--results", db, *TINY]
            + ["--repeats", str(repeats), "--no-comm", "--telemetry-interval", "0"]
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    sweeps = json.loads(run_cli(["results", "list", "--results", db, "--format", "json"]).stdout)
    b, a = sweeps[0]["id"], sweeps[1]["id"]
    proc = run_cli(["compare", a, b, "--results", db, "--format", "json"])
    # at R = 1 nothing is judged: exit 3 (undecided) unless --allow-undecided
    assert proc.returncode == (3 if repeats == 1 else 0), proc.stdout[-3000:] + proc.stderr[-3000:]
    [p] = [p for p in json.loads(proc.stdout)["points"] if p["strategy"] == "torch"]
    assert p["repeats_a"] == p["repeats_b"] == repeats
    if repeats == 1:
        assert p["verdict"] == NOT_ENOUGH and p["p_holm"] is None
    else:
        assert p["verdict"] in ("within noise", "below threshold", "improvement"), p
        assert p["p_holm"] is not None and p["ci_low"] < p["ratio"] < p["ci_high"]


def test_differences_name_an_unset_field_in_words(tmp_path):
    with Store(tmp_path / "r.db") as store:
        sa = add_sweep(store, [point("ddp", 2, 0.1)])
        sb = add_sweep(store, [point("ddp", 2, 0.1, config={"seq_len": 64})])
        result = compare_sweeps(load_sweep(store, sa), load_sweep(store, sb))
    differences = result.differ[0][2]
    assert "seq_len not set in A, 64 in B" in differences and not any("None" in d for d in differences)


def test_compared_workload_leaves_out_fields_without_a_value(tmp_path):
    """A workload field with no value (seq_len, model_size, baseline_threads of an image model) is left out of
    'compared workload:', never printed as 'None'."""
    extra = {"seq_len": None, "model_size": None, "baseline_threads": None}
    a = [rep("torch", 1, 0.1, config=extra), rep("ddp", 2, 0.1, config=extra)]
    b = [rep("torch", 1, 0.1, config=extra), rep("ddp", 2, 0.1, config=extra)]
    with Store(tmp_path / "r.db") as store:
        result = compare_sweeps(load_sweep(store, add_sweep(store, a)), load_sweep(store, add_sweep(store, b)))
    assert "seq_len" in dict(result.points[0].key.workload)  # the key holds the field, without a value
    [line] = [x for x in summary_lines(result) if x.startswith("compared workload: ")]
    assert line.startswith("compared workload: model resnet50, device cpu, scaling weak")
    assert "None" not in line and "seq_len" not in line and "baseline_threads" not in line


def _kinds_store(path):
    """A store whose sweeps are, oldest first: scale, comm, profile, converge, then a newer scale and infer."""
    made = {}
    with Store(path) as store:
        made["scale-old"] = add_sweep(store, [rep("torch", 1, 0.1), rep("ddp", 2, 0.1)])
        made["comm"] = add_sweep(store, [dict(point("ddp", 2, 0.1), kind="comm")], command="distbench comm --gpus 2")
        made["profile"] = add_sweep(store, [point("torch", 1, 0.1)], command="distbench profile --strategy torch")
        converge = [dict(point("torch", 1, 0.1), kind="converge")]
        made["converge"] = add_sweep(store, converge, command="distbench converge --gpus 1")
        made["scale"] = add_sweep(store, [rep("torch", 1, 0.1), rep("ddp", 2, 0.1), rep("ddp", 4, 0.1)])
        made["infer"] = add_sweep(store, [dict(point("torch", 1, 0.1), kind="inference")], command="distbench infer")
    return made


def test_latest_for_a_flag_is_the_newest_sweep_of_the_kind_it_reads(tmp_path, capsys):
    """predict's --comm, --profile, --epochs-to-target and compare's --noise-floor take 'latest' as the
    newest sweep of the kind they read, named on stderr, not the newest sweep of any kind."""
    from distbench.analysis import open_store, pick_latest

    made = _kinds_store(tmp_path / "r.db")
    with open_store(tmp_path / "r.db") as store:
        for use in ("comm", "profile", "converge", "scaling"):
            assert pick_latest(store, use)[0] == made[use if use != "scaling" else "scale"], use
    db = str(tmp_path / "r.db")
    code, _, err = _run(
        capsys, ["compare", made["scale-old"], made["profile"], "--results", db, "--noise-floor", "latest"]
    )
    assert f"latest: sweep {made['scale']}" in " ".join(err.split())  # not the newer infer sweep
    code, _, err = _run(
        capsys,
        [
            "predict",
            "latest",
            "--results",
            db,
            "--epochs-to-target",
            "latest",
            "--gpus",
            "2",
            "--grad-bytes",
            "1e8",
            "--link",
            "nvlink4",
        ],
    )
    assert f"latest: sweep {made['converge']}" in " ".join(err.split()), err
    code, _, err = _run(capsys, ["predict", "latest", "--results", db, "--profile", "latest", "--gpus", "2"])
    assert f"latest: sweep {made['profile']}" in " ".join(err.split()), err
    with Store(tmp_path / "none.db") as store:
        add_sweep(store, [rep("torch", 1, 0.1), rep("ddp", 2, 0.1)])
    code, _, err = _run(capsys, ["predict", "latest", "--results", str(tmp_path / "none.db"), "--comm", "latest"])
    assert code == 2 and "\nError: --comm latest: none of the 1 newest sweep(s) in " in err
    assert err.rstrip().endswith("has `distbench comm` points: give a sweep id (`distbench results list`)")


def test_the_floor_false_alarm_quoted_is_the_benchmark_table_s_highest():
    """compare.FLOOR_FALSE_ALARM_MAX (quoted in MODERATION_CAVEAT) is the highest family false alarm of the noise-floor
    rows benchmarks/gate_power.py last wrote into docs/benchmarks.md."""
    from distbench.analysis.compare import FLOOR_FALSE_ALARM_MAX

    doc = (Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md").read_text()
    section = doc[doc.index("## The regression gate's false alarm and power") :]
    section = section[: section.index("\n## ")]
    rows = [line for line in section.splitlines() if line.startswith("|") and "| 1 and a noise floor |" in line]
    alarms = [float(line.split("|")[5].split("%")[0]) / 100 for line in rows]
    assert len(rows) >= 12 and max(alarms) == pytest.approx(FLOOR_FALSE_ALARM_MAX, abs=5e-4), alarms

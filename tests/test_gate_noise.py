"""compare's check that B's run-to-run noise is A's (gatestats.noise_ratio_p / noise_ratio, gatenotes): the exact
signed-rank law, its false alarm under A/A and its power where B is noisier (tests/cisim.gate_sweeps), and the
note compare prints."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from distbench.analysis import load_sweep
from distbench.analysis.compare import compare_sweeps, summary_lines
from distbench.analysis.gatenotes import UNSHARED_NOISE_FALSE_ALARM
from distbench.cli import main
from distbench.results import gatestats
from distbench.results.store import Store
from tests import cisim
from tests.builders import add_sweep, point

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def test_signed_rank_law_and_the_interval_agree_with_the_test():
    """The exact law by hand (m = 3: T+ takes 0..6 with counts 1 1 1 2 1 1 1), every sign the same at 6 points
    gives p = 2 / 2^6, and the interval leaves out ratio 1 exactly where p <= 5%."""
    assert gatestats.signed_rank_cdf(3) * 8 == pytest.approx([1, 2, 3, 5, 6, 7, 8])
    va = np.array([1.0, 2.0, 0.5, 3.0, 1.5, 0.7])
    p, m = gatestats.noise_ratio_p(va, 2, va * np.array([2, 3, 4, 5, 6, 7]), 2)
    assert m == 6 and p == pytest.approx(2 / 64)
    few = gatestats.NOISE_RATIO_MIN_POINTS - 1
    p_few, _ = gatestats.noise_ratio_p(va[:few], 2, va[:few] * 9, 2)
    assert p_few == pytest.approx(2 / 2**few) and p_few > 0.05
    rng = np.random.default_rng(5)
    for _ in range(200):
        m = int(rng.integers(6, 30))
        va, vb = rng.chisquare(2, m), rng.chisquare(2, m) * rng.choice([1.0, 4.0])
        got = gatestats.noise_ratio(va, 2, vb, 2)
        assert got["differs"] == (got["low"] > 1 or got["high"] < 1)
        assert got["low"] <= got["ratio"] <= got["high"]


def test_points_with_unequal_df_or_a_zero_ratio_are_left_out():
    va = np.full(8, 1.0)
    vb = np.array([2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 1.0])  # the last: log ratio 0
    p, m = gatestats.noise_ratio_p(va, [2, 2, 2, 2, 2, 2, 2, 2], vb, [2, 2, 2, 2, 2, 2, 1, 2])
    assert m == 6 and p == pytest.approx(2 / 64)


def test_the_interval_is_the_set_of_centres_the_test_keeps():
    """The interval inverts the test: every centre strictly between its ends (the Walsh averages of ranks c + 1
    and M - c) keeps p > 5% for the log ratios less that centre, every centre just outside rejects; the law of
    T+ is the enumeration of all 2^m signs (m = 6 to 9)."""
    rng = np.random.default_rng(11)
    for m in range(6, 10):
        ranks = np.arange(1, m + 1)
        signs = (np.arange(2**m)[:, None] >> np.arange(m)) & 1
        counts = np.bincount(signs @ ranks, minlength=m * (m + 1) // 2 + 1)
        assert gatestats.signed_rank_cdf(m) == pytest.approx(np.cumsum(counts) / 2**m)
        x = rng.standard_t(3, m) + 0.4
        got = gatestats.noise_ratio(np.ones(m), 2, np.exp(x), 2)
        low, high = 2 * math.log(got["low"]), 2 * math.log(got["high"])
        walsh = np.sort([(x[i] + x[j]) / 2 for i in range(m) for j in range(i, m)])
        gap = np.diff(walsh).min() / 4
        for centre, kept in ((low + gap, True), (high - gap, True), (low - gap, False), (high + gap, False)):
            p, _ = gatestats.noise_ratio_p(np.ones(m), 2, np.exp(x - centre), 2)
            assert (p > 0.05) == kept, (m, centre)


def test_a_point_without_spread_on_a_side_is_left_out():
    """Identical throughputs on a side (variance 0, or at most NOISE_RATIO_VAR_MIN) make the ratio 0 or infinite:
    the point is left out, whichever side it is, as are NaN variances."""
    va = np.array([1.0, 2.0, 0.5, 3.0, 1.5, 0.7, 0.0, 1.0, 1e-13, np.nan]) * 1e-4
    vb = va * 4
    vb[7] = 0.0
    p, m = gatestats.noise_ratio_p(va, 2, vb, 2)
    assert m == 6 and p == pytest.approx(2 / 64)
    got = gatestats.noise_ratio(va, 2, vb, 2)
    assert got["points"] == 6 and got["ratio"] == pytest.approx(2.0)


@pytest.mark.parametrize("law", ["normal", "t4", "lognormal"])
def test_the_note_fires_in_about_5_percent_of_a_a_comparisons_whatever_the_noise(law):
    """A and B share each point's variance (any law, variances spread 10x): the note's false alarm is the exact
    signed-rank level (<= 4.84% at 20 points), here within 2 Monte Carlo standard errors of 5% at most."""
    trials = 3000
    got = cisim.gate_sweeps(
        np.random.default_rng(71), points=20, r=3, run_sd=0.03, law=law, hetero=math.sqrt(10), trials=trials
    )
    assert got["noise_note"] <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)


def test_the_note_fires_where_b_is_twice_as_noisy():
    """B's sd 2x A's on every point, R = 3, 20 points (docs/benchmarks.md: about 90% Gaussian, 80% lognormal)."""
    for law in ("normal", "lognormal"):
        got = cisim.gate_sweeps(
            np.random.default_rng(72),
            points=20,
            r=3,
            run_sd=0.03,
            law=law,
            hetero=math.sqrt(10),
            b_noise=2.0,
            trials=1000,
        )
        assert got["noise_note"] > 0.7, law


def test_the_estimate_recovers_bs_sd_over_as():
    """B's sd 2x A's on 300 points of R = 3, lognormal noise: the Hodges-Lehmann ratio near 2, its interval on 2."""
    rng = np.random.default_rng(73)
    a, b = (cisim.run_noise(rng, "lognormal", (300, 3)) for _ in range(2))
    got = gatestats.noise_ratio(a.var(axis=1, ddof=1), 2, (2 * b).var(axis=1, ddof=1), 2)
    assert got["differs"] and got["low"] < 2 < got["high"] and got["ratio"] == pytest.approx(2, rel=0.15)


def test_the_quoted_false_alarms_are_the_benchmarks():
    """gatenotes.UNSHARED_NOISE_FALSE_ALARM is what benchmarks/gate_probes.py last wrote into docs/benchmarks.md."""
    text = DOCS.read_text()
    for side, ((low, high), (fa_low, fa_high)) in UNSHARED_NOISE_FALSE_ALARM.items():
        span = f"{low:g}x" if low == high else f"{low:g}-{high:g}x"
        assert f"B's sd {span} A's on every point: {fa_low:.1%}-{fa_high:.1%}" in text, side


# -- compare -------------------------------------------------------------------------------------------------------
POINTS = [("torch", 1), ("ddp", 1), ("ddp", 2), ("ddp", 4), ("ddp", 8), ("horovod-torch", 1), ("horovod-torch", 2)]
POINTS.append(("horovod-torch", 4))
SHIFTS = (-0.2, -0.15, -0.1, -0.05, 0.05, 0.1, 0.15, 0.2)
"""B's log sd over A's per point, less log 3: B's sd 3x A's give or take these, symmetric about 3x."""


def _sweep(store: Store, scale) -> str:
    """R = 3 per point, log throughputs 40 x exp(-s, 0, +s) at s = a point's own sd (1% to 2.75%) times scale[i]."""
    recs = []
    for i, (strategy, n) in enumerate(POINTS):
        s = 0.01 * (1 + i / 4) * scale[i]
        reps = [{"status": "ok", "throughput": 4 * n / 0.1 * math.exp(v)} for v in (-s, 0.0, s)]
        recs.append(point(strategy, n, 0.1, repeats=reps))
    return add_sweep(store, recs)


def _three_times(tmp_path):
    path = tmp_path / "r.db"
    with Store(path) as store:
        sa = _sweep(store, [1.0] * len(POINTS))
        sb = _sweep(store, [3 * math.exp(d) for d in SHIFTS])
        return path, sa, sb, load_sweep(store, sa), load_sweep(store, sb)


def test_compare_says_when_bs_noise_is_not_as(tmp_path, capsys):
    """B's sd 3x A's (8 points, every log ratio above 0; the figures quoted are gatenotes.UNSHARED_NOISE_FALSE_ALARM's): p = 2 / 2^8; the Hodges-Lehmann ratio 3 (the shifts are
    symmetric), its interval the 4th lowest and 4th highest Walsh averages of the shifts (-0.15, +0.15)."""
    path, sa, sb, a, b = _three_times(tmp_path)
    result = compare_sweeps(a, b)
    note = (
        "B's run-to-run noise is about 3.0x A's (sd) across the 8 points with as many repeats in A as in B and some "
        "spread on both (95% CI 2.6-3.5x; Wilcoxon signed-rank on their log variance ratios, p = 0.0078): the gate "
        "pools A's and B's variances, which assumes they share each point's, and with B's sd 1.5-3x A's on every "
        "point its simulated family false alarm was 2.1%-8.4% against the design's 5% (docs/benchmarks.md)"
    )
    assert note in result.notes
    assert result.noise_ratio["sd_ratio"] == pytest.approx(3.0)
    assert result.noise_ratio["ci_low"] == pytest.approx(3 * math.exp(-0.15))
    assert result.noise_ratio["ci_high"] == pytest.approx(3 * math.exp(0.15))
    lines = summary_lines(result)
    assert (
        "run-to-run noise: t on log throughput, Holm over 8 tested point(s) (one-sided for regressions) at a "
        "family-wise 5% (the design level; see the notes)"
    ) in lines
    assert f"note: {note}" in lines
    quieter = compare_sweeps(b, a)  # A noisier: B's sd about a third of A's, the quieter side's figures
    assert any(
        n.startswith("B's run-to-run noise is about 0.33x A's (sd) across the 8 points")
        and n.endswith(
            "with B's sd 0.5x A's on every point its simulated family false alarm was 1.1%-5.2% against the "
            "design's 5% (docs/benchmarks.md)"
        )
        for n in quieter.notes
    )
    assert main(["compare", sa, sb, "--results", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # lines wrap at the width
    assert "note: B's run-to-run noise is about 3.0x A's (sd) across the 8 points" in out
    assert "at a family-wise 5% (the design level; see the notes)" in out
    assert main(["compare", sa, sb, "--results", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert note in doc["notes"] and doc["noise_ratio"]["differs"] is True and doc["noise_ratio"]["points"] == 8
    assert doc["noise_ratio"]["p_value"] == pytest.approx(2 / 256)


def test_compare_says_nothing_where_the_noise_is_shared(tmp_path):
    """B's sd A's give or take the same shifts (log ratios symmetric about 0): no note, the plain 5% line."""
    path = tmp_path / "r.db"
    with Store(path) as store:
        a = load_sweep(store, _sweep(store, [1.0] * len(POINTS)))
        b = load_sweep(store, _sweep(store, [math.exp(d) for d in SHIFTS]))
    result = compare_sweeps(a, b)
    assert not [n for n in result.notes if "run-to-run noise is about" in n]
    assert result.noise_ratio["differs"] is False and result.noise_ratio["sd_ratio"] == pytest.approx(1.0)
    [line] = [x for x in summary_lines(result) if x.startswith("run-to-run noise:")]
    assert line.endswith("at a family-wise 5%")
    assert re.search(r"Holm over 8 tested point\(s\)", line)


def _spread_sweep(store: Store, sds, *, ones=(), nan_at=()) -> str:
    """R = 3 per point (one where i in `ones`), log throughputs 40 x exp(-s, 0, +s) at s = sds[i]; a NaN first
    repeat where i in `nan_at`."""
    recs = []
    for i, ((strategy, n), s) in enumerate(zip(POINTS, sds)):
        reps = [{"status": "ok", "throughput": 4 * n / 0.1 * math.exp(v)} for v in (-s, 0.0, s)]
        if i in nan_at:
            reps[0]["throughput"] = math.nan
        recs.append(point(strategy, n, 0.1, repeats=reps[:1] if i in ones else reps))
    return add_sweep(store, recs)


@pytest.mark.parametrize(
    ("case", "a", "b", "counted"),
    [
        ("A deterministic, B noisy", {"sds": [0.0] * 8}, {"sds": [0.03] * 8}, 0),
        ("both deterministic", {"sds": [0.0] * 8}, {"sds": [0.0] * 8}, 0),
        ("half of A deterministic", {"sds": [0.0] * 4 + [0.01] * 4}, {"sds": [0.03] * 8}, 4),
        ("fewer than 6 points", {"sds": [0.01] * 5}, {"sds": [0.03] * 5}, 5),
        ("repeats in A at 3 points", {"sds": [0.01] * 8, "ones": range(3, 8)}, {"sds": [0.03] * 8}, 3),
        ("a NaN repeat in B at 3 points", {"sds": [0.01] * 8}, {"sds": [0.03] * 8, "nan_at": range(3)}, 5),
    ],
)
def test_compare_says_nothing_it_cannot_back(tmp_path, case, a, b, counted):
    """Points left out of the noise test (no spread on a side, R unequal after a failed repeat, R = 1) leave
    fewer than 6: no note, the plain 5% line, the JSON's counts right, no traceback (B's sd 3x A's where both
    have spread, so a note from the zeros' made-up ratios or from too few points would be wrong)."""
    with Store(tmp_path / "r.db") as store:
        sa, sb = load_sweep(store, _spread_sweep(store, **a)), load_sweep(store, _spread_sweep(store, **b))
    result = compare_sweeps(sa, sb)
    assert not [n for n in result.notes if "run-to-run noise is about" in n], case
    assert result.noise_ratio["points"] == counted and result.noise_ratio["differs"] is False
    assert (result.noise_ratio["sd_ratio"] is None) == (counted == 0)
    assert result.noise_ratio["ci_low"] is None and result.noise_ratio["ci_high"] is None
    [line] = [x for x in summary_lines(result) if x.startswith("run-to-run noise:")]
    assert line.endswith("at a family-wise 5%")

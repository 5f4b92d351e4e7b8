"""`distbench compare`: batch-means and record-based CIs of the throughput ratio, regression flagging only
beyond the noise and the threshold, unmatched points, and the CLI's exit codes (a CI gate)."""

from __future__ import annotations

import json
import math

import random

import pytest

from distbench import analysis as an
from distbench.analysis import load_sweep
from distbench.cli import main
from distbench.compare import RegressionFound, compare_sweeps, gate, judge, parse_threshold
from distbench.errors import BadInput
from distbench.store import Store
from tests.test_report import add_sweep, point


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


# -- flagging ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ratio,ci,verdict",
    [
        (0.80, (0.78, 0.82), "regression"),
        (1.20, (1.18, 1.22), "improvement"),
        (0.98, (0.97, 0.99), "below threshold"),  # beyond the noise but smaller than 5%
        (0.90, (0.70, 1.10), "within noise"),  # larger than 5% but the CI includes 1
        (0.80, None, "no CI"),
    ],
)
def test_judge(ratio, ci, verdict):
    assert judge(ratio, ci, 0.05) == verdict


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


NOISY = [0.11 * (0.2 + 1.6 * u) for u in (lambda rng: [rng.random() for _ in range(200)])(random.Random(7))]
"""200 steps around 0.11 s with CV ~50%: a 9% change cannot be told from the noise."""


def _pair(tmp_path, extra_b=()):
    a = [
        point("torch", 1, 0.1),
        point("ddp", 2, 0.1),
        point("ddp", 4, 0.1),
        point("horovod-torch", 2, 0.1),
        point("ddp", 8, 0.1),
    ]
    b = [
        point("torch", 1, 0.1),
        point("ddp", 2, 0.125),  # -20%: regression
        point("ddp", 4, 0.098),  # +2%: beyond the noise, under the threshold
        point("horovod-torch", 2, times=NOISY),  # -9% but noisy: within noise
        point("mirrored", 2, 0.1, framework="tf"),
        *extra_b,
    ]
    path = tmp_path / "r.db"
    with Store(path) as store:
        sa, sb = add_sweep(store, a), add_sweep(store, b)
        return path, sa, sb, load_sweep(store, sa), load_sweep(store, sb)


def test_compare_flags_only_beyond_noise_and_threshold(tmp_path):
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
    assert reg.ratio == pytest.approx(0.8) and reg.ci[1] < 1 and reg.ci_method == "batch means"
    assert [k[:2] for k in result.only_a] == [("ddp", 8)]
    assert [k[:2] for k in result.only_b] == [("mirrored", 2)]
    assert [p.key[:2] for p in result.regressions] == [("ddp", 2)]
    # a 25% threshold: the 20% drop is real but not large enough to flag
    assert not compare_sweeps(a, b, threshold=0.25).regressions


def test_compare_uses_record_cis_and_failures_count_as_regressions(tmp_path):
    a = [
        point("ddp", 2, 0.1, throughput_ci_low=78.0, throughput_ci_high=82.0),
        point("ddp", 4, 0.1),
        point("ddp", 8, status="failed", reason="oom-ish"),
    ]
    b = [
        point("ddp", 2, 0.1, throughput_ci_low=70.0, throughput_ci_high=90.0),
        point("ddp", 4, status="timeout", reason="killed after 900 s"),
        point("ddp", 8, 0.1),
    ]
    with Store(tmp_path / "r.db") as store:
        sa, sb = add_sweep(store, a), add_sweep(store, b)
        result = compare_sweeps(load_sweep(store, sa), load_sweep(store, sb))
    by = {p.key[1]: p for p in result.points}
    assert by[2].ci_method == "records" and by[2].verdict == "within noise"
    assert by[4].verdict == "failed in B" and by[4].note == "timeout: killed after 900 s"
    assert by[8].verdict == "fixed in B"
    assert [p.key[1] for p in result.regressions] == [4]


def test_too_few_steps_are_never_flagged(tmp_path):
    with Store(tmp_path / "r.db") as store:
        sa = add_sweep(store, [point("ddp", 2, 0.1, steps=3)])
        sb = add_sweep(store, [point("ddp", 2, 0.2, steps=3)])
        [p] = compare_sweeps(load_sweep(store, sa), load_sweep(store, sb)).points
    assert p.verdict == "no CI" and p.note == "too few steps (3 < 150): not flagged"


# -- CLI ---------------------------------------------------------------------------------------------------
def _run(capsys, args):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compare_cli_exit_1_on_regression_else_0(capsys, tmp_path):
    path, sa, sb, _, _ = _pair(tmp_path)
    code, out, err = _run(capsys, ["compare", sa, sb, "--results", str(path)])
    assert code == 1, err
    assert err == (f"Error: 1 regression(s) in {sb} vs {sa} beyond the noise and the 5.0% threshold: ddp N=2\n")
    assert "regression" in out and "only in A (unmatched): ddp N=8 resnet50 batch=4 weak" in out
    assert "1 regression(s), 0 improvement(s) beyond the noise and the 5.0% threshold, over 4 matched point(s)" in out
    code, out, _ = _run(capsys, ["compare", sa, sb, "--results", str(path), "--threshold", "25%"])
    assert code == 0
    code, out, _ = _run(capsys, ["compare", sa, "latest", "--results", str(path), "--format", "json"])
    assert code == 1
    doc = json.loads(out)
    assert doc["sweep_b"] == sb and doc["regressions"] == 1 and doc["threshold"] == 0.05
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


def test_compare_cli_across_two_stores(capsys, tmp_path):
    with Store(tmp_path / "a.db") as store:
        sa = add_sweep(store, [point("ddp", 2, 0.1)])
    with Store(tmp_path / "b.db") as store:
        add_sweep(store, [point("ddp", 2, 0.0999)])
    code, out, err = _run(
        capsys, ["compare", sa, "latest", "--results", str(tmp_path / "a.db"), "--results-b", str(tmp_path / "b.db")]
    )
    assert code == 0, err
    assert "0 regression(s)" in out


def test_compare_cli_errors(capsys, tmp_path):
    with Store(tmp_path / "r.db") as store:
        sa = add_sweep(store, [point("ddp", 2, 0.1)])
        sb = add_sweep(store, [point("ddp", 2, 0.1, model="resnet18")])
    code, _, err = _run(capsys, ["compare", sa, sb, "--results", str(tmp_path / "r.db")])
    assert code == 2
    assert err == (
        f"Error: no points of {sa} and {sb} match: their workloads differ (model resnet50 in A, "
        "resnet18 in B): nothing to compare\n"
    )
    code, out, err = _run(capsys, ["compare", sa, "nope", "--results", str(tmp_path / "r.db")])
    assert code == 2 and out == ""
    assert err == f"Error: unknown sweep 'nope'; recent sweeps: {sb}, {sa}\n"
    code, _, err = _run(capsys, ["compare", sa, sb, "--results", str(tmp_path / "r.db"), "--threshold", "5"])
    assert code == 2
    assert err == "Error: --threshold '5' is ambiguous: write 5% for a percentage or a fraction below 1\n"


# -- the whole workload is the key -------------------------------------------------------------------------
def _ci(thr: float) -> dict:
    """A record CI of +-1% (the 'records' method: no dependence on step counts)."""
    return {"throughput_ci_low": thr * 0.99, "throughput_ci_high": thr * 1.01}


def test_points_at_the_same_n_on_other_nodes_are_separate_points(tmp_path):
    a = [point("ddp", 8, 0.1, **_ci(320.0)), point("ddp", 8, 0.1, nodes=2, **_ci(320.0))]
    b = [point("ddp", 8, 0.1, **_ci(320.0)), point("ddp", 8, 0.2, nodes=2, **_ci(160.0))]
    with Store(tmp_path / "r.db") as store:
        sa, sb = add_sweep(store, a), add_sweep(store, b)
        result = compare_sweeps(load_sweep(store, sa), load_sweep(store, sb))
    verdicts = {(p.key.world_size, p.key.nodes): p.verdict for p in result.points}
    assert verdicts == {(8, 1): "within noise", (8, 2): "regression"}  # not one point where the later wins
    assert [p.to_json()["nodes"] for p in result.regressions] == [2]
    with pytest.raises(RegressionFound) as exc:
        gate(result)
    assert str(exc.value).endswith("threshold: ddp (2 nodes) N=8")


def test_workloads_that_differ_are_listed_apart_not_compared(tmp_path, capsys):
    a = [point("ddp", 2, 0.1, **_ci(80.0)), point("ddp", 4, 0.1, **_ci(160.0))]
    b = [
        point("ddp", 2, 0.05, config={"precision": "bf16", "image_size": 128}, **_ci(160.0)),
        point("ddp", 4, 0.1, **_ci(160.0)),
    ]
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
    assert code == 0
    assert (
        "not compared, the workloads differ: ddp N=2 resnet50 batch=4 weak: image_size 224 in A, 128 in B; "
        "precision fp32 in A, bf16 in B"
    ) in out
    assert "compared workload: model resnet50, device cpu, scaling weak, image_size 224" in out

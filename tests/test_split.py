"""The three-term split of a step (distbench.results.split): communication = A - T, straggler wait = T - B,
compute = B, window means throughout, with CIs; who the stragglers are; the in-process run order."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from distbench.results import split
from distbench.workers.common import is_tiny, lift_allreduce, segment_configs
from tests.builders import point_config
from tests.conftest import require


def _run(times: list[float], window: float | None = None) -> dict:
    return {"step_times_s": times, "time_per_step_s": (window or sum(times)) / len(times)}


def _ranks(rng: random.Random, steps: int, ranks: int, cv: float, mean: float = 0.1) -> list[list[float]]:
    """Per-rank step times of independent replicas (AR(1) phi 0.3, like issue 20's simulation)."""
    out = []
    for _ in range(ranks):
        x, series = 0.0, []
        for _ in range(steps):
            x = 0.3 * x + rng.gauss(0, cv * (1 - 0.09) ** 0.5)
            series.append(mean * (1 + x))
        out.append(series)
    return out


def test_zero_communication_is_split_into_wait_not_communication():
    """Issue 20 item 1: with no bytes moved, sync - no-sync is the wait for the slowest rank. A: each step
    as long as its slowest rank; T: the same with a tiny collective (no cost here); B: the slowest rank's
    own pace. Communication comes out ~0, the wait carries the difference."""
    rng = random.Random(1)
    reps = []
    for _ in range(3):
        a, t, b = (_ranks(rng, 600, 4, cv=0.05) for _ in range(3))
        sync_a, sync_t = ([max(s) for s in zip(*x)] for x in (a, t))
        own_b = max(b, key=sum)
        reps.append({"A": [_run(sync_a)], "T": [_run(sync_t)], "B": [_run(own_b)]})
    out = split.three_terms(reps)
    assert out["communication_ci"][0] <= 0 <= out["communication_ci"][1]
    assert abs(out["communication_share"]) < 0.01
    assert out["wait_ci"][0] > 0 and out["wait_share"] > 0.03  # what exposed comm used to call communication
    assert out["communication_s"] + out["wait_s"] + out["compute_s"] == pytest.approx(out["step_s"])
    assert out["ci_scope"] == "run-to-run (paired t over 3 repeats)"
    # every repeat's value is kept, and the paired t is over exactly those
    for name in ("communication", "wait", "compute"):
        values = out[f"{name}_per_repeat"]
        assert len(values) == 3 and sum(values) / 3 == pytest.approx(out[f"{name}_s"])
    assert [sum(x) for x in zip(*(out[f"{k}_per_repeat"] for k in ("communication", "wait", "compute")))] == (
        pytest.approx([r["A"][0]["time_per_step_s"] for r in reps])
    )


def test_one_repeat_gets_within_run_welch_cis_from_window_means():
    rng = random.Random(2)
    steps = {
        k: [m * (1 + 0.03 * rng.gauss(0, 1)) for _ in range(300)] for k, m in (("A", 0.12), ("T", 0.11), ("B", 0.1))
    }
    # the window mean differs from the step mean (e.g. stopping checks): the window mean is what counts
    reps = [{k: [_run(v, window=sum(v) * 1.01)] for k, v in steps.items()}]
    out = split.three_terms(reps, tiny_calls=300)
    mean = {k: sum(v) * 1.01 / 300 for k, v in steps.items()}
    assert out["communication_s"] == pytest.approx(mean["A"] - mean["T"])
    assert out["compute_s"] == pytest.approx(mean["B"])
    assert out["ci_scope"] == split.WITHIN_RUN_SCOPE and "windows taken as independent" in out["ci_scope"]
    for name in ("communication", "wait", "compute"):
        lo, hi = out[f"{name}_ci"]
        assert lo < out[f"{name}_s"] < hi
    assert out["tiny_collective_calls"] == 300
    assert out["statistic"].startswith("window mean")


def test_a_variant_run_twice_counts_as_the_mean_of_its_runs_and_short_runs_have_no_ci():
    reps = [{"A": [_run([0.3] * 10), _run([0.34] * 10)], "T": [_run([0.28] * 10)], "B": [_run([0.26] * 10)]}]
    out = split.three_terms(reps)
    assert out["step_s"] == pytest.approx(0.32) and out["communication_s"] == pytest.approx(0.04)
    assert out["communication_ci"] is None and out["ci_scope"].startswith("no CI: a within-run CI needs")


def test_stragglers_per_rank():
    # rank 1 is slowest on steps 0 and 1 by 30 ms, rank 0 on step 2 by 10 ms
    per_rank = [[0.10, 0.10, 0.12], [0.13, 0.13, 0.11]]
    out = split.stragglers([per_rank], "test")
    r0, r1 = out["ranks"]
    assert r1["slowest_share"] == pytest.approx(2 / 3) and r0["slowest_share"] == pytest.approx(1 / 3)
    assert r1["others_wait_s"] == pytest.approx(0.06 / 3) and r0["others_wait_s"] == pytest.approx(0.01 / 3)
    assert r0["own_wait_s"] == pytest.approx(0.06 / 3) and r1["own_wait_s"] == pytest.approx(0.01 / 3)
    assert out["mean_wait_s"] == pytest.approx(0.07 / 6) and out["steps"] == 3
    # rank 1's steady lead (mean 0.1233 vs 0.1067: 0.0083 over the ranks' mean) is wait, the rest jitter
    assert out["pace_gap_s"] == pytest.approx((0.37 - 0.32) / 3 / 2)
    assert out["jitter_wait_s"] == pytest.approx(0.07 / 6 - 0.05 / 6) and out["skipped_runs"] == 0
    assert split.stragglers([[[0.1, 0.1]]], "one rank") is None
    line = split.split_line(
        {
            "stragglers": out,
            "comm_split": {
                "step_s": 0.12,
                "compute_s": 0.1,
                "compute_ci": [0.09, 0.11],
                "wait_s": 0.012,
                "wait_ci": None,
                "communication_s": 0.008,
                "communication_ci": [0.003, 0.013],
            },
        }
    )
    assert line == (
        "mean step 120.0 ms = compute 100.0 ms [90.0, 110.0] + straggler wait 12.0 ms + communication 8.0 ms "
        "[3.0, 13.0]; "
        "rank 1 slowest in 67% of steps, the others would wait 20.0 ms per step on it (at the no-sync pace); "
        "stragglers explain 11.7 ms of the wait (steady pace gap 8.3 ms, jitter 3.3 ms), the rest is meeting once "
        "per step"
    )


def test_segment_order_marks_the_tiny_variant_and_only_the_first_run_is_adaptive():
    cfg = point_config("ddp", 2, target_ci=0.02, measure_comm=True)
    segs = segment_configs(dataclasses.replace(cfg, nosync_order="ATBTA"))
    assert [x for x, _ in segs] == list("ATBTA")
    first, *rest = (c for _, c in segs)
    assert first.target_ci == 0.02 and first.sync and not is_tiny(first)
    assert all(c.target_ci == 0.0 and c.nosync_order is None for c in rest)
    # the standalone all-reduce after the closing A only: no gap on one side of the order
    assert [c.measure_comm for _, c in segs] == [False, False, False, False, True]
    assert [c.measure_comm for _, c in segment_configs(dataclasses.replace(cfg, nosync_order="AB"))] == [
        True,
        False,
    ]
    assert [c.sync for c in rest] == [False, False, False, True]
    assert [is_tiny(c) for c in rest] == [True, False, True, False]
    assert segment_configs(cfg) == [("A", cfg)]
    for bad in ("TB", "AXB"):
        with pytest.raises(ValueError, match="nosync_order must be None or runs A/T/B"):
            point_config("ddp", 2, nosync_order=bad)


def test_comm_breakdown_uses_the_headline_window_mean_like_comm_overhead():
    """exposed_comm_s is a difference of window means, so the step it is taken out of is a window mean too, never
    the median; and it is the headline step (the opening A's) even where a split averages the opening and closing
    A: the report's comm table shows step, exposed comm and comm overhead side by side on one denominator."""
    from distbench import analysis as an

    rec = {"time_per_step_s": 0.2, "step_time_median_s": 0.15, "exposed_comm_s": 0.05, "allreduce_s": 0.05}
    b = an.comm_breakdown(rec)
    assert b["step_s"] == pytest.approx(0.2) and b["compute_only_s"] == pytest.approx(0.15)
    b = an.comm_breakdown({**rec, "comm_overhead": 0.25, "comm_split": {"step_s": 0.25}})
    assert b["step_s"] == pytest.approx(0.2) and b["step_s"] * b["comm_overhead"] == pytest.approx(b["exposed_s"])


def test_summary_lines_name_the_three_terms_and_the_straggler():
    from distbench import analysis as an

    split_rec = {
        "status": "ok",
        "strategy": "ddp",
        "world_size": 2,
        "comm_split": {
            "step_s": 0.01,
            "compute_s": 0.006,
            "compute_ci": None,
            "wait_s": 0.003,
            "wait_share": 0.3,
            "wait_ci": None,
            "communication_s": 0.001,
            "communication_share": 0.1,
            "communication_ci": None,
            "ci_scope": "no CI: too short",
        },
    }
    other = {"status": "ok", "strategy": "fabric", "world_size": 2, "split_note": "no tiny-collective variant"}
    lines = an.split_lines([split_rec, other, {**other, "world_size": 1}])
    assert lines == [
        "ddp N=2: mean step 10.0 ms = compute 6.0 ms + straggler wait 3.0 ms + communication 1.0 ms "
        "(no CI: too short).",
        "fabric N=2: no three-term split: no tiny-collective variant.",
    ]
    drifted = an.split_lines([{**split_rec, "sync_after_variant_ratio": 1.45}])[0]
    assert drifted.endswith(
        "ran at 1.45x its first throughput: the machine's pace moved within the point; "
        "A T B T A cancels a steady trend, not this."
    )
    assert an.split_lines([{**split_rec, "sync_after_variant_ratio": 0.95}]) == lines[:1]
    causes, _ = an.limiting_factors(split_rec)
    assert "straggler wait term, the slowest rank plus one few-byte collective's latency per step, is 30%" in causes[0]
    assert not any(c.startswith("communication") for c in causes)  # 10%: below COMM_LARGE


def test_report_has_a_stacked_bar_and_a_table_row_per_split_point(tmp_path):
    from distbench.analysis import load_sweep
    from distbench.report import plots, tables
    from distbench.results.record import base_record
    from distbench.results.store import Store

    r = base_record({"world_size": 2, "per_device_batch": 4}, strategy="ddp", framework="torch", status="ok")
    r.update(step_times_s=[0.01] * 5, throughput=800.0, time_per_step_s=0.01)
    r["comm_split"] = {
        "step_s": 0.01,
        "compute_s": 0.006,
        "compute_ci": [0.0055, 0.0065],
        "wait_s": 0.003,
        "wait_ci": None,
        "communication_s": -0.0002,
        "communication_ci": [-0.001, 0.0006],
        "ci_scope": "run-to-run (paired t over 3 repeats)",
    }
    r["stragglers"] = split.stragglers([[[0.1, 0.1, 0.12], [0.13, 0.13, 0.11]]], "test")
    with Store(tmp_path / "r.db") as store:
        sid = store.start_sweep(command="distbench scale", version="0", git_sha=None, env={}, options={}, notes=[])
        store.add_point(sid, r)
        store.finish_sweep(sid, "complete")
        sweep = load_sweep(store, sid)
    headers, rows = tables.split_rows(sweep)
    assert headers[3:6] == ["compute (ms)", "straggler wait (ms)", "communication (ms)"]
    assert rows == [
        [
            "ddp",
            "2",
            "10.00",
            "6.00 [5.50, 6.50]",
            "3.00",
            "-0.20 [-1.00, 0.60] (below 0 is within noise of 0: its 95% CI includes 0)",
            "rank 1: 67% of steps, 20.00 ms",
            "run-to-run (paired t over 3 repeats)",
        ]
    ]
    fig = plots.plot_split(sweep, plots._colors(), "t")
    bars = [v for p in fig.axes[0].patches for v in (p.get_y(), p.get_height())]
    # compute, wait, communication (0 above 0), then communication's -0.2 hatched down from the top: the solid
    # part ends at the terms' sum, 8.8 ms, not at 9.0
    assert bars == pytest.approx([0.0, 6.0, 6.0, 3.0, 9.0, 0.0, 8.8, 0.2])
    assert headers[2] == "mean step (ms)"
    line = split.split_line(r)
    assert line.startswith(
        "mean step 10.0 ms = compute 6.0 ms [5.5, 6.5] + straggler wait 3.0 ms + communication -0.2 ms [-1.0, 0.6] "
        "(communication below 0 is within noise of 0: its 95% CI includes 0)"
    )


def test_a_split_term_below_zero_is_never_shown_without_what_it_means():
    assert split.below_zero_phrase(0.0, None) is None and split.below_zero_phrase(0.001, [-1.0, 1.0]) is None
    assert split.below_zero_note("wait", -0.006, None) == (
        "straggler wait below 0 with no CI to judge it, too few steps: read it as 0 within unmeasured noise"
    )
    assert split.below_zero_note("wait", -0.0684, [-0.09, -0.05]) == (
        "straggler wait below 0 beyond its 95% CI: the machine's pace moved between the runs, so this split is "
        "not reliable"
    )
    rec = {
        "comm_split": {
            "step_s": 0.4169,
            "compute_s": 0.4421,
            "compute_ci": None,
            "wait_s": -0.0684,
            "wait_ci": None,
            "communication_s": 0.0431,
            "communication_ci": None,
        }
    }
    line = split.split_line(rec)
    assert (
        "straggler wait ≈0 ms (-68.4 measured, no CI) + communication 43.1 ms (straggler wait below 0 with no CI"
        in line
    )
    assert not re.findall(r"-\d+\.\d ms", line)  # no term is shown as a bare negative
    for value in re.findall(r"-\d+\.\d", line):  # every negative figure in the line has its phrase
        assert "below 0" in line.split(value, 1)[1]


def test_a_term_below_zero_with_no_ci_is_shown_as_about_zero_with_what_it_measured():
    assert split.term_text(-0.006, None) == "≈0 ms (-6.0 measured, no CI)"
    assert split.term_text(-0.006, [-0.01, 0.002]) == "-6.0 ms [-10.0, 2.0]"
    assert split.term_text(0.012, None, digits=2) == "12.00 ms"


def test_a_comm_overhead_below_zero_is_about_zero_with_its_ci_in_the_legend(tmp_path):
    """comm_overhead is the split's communication term / the headline step, so it can measure below 0: the
    results table and the report's Communication table show '≈0' and a legend line gives what it measured and
    where its CI is, never a bare '-8%'."""
    from rich.console import Console

    from distbench.analysis import load_sweep
    from distbench.analysis.output import DEFAULT_COLUMNS, legend_lines, results_table
    from distbench.report.tables import comm_legend, comm_rows
    from distbench.results.store import Store
    from tests.builders import add_sweep, point

    rec = point("ddp", 2, 0.100, allreduce_s=0.02)
    rec.update(exposed_comm_s=-0.008, comm_overhead=-0.08, exposed_comm_ci_low=-0.02, exposed_comm_ci_high=0.004)
    assert split.overhead_below_zero(rec) == "-8% measured, 95% CI [-20%, 4%]: within noise of 0"
    assert split.overhead_below_zero({**rec, "exposed_comm_ci_high": -0.001}).endswith(
        "beyond its CI, the machine's pace moved between the runs"
    )
    assert "no CI" in split.overhead_below_zero({**rec, "exposed_comm_ci_low": None})
    assert split.overhead_below_zero({**rec, "comm_overhead": 0.05}) is None
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, [point("torch", 1, 0.1), rec]))
    headers, rows = comm_rows(sweep)
    [row] = [r for r in rows if r[0].startswith("ddp")]
    assert row[headers.index("comm overhead")] == "≈0"
    assert comm_legend(sweep) == (
        "comm overhead ≈0 = the communication term measured below 0 (a time cannot be negative): ddp N=2: -8% "
        "measured, 95% CI [-20%, 4%]: within noise of 0"
    )
    console = Console(width=200, record=True)
    console.print(results_table(sweep.points, columns=DEFAULT_COLUMNS))
    text = console.export_text()
    assert "≈0" in text and "-8%" not in text
    legend = legend_lines(sweep.points, list(DEFAULT_COLUMNS))
    assert any("ddp N=2: -8% measured, 95% CI [-20%, 4%]" in line for line in legend)
    assert not any("measured below 0" in line for line in legend_lines(sweep.points, ["strategy", "N", "status"]))


def test_deepspeed_amp_points_say_they_are_not_like_for_like():
    """Issue 20 item 5: deepspeed-zero* under --precision amp is DeepSpeed's fp16 mode (half the gradient
    bytes): every label of such a point says so, and the summary says why."""
    from distbench import analysis as an
    from distbench.workers.deepspeed_zero import AMP_NOTE, ds_config

    cfg = point_config("deepspeed-zero2", 2, device="cuda")
    assert "fp16" not in ds_config(cfg, 2)
    assert ds_config(dataclasses.replace(cfg, precision="amp"), 2)["fp16"]["enabled"] is True
    rec = {"strategy": "deepspeed-zero2", "world_size": 2, "precision_note": AMP_NOTE}
    assert an.point_name(rec) == "deepspeed-zero2 (fp16 weights and communication) N=2"
    assert "not like-for-like" in AMP_NOTE


def test_straggler_wait_splits_into_a_steady_pace_gap_and_jitter():
    """A rank that is steadily slower is a wait of the others in the split (compute is the ranks' mean pace):
    its lead is pace_gap_s, not jitter; with no jitter the whole per-rank wait is that gap. A run whose ranks measured
    different step counts cannot be aligned by index: left out and counted, never silently truncated."""
    steady = [[0.10] * 4, [0.12] * 4]
    out = split.stragglers([steady, [[0.1] * 3, [0.1] * 4]], "test")
    assert out["steps"] == 4 and out["skipped_runs"] == 1
    assert out["pace_gap_s"] == pytest.approx(0.01) and out["jitter_wait_s"] == pytest.approx(0.0, abs=1e-12)
    assert out["ranks"][1]["slowest_share"] == 1.0 and out["ranks"][1]["others_wait_s"] == pytest.approx(0.02)
    # equal paces, alternating slow steps: no gap, all jitter
    jitter = split.stragglers([[[0.1, 0.12] * 50, [0.12, 0.1] * 50]], "test")
    assert jitter["pace_gap_s"] == pytest.approx(0.0, abs=1e-12) and jitter["jitter_wait_s"] == pytest.approx(0.01)


def test_a_wait_that_is_mostly_collective_latency_is_not_called_stragglers():
    """Measured here (ddp N=2, 'linear' model, R=5, 2026-11-25): step 1.67 ms = compute 0.24 + wait 1.56 +
    communication -0.13 ms, while the ranks' jitter at their own pace explains 0.07 ms of the wait: the wait
    term is the tiny collective's latency, and the limiting factor must say so, not blame stragglers."""
    from distbench import analysis as an

    rec = {
        "world_size": 2,
        "comm_split": {"step_s": 1.67e-3, "wait_s": 1.56e-3, "wait_share": 1.56 / 1.67, "communication_share": -0.08},
        "stragglers": {"jitter_wait_s": 0.074e-3},
    }
    causes = an.wait_causes(rec, 2)
    assert len(causes) == 1 and causes[0].startswith("synchronization latency (meeting once per step")
    assert "beyond the stragglers' 4%" in causes[0]
    # jitter that is most of the wait: stragglers named, the small latency rest not
    rec["stragglers"]["jitter_wait_s"] = 1.4e-3
    assert [c.split(" (")[0] for c in an.wait_causes(rec, 2)] == ["stragglers"]
    # no per-rank step times (mirrored: one process): the term named as both
    del rec["stragglers"]
    assert an.wait_causes(rec, 2)[0].startswith("stragglers or synchronization latency")


def test_the_closing_runs_all_reduce_figures_belong_to_the_point():
    extra = {"stopping": {"window": [1.0, 2.0]}}
    segments = [
        {"variant": "T", "stopping": {"window": [3.0, 4.0]}},
        {"variant": "A", "allreduce_s": 0.01, "allreduce_samples_s": [0.01], "stopping": {"allreduce_window": [9, 10]}},
    ]
    lift_allreduce(extra, segments)
    assert extra["allreduce_s"] == 0.01 and extra["allreduce_samples_s"] == [0.01]
    assert extra["stopping"]["allreduce_window"] == [9, 10]
    assert "allreduce_s" not in segments[1] and "allreduce_window" not in segments[1]["stopping"]


# -- one meaning of communication (issue 34) ----------------------------------------------------------------
def _abt(a: float, t: float, b: float, per_rank_b=None, steps: int = 200) -> list[dict]:
    run_b = _run([b] * steps)
    if per_rank_b:
        run_b["per_rank_step_times_s"] = per_rank_b
    return [{"A": [_run([a] * steps)], "T": [_run([t] * steps)], "B": [run_b]}]


def test_exposed_comm_overhead_and_overlap_come_from_the_communication_term_not_the_wait():
    """Issue 34's example: A = 120, T = 112, B = 100 ms, all-reduce 20 ms: communication 8 ms (60% of the
    all-reduce hidden) plus a wait of 12 ms; exposed comm was A - B = 20 ms, overlap 0%."""
    out = split.three_terms(_abt(0.120, 0.112, 0.100))
    fields = split.comm_fields(out, 0.020)
    assert fields["exposed_comm_s"] == pytest.approx(0.008)
    assert fields["comm_overhead"] == pytest.approx(0.008 / 0.120)
    assert fields["overlap"] == pytest.approx(0.60)
    assert out["wait_s"] == pytest.approx(0.012) and out["compute_s"] == pytest.approx(0.100)


def test_stored_records_with_a_minus_b_are_read_with_the_split_s_communication(tmp_path):
    """A record stored before the fix (exposed_comm_s = A - B = 20 ms beside its split) is read with the
    split's 8 ms everywhere: the comm table, and the CSV/JSON export, which so no longer counts the wait
    twice (predict --csv reads it)."""
    from distbench.analysis import load_sweep
    from distbench.analysis.export import points_frame
    from distbench.report.tables import comm_rows
    from distbench.results.store import Store
    from tests.builders import add_sweep, point

    comm_split = split.three_terms(_abt(0.120, 0.112, 0.100))
    rec = point("ddp", 2, 0.120, comm_split=comm_split, allreduce_s=0.020)
    rec.update(exposed_comm_s=0.020, comm_overhead=0.020 / 0.120, overlap=0.0, overlap_raw=0.0)  # A - B, as stored
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, [point("torch", 1, 0.1), rec]))
    [ddp] = [r for r in sweep.points if r["strategy"] == "ddp"]
    assert ddp["exposed_comm_s"] == pytest.approx(0.008) and ddp["overlap"] == pytest.approx(0.6)
    frame = points_frame(sweep).set_index("strategy")
    assert frame.loc["ddp", "exposed_comm_s"] == pytest.approx(0.008)
    assert frame.loc["ddp", "comm_overhead"] == pytest.approx(0.008 / 0.120)
    headers, rows = comm_rows(sweep)
    [row] = [r for r in rows if r[0].startswith("ddp")]
    assert row[headers.index("exposed comm (ms)")] == "8.0" and row[headers.index("overlap")] == "60%"


def test_a_persistently_slow_rank_is_wait_not_compute():
    """Issue 34: ranks at 100 and 110 ms with no jitter: compute is their mean pace, 105 ms; the wait T - 105 =
    5 ms (T = 110 ms: the tiny collective's latency taken as 0 here); it used to be compute 110 ms + wait 0."""
    per_rank = [[0.100] * 200, [0.110] * 200]
    out = split.three_terms(_abt(0.115, 0.110, 0.110, per_rank_b=per_rank))
    assert out["compute_s"] == pytest.approx(0.105)
    assert out["wait_s"] == pytest.approx(0.005)
    assert out["communication_s"] == pytest.approx(0.005)
    assert out["compute_s"] + out["wait_s"] + out["communication_s"] == pytest.approx(out["step_s"])
    info = split.stragglers([per_rank], "test")
    line = split.split_line({"comm_split": out, "stragglers": info})
    assert "stragglers explain 5.0 ms of the wait (steady pace gap 5.0 ms, jitter 0.0 ms)" in line


@pytest.mark.slow
@require("torch")
def test_headline_step_times_overhead_is_the_communication_term_on_a_real_ddp_point(tmp_path):
    """One denominator: a real ddp N=2 point (A T B T A in one process tree, the first A sized by its pilot within
    --max-time 4 s): the headline time per step (the opening A's, what the throughput is from) x comm_overhead is
    the split's communication term (within 2%), as stored and as read back (split.with_split_comm)."""
    from distbench.core.strategies import STRATEGIES
    from distbench.kinds.measure import measure_point
    from distbench.run.plan import PlannedPoint
    from tests.builders import tiny_config

    cfg = tiny_config("ddp", 2, steps=10, warmup=2, target_ci=0.02, max_time_s=4, measure_comm=True)
    record = measure_point(PlannedPoint(STRATEGIES["ddp"], cfg), tmp_path, timeout_s=300)
    assert record["status"] == "ok", record.get("reason")
    comm = record["comm_split"]["communication_s"]
    assert record["time_per_step_s"] * record["comm_overhead"] == pytest.approx(comm, rel=0.02)
    assert record["sync_after_variant_ratio"] is not None  # the closing A, which the split's step also averages
    read = split.with_split_comm(record)
    assert read["time_per_step_s"] * read["comm_overhead"] == pytest.approx(comm, rel=0.02)

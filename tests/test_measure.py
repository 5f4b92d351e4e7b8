"""Repeats, CIs, noise flags, adaptive stopping, the measured window, ABAB sync/no-sync pairs."""

import itertools
import random
import time

import pytest

from distbench.core.strategies import STRATEGIES
from distbench.kinds import measure as measure_mod
from distbench.kinds.measure import combine_repeats, exposed_comm_ci
from distbench.results import stats
from distbench.results.record import base_record
from distbench.workers.common import measured_run
from distbench.workers.stopping import measure
from tests.builders import point_config
from tests.conftest import require


def _rec(times, status="ok", window=None):
    r = base_record({"world_size": 2, "per_device_batch": 4}, strategy="ddp", framework="torch", status=status)
    r["step_times_s"] = list(times)
    if window is not None:
        r["measured_window_s"] = window
    return r


def test_combine_repeats_geometric_mean_and_t_ci_over_repeats():
    runs = [_rec([0.1] * 5), _rec([0.2] * 5), _rec([0.1] * 5)]
    r = combine_repeats(runs)
    assert r["throughput"] == pytest.approx((80.0 * 40.0 * 80.0) ** (1 / 3))
    assert r["throughput_ci_low"] < r["throughput"] < r["throughput_ci_high"]
    assert r["ci_method"] == "t-interval on log throughput over 3 repeats (geometric mean)"
    assert r["ci_scope"] == "run-to-run (t over 3 repeats)"
    assert len(r["step_times_s"]) == 15 and len(r["repeats"]) == 3


def test_single_run_gets_a_within_run_ci_only_with_enough_steps():
    rng = random.Random(0)
    steps = [0.1 * (1 + 0.05 * rng.gauss(0, 1)) for _ in range(300)]
    r = combine_repeats([_rec(steps)])
    assert r["ci_scope"] == (
        "within-run noise (batch means over 10 batches) of the per-step slowest-rank times "
        "(coverage simulated for one series)"
    )
    assert r["throughput_ci_low"] < r["throughput"] < r["throughput_ci_high"]
    short = combine_repeats([_rec([0.1, 0.1, 0.1, 0.3, 0.1])], noisy_cv=0.1)
    assert short["throughput_ci_low"] is None and "a within-run CI needs at least" in short["ci_note"]
    assert short["noisy"] is True
    quiet = combine_repeats([_rec([0.1, 0.1001, 0.0999, 0.1, 0.1])], noisy_cv=0.1)
    assert quiet["noisy"] is False


def test_throughput_is_over_the_measured_window():
    r = combine_repeats([_rec([0.1] * 10, window=1.25)])
    assert r["throughput"] == pytest.approx(8 * 10 / 1.25)
    assert r["time_per_step_s"] == pytest.approx(0.125) and r["step_time_median_s"] == pytest.approx(0.1)


def test_a_failed_repeat_fails_the_point_with_its_reason():
    bad = _rec([], status="timeout")
    bad["reason"] = "timed out after 5s (--timeout)"
    r = combine_repeats([_rec([0.1, 0.1]), bad])
    assert r["status"] == "timeout"
    assert r["reason"] == "repeat 2 of 2: timed out after 5s (--timeout)"


def _cfg(**kw):
    return point_config("torch", 1, **{"per_device_batch": 1, "steps": 5, "warmup": 2, **kw})


def test_measure_excludes_warmup_and_runs_fixed_steps():
    calls = []
    times, out, stopping = measure(lambda: calls.append(1) or len(calls), lambda o: None, _cfg())
    assert len(calls) == 7 and len(times) == 5 and out == 7
    assert stopping["rule"] == "fixed_steps"
    assert sum(times) == pytest.approx(sum(stopping["segments_s"]))  # back-to-back steps fill the window


def test_measure_barriers_before_the_window_and_looks_only_at_geometric_step_counts(monkeypatch):
    looks = []

    def gather(obj):
        looks.append(None if obj is None else len(obj[0]))
        return [obj]

    # CV 50%: the 10% target is met only with enough steps. A fake clock: real sleeps on a loaded machine
    # drift, and the batch means' lag-1 test (stats.batch_means_ci) then rightly refuses to stop at 600.
    sleeps, clock = itertools.cycle([0.0005, 0.0015]), [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    times, _, stopping = measure(
        lambda: clock.__setitem__(0, clock[0] + next(sleeps)),
        lambda o: None,
        _cfg(steps=20, target_ci=0.1, max_time_s=60),
        gather,
    )
    assert looks[0] is None  # the barrier comes first
    # A look may stop only with all 20 batches (600 steps): a CI over fewer degrees of freedom is
    # checked at 20 steps but cannot stop the run.
    assert looks[1:] == [20, 600][: len(looks) - 1] and stopping["rule"] == "target_ci_met"
    assert len(times) == 600 and stopping["ci_half_width"] <= 0.1
    assert len(stopping["segments_s"]) == 2


def test_measure_gives_up_at_max_time_near_the_limit():
    times, _, stopping = measure(
        lambda: time.sleep(0.002), lambda o: None, _cfg(steps=5, target_ci=0.0001, max_time_s=0.1)
    )
    assert stopping["rule"] == "max_time"
    assert 5 < len(times) < 600 and sum(stopping["segments_s"]) < 0.2


def test_measured_run_window_uses_the_slowest_rank_per_segment():
    """Two simulated ranks: the gather hook returns both ranks' payloads."""
    other = {"times": [0.3, 0.1, 0.1], "segments": [0.5]}

    def gather(obj):
        if obj is None:
            return [None, None]
        if isinstance(obj, list) and len(obj) == 2 and isinstance(obj[1], list):
            return [obj, [other["times"], other["segments"]]]
        return [obj, obj]

    cfg = _cfg(steps=3, warmup=0, world_size=2, per_device_batch=2)
    times, _, fields = measured_run(lambda: time.sleep(0.001) or 0.0, lambda o: None, cfg, gather, [])
    assert fields["measured_window_s"] == pytest.approx(0.5)  # rank 1 was slower
    assert times[0] == pytest.approx(0.3) and len(fields["per_rank_step_times_s"]) == 2


def _pair_runs(sync_tps, indep_tps, steps=20):
    mk = lambda tps: {"time_per_step_s": tps, "step_times_s": [tps] * steps}  # noqa: E731
    return [mk(t) for t in sync_tps], [mk(t) for t in indep_tps]


def test_exposed_comm_ci_paired_over_pairs_or_from_two_within_run_cis():
    a, b = _pair_runs([0.30, 0.33, 0.31], [0.25, 0.27, 0.27])
    (lo, hi), scope = exposed_comm_ci(a, b)
    assert lo < 0.05 < hi and scope == "run-to-run (paired t over 3 sync/no-sync pairs)"
    ci, scope = exposed_comm_ci(*_pair_runs([0.3], [0.25]))
    assert ci is None and scope.startswith("no CI")
    rng = random.Random(1)
    steps = lambda m: [m * (1 + 0.05 * rng.gauss(0, 1)) for _ in range(300)]  # noqa: E731
    ci, scope = exposed_comm_ci(
        [{"time_per_step_s": 0.3, "step_times_s": steps(0.3)}], [{"time_per_step_s": 0.25, "step_times_s": steps(0.25)}]
    )
    assert ci[0] < 0.05 < ci[1] and scope.startswith("within-run noise of one sync and one no-sync run")


def test_measure_point_alternates_sync_and_independent_runs(monkeypatch, tmp_path):
    order = []

    def fake_run_point(strategy, cfg, workdir, timeout_s, telemetry_interval_s=0.0):
        order.append((workdir.name, cfg.sync, cfg.steps, cfg.target_ci))
        tps = 0.30 + 0.01 * len(order) if cfg.sync else 0.26 + 0.01 * len(order)
        r = base_record(cfg.to_dict(), strategy="ddp", framework="torch", status="ok")
        r["step_times_s"] = [tps] * 12
        r["measured_window_s"] = tps * 12
        r["allreduce_s"] = 0.1 if cfg.sync else None
        return r

    class Point:  # a strategy whose variant is a process tree of its own
        strategy = STRATEGIES["fabric"]
        config = _cfg(strategy="fabric", world_size=2, steps=10, target_ci=0.02, max_time_s=5, measure_comm=True)

    assert not Point.strategy.nosync_in_process
    monkeypatch.setattr(measure_mod, "run_point", fake_run_point)
    rec = measure_mod.measure_point(Point(), tmp_path, timeout_s=10, repeats=2)
    # A B, then B A: a steady trend of the machine cancels over the pairs
    assert [o[:2] for o in order] == [("r1", True), ("independent1", False), ("independent2", False), ("r2", True)]
    assert rec["pair_order"] == ["AB", "BA"]
    # every run after the first A runs its step count, without stopping of its own
    assert all(o[2] == 12 and o[3] == 0.0 for o in order[1:])
    # pairs: (0.31 - 0.28) and (0.34 - 0.29): raw exposed 0.04 s per step
    assert rec["exposed_comm_s"] == pytest.approx(0.04)
    assert rec["exposed_comm_ci_low"] < 0.04 < rec["exposed_comm_ci_high"]
    assert rec["exposed_comm_ci_scope"] == "run-to-run (paired t over 2 sync/no-sync pairs)"
    assert rec["overlap_raw"] == pytest.approx(0.6) and rec["overlap"] == pytest.approx(0.6)
    assert len(rec["independent"]) == 2 and rec["ci_scope"] == "run-to-run (t over 2 repeats)"
    assert stats.MIN_CI_STEPS > 12


def test_n1_repeats_run_the_first_runs_step_count_without_stopping_of_their_own(monkeypatch, tmp_path):
    """docs/methodology.md: repeats after a point's first run measure as many steps as its first run did. An N=1
    baseline (no communication measured) follows that rule too: only its first run stops adaptively."""
    order = []

    def fake_run_point(strategy, cfg, workdir, timeout_s, telemetry_interval_s=0.0):
        order.append((workdir.name, cfg.steps, cfg.target_ci))
        r = base_record(cfg.to_dict(), strategy="torch", framework="torch", status="ok")
        r["step_times_s"] = [0.1] * (640 if len(order) == 1 else cfg.steps)
        r["measured_window_s"] = sum(r["step_times_s"])
        return r

    class Point:
        strategy = STRATEGIES["torch"]
        config = _cfg(strategy="torch", world_size=1, steps=10, target_ci=0.02, max_time_s=60)

    monkeypatch.setattr(measure_mod, "run_point", fake_run_point)
    rec = measure_mod.measure_point(Point(), tmp_path, timeout_s=10, repeats=3)
    assert order == [("r1", 10, 0.02), ("r2", 640, 0.0), ("r3", 640, 0.0)]
    assert [r["measured_steps"] for r in rec["repeats"]] == [640, 640, 640]


def _segments(t0: float, steps: int, times: dict[str, float]) -> list[dict]:
    """T B T A after the point's own A, each 1 s of wall clock apart, as a worker writes them."""
    out = []
    for i, letter in enumerate("TBTA"):
        tps = times[letter] if letter != "T" else times["T"][i // 2]
        start = t0 + 11 + 2 * i
        seg = {
            "variant": letter,
            "step_times_s": [tps] * steps,
            "measured_window_s": tps * steps,
            "stopping": {"window": [start + 0.5, start + 1.5], "segment_start": start},
            "per_rank_step_times_s": [[tps] * steps, [tps * (0.9 if j % 4 else 1.1) for j in range(steps)]],
        }
        if letter == "B":
            seg["nosync_hook_calls"] = 36
        if letter == "T":
            seg["tiny_collective_calls"] = steps
        out.append(seg)
    return out


def test_measure_point_runs_the_variants_in_the_same_process_tree(monkeypatch, tmp_path):
    """ddp: each repeat is one process tree measuring A T B T A (balanced: a steady drift cancels); the
    variants' runs come from the run's segments; the step splits into communication (A - T), straggler wait
    and compute (B at the ranks' mean pace), window means throughout; their time counts as the wall split's no-sync phase."""
    from distbench.analysis import wall_split

    calls = []

    def fake_run_point(strategy, cfg, workdir, timeout_s, telemetry_interval_s=0.0):
        calls.append((workdir.name, cfg.nosync_order, cfg.steps, cfg.target_ci, timeout_s))
        t0 = 1000.0 * len(calls)  # wall clock of this launch
        r = base_record(cfg.to_dict(), strategy="ddp", framework="torch", status="ok")
        # the window mean (0.30) differs from the median (0.25): the split must use the window mean
        r.update(step_times_s=[0.25] * 12, measured_window_s=0.30 * 12, allreduce_s=0.1)
        r["stopping"] = {"warmup_start": t0 + 5, "window": [t0 + 6, t0 + 10], "allreduce_window": [t0 + 10, t0 + 11]}
        r["launch"] = {"started": t0, "wall_s": 25.0}
        # a linear drift: A 0.30 then 0.34; T 0.27, 0.29; B 0.26 (the middle)
        r["segments"] = _segments(t0, 12, {"T": (0.27, 0.29), "B": 0.26, "A": 0.34})
        return r

    class Point:
        strategy = STRATEGIES["ddp"]
        config = _cfg(strategy="ddp", world_size=2, steps=10, target_ci=0.02, max_time_s=5, measure_comm=True)

    assert Point.strategy.nosync_in_process
    monkeypatch.setattr(measure_mod, "run_point", fake_run_point)
    rec = measure_mod.measure_point(Point(), tmp_path, timeout_s=10, repeats=2)
    assert [c[:2] for c in calls] == [("r1", "ATBTA"), ("r2", "ATBTA")]
    assert calls[0][4] == 50  # five runs' time limit
    assert calls[1][2:4] == (12, 0.0)  # the second repeat runs the first A's step count, no stopping of its own
    assert rec["pair_order"] == ["ATBTA"] * 2 and "segments" not in rec
    assert [b["throughput"] for b in rec["independent"]] == pytest.approx([rec["global_batch"] / 0.26] * 2)
    assert [b["nosync_hook_calls"] for b in rec["independent"]] == [36, 36]
    assert len(rec["tiny"]) == 4
    split = rec["comm_split"]
    # A = (0.30 + 0.34) / 2 = 0.32, T = 0.28, B = 0.26: the drift weighs every variant alike
    assert split["step_s"] == pytest.approx(0.32)
    assert split["communication_s"] == pytest.approx(0.04)
    # B's rank 1 runs at 0.95 x rank 0's pace: compute is the ranks' mean pace, 0.26 less the gap 0.0065
    assert split["wait_s"] == pytest.approx(0.02 + 0.0065)
    assert split["compute_s"] == pytest.approx(0.26 - 0.0065)
    assert split["communication_s"] + split["wait_s"] + split["compute_s"] == pytest.approx(split["step_s"])
    assert split["ci_scope"] == "run-to-run (paired t over 2 repeats)"
    assert split["communication_ci"] == pytest.approx([0.04, 0.04])  # identical repeats: no spread
    assert split["tiny_collective_calls"] == 4 * 12
    # one meaning of communication: exposed comm is the split's A - T, not A - B (which adds the wait)
    assert rec["exposed_comm_s"] == pytest.approx(0.04) and rec["comm_overhead"] == pytest.approx(0.04 / 0.30)
    # one denominator: the overhead is over the headline step (the opening A, 0.30), not the split's mean of the
    # opening and closing A (0.32), so headline step x overhead is the communication term
    assert rec["time_per_step_s"] * rec["comm_overhead"] == pytest.approx(split["communication_s"])
    assert rec["overlap"] == pytest.approx(1 - 0.04 / 0.1) and rec["exposed_comm_ci_scope"] == split["ci_scope"]
    assert rec["sync_after_variant_ratio"] == pytest.approx(0.30 / 0.34)
    # stragglers from the no-sync variant's per-rank times: rank 1 is slower on every 4th step
    worst = max(rec["stragglers"]["ranks"], key=lambda x: x["slowest_share"])
    assert worst["rank"] == 0 and worst["slowest_share"] == pytest.approx(0.75)
    wall = wall_split(rec)
    # each repeat: the variants from +11 to +18.5, out of teardown
    assert wall["no_sync"] == pytest.approx(15.0) and wall["total"] == pytest.approx(50.0)
    assert wall["unattributed"] == pytest.approx(0.0)


def test_a_failed_in_process_variant_keeps_the_synchronized_run(monkeypatch, tmp_path):
    """A run measuring A and B in one process tree fails (say B's re-wrap): A is measured alone, so the
    point keeps its throughput and says why it has no communication figures. The pair gets twice the
    point's time limit, the run alone the limit itself."""
    calls = []

    def fake_run_point(strategy, cfg, workdir, timeout_s, telemetry_interval_s=0.0):
        calls.append((workdir.name, cfg.nosync_order, timeout_s))
        if cfg.nosync_order:
            return base_record(cfg.to_dict(), strategy="ddp", framework="torch", status="failed", reason="boom")
        r = base_record(cfg.to_dict(), strategy="ddp", framework="torch", status="ok")
        r.update(step_times_s=[0.3] * 12, measured_window_s=0.3 * 12)
        return r

    class Point:
        strategy = STRATEGIES["ddp"]
        config = _cfg(strategy="ddp", world_size=2, steps=10, target_ci=0.02, max_time_s=5, measure_comm=True)

    monkeypatch.setattr(measure_mod, "run_point", fake_run_point)
    rec = measure_mod.measure_point(Point(), tmp_path, timeout_s=10, repeats=2)
    assert calls == [("r1", "ATBTA", 50), ("r1-alone", None, 10)]
    assert rec["status"] == "ok" and rec["throughput"] == pytest.approx(rec["global_batch"] / 0.3)
    assert rec["comm_note"] == "independent variant failed: failed with the variants in its processes (ATBTA): boom"
    assert rec["exposed_comm_s"] is None and "sync_after_variant_ratio" not in rec
    assert rec["repeats"][-1]["ran_alone"] is True and rec["independent"][0]["status"] == "failed"


def test_when_the_run_alone_fails_too_its_reason_names_the_pairs(monkeypatch, tmp_path):
    def fake_run_point(strategy, cfg, workdir, timeout_s, telemetry_interval_s=0.0):
        status, reason = ("timeout", "no step for 20 s") if cfg.nosync_order else ("failed", "rank 1 killed (SIGKILL)")
        return base_record(cfg.to_dict(), strategy="ddp", framework="torch", status=status, reason=reason)

    class Point:
        strategy = STRATEGIES["ddp"]
        config = _cfg(strategy="ddp", world_size=2, steps=10, target_ci=0.02, max_time_s=5, measure_comm=True)

    monkeypatch.setattr(measure_mod, "run_point", fake_run_point)
    rec = measure_mod.measure_point(Point(), tmp_path, timeout_s=10)
    assert rec["status"] == "failed"
    assert rec["reason"] == (
        "rank 1 killed (SIGKILL) (run alone, after the variants: timeout with the variants in its processes "
        "(ATBTA): no step for 20 s)"
    )


def test_cuda_event_path_times_steps_on_the_device_and_syncs_only_at_segment_ends():
    """Issue 20 item 6: with an event factory the host records an event after each step and waits for the
    device once per segment; step times are the device time between consecutive events (ms -> s)."""
    device = {"t": 0.0}  # the fake device's clock, ms
    durations = iter([9.0, 4.0, 5.0, 6.0, 7.0, 8.0, 100.0])  # warmup step, then five measured steps

    class FakeEvent:
        def record(self):
            self.at = device["t"]

        def elapsed_time(self, other):
            return other.at - self.at

    def step():
        device["t"] += next(durations)
        return 0.0

    syncs = []
    cfg = _cfg(steps=5, warmup=1, target_ci=0.0)
    times, _, stopping = measure(step, lambda out: syncs.append(out), cfg, new_event=FakeEvent)
    assert times == pytest.approx([0.004, 0.005, 0.006, 0.007, 0.008])
    assert len(syncs) == 1 + 1 + 1  # before warmup, after the warmup step, at the segment's end: not per step
    assert len(stopping["segments_s"]) == 1
    from distbench.workers.stopping import event_step_times

    a, b, c = FakeEvent(), FakeEvent(), FakeEvent()
    a.at, b.at, c.at = 1.0, 3.5, 4.0
    assert event_step_times(a, [b, c]) == pytest.approx([0.0025, 0.0005])


@require("torch")
def test_event_clock_on_cuda_only():
    """The CPU path keeps the host clock (no events); on a CUDA device every torch strategy run by
    torch_common.run gets the event factory (wrappers that own their loop too: tests/test_clock.py)."""
    import torch

    from distbench.workers import torch_common as tc

    assert tc.make_event_clock(torch.device("cpu")) is None
    assert callable(tc.make_event_clock(torch.device("cuda", 0)))

"""`distbench predict`'s physical model, term by term: the straggler term from the measured per-rank spread,
the bounds on the exposed communication and their warnings, unresolved link figures, the CPU-core limit,
what-if traffic and the order check, what to measure next, the naive guess and its verdict; bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from distbench import mfu, predict as pr
from distbench.cli import main
from distbench.errors import BadInput
from distbench.predict.model import bounds
from distbench.predict.sources import hidden_share, rank_spread


def link(bw_gbps: float, lat_us: float, measured: bool = False) -> pr.Link:
    return pr.Link(bw_gbps * 1e9, lat_us * 1e-6, "test", measured)


def series(points, *, strategy="ddp", overlap=None, per_node=8, grad=100e6, sd=None, device="cuda") -> pr.Series:
    return pr.Series(
        workload="w",
        strategy=strategy,
        framework="torch",
        scaling="weak",
        points=[pr.Observed(n, max(1, math.ceil(n / per_node)), b, thr, 0.01) for n, b, thr in points],
        grad_bytes=grad,
        overlap=overlap,
        overlap_note="test",
        baseline_throughput=points[0][2],
        baseline_name="N=1",
        per_node=per_node,
        rank_sd=sd,
        device=device,
    )


PTS = [(1, 32, 100.0), (2, 32, 196.0), (4, 32, 384.0)]


# -- the straggler term
@pytest.mark.parametrize("n, tol", [(2, 0.05), (4, 0.02), (8, 0.01), (64, 0.01), (1024, 0.01)])
def test_straggler_term_is_sigma_times_the_expected_maximum_of_n_normals(n, tol):
    x = np.linspace(-12, 12, 20001)
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x]))
    exact = float(np.sum(x * n * pdf * cdf ** (n - 1)) * (x[1] - x[0]))  # E[max of n N(0, 1)]
    assert pr.straggler(0.01, n) == pytest.approx(0.01 * exact, rel=tol)
    assert pr.straggler(0.01, n) < 0.01 * math.sqrt(2 * math.log(n))  # the asymptotic form overstates it
    assert pr.straggler(0.01, 1) == 0.0 and pr.straggler(0.0, 64) == 0.0


def test_straggler_term_grows_the_step_beyond_the_anchor():
    ideal = link(math.inf, 0)
    with_sd = pr.build_model(series(PTS, sd=0.005, per_node=64), ideal, None)
    without = pr.build_model(series(PTS, per_node=64), ideal, None)
    for n in (16, 64):
        extra = with_sd.step_time(n) - without.step_time(n)
        assert extra == pytest.approx(pr.straggler(0.005, n) - pr.straggler(0.005, 4), rel=1e-6)
    assert with_sd.throughput(64) < without.throughput(64)


def test_rank_spread_from_per_rank_step_times():
    records = [
        {"world_size": 2, "per_rank_step_times_s": [[0.10, 0.12, 0.11], [0.12, 0.10, 0.11]]},
        {"world_size": 4, "per_rank_step_times_s": [[0.1, 0.1], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1]]},
    ]
    sd, note = rank_spread(records)
    assert sd == pytest.approx(0.0) and "N=4" in note and "measured" in note  # the largest N that has them
    sd, _ = rank_spread(records[:1])
    assert sd == pytest.approx(math.sqrt(2) * 0.01)  # median over steps of the per-step sd across 2 ranks
    assert rank_spread([{"world_size": 2}])[0] is None


def test_rank_spread_prefers_each_ranks_own_pace_and_reads_repeats():
    synced = [[0.11, 0.11, 0.11], [0.11, 0.11, 0.11]]  # every rank waits for the all-reduce: no spread visible
    own = [[0.10, 0.12, 0.10], [0.12, 0.10, 0.12]]
    record = {"world_size": 2, "per_rank_step_times_s": synced, "independent": [{"per_rank_step_times_s": own}]}
    sd, note = rank_spread([record])
    assert sd == pytest.approx(math.sqrt(2) * 0.01) and "no-sync" in note and "3 steps" in note
    repeated = {"world_size": 2, "repeats": [{"per_rank_step_times_s": own}, {"per_rank_step_times_s": own}]}
    sd, note = rank_spread([repeated])  # a repeated point keeps per-rank times per repeat only
    assert sd == pytest.approx(math.sqrt(2) * 0.01) and "synchronized" in note and "6 steps" in note


# -- bounds and what they imply
def test_bounds_nominal_measured_and_overlap():
    assert bounds(link(10, 1), None) == pytest.approx((0.1, 4.0))
    assert bounds(link(10, 1), 0.5) == pytest.approx((0.5, 2.0))
    assert bounds(link(10, 1, measured=True), 0.0) == pytest.approx((1 / 1.5, 1.5))


def test_loss_that_is_not_communication_is_clipped_and_warned():
    # efficiency falls to 50% at N=4 on a 300 GB/s link: no plausible link is that slow
    pts = [(1, 32, 100.0), (2, 32, 130.0), (4, 32, 200.0)]
    model = pr.build_model(series(pts), link(300, 1), None)
    t = model.tiers["intra"]
    assert t.x == pytest.approx(t.hi) and t.wanted and t.wanted > t.hi
    assert any("more exposed communication than is physical" in w and "GB/s" in w for w in model.warnings)
    assert t.bandwidth() == pytest.approx(300e9 / 4)  # the bandwidth the bounded share implies, printed
    assert any("(x = 631, an effective 0.475 GB/s against 300 GB/s nominal" in w for w in model.warnings)
    # a loss the search cannot explain even at 1000x the nominal time: "that much or more", never a made-up x
    flat = pr.build_model(series([(1, 32, 100.0), (2, 32, 101.0), (4, 32, 102.0)]), link(300, 1), None)
    assert flat.tiers["intra"].wanted_beyond
    assert any("(x >= 1e+03, an effective 0.3 GB/s or less against 300 GB/s nominal" in w for w in flat.warnings)


def test_implied_bandwidth_is_in_the_document():
    doc = pr.predict([series(PTS)], {"intra": link(10, 10)}, lambda _: None, gpus=[8])
    tier = doc["series"][0]["parameters"]["tiers"]["intra"]
    assert tier["implied_effective_gbps"] == pytest.approx(10 / tier["exposed_share"])
    assert tier["bounds"] == pytest.approx([0.1, 4.0])
    assert "kappa" not in doc["series"][0]["parameters"]


def test_unmeasured_inter_tier_spans_its_range_in_the_interval():
    model = pr.build_model(series(PTS, per_node=4), link(10, 10), link(5, 5))
    te = model.tiers["inter"]
    assert not te.fitted and model.crosses(32)
    thr, lo, hi = model.interval(32)
    assert lo <= model.throughput(32, x_inter=te.hi) <= model.throughput(32, x_inter=te.lo) <= hi
    assert lo < thr < hi


# -- unresolved link figures: a warning, never a figure
def test_unresolved_latency_is_a_warning():
    l = link(5, 0)
    samples = [(n, 2**k, pr.ring_allreduce_time(2**k, n, l), 1) for n in (2, 4) for k in range(16, 27, 2)]
    fitted = pr.fit_link(samples, "t")
    assert fitted.latency == 0.0 and fitted.warnings and "do not resolve the latency" in fitted.warnings[0]
    assert "latency not resolved" in fitted.describe() and "e-" not in fitted.describe()
    assert fitted.bandwidth == pytest.approx(5e9, rel=1e-6)


# -- CPU workers and their cores
def test_cpu_workers_beyond_the_cores_are_not_predicted():
    s = series(PTS[:2], device="cpu")
    doc = pr.predict([s], {"intra": link(10, 10)}, lambda _: None, gpus=[2, 8], cores=2)
    assert [r["n"] for r in doc["series"][0]["predicted"]] == [2]
    assert any("N=8 not predicted" in w and "2 physical cores" in w for w in doc["warnings"])
    with pytest.raises(BadInput, match="--gpus: every requested N exceeds the 2 physical cores"):
        pr.predict([s], {"intra": link(10, 10)}, lambda _: None, gpus=[8], cores=2)


def test_measured_points_beyond_the_cores_are_warned():
    s = series(PTS, device="cpu")  # N = 1, 2, 4 measured on 2 cores
    doc = pr.predict([s], {"intra": link(10, 10)}, lambda _: None, gpus=[2], cores=2)
    assert any("measured N=4 ran more CPU workers than the 2 physical cores" in w for w in doc["warnings"])


def test_warnings_name_the_workload_when_a_strategy_has_several():
    one, two = series(PTS, device="cpu"), series(PTS, device="cpu")
    two.workload = "w2"
    doc = pr.predict([one, two], {"intra": link(10, 10)}, lambda _: None, gpus=[2], cores=2)
    assert any(w.startswith("ddp (w2): measured N=4") for w in doc["warnings"])
    alone = pr.predict([one], {"intra": link(10, 10)}, lambda _: None, gpus=[2], cores=2)
    assert any(w.startswith("ddp: measured N=4") for w in alone["warnings"])


def test_held_out_rows_name_the_workload_when_there_are_several():
    one, two = series(PTS), series(PTS)
    two.workload = "w2"
    doc = pr.predict([one, two], {"intra": link(10, 10)}, lambda _: None, gpus=[8])
    headers, rows = pr.validation_rows(doc)
    assert headers[0] == "workload" and {r[0] for r in rows} == {"w", "w2"}
    assert pr.validation_rows(pr.predict([one], {"intra": link(10, 10)}, lambda _: None, gpus=[8]))[0][0] == "strategy"


def test_sweep_cores_are_physical_not_hyperthreads(monkeypatch):
    import socket

    from distbench.commands.predict import sweep_cores

    monkeypatch.setattr(mfu, "physical_cores", lambda logical: logical // 2)  # two threads per core here
    here = socket.gethostname()
    assert sweep_cores({"env": {"hostname": here, "cpu_count": 8, "cpu_affinity": 4}}) == 2
    assert sweep_cores({"env": {"hostname": here, "cpu_count": 8}}) == 4
    assert sweep_cores({"env": {"hostname": here, "cpu_count": 8, "physical_cores": 3}}) == 3
    assert sweep_cores({"env": {"hostname": "elsewhere", "cpu_count": 8}}) == 8  # another machine: as recorded
    assert sweep_cores({"env": {}}) is None and sweep_cores({}) is None


def test_latest_prediction_without_a_store_or_table(tmp_path):
    import sqlite3

    assert pr.latest_for(str(tmp_path / "absent.db"), "s") is None
    bare = tmp_path / "bare.db"
    sqlite3.connect(bare).close()
    assert pr.latest_for(str(bare), "s") is None


# -- what-if and the order check
def test_what_if_zero3_moves_more_bytes():
    doc = pr.predict([series(PTS)], {"intra": link(10, 10)}, lambda _: None, gpus=[8], what_if=["deepspeed-zero3"])
    entry = doc["series"][0]
    w = entry["what_if"][0]
    assert w["strategy"] == "deepspeed-zero3" and "all-gather" in w["traffic"]
    assert "deepspeed-zero3's own overlap is not measured" in w["assumes"]
    assert any(line.startswith("    assumes: ddp's fitted compute") for line in pr.summary_lines(doc))
    assert w["predicted"][0]["throughput"] < entry["predicted"][0]["throughput"]
    assert pr.traffic_factor("deepspeed-zero3")[0] == 1.5 and pr.traffic_factor("ddp")[0] == 1.0


def test_order_check_compares_predicted_and_measured_order():
    ddp = series(PTS)
    zero3 = series([(1, 32, 99.0), (2, 32, 180.0), (4, 32, 340.0)], strategy="deepspeed-zero3")
    doc = pr.predict(
        [ddp, zero3], {"intra": link(10, 10)}, lambda _: None, gpus=[8], what_if=["ddp", "deepspeed-zero3"]
    )
    checks = doc["order_checks"]
    assert {c["n"] for c in checks} == {2, 4} and len(checks) == 4  # both directions at N = 2 and 4
    assert all(c["agrees"] for c in checks)


# -- naive guess, verdict, next measurement
def test_a_tie_with_the_naive_guess_is_not_a_win():
    s = series([(1, 32, 100.0), (2, 32, 200.0), (4, 32, 400.0), (8, 32, 780.0)], grad=0.0)  # nothing to model
    checks = pr.holdout(s, link(10, 10), None)
    assert checks and all(math.isclose(c["error"], c["naive_error"]) for c in checks)
    assert not any(c["beats_naive"] for c in checks)
    assert any("IS the naive guess" in line for line in pr.verdict_lines(checks))


def test_rows_carry_the_naive_guess_and_the_verdict_says_when_the_model_loses():
    doc = pr.predict([series(PTS)], {"intra": link(10, 10)}, lambda _: None, gpus=[8])
    row = doc["series"][0]["predicted"][0]
    assert row["naive_throughput"] == pytest.approx(8 * 384.0 / 4)
    losing = [{"error": 0.10, "naive_error": 0.01, "beats_naive": False, "covered": True, "extrapolation": 2, "n": 8}]
    lines = pr.verdict_lines(losing)
    assert any("does NOT beat the naive guess" in line for line in lines)
    assert not any("NOT" in line for line in pr.verdict_lines([dict(losing[0], error=0.0, beats_naive=True)]))


def test_what_to_measure_next_narrows_the_interval():
    s = series(PTS, per_node=8)
    model = pr.build_model(s, link(10, 10), link(5, 5))
    nxt = pr.next_measurement(model, s, link(10, 10), link(5, 5), 64)
    assert nxt and nxt["half_width_after"] < nxt["half_width_now"]
    assert "node" in nxt["what"] or "comm" in nxt["what"]


# -- bad input: one line, exit 2
def one_line_error(capsys, args) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("Error: ") and "Traceback" not in err
    return err


def test_bad_what_if_and_cpu_cores(tmp_path, capsys):
    good = tmp_path / "ok.csv"
    good.write_text("strategy,world_size,per_device_batch,throughput,grad_bytes\nddp,1,32,100,1e8\nddp,2,32,190,1e8\n")
    base = ["predict", "--csv", str(good), "--link", "pcie4"]
    assert "--what-if: unknown strategy 'bogus'" in one_line_error(capsys, [*base, "--what-if", "bogus"])
    assert "--what-if: name at least one strategy" in one_line_error(capsys, [*base, "--what-if", ","])
    cpu = tmp_path / "cpu.csv"
    cpu.write_text(
        "strategy,world_size,per_device_batch,throughput,grad_bytes,device\nddp,1,32,100,1e8,cpu\nddp,2,32,190,1e8,cpu\n"
    )
    err = one_line_error(
        capsys, ["predict", "--csv", str(cpu), "--link", "pcie4", "--gpus", "100000", "--gpus-per-node", "1024"]
    )
    assert "--gpus: every requested N exceeds" in err


def test_a_prediction_stored_before_the_physical_model_still_renders():
    doc = pr.predict([series(PTS)], {"intra": link(10, 10)}, lambda _: None, gpus=[8])
    for s in doc["series"]:  # what an older distbench stored: kappa, no naive guess, no tiers
        s["parameters"] = {"compute_s_per_sample": 0.01, "kappa": 2.0, "buckets": 4}
        for p in s["predicted"]:
            p.pop("naive_throughput")
        for c in s["validation"]:
            c.pop("naive_error")
    headers, rows = pr.table_rows(doc)
    assert rows[0][headers.index("naive")] == "n/a"
    assert pr.summary_lines(doc) and pr.validation_rows(doc)
    svg, png, _ = pr.plot_images(doc)
    assert svg.startswith(b"<?xml") and png[:4] == b"\x89PNG"


def test_overlap_from_the_split_keeps_the_straggler_wait_out_of_the_communication_term():
    # exposed (sync - no-sync) 30 ms = communication 10 ms + straggler wait 20 ms; the standalone all-reduce 40 ms
    split = {"world_size": 2, "allreduce_s": 0.040, "overlap_raw": 1 - 0.030 / 0.040}
    split["comm_split"] = {"communication_s": 0.010, "wait_s": 0.020}
    h, note = hidden_share([split])
    assert h == pytest.approx(0.75) and "without the three-term split" not in note  # 1 - 10/40, not 1 - 30/40
    old = {k: v for k, v in split.items() if k != "comm_split"}  # a point measured before the split
    h, note = hidden_share([old])
    assert h == pytest.approx(0.25) and "1 without the three-term split" in note

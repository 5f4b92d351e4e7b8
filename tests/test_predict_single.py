"""The bucket pipeline (against the closed form and by hand), the model's per-layer facts, the slow-rank term,
and prediction from one device: its inputs' sources and its bad input (one line, exit 2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from distbench import predict as pr
from distbench.analysis import Z95
from distbench.cli import main
from distbench.core.errors import BadInput
from distbench.models import specs
from distbench.predict import layers, pipeline, profiled, whatif
from distbench.predict import single as sg
from distbench.predict.model import expected_max, pace_spread
from distbench.predict.sources import pace_gap, rank_spread, series_from_records
from tests.test_predict import one_line_error, write_csv
from tests.test_predict_model import series


# -- the pipeline
@pytest.mark.parametrize("seed", range(6))
def test_equal_buckets_at_equal_steps_are_the_closed_form(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        k = int(rng.integers(1, 40))
        total, backward = float(rng.uniform(0.001, 2)), float(rng.uniform(0, 2))
        window = backward * (1 - 1 / k)
        closed = max(total / k, total - window)
        got = pipeline.exposed(pipeline.uniform(k), backward, lambda share: total * share)
        assert got == pytest.approx(closed, rel=1e-9, abs=1e-12)


def test_pipeline_by_hand():
    """Three buckets ready at 0.2, 0.5 and 1.0 of a 1 s backward (so at -0.8, -0.5, 0 s), costing 0.1, 0.5 and
    0.2 s: the first runs -0.8..-0.7, the second -0.5..0.0, the third 0.0..0.2: 0.2 s exposed."""
    tl = pipeline.Timeline((0.2, 0.5, 1.0), (0.125, 0.625, 0.25), "test")
    tl.check()
    cost = lambda share: 0.8 * share  # noqa: E731
    sched = pipeline.schedule(tl, 1.0, cost)
    assert [round(x, 9) for row in sched for x in row] == [-0.8, -0.8, -0.7, -0.5, -0.5, 0.0, 0.0, 0.0, 0.2]
    assert pipeline.exposed(tl, 1.0, cost) == pytest.approx(0.2)
    # the link as the bottleneck: a slow link queues the buckets behind one another
    assert pipeline.exposed(tl, 1.0, lambda share: 4 * share) == pytest.approx(-0.8 + 4 - 0.0)
    # no backward to hide behind: everything exposed
    assert pipeline.exposed(tl, 0.0, cost) == pytest.approx(0.8)


def test_merge_fills_buckets_in_backward_order():
    tl = pipeline.merge([0.1, 0.3, 0.6, 1.0], [10, 10, 25, 5], cap=20)
    assert tl.ready == (0.3, 0.6, 1.0) and tl.shares == pytest.approx((0.4, 0.5, 0.1))
    assert pipeline.merge([0.5, 1.0], [1, 1], cap=math.inf).ready == (1.0,)


def test_uneven_ready_times_expose_more_than_the_closed_form():
    """A late, heavy last bucket (a model's first layers hold many parameters, or its embedding) exposes more
    than k equal buckets would: the pipeline sees it, the closed form cannot."""
    late = pipeline.Timeline((0.5, 1.0), (0.2, 0.8), "test")
    cost = lambda share: 0.4 * share  # noqa: E731
    assert pipeline.exposed(late, 1.0, cost) == pytest.approx(0.32)
    assert pipeline.exposed(pipeline.uniform(2), 1.0, cost) == pytest.approx(0.2)


# -- the models' per-layer facts
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "resnet152", "vgg16", "bert_base"])
def test_layer_tables_hold_every_parameter(name):
    table = layers.model_layers(name)
    assert sum(p for _, p, _ in table) == specs.get_spec(name).reference_params
    tl = layers.flops_timeline(name, 25 * 2**20)
    tl.check()
    assert tl.ready[-1] == pytest.approx(1.0) and "model FLOPs" in tl.source


def test_layer_flops_are_the_known_totals():
    """ResNet-50 at 224: 4.1 G multiply-adds; VGG-16: 15.5 G (2 FLOPs each)."""
    assert sum(f for *_, f in layers.model_layers("resnet50")) / 2 == pytest.approx(4.09e9, rel=0.01)
    assert sum(f for *_, f in layers.model_layers("vgg16")) / 2 == pytest.approx(15.47e9, rel=0.01)
    assert layers.model_layers("lstm") is None


# -- the slow rank: a persistent pace gap grows as the expected max of N pace draws
def test_pace_gap_is_its_own_term():
    s = series([(2, 32, 60.0), (4, 32, 118.0)], per_node=64)
    s.pace_gap, s.pace_n = 0.004, 2
    with_gap = pr.build_model(s, pr.Link(1e12, 0, "t", False), None)
    s.pace_gap = None
    without = pr.build_model(s, pr.Link(1e12, 0, "t", False), None)
    spread = 0.004 / expected_max(2)
    assert with_gap.pace_sd == pytest.approx(spread) and pace_spread(0.004, 2) == pytest.approx(spread)
    assert with_gap.parts(2)["slow_rank_s"] == pytest.approx(0.004)  # reproduces the gap where it was measured
    for n in (8, 64):
        assert with_gap.parts(n)["slow_rank_s"] == pytest.approx(0.004 * expected_max(n) / expected_max(2))
        extra = with_gap.step_time(n) - without.step_time(n)
        assert extra == pytest.approx(with_gap.parts(n)["slow_rank_s"] - with_gap.parts(4)["slow_rank_s"], rel=1e-6)


def test_pace_gap_read_from_the_split_or_per_rank_times_and_kept_out_of_the_jitter():
    steady = [[0.10, 0.10, 0.10, 0.10], [0.11, 0.11, 0.11, 0.11]]  # rank 1 is 10 ms slower every step
    rec = {"world_size": 2, "per_rank_step_times_s": steady}
    gap, n0, note = pace_gap([rec])
    assert gap == pytest.approx(0.005) and n0 == 2 and "per-rank" in note
    assert rank_spread([rec])[0] == pytest.approx(0.0)  # no jitter: the gap is not spread
    split = {"world_size": 4, "stragglers": {"pace_gap_s": 0.002}}
    assert pace_gap([rec, split])[:2] == (pytest.approx(0.002), 4)  # the largest N that measured it
    rows = [{"strategy": "ddp", "world_size": "2", "per_device_batch": "8", "throughput": "50", "pace_gap_s": "0.003"}]
    (s,) = series_from_records(rows, from_csv=True)
    assert s.pace_gap == pytest.approx(0.003) and s.pace_n == 2


# -- from one device
def one_device(thr=100.0, grad=1e8, per_node=8, strategy="ddp"):
    return series([(1, 32, thr)], per_node=per_node, grad=grad, strategy=strategy)


def test_one_device_prediction_is_physics_from_the_links():
    s = one_device()
    fast, slow = pr.Link(300e9, 1e-6, "t", False), pr.Link(1e9, 1e-6, "t", False)
    m_fast = sg.build_single(s, fast, None, loss=0, error=0)
    m_slow = sg.build_single(s, slow, None, loss=0, error=0)
    assert m_fast.a == pytest.approx(32 / 100.0 / 32)  # compute per sample: the N=1 step
    assert m_fast.naive(8) == pytest.approx(800.0)  # the linear guess
    assert m_slow.throughput(8) < m_fast.throughput(8) <= 800.0
    t = m_slow.tiers["intra"]
    assert t.bw == pytest.approx(math.sqrt(t.lo * t.hi))  # the middle of the plausible range
    thr, lo, hi = sg.build_single(s, slow, None).interval(8)
    assert lo < thr < hi


def test_one_device_interval_combines_spans_and_residual_in_quadrature():
    """From one device nothing is fitted: the parameters' spans (corners) and the calibrated residual are
    independent, so their 95% half-widths in log throughput add in quadrature, not end to end."""
    s = one_device()
    m = sg.build_single(s, pr.Link(2e9, 1e-6, "t", False), None, error=0.03)
    assert m.one_device
    for n in (2, 8):
        thr, lo, hi = m.interval(n)
        corners = m.corners(n)
        down = math.hypot(math.log(thr / min(corners)), Z95 * m.sd(n))
        assert math.log(thr / min(corners)) > 0.01 and lo == pytest.approx(thr * math.exp(-down), rel=1e-9)
        stacked = min(corners) * math.exp(-Z95 * m.sd(n))
        assert stacked < lo < thr <= hi  # narrower than the worst corner widened by the whole residual
    m.one_device = False  # several points measured: stacked, as before
    assert m.interval(8)[1] == pytest.approx(min(m.corners(8)) * math.exp(-Z95 * m.sd(8)), rel=1e-9)


def test_one_device_host_terms_count_the_devices_sharing_a_host():
    """The loss no link explains and the residual per doubling grow with the devices on one host, up to the node:
    a second node brings its own host (what it adds is the inter-node link and the crossing terms)."""
    s = one_device(per_node=8)
    m = sg.build_single(s, pr.Link(300e9, 1e-6, "t", False), pr.Link(25e9, 1e-6, "t", False), loss=0.02, error=0.03)
    assert [m.host_doublings(n) for n in (1, 2, 8, 16, 64)] == pytest.approx([0, 1, 3, 3, 3])
    assert m.host_loss(8) == pytest.approx(0.06) and m.host_loss(64) == pytest.approx(0.06 + m.loss_crossing)
    assert m.sd(64) == pytest.approx(math.sqrt(m.anchor_se**2 + (0.03 * 3) ** 2 + m.crossing_sd**2))
    several = series([(1, 32, 100.0), (2, 32, 190.0)], per_node=8)
    fitted = pr.build_model(several, pr.Link(300e9, 1e-6, "t", False), pr.Link(25e9, 1e-6, "t", False))
    assert not fitted.one_device and fitted.host_doublings(64) == pytest.approx(5)  # per doubling of N, as before


def test_strategy_what_if_from_one_device_keeps_the_host_terms():
    s = one_device()
    base = sg.build_single(s, pr.Link(300e9, 1e-6, "t", False), pr.Link(25e9, 1e-6, "t", False), loss=0.02)
    m = pr.build_model(s, base.tiers["intra"].link, base.tiers["inter"].link, traffic_of="fsdp", base=base)
    assert m.one_device and m.loss_per_doubling == base.loss_per_doubling and m.loss_crossing == base.loss_crossing
    assert m.throughput(64) < base.throughput(64)  # 1.5x the bytes, the same host loss


def test_one_device_with_the_flops_timeline():
    s = one_device(grad=25_557_032 * 4)
    s.model = "resnet50"
    tl = sg.one_device_timeline(s, None)
    assert tl is not None and tl.buckets == 5 and "resnet50" in tl.source
    m = sg.build_single(s, pr.Link(10e9, 5e-6, "t", False), None, timeline=tl)
    assert m.buckets == 5 and m.timeline is tl
    lines = sg.one_device_sources(s, m, pr.Link(10e9, 5e-6, "t", False), None, None)
    assert any(line.startswith("ready times: model FLOPs") for line in lines)
    assert any("measured (the N=1 point" in line for line in lines)


def test_one_device_on_the_command_line(tmp_path, capsys):
    header = "strategy,model,world_size,per_device_batch,throughput,grad_bytes"
    one = write_csv(tmp_path / "one.csv", ["ddp,resnet50,1,64,400,1.0223e8"], header)
    assert main(["predict", "--csv", one, "--link", "nvlink3", "--gpus", "2,8", "--gpus-per-node", "8"]) == 0
    out = capsys.readouterr().out
    assert "from one device, each input's source" in " ".join(out.split())
    assert "ready times: model FLOPs (resnet50" in " ".join(out.split())


def test_one_device_bad_input(tmp_path, capsys):
    one = write_csv(tmp_path / "one.csv", ["ddp,1,32,100,1e8"])
    err = one_line_error(capsys, ["predict", "--csv", one, "--gpus", "8"])
    assert "a single measured point (N=1) needs the links: pass --link PROFILE" in err
    err = one_line_error(capsys, ["predict", "--csv", one, "--link-bw", "intra=0", "--link-latency", "intra=1"])
    assert "--link-bw: '0' is not a positive number of GB/s" in err
    err = one_line_error(capsys, ["predict", "--csv", one, "--link", "pcie4", "--gpus", "16", "--gpus-per-node", "8"])
    assert "no inter-node figure" in err
    err = one_line_error(capsys, ["predict", "--csv", one, "--link", "pcie4", "--gpus", "2"])
    assert "from one device, --gpus-per-node says how many devices a node has" in err


# -- docs/prediction.md: the FLOPs timeline beside the assumed one, on published one-device points
TIMELINE_CASES = [  # (table, strategy, workload model, spec name, N shown)
    ("predict_lambda_rn50_pyt_a100sxm4.csv", "ddp", "resnet50_fp32_b640", "resnet50", (8,)),
    ("tfb_dgx1_p100_synthetic.csv", "tf_cnn_benchmarks", "resnet152_b64", "resnet152", (8,)),
    ("tfb_dgx1_p100_synthetic.csv", "tf_cnn_benchmarks", "vgg16_b64", "vgg16", (8,)),
    ("predict_dlperf_bert_base_fp32_v100_edr.csv", "oneflow", "bert_base_seq128_fp32_b32", "bert_base", (8, 32)),
]
DOC_BUCKET = 25 * 2**20
PROFILES = Path(__file__).parent / "data" / "profiles"
"""One-device `distbench profile` points (CPU workers on this 2-core machine, shared and loaded; 2026-11-28),
their traces reduced to the step markers, the first backward operation and the gradient accumulations
(README.md there)."""


def profile_record(name: str) -> dict:
    record = json.loads((PROFILES / f"{name}.json").read_text())
    return {**record, "profile_trace": str(PROFILES / record["profile_trace"])}


def _timeline_text(tl: pipeline.Timeline) -> str:
    ready = ", ".join(f"{r:.2f}" for r in tl.ready)
    shares = ", ".join(f"{s:.0%}" for s in tl.shares)
    return f"ready {ready}; bytes {shares}"


def timeline_lines() -> list[str]:
    """Per case: the N=1 point predicted with k equal buckets at equal steps and with the FLOPs timeline (both
    25 MiB buckets), the exposed communication and throughput at N beside the measured and the linear guess."""
    from tests.test_predict_validation import setup, sources

    lines = [
        "| model (table) | N | ready times | buckets: ready fraction of backward; share of the bytes | exposed "
        "comm (ms) | predicted [95%] | measured | linear |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for file, strategy, workload, name, ns in TIMELINE_CASES:
        src = next(s for s in sources() if s["file"] == file)
        links, _, all_series = setup(src)
        s = next(x for x in all_series if x.strategy == strategy and x.workload.startswith(workload))
        measured = {p.n: p.throughput for p in s.points}
        kinds = [(None, None, "equal steps (assumed)"), (layers.flops_timeline(name, DOC_BUCKET), None, "model FLOPs")]
        if (PROFILES / f"{name}.json").exists():
            tl, share = profiled.profile_timeline(profile_record(name), DOC_BUCKET, "--profile")
            kinds.append((tl, (share, share, share, "profile"), f"profile (backward share {share:.2f})"))
        for tl, share, label in kinds:
            m = sg.build_single(
                s, links.get("intra"), links.get("inter"), bucket_bytes=DOC_BUCKET, timeline=tl, backward_share=share
            )
            used = m.timeline_for(m.buckets)
            for n in ns:
                thr, lo, hi = m.interval(n)
                exposed = m.parts(n)["comm_intra_s"] + m.parts(n)["comm_inter_s"]
                lines.append(
                    f"| {name} ({file}) | {n} | {label} | "
                    f"{_timeline_text(used)} | {exposed * 1e3:.3g} | {thr:,.0f} [{lo:,.0f}, {hi:,.0f}] | "
                    f"{measured[n]:,.0f} | {m.naive(n):,.0f} |"
                )
    return lines


def test_docs_show_the_flops_timeline_beside_the_assumed_one():
    from tests.test_predict_validation import DOC

    doc = DOC.read_text()
    lines = timeline_lines()
    assert len({line.split(" | ")[0] for line in lines[2:]}) >= 3  # at least three models
    both = [
        m
        for m in {line.split(" | ")[0] for line in lines[2:]}
        if all(
            any(line.startswith(m + " |") and f" | {kind}" in line for line in lines)
            for kind in ("model FLOPs", "profile (")
        )
    ]
    assert len(both) >= 3  # a profile-based and a FLOPs-based prediction side by side for at least three models
    for line in lines:
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"


if __name__ == "__main__":  # print the docs' table
    print("\n".join(timeline_lines()))


# -- onto another network: --what-if link=...
def test_link_what_if_moves_only_the_named_tier():
    s = one_device()
    intra, inter = pr.Link(300e9, 1e-6, "t", False), pr.Link(25e9, 1e-6, "t", False)
    base = sg.build_single(s, intra, inter)
    (_, tier, slow), (_, _, fast) = whatif.parse(["link=inter=10gbe", "link=inter=ib-ndr"], 1)[1]
    payload = 1.25e9 * 1448 / 1538  # 10 Gbit/s of Ethernet frames at MTU 1500: TCP's payload share
    assert tier == "inter" and slow.line_rate == pytest.approx(1.25e9) and slow.bandwidth == pytest.approx(payload)
    m_slow, m_fast = whatif.link_model(base, "inter", slow), whatif.link_model(base, "inter", fast)
    assert m_slow.throughput(8) == pytest.approx(base.throughput(8))  # one node: the inter link does not matter
    assert m_slow.throughput(64) < base.throughput(64) < m_fast.throughput(64)
    t = m_slow.tiers["inter"]
    assert (t.lo, t.hi) == pytest.approx((0.25 * payload, payload)) and t.bw == pytest.approx(math.sqrt(t.lo * t.hi))
    assert base.tiers["inter"].link is inter  # the base is untouched
    (row,) = whatif.link_what_ifs(base, [("link=inter=10gbe", "inter", slow)], [64])[0]["predicted"]
    assert row["throughput_low"] < row["throughput"] < row["throughput_high"]


def test_link_what_if_bad_input(tmp_path, capsys):
    one = write_csv(tmp_path / "one.csv", ["ddp,1,32,100,1e8"])
    base = ["predict", "--csv", one, "--link", "nvlink3", "--gpus-per-node", "8"]
    err = one_line_error(capsys, [*base, "--gpus", "8", "--what-if", "link=inter=10gbe"])
    assert "--what-if link=inter=10gbe: no predicted N spans several nodes" in err
    err = one_line_error(capsys, [*base, "--gpus", "16", "--link", "inter=ib-hdr", "--what-if", "link=warp9"])
    assert "--what-if link=warp9: unknown link profile 'warp9'" in err
    assert main([*base, "--gpus", "16", "--link", "inter=ib-hdr", "--what-if", "link=inter=25gbe"]) == 0
    assert "what-if link=inter=25gbe (inter-node link" in " ".join(capsys.readouterr().out.split())


# -- ready times from a one-device profile's trace
def synthetic_trace(path, tensors: int, steps: int = 2) -> str:
    """A trace of `steps` profiled steps of 1500 us: backward from 400 us, tensor i's gradient accumulated at
    400 + 10 (i + 1) us (i = 0 first, the model's last tensor)."""
    events = []
    for k in range(steps):
        t0 = 3000.0 * k
        events.append({"name": "ProfilerStep#%d" % k, "ph": "X", "ts": t0, "dur": 1500.0, "cat": "user_annotation"})
        events.append({"name": profiled.BACKWARD + "NllLossBackward0", "ph": "X", "ts": t0 + 400, "dur": 1.0})
        for i in range(tensors):
            events.append({"name": profiled.ACCUMULATE, "ph": "X", "ts": t0 + 400 + 10 * (i + 1) - 1, "dur": 1.0})
    path.write_text(json.dumps({"traceEvents": [dict(e, pid=1, tid=1) for e in events]}))
    return str(path)


def test_profile_timeline_from_the_gradient_accumulations(tmp_path):
    counts = layers.tensors_per_layer("resnet18")
    assert sum(counts) == 62  # torchvision resnet18's parameter tensors: 20 convolutions + 20 x 2 batch norm + fc
    record = {"model": "resnet18", "world_size": 1, "config": {"image_size": 32}}
    record["profile_trace"] = synthetic_trace(tmp_path / "t.json", 62)
    tl, share = profiled.profile_timeline(record, None, "--profile")
    assert share == pytest.approx(620 / 1500)  # backward 400..1020 us: 620 us of a 1500 us step
    assert tl.buckets == 1 and tl.ready == (1.0,) and "profile (resnet18: 2 profiled step(s)" in tl.source
    tl, _ = profiled.profile_timeline(record, 25 * 2**20, "--profile")
    # the fc (2 tensors) is ready at 20 of 620 us; the first bucket closes when layer4's tensors (the 25 MiB
    # mark) are in: its ready time is that of its last layer's last tensor, as a share of backward
    assert tl.buckets == 2 and 0 < tl.ready[0] < tl.ready[1] == pytest.approx(1.0)
    fr = profiled._step_ready(json.loads(open(record["profile_trace"]).read())["traceEvents"], 0, 1500, counts)[0]
    assert fr[0] == pytest.approx(20 / 620) and fr[1] == pytest.approx(50 / 620) and fr[-1] == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "vgg16", "bert_base"])
def test_profile_timeline_from_real_profiles(name):
    """Every stored profile's accumulations match its model's parameter tensors (torch's own count) step by step."""
    tl, share = profiled.profile_timeline(profile_record(name), DOC_BUCKET, "--profile")
    tl.check()
    assert 0.2 < share < 1 and tl.ready[-1] == pytest.approx(1.0) and "profile (" + name in tl.source


def test_profile_of_another_model_on_the_command_line(tmp_path, capsys):
    """A stored `distbench profile` sweep of resnet18 against resnet50 points: one line naming --profile, exit 2."""
    from distbench.results.store import Store
    from tests.builders import add_sweep, point

    store = tmp_path / "r.db"
    with Store(store) as st:
        trace = synthetic_trace(tmp_path / "t.json", 62)
        sid = add_sweep(
            st,
            [point("ddp", 1, 0.1, model="resnet18", profile_trace=trace)],
            command="distbench profile --model resnet18 --strategies ddp --gpus 1",
        )
    header = "strategy,model,world_size,per_device_batch,throughput,grad_bytes"
    one = write_csv(tmp_path / "one.csv", ["ddp,resnet50,1,64,400,1.0223e8"], header)
    args = ["predict", "--csv", one, "--results", str(store), "--profile", sid, "--link", "nvlink3"]
    err = one_line_error(capsys, [*args, "--gpus", "8", "--gpus-per-node", "8", "--no-store"])
    assert "--profile: a profile of resnet18, the points are resnet50: profile the same model" in err


def test_profile_bad_input(tmp_path, capsys):
    record = {"model": "resnet18", "world_size": 1, "profile_trace": synthetic_trace(tmp_path / "t.json", 61)}
    with pytest.raises(BadInput, match="--profile: 61 gradient accumulations in a profiled step, the model has 62"):
        profiled.profile_timeline(record, None, "--profile")
    with pytest.raises(BadInput, match="--profile: a profile of resnet18, the points are resnet50"):
        profiled.pick_record([record], "resnet50", "--profile")
    with pytest.raises(BadInput, match="no profiled one-device point"):
        profiled.pick_record([{**record, "world_size": 2}], "resnet18", "--profile")
    gone = {**record, "profile_trace": str(tmp_path / "gone.json")}
    with pytest.raises(BadInput, match="--profile: its trace .* cannot be read"):
        profiled.profile_timeline(gone, None, "--profile")

"""distbench profile / --profile (issue 32): the categories, the attribution of synthetic and converted traces,
the side-by-side sentences, the request on planned points, the flags' one-line errors, the exports and the
report; one real-process run of the whole command (slow)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from distbench.core.errors import BadInput
from distbench.core.sections import ProfileSection
from distbench.core.strategies import STRATEGIES
from distbench.profile import breakdown as bd
from distbench.profile import compare
from distbench.profile.categories import CATEGORIES, classify, parse_filter
from distbench.profile.request import with_profiling
from distbench.profile.trace import check_trace_folder, load_trace, trace_folder, trace_problems, write_trace
from distbench.run.plan import SweepOptions, make_plan
from tests.conftest import have, quick, require, run_cli


@pytest.mark.parametrize(
    "name, category",
    [
        ("aten::conv2d", "convolution"),
        ("autograd::engine::evaluate_function: ConvolutionBackward0", "convolution"),
        ("aten::addmm", "matmul"),
        ("aten::linear", "matmul"),
        ("aten::batch_norm", "normalisation"),
        ("NativeBatchNormBackward0", "normalisation"),
        ("aten::relu_", "elementwise"),
        ("aten::add_", "elementwise"),
        ("aten::max_pool2d", "pooling"),
        ("aten::adaptive_avg_pool2d", "pooling"),
        ("aten::cross_entropy_loss", "loss"),
        ("Optimizer.step#SGD.step", "optimizer"),
        ("gloo:all_reduce", "communication"),
        ("record_param_comms", "communication"),
        ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "data_input"),
        ("aten::view", None),
        ("aten::empty", None),
        # TF ops: 'scope/name:Type'; a Keras block name ('conv5_block3_2_relu') does not make an op a convolution
        (
            "gradient_tape/m/conv2d_1/convolution/Conv2DBackpropFilter:_MklNativeConv2DBackpropFilterWithBias",
            "convolution",
        ),
        ("gradient_tape/m/conv5_block3_2_relu_1/ReluGrad:ReluGrad", "elementwise"),
        ("m/conv1_bn_1/batchnorm/sub:Sub", "normalisation"),
        ("m/batch_normalization_3/moments/mean:Mean", "normalisation"),
        ("m/global_average_pooling2d_1/Mean:Mean", "pooling"),
        ("m/predictions_1/BiasAdd:_MklNativeFusedMatMul", "matmul"),
        ("sgd/AssignAddVariableOp_213:AssignAddVariableOp", "optimizer"),
        ("sparse_categorical_crossentropy/Sum:Sum", "loss"),
        ("m/dense/MatMul/ReadVariableOp:ReadVariableOp", None),
        ("CollectiveReduceV2:CollectiveReduceV2", "communication"),
        # GPU kernels
        ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw", "convolution"),
        ("ampere_sgemm_128x64_tn", "matmul"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication"),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
    ],
)
def test_classify(name, category):
    assert classify(name) == category


def X(name, ts, dur, tid=1, cat="cpu_op", pid=1):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "cat": cat}


def synthetic_trace() -> dict:
    """Two 100 us steps: a conv (with a nested mkldnn op and an uncategorized aten::empty inside it), an
    optimizer step whose elementwise ops are the optimizer's, a collective on a second thread overlapping the
    conv, framework time outside any op, and Python time (only the step marker running)."""
    events = []
    for k, t in enumerate((1000.0, 2000.0)):
        events += [
            X(f"{bd.TORCH_MARKER}{k}", t, 100, cat="user_annotation"),
            X("aten::conv2d", t + 0, 40),
            X("aten::mkldnn_convolution", t + 5, 30),
            X("aten::empty", t + 6, 2),
            X("Optimizer.step#SGD.step", t + 50, 20),
            X("aten::mul_", t + 52, 10),
            X("autograd::engine::bookkeeping", t + 75, 10),  # framework, no category
            X("gloo:all_reduce", t + 20, 40, tid=2),  # overlaps the conv for 20 us, then alone for 10 us
        ]
    events.append({"ph": "X", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 1e9, "pid": 1, "tid": 1, "cat": "Trace"})
    return {"traceEvents": events}


def test_breakdown_attributes_every_instant_once():
    b = bd.breakdown(synthetic_trace(), device="cpu", clock_step_s=[104e-6, 104e-6], timed_step_median_s=99e-6)
    cats = b["categories"]
    us = {c: cats[c]["s"] * 1e6 for c in CATEGORIES if "s" in cats[c]}
    # conv: 0-20 alone, 20-40 shared with the collective (half each)
    assert us["convolution"] == pytest.approx(30)
    # the collective: 20-40 half, 40-60 it runs alongside the optimizer (50-60): 40-50 alone, 50-60 half
    assert us["communication"] == pytest.approx(10 + 10 + 5)
    assert us["optimizer"] == pytest.approx(5 + 10)  # the mul_ inside the step is the optimizer's
    assert us["elementwise"] == 0
    assert us["host_overhead"] == pytest.approx(10)  # the framework call with no category
    assert us["idle"] == pytest.approx(100 - 30 - 25 - 15 - 10)
    assert b["sum_s"] * 1e6 == pytest.approx(100) and b["traced_step_s"] * 1e6 == pytest.approx(100)
    assert b["steps"] == 2 and cats["convolution"]["ops"] == 1 and cats["optimizer"]["ops"] == 1
    assert cats["convolution"]["top"][0][0] == "aten::conv2d"
    assert cats["memcpy"] == {"not_applicable": "not on a GPU"}
    assert b["left_over_s"] * 1e6 == pytest.approx(4) and b["within_tolerance"] is True
    worse = bd.breakdown(synthetic_trace(), device="cpu", clock_step_s=[130e-6])
    assert worse["within_tolerance"] is False


def test_layers_inside_an_optimizer_step_keep_their_category():
    """Lightning's automatic optimization: forward and backward run inside optimizer.step(closure)."""
    events = [
        X(f"{bd.TORCH_MARKER}0", 0, 100, cat="user_annotation"),
        X("Optimizer.step#SGD.step", 0, 100),
        X("aten::conv2d", 0, 50),
        X("aten::mkldnn_convolution", 5, 40),
        X("aten::relu_", 50, 10),
        X("aten::mul_", 80, 20),
    ]
    us = {
        c: v["s"] * 1e6
        for c, v in bd.breakdown({"traceEvents": events}, device="cpu")["categories"].items()
        if "s" in v
    }
    assert us["convolution"] == pytest.approx(50)
    assert us["optimizer"] == pytest.approx(50)  # relu_, mul_ and the step's own time around them


def test_breakdown_on_gpu_counts_device_kernels_only():
    events = [
        X(f"{bd.MARKER}#0", 0, 100, cat="user_annotation"),
        X("aten::conv2d", 0, 30),  # the host launching: the device is idle meanwhile
        X("aten::batch_norm", 30, 10),
        X("sm80_xmma_fprop_implicit_gemm_f32", 20, 50, pid=0, tid=7, cat="kernel"),
        X("bn_fw_tr_1C11_kernel_NCHW", 70, 10, pid=0, tid=7, cat="kernel"),
        X("Memcpy DtoD (Device -> Device)", 85, 5, pid=0, tid=7, cat="gpu_memcpy"),
        X(f"{bd.TORCH_MARKER}0", 20, 70, pid=0, tid=7, cat="gpu_user_annotation"),  # torch's copy on the GPU
    ]
    b = bd.breakdown({"traceEvents": events}, device="cuda", clock_step_s=[100e-6])
    us = {c: v["s"] * 1e6 for c, v in b["categories"].items()}
    assert us["convolution"] == pytest.approx(50) and us["normalisation"] == pytest.approx(10)
    assert us["memcpy"] == pytest.approx(5)
    assert us["host_overhead"] == pytest.approx(20)  # 0-20: only the host's launches run
    assert us["idle"] == pytest.approx(15)  # 80-85, 90-100: nothing but the step marker
    assert b["on_gpu_trace"] is True and b["steps"] == 1


def test_breakdown_needs_step_markers():
    with pytest.raises(ValueError, match=r"no step events \(distbench.step or ProfilerStep#\)"):
        bd.breakdown({"traceEvents": [X("aten::conv2d", 0, 10)]}, device="cpu")


def test_trace_problems_and_files(tmp_path):
    assert trace_problems(synthetic_trace()) == []
    assert trace_problems({"events": []}) == ["no traceEvents array"]
    assert "no numeric ts/dur" in trace_problems({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1}]})[0]
    path = write_trace(synthetic_trace(), tmp_path / "t" / "a.trace.json")
    assert load_trace(path)["traceEvents"][0]["name"] == "ProfilerStep#0"
    (tmp_path / "bad.json").write_text(json.dumps({"nope": 1}))
    with pytest.raises(ValueError, match="not trace-event JSON"):
        load_trace(tmp_path / "bad.json")
    assert trace_folder(tmp_path / "results.db").name == "results.db-traces"


def test_trace_folder_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(BadInput, match=r"^--trace-dir: cannot write traces into .*file/sub"):
        check_trace_folder(blocker / "sub", "--trace-dir")


@pytest.mark.slow  # importing TensorFlow for its XSpace proto takes ~12 s: the slow tier's
@require("tensorflow")
def test_xspace_converts_to_trace_events():
    """A TF XSpace built here (a host plane: the step annotation, a Conv2D and an sgd/ op on two threads)
    converted to trace-event JSON, then broken down like a torch trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from distbench.profile.trace import xspace_to_trace

    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=0, name="/host:CPU")
    names = {1: bd.MARKER, 2: "m/conv2d/Conv2D:_MklNativeConv2D", 3: "sgd/Mul_1:Mul", 4: "ExecutorState::Process"}
    for i, n in names.items():
        plane.event_metadata[i].id = i
        plane.event_metadata[i].name = n
    main = plane.lines.add(id=1, name="python", timestamp_ns=1000)
    main.events.add(metadata_id=1, offset_ps=0, duration_ps=100_000_000)  # 100 us
    work = plane.lines.add(id=2, name="tf_Compute", timestamp_ns=1000)
    work.events.add(metadata_id=4, offset_ps=0, duration_ps=90_000_000)
    work.events.add(metadata_id=2, offset_ps=10_000_000, duration_ps=50_000_000)
    work.events.add(metadata_id=3, offset_ps=70_000_000, duration_ps=10_000_000)
    doc = xspace_to_trace(space.SerializeToString())
    assert trace_problems(doc) == []
    assert {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"} == set(names.values())
    b = bd.breakdown(doc, device="cpu")
    us = {c: v["s"] * 1e6 for c, v in b["categories"].items() if "s" in v}
    assert us["convolution"] == pytest.approx(50) and us["optimizer"] == pytest.approx(10)
    assert us["host_overhead"] == pytest.approx(30) and us["idle"] == pytest.approx(10)


def test_category_filter():
    assert parse_filter(None) is None
    assert parse_filter("conv, matmul/GEMM,norm") == ("convolution", "matmul", "normalisation")
    with pytest.raises(ValueError, match=r"^--category: 'bogus' is not a category; categories: convolution, matmul"):
        parse_filter("conv,bogus")


def _record(strategy, framework, seconds: dict, clock: float) -> dict:
    cats = {c: {"s": 0.0, "share": 0.0, "ops": 0, "top": []} for c in CATEGORIES}
    total = sum(v[0] for v in seconds.values())
    for c, (s, ops, top) in seconds.items():
        cats[c] = {"s": s, "share": s / total, "ops": ops, "top": [[top, s, 1.0]]}
    cats["memcpy"] = {"not_applicable": "not on a GPU"}
    prof = {"categories": cats, "sum_s": total, "clock_step_s": clock, "steps": 3, "timed_step_median_s": clock * 0.98}
    return {"strategy": strategy, "framework": framework, "world_size": 1, "model": "resnet18", "profile": prof}


def _pair():
    return [
        _record(
            "torch",
            "torch",
            {"convolution": (0.097, 40, "aten::conv2d"), "normalisation": (0.021, 40, "aten::batch_norm")},
            0.12,
        ),
        _record(
            "tf",
            "tf",
            {"convolution": (0.228, 158, "Conv2DBackpropFilter"), "normalisation": (0.0135, 2039, "Mul")},
            0.25,
        ),
    ]


def test_side_by_side_and_sentences_come_from_the_numbers():
    recs = _pair()
    headers, rows = compare.side_by_side(recs)
    assert headers[-1] == "tf N=1 - torch N=1 ms"
    conv = next(r for r in rows if r[0] == "convolution")
    assert conv[1:] == ["97.00 (82.2%)", "228.00 (94.4%)", "+131.00"]
    assert next(r for r in rows if r[0] == "memory copies")[1] == "not on a GPU"
    lines = compare.sentences(recs)
    assert lines[0].startswith("Profiled step: torch N=1 120.00 ms, tf N=1 250.00 ms (2.08x)")
    assert lines[1].startswith("tf N=1 spends 131.00 ms more a step in convolution than torch N=1 (228.00 vs 97.00 ms")
    assert "in 158 operations a step against 40" in lines[1] and "Conv2DBackpropFilter 228.00 ms" in lines[1]
    assert "normalisation" in lines[2] and "torch N=1 spends 7.50 ms more" in lines[2]
    assert "noisy" not in lines[0]
    from distbench.analysis import is_noisy

    recs[1]["step_time_cv"] = 0.56
    flagged = compare.sentences(recs, is_noisy)
    assert flagged[0].endswith(
        "(2.08x). tf N=1 is flagged noisy (step-time CV 56%): a ratio from a noisy point can be off by more than "
        "its spread; profile again."
    )
    _, one = compare.breakdown_rows(recs[0], ("convolution", "memcpy"))
    assert one[0][:4] == ["convolution", "97.00", "82.2%", "40"] and one[1][1] == "not on a GPU"


def test_export_columns():
    cols = compare.profile_columns(_pair()[1]["profile"])
    assert cols["profile.convolution_s"] == 0.228 and cols["profile.memcpy_s"] == "not on a GPU"
    assert cols["profile.clock_step_s"] == 0.25


def test_profile_plot_draws_a_bar_per_point():
    from types import SimpleNamespace

    from distbench.profile.plot import plot_profile

    assert plot_profile(SimpleNamespace(points=[{"strategy": "ddp"}]), None, "t") is None
    fig = plot_profile(SimpleNamespace(points=_pair()), None, "t")
    assert len(fig.axes[0].patches) == 4  # two categories with time x two points


def _plan(*strategies):
    opts = SweepOptions(gpus="1", strategies=strategies, add_baselines=False, model="resnet18", image_size=32)
    return make_plan(opts, visible_gpus=0)


def test_the_request_rides_on_the_planned_points(tmp_path):
    prof = with_profiling(_plan("torch", "tf"), tmp_path / "traces", steps=2)
    assert prof.problem is None
    for p in prof.plan.points:
        assert p.config.profiling == ProfileSection(steps=2, trace_dir=str((tmp_path / "traces").resolve()))
    prof.finish()  # nothing to say


def test_no_profiler_and_unwritable_folder_are_measured_then_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    prof = with_profiling(_plan("ddp", "composer"), tmp_path / "f" / "t", dir_flag="--trace-dir")
    points = {p.strategy.name: p for p in prof.plan.points}
    assert points["composer"].config.profiling is None  # measured, unprofiled
    assert points["ddp"].config.profiling.trace_dir is None  # profiled, trace not kept
    if not points["composer"].skip_reason:
        assert prof.problem.startswith(
            f"--profile: strategy composer has no profiler ({STRATEGIES['composer'].no_profiler_reason})"
        )
    assert "--trace-dir: cannot write traces into" in prof.problem
    with pytest.raises(BadInput) as exc:
        prof.finish()
    assert exc.value.exit_code == 2


def test_bad_category_is_one_line_exit_2(tmp_path):
    proc = run_cli(["profile", "--category", "conv,bogus", "--results", str(tmp_path / "r.db")], timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"Error: --category: 'bogus' is not a category; categories: {', '.join(CATEGORIES)}"
    ]


@pytest.mark.skipif(
    not have("hta"), reason="holistictraceanalysis (HTA) is not installed: pip install holistictraceanalysis"
)
def test_hta_loads_a_trace(tmp_path):
    """Holistic Trace Analysis loads a trace of the shape the torch hook writes (ProfilerStep# steps)."""
    from hta.trace_analysis import TraceAnalysis

    doc = synthetic_trace()
    for i, e in enumerate(doc["traceEvents"]):  # what Kineto puts on every CPU op
        e["args"] = {"External id": i + 1, "Record function id": 0, "Ev Idx": i}
    write_trace({**doc, "distributedInfo": {"rank": 0}}, tmp_path / "rank-0.json")
    trace = TraceAnalysis(trace_dir=str(tmp_path)).t
    assert trace.get_ranks() == [0]
    names = set(trace.symbol_table.get_sym_table())
    assert {"aten::conv2d", "ProfilerStep#0", "gloo:all_reduce"} <= names


@pytest.mark.slow
@require("torch", "tensorflow")
def test_profile_command_torch_and_tf(tmp_path):
    """The whole command on CPU workers: both breakdowns, within 10% of the profiled steps, trace files that
    parse with the expected events, the side-by-side sentences, results show, export and the report."""
    db = str(tmp_path / "r.db")
    args = ["profile", "--strategy", "torch,tf", *quick(), "--profile-steps", "4", "--results", db]
    proc = run_cli([*args, "--format", "json"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert [p["strategy"] for p in doc["points"]] == ["torch", "tf"]
    for point in doc["points"]:
        prof = point["profile"]
        assert prof["steps"] == 4 and prof["within_tolerance"], prof
        assert prof["categories"]["memcpy"] == {"not_applicable": "not on a GPU"}
        assert prof["categories"]["convolution"]["s"] > 0 and prof["categories"]["convolution"]["ops"] > 0
        trace = load_trace(point["profile_trace"])
        names = [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"]
        assert sum(n.startswith(bd.MARKERS) for n in names) == 4
        assert any(classify(n) == "convolution" for n in names)
    assert doc["sentences"][0].startswith("Profiled step: torch N=1")
    shown = run_cli(["results", "show", "latest", "--results", db], timeout=120)
    assert shown.returncode == 0 and "Side by side" in shown.stdout and "convolution" in shown.stdout
    csv = tmp_path / "p.csv"
    assert run_cli(["results", "export", "latest", "--results", db, "--csv", str(csv)]).returncode == 0
    assert "profile.convolution_s" in csv.read_text().splitlines()[0]
    rep = run_cli(["report", "latest", "--results", db, "--out", str(tmp_path / "report.html")], timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert "Where the step goes: operation categories" in (tmp_path / "report.md").read_text()


@pytest.fixture
def measured_nothing(monkeypatch):
    """The commands plan, open their sweep and store it, and run no point (sweep.run_points returns none)."""
    from distbench.kinds import sweep

    monkeypatch.setattr(sweep, "run_points", lambda *a, **kw: [])


def test_run_profile_with_a_strategy_without_profiler_exits_2(tmp_path, monkeypatch, capsys, measured_nothing):
    from distbench.cli import main
    from distbench.core import strategies

    torch_ = dataclasses.replace(
        strategies.STRATEGIES["torch"], no_profiler_reason="a test's stand-in for a loop without the hook"
    )
    monkeypatch.setitem(strategies.STRATEGIES, "torch", torch_)
    args = ["run", "--strategy", "torch", "--profile", *quick(), "--results", str(tmp_path / "r.db")]
    assert main(args) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "Error: --profile: strategy torch has no profiler (a test's stand-in for a loop without the hook); "
        "it was measured unprofiled"
    )


def test_profile_with_an_unwritable_trace_dir_exits_2(tmp_path, capsys, measured_nothing):
    from distbench.cli import main

    (tmp_path / "f").write_text("x")
    args = ["profile", "--strategy", "torch", *quick(), "--trace-dir", str(tmp_path / "f" / "t")]
    assert main([*args, "--results", str(tmp_path / "r.db")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"Error: --trace-dir: cannot write traces into {tmp_path / 'f' / 't'}: ")
    assert last.endswith("; the points were measured and profiled, their trace files not kept")

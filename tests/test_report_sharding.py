"""The report's "What sharding costs and buys" section: memory per device beside the model-state formula of the
optimizer and precision each strategy used (plus a decoder's activations), the split's communication beside the
traffic expected relative to ddp's, the step against ddp's, tokens/s; only for sweeps with a decoder or a
sharded strategy.

Fixture numbers (tests/builders.point: the mean step is exactly step_s): gpt2 l2-d512-h8-v512, P parameters
(decoders.parameter_count), batch 1, sequence 32. ddp N=2: step 0.12 s, communication term 20 ms [15, 25],
measured 110 MiB above the RSS before the model (worst rank). fsdp N=2: step 0.13 s, 60 MiB. ZeRO-1 and
ZeRO-3 N=2: step 0.14 s and 0.15 s, measured 90 and 70 MiB."""

from __future__ import annotations

import re

import pytest

from distbench.analysis import load_sweep
from distbench.core.memory import state_memory
from distbench.models import decoders
from distbench.report import build_report, write_report
from distbench.report.blocks import Bullets, Table
from distbench.results.store import Store
from tests.builders import add_sweep, point, run_chromium, scaling_records

MIB = 2**20
SIZE = "l2-d512-h8-v512"
P = decoders.parameter_count(decoders.decoder_shape("gpt2", SIZE))
CFG = {"model": "gpt2", "model_size": SIZE, "seq_len": 32}


def decoder_point(strategy: str, n: int, step_s: float, measured_mib: float, **fields) -> dict:
    return point(
        strategy,
        n,
        step_s,
        model="gpt2",
        batch=1,
        config=CFG,
        peak_memory_per_rank_bytes=[int((400 + measured_mib) * MIB), int((395 + measured_mib) * MIB)][:n],
        memory_before_model_per_rank_bytes=[400 * MIB, 400 * MIB][:n],
        **fields,
    )


SPLIT = {
    "step_s": 0.12,
    "compute_s": 0.09,
    "wait_s": 0.01,
    "communication_s": 0.02,
    "communication_ci": [0.015, 0.025],
    "ci_scope": "within-run",
}


def records() -> list[dict]:
    return [
        point("torch", 1, 0.1, model="gpt2", batch=1, config=CFG),
        decoder_point("ddp", 2, 0.12, 110, comm_split=SPLIT),
        decoder_point("fsdp", 2, 0.13, 60),
        decoder_point("deepspeed-zero1", 2, 0.14, 90),
        decoder_point("deepspeed-zero3", 2, 0.15, 70),
    ]


@pytest.fixture
def sweep(tmp_path):
    with Store(tmp_path / "r.db") as store:
        return load_sweep(store, add_sweep(store, records()))


def section_of(sweep):
    return next((s for s in build_report(sweep, []).sections if s.id == "sharding"), None)


def tables(section) -> list[Table]:
    return [b for b in section.blocks if isinstance(b, Table)]


def mib(value: float) -> str:
    return f"{value / MIB:,.0f}" if value >= 10 * MIB else f"{value / MIB:.1f}"


def test_memory_table_sets_each_strategy_beside_the_formula_of_its_optimizer(sweep):
    memory = tables(section_of(sweep))[0]
    rows = {(r[0], r[1]): r for r in memory.rows}
    assert set(rows) == {("ddp", "2"), ("fsdp", "2"), ("deepspeed-zero1", "2"), ("deepspeed-zero3", "2")}
    activations = decoders.activation_bytes(decoders.decoder_shape("gpt2", SIZE), 1, 32, 4)
    # ddp and fsdp: torch SGD with momentum, 12 bytes a parameter; DeepSpeed adds its fp32 master copy: 16
    for name, shape, states, measured in [
        ("ddp", "12P", 12 * P, 110),
        ("fsdp", "12P/N", 6 * P, 60),
        ("deepspeed-zero1", "8P + 8P/N", 12 * P, 90),
        ("deepspeed-zero3", "16P/N", 8 * P, 70),
    ]:
        row = rows[(name, "2")]
        expected = states + activations
        assert row[3:] == [
            shape,
            mib(states),
            mib(activations),
            mib(expected),
            f"{measured}",
            f"{measured * MIB / expected:.2f}x",
        ]
    assert rows[("deepspeed-zero1", "2")][2] == "optimizer"
    assert rows[("fsdp", "2")][2] == "optimizer, grads, params" and rows[("ddp", "2")][2] == "none"


def test_traffic_table_and_sentences_set_the_sharded_step_beside_1_5x_ddps_communication(sweep):
    section = section_of(sweep)
    traffic = tables(section)[1]
    rows = {r[0]: r for r in traffic.rows}
    # tokens/s: 2 samples per step (1 per device) x 32 tokens / 0.12 s
    assert rows["ddp"][2:] == ["533", "267", "120.0", "-", "20.00 [15.00, 25.00]", "-", "1x"]
    assert rows["fsdp"][4:] == ["130.0", "1.08x", "not measured: no no-sync variant", "-", "1.5x"]
    assert rows["deepspeed-zero1"][-1] == "1x" and rows["deepspeed-zero3"][-1] == "1.5x"
    words = next(b for b in section.blocks if isinstance(b, Bullets)).items
    fsdp = next(w for w in words if w.startswith("fsdp N=2"))
    assert "its step is 10.0 ms longer than ddp's" in fsdp
    assert "1.5x ddp's traffic at ddp's measured rate would add 10.0 ms (0.5 x its communication term, 20.0 ms)" in fsdp
    assert "0.55x ddp's memory per device (model states 0.50x by the formulas)" in fsdp
    zero1 = next(w for w in words if w.startswith("deepspeed-zero1 N=2"))
    assert "20.0 ms longer" in zero1 and "would add 0.0 ms" in zero1


def test_section_appears_only_with_a_decoder_or_a_sharded_strategy(tmp_path):
    with Store(tmp_path / "g.db") as store:
        golden_like = load_sweep(store, add_sweep(store, scaling_records()))
        resnet_fsdp = load_sweep(
            store, add_sweep(store, [point("ddp", 2, 0.1, params=1000), point("fsdp", 2, 0.11, params=1000)])
        )
        gpt2_ddp = load_sweep(store, add_sweep(store, [decoder_point("ddp", 2, 0.12, 110)]))
    assert section_of(golden_like) is None  # the golden sweep's report is unchanged
    memory = tables(section_of(resnet_fsdp))[0]
    assert [r[:6] + r[7:] for r in memory.rows] == [
        ["ddp", "2", "none", "12P", mib(12 * 1000), "-", "-", "-"],
        ["fsdp", "2", "optimizer, grads, params", "12P/N", mib(6 * 1000), "-", "-", "-"],
    ]  # not a decoder: no activation estimate; nothing measured on these records
    assert tables(section_of(gpt2_ddp))[0].rows[0][0] == "ddp"


def test_state_memory_counts_deepspeeds_master_copy_and_gpu_peaks():
    record = {"strategy": "deepspeed-zero2", "world_size": 4, "device": "cuda", "config": CFG}
    m = state_memory({**record, "peak_memory_bytes": 10 * MIB})
    assert m["formula_bytes"] == 4 * P + 12 * P / 4 and m["optimizer"] == "sgd_momentum_master"
    assert m["measured_bytes"] == 10 * MIB
    half = state_memory({**record, "config": {**CFG, "precision": "amp"}})
    assert half["formula_bytes"] == 2 * P + 10 * P / 4  # fp16 params, fp16 grads / N, master + momentum / N
    assert state_memory({"strategy": "tf", "framework": "tf", "params": 10, "config": {"model": "resnet50"}}) is None


def test_activation_estimate_counts_layers_and_logits():
    shape = decoders.decoder_shape("gpt2", SIZE)
    tokens = 3 * 32
    full = decoders.activation_bytes(shape, 3, 32, 4)
    assert full == 2 * 16 * tokens * 512 * 4 + 3 * tokens * 512 * 4
    ckpt = decoders.activation_bytes(shape, 3, 32, 4, checkpointed=True)
    assert ckpt == 2 * tokens * 512 * 4 + 16 * tokens * 512 * 4 + 3 * tokens * 512 * 4


def test_markdown_and_html_both_carry_the_section(sweep, tmp_path):
    files = write_report(sweep, tmp_path / "r.html")
    md = files.markdown.read_text()
    assert (
        "## What sharding costs and buys" in md and "| deepspeed-zero3 | 2 | optimizer, grads, params | 16P/N |" in md
    )
    page = files.html.read_text()
    assert '<section id="sharding">' in page and "What sharding costs and buys" in page
    assert "16P/N" in page and "not measured: no no-sync variant" in page


# -- a real sweep (slow tier) --------------------------------------------------------------------------------
@pytest.mark.slow
def test_gpt2_tiny_ddp_fsdp_sweep_renders_the_section_with_measured_numbers(tmp_path, chromium):
    from tests.conftest import run_cli

    db = str(tmp_path / "r.db")
    args = ["scale", "--model", "gpt2", "--model-size", "tiny", "--strategy", "ddp,fsdp", "--gpus", "2"]
    args += ["--device", "cpu", "--steps", "3", "--warmup", "1", "--max-time", "2", "--target-ci", "0"]
    args += ["--telemetry-interval", "0", "--results", db]
    proc = run_cli(args, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Store(db) as store:
        sweep = load_sweep(store, store.sweeps(limit=1)[0]["id"])
    files = write_report(sweep, tmp_path / "report.html")
    md = files.markdown.read_text()
    start = md.index("## What sharding costs and buys")
    text = md[start : md.index("\n## ", start + 1)]
    number = r"[\d,.]+"
    for name, shape in (("ddp", "12P"), ("fsdp", "12P/N")):
        # strategy, N, states, formula, states MiB, activations MiB, expected MiB, measured MiB, ratio
        row = rf"\| {name} \| 2 \| [a-z, ]+ \| {re.escape(shape)} \| {number} \| {number} \| {number} \| {number} \| {number}x \|"
        assert re.search(row, text), text
        tokens = rf"\| {name} \| 2 \| {number} \| {number} \| {number} \|"
        assert re.search(tokens, text), text
    comm = r"(-?[\d.]+( \[-?[\d.]+, -?[\d.]+\])?|≈0 ms[^|]*)"  # the split's term, its CI where it has one
    assert re.search(rf"\| ddp \| 2 \|( [^|]+ \|){{4}} {comm} \|", text), text
    assert "fsdp N=2: its step is" in text

    dom = run_chromium(
        chromium, tmp_path, "dom", "--virtual-time-budget=5000", "--dump-dom", files.html.resolve().as_uri()
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    root = re.search(r"<html[^>]*>", dom.stdout).group(0)
    assert 'data-report-ready="yes"' in root and "data-js-errors" not in root, root
    assert '<section id="sharding"><h2>What sharding costs and buys</h2>' in dom.stdout

"""The decoder language models (gpt2, llama): exact parameter counts in both frameworks, the FLOPs and
model-state formulas, activation checkpointing, the tokens/s table and the one-line errors of their flags.

The large sizes are counted on torch's meta device (shapes only, nothing allocated); Keras has no such
device, so Keras builds the tiny sizes in the fast tier and the default (~125M) sizes in the slow tier."""

import gc
import os

import pytest

from distbench.cli import main
from distbench.models import decoders
from distbench.models.specs import get_spec, sized_spec

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ALL_SIZES = [(f, s) for f in decoders.FAMILIES for s in decoders.SIZES[f]]


def test_published_counts():
    assert decoders.parameter_count(decoders.SIZES["gpt2"]["124m"]) == 124_439_808  # HF gpt2
    assert decoders.parameter_count(decoders.SIZES["gpt2"]["350m"]) == 354_823_168  # HF gpt2-medium
    assert decoders.parameter_count(decoders.SIZES["llama"]["1b"]) == 1_100_048_384  # TinyLlama-1.1B
    assert get_spec("gpt2").reference_params == 124_439_808
    assert get_spec("llama").reference_params == decoders.parameter_count(decoders.SIZES["llama"]["125m"])


@pytest.mark.parametrize("family,size", ALL_SIZES)
def test_torch_counts_every_size_without_allocating(family, size):
    pytest.importorskip("torch")
    from distbench.models import torch_models

    shape = decoders.SIZES[family][size]
    assert torch_models.count_params_without_allocating(family, size) == decoders.parameter_count(shape)
    assert sum(decoders.gradient_tensors(shape)) == decoders.parameter_count(shape)


def _keras_count(family, size):
    pytest.importorskip("keras")
    from distbench.models import keras_models

    model = keras_models.build_model(family, model_size=size, seq_len=8)
    try:
        return keras_models.count_params(model)
    finally:
        del model
        gc.collect()


@pytest.mark.parametrize("family", decoders.FAMILIES)
def test_keras_count_equals_torch_tiny_and_custom(family):
    for size in ("tiny", "l1-d32-h2" + ("-kv1" if family == "llama" else "")):
        assert _keras_count(family, size) == decoders.parameter_count(decoders.decoder_shape(family, size))


@pytest.mark.slow
@pytest.mark.parametrize("family", decoders.FAMILIES)
def test_keras_count_at_the_default_size(family):
    assert _keras_count(family, None) == get_spec(family).reference_params


@pytest.mark.parametrize("family", decoders.FAMILIES)
def test_torch_and_keras_train_the_tiny_size(family):
    torch = pytest.importorskip("torch")
    from distbench.models import keras_models, torch_models

    model = torch_models.build_model(family, model_size="tiny")
    x, y = torch_models.synthetic_batch(family, 2, seq_len=16, model_size="tiny")
    out = model(x)
    assert out.shape == (2, 16, 512)
    torch_models.loss_fn(family)(out, y).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    km = keras_models.build_model(family, model_size="tiny", seq_len=16)
    xk, yk = keras_models.synthetic_batch(family, 2, seq_len=16, model_size="tiny")
    assert tuple(km(xk).shape) == (2, 16, 512)


@pytest.mark.parametrize("family", decoders.FAMILIES)
def test_causal_the_first_positions_ignore_later_tokens(family):
    torch = pytest.importorskip("torch")
    from distbench.models import torch_models

    model = torch_models.build_model(family, model_size="tiny").eval()
    x, _ = torch_models.synthetic_batch(family, 1, seq_len=12, model_size="tiny")
    changed = x.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 512
    with torch.no_grad():
        a, b = model(x), model(changed)
    assert torch.allclose(a[0, :8], b[0, :8], atol=1e-6)
    assert not torch.allclose(a[0, 8:], b[0, 8:])


@pytest.mark.parametrize("family", decoders.FAMILIES)
def test_activation_checkpointing_gives_the_same_gradients(family):
    torch = pytest.importorskip("torch")
    from distbench.models import torch_models
    from distbench.models.torch_decoder import set_checkpointing

    torch.manual_seed(0)
    model = torch_models.build_model(family, model_size="tiny")
    x, y = torch_models.synthetic_batch(family, 2, seq_len=16, model_size="tiny")
    grads = []
    for on in (False, True):
        assert set_checkpointing(model, on)
        model.zero_grad()
        torch_models.loss_fn(family)(model(x), y).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads))


def test_train_flops_per_token():
    s = decoders.SIZES["gpt2"]["124m"]
    n = 124_439_808 - 1024 * 768  # the position table is only looked up
    assert decoders.matmul_parameters(s) == n
    assert decoders.train_flops_per_token(s, 1024) == 6 * n + 12 * 12 * 768 * 1024
    l1b = decoders.SIZES["llama"]["1b"]
    assert decoders.matmul_parameters(l1b) == 1_100_048_384 - 32000 * 2048  # the input table is looked up


def test_mfu_uses_the_decoder_count():
    from distbench.core.mfu import train_flops_per_sample

    flops, how = train_flops_per_sample({"model": "llama", "model_size": "tiny", "seq_len": 64})
    s = decoders.SIZES["llama"]["tiny"]
    assert flops == 64 * (6 * decoders.matmul_parameters(s) + 12 * 2 * 64 * 64)
    assert "12 x 2 layers x 64 hidden x 64 sequence" in how


def test_zero_formulas():
    p = 1000
    # the ZeRO paper's mixed-precision Adam (K = 12)
    z = decoders.ZERO_STAGES
    assert decoders.model_state_bytes(p, 1, z[0], "adam_mixed") == 16 * p
    assert decoders.model_state_bytes(p, 4, z[1], "adam_mixed") == 4 * p + 12 * p / 4
    assert decoders.model_state_bytes(p, 4, z[2], "adam_mixed") == 2 * p + 14 * p / 4
    assert decoders.model_state_bytes(p, 4, z[3], "adam_mixed") == 16 * p / 4
    # fp32 SGD with momentum (what distbench trains with)
    assert decoders.model_state_bytes(p, 2, z[0]) == 12 * p
    assert decoders.model_state_bytes(p, 2, z[2]) == 4 * p + 8 * p / 2
    assert decoders.model_state_bytes(p, 2, z[3]) == 12 * p / 2
    # DeepSpeed's ZeRO optimizer over SGD: an fp32 master copy; its fp16 mode (--precision amp) halves the
    # parameters and gradients, so the precision the formula is given changes it
    assert decoders.model_state_bytes(p, 4, z[3], "sgd_momentum_master") == 16 * p / 4
    assert decoders.model_state_bytes(p, 4, z[3], "sgd_momentum_master", "fp16") == 12 * p / 4
    assert decoders.model_state_bytes(p, 4, z[1], "sgd_momentum_master", "fp16") == 4 * p + 8 * p / 4
    from distbench.core.strategies import STRATEGIES

    assert STRATEGIES["fsdp"].sharded_states == z[3] and STRATEGIES["ddp"].sharded_states == z[0]
    assert [STRATEGIES[f"deepspeed-zero{k}"].sharded_states for k in (1, 2, 3)] == [z[1], z[2], z[3]]


def test_sized_spec():
    spec = sized_spec("llama", "tiny")
    assert (spec.vocab_size, spec.max_seq_len, spec.reference_params) == (512, 256, 158_016)
    assert sized_spec("gpt2", "l2-d128-h4").max_seq_len == 1024
    assert (
        sized_spec("gpt2", "l2-d128-h4-v300").vocab_size == 300 and sized_spec("gpt2", "l2-d128-h4").vocab_size == 50257
    )


def _cli(capsys, args):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--model", "llama", "--model-size", "7b"],
            "Error: --model-size '7b' is not a size of llama: use one of tiny, 125m, 350m, 1b or "
            "l<layers>-d<hidden>-h<heads>[-kv<kv heads>][-v<vocabulary>]\n",
        ),
        (
            ["--model", "gpt2", "--model-size", "l2-d64-h3"],
            "Error: --model-size 'l2-d64-h3': 3 heads do not divide the hidden size 64\n",
        ),
        (
            ["--model", "llama", "--model-size", "l2-d64-h4-kv3"],
            "Error: --model-size 'l2-d64-h4-kv3': 3 key/value heads do not divide the 4 query heads\n",
        ),
        (
            ["--model", "gpt2", "--model-size", "tiny", "--seq-len", "300"],
            "Error: --seq-len 300 is too large for gpt2: the maximum is 256\n",
        ),
        (
            ["--model", "llama", "--seq-len", "4096"],
            "Error: --seq-len 4096 is too large for llama: the maximum is 2048\n",
        ),
        (
            ["--model", "resnet18", "--model-size", "tiny"],
            "Error: --model-size applies to the decoder models (gpt2, llama), not resnet18\n",
        ),
        (
            ["--model", "resnet18", "--activation-checkpointing"],
            "Error: --activation-checkpointing applies to the decoder models (gpt2, llama), not resnet18\n",
        ),
    ],
)
def test_bad_decoder_input_exits_2_with_one_line(capsys, args, message):
    code, out, err = _cli(capsys, ["scale", "--gpus", "1", "--strategy", "ddp", "--device", "cpu", *args])
    assert (code, err, out) == (2, message, "")


def test_decoder_table_shows_tokens_mfu_and_memory():
    from rich.console import Console

    from distbench.analysis.output import results_table, tokens_per_s

    record = {
        "strategy": "ddp",
        "world_size": 2,
        "status": "ok",
        "device": "cpu",
        "throughput": 10.0,
        "mfu": 0.25,
        "peak_memory_bytes": 3 * 2**30,
        "config": {"model": "gpt2", "seq_len": 64, "per_device_batch": 4},
    }
    assert tokens_per_s(record) == 640.0 and tokens_per_s(record, per_device=True) == 320.0
    console = Console(width=200, record=True)
    console.print(results_table([record]))
    text = console.export_text()
    assert "tokens/s" in text and "640" in text and "320" in text and "25.0%" in text


def test_state_memory_of_a_decoder_point():
    from distbench.core.memory import state_memory

    p = decoders.parameter_count(decoders.SIZES["gpt2"]["tiny"])
    record = {
        "strategy": "fsdp",
        "world_size": 2,
        "device": "cpu",
        "config": {"model": "gpt2", "model_size": "tiny"},
        "peak_memory_per_rank_bytes": [500 * 2**20, 520 * 2**20],
        "memory_before_model_per_rank_bytes": [400 * 2**20, 410 * 2**20],
    }
    m = state_memory(record)
    assert m["params"] == p and m["formula_bytes"] == 12 * p / 2
    assert m["measured_bytes"] == 110 * 2**20 and m["ratio"] == 110 * 2**20 / (6 * p)
    assert m["formula"].startswith("4P/N (params) + 4P/N (grads) + 4P/N (optimizer)")
    ddp = state_memory({**record, "strategy": "ddp", "memory_before_model_per_rank_bytes": None})
    assert ddp["formula_bytes"] == 12 * p and ddp["measured_bytes"] is None
    assert state_memory({"config": {"model": "resnet18"}}) is None


def test_verify_plans_the_cpu_size_of_a_decoder():
    from distbench.core.strategies import parse_strategies
    from distbench.kinds.plans import VerifyOptions, plan_verify

    opts = VerifyOptions(
        model="llama", device="cpu", gpus=2, strategies=tuple(parse_strategies(["ddp"])), global_batch=4, steps=2
    )
    plan = plan_verify(opts, visible_gpus=0)
    assert {p.config.model_size for p in plan.points} == {"tiny"}


# -- real runs on CPU workers (slow tier) --------------------------------------------------------------------
def _deepspeed_or_skip():
    from tests.conftest import have

    if not have("deepspeed"):
        pytest.skip("deepspeed is not installed (scripts/install.sh installs it optionally)")


@pytest.mark.slow
def test_scale_gpt2_tiny_ddp_fsdp_deepspeed_shows_tokens_mfu_and_memory(tmp_path):
    from distbench.core.memory import state_memory
    from distbench.results.store import Store
    from tests.conftest import run_cli

    _deepspeed_or_skip()
    db = str(tmp_path / "r.db")
    args = ["scale", "--model", "gpt2", "--model-size", "tiny", "--strategy", "ddp,fsdp,deepspeed", "--gpus", "1,2"]
    args += ["--device", "cpu", "--steps", "2", "--warmup", "1", "--max-time", "2", "--target-ci", "0"]
    args += ["--no-comm", "--telemetry-interval", "0", "--results", db]
    proc = run_cli(args, env={"COLUMNS": "160"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    header = " ".join(proc.stdout.splitlines()[:6])
    for word in ("tokens/s", "per", "MFU", "peak", "memory"):
        assert word in header
    store = Store(db)
    records = store.points(store.sweeps(limit=1)[0]["id"])
    ran = {(r["strategy"], r["world_size"]) for r in records if r["status"] == "ok"}
    for s in ("ddp", "fsdp", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3"):
        assert {(s, 1), (s, 2)} <= ran
    for r in records:
        assert r["config"]["model_size"] == "tiny" and r["config"]["seq_len"] == 64
        assert r["mfu"] and r["mfu"] > 0 and "6 x" in r["mfu_note"] and r["peak_memory_bytes"] > 0
        if r["strategy"] != "torch":
            assert state_memory(r)["measured_bytes"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("family", decoders.FAMILIES)
def test_verify_decoders_ddp_fsdp_zero2_train_like_one_device(family, tmp_path):
    from tests.conftest import run_cli

    _deepspeed_or_skip()
    args = ["verify", "--model", family, "--device", "cpu", "--gpus", "2", "--strategy", "ddp,fsdp,deepspeed-zero2"]
    proc = run_cli([*args, "--results", str(tmp_path / "v.db")])
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("pass") == 3


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed-zero3"])
def test_activation_checkpointing_runs_under_each_torch_strategy(strategy, tmp_path):
    from distbench.core.strategies import STRATEGIES
    from distbench.run.launch import run_point
    from tests.builders import point_config

    if strategy.startswith("deepspeed"):
        _deepspeed_or_skip()
    cfg = point_config(
        strategy,
        2,
        model="llama",
        model_size="tiny",
        image_size=None,
        seq_len=32,
        activation_checkpointing=True,
        steps=2,
        warmup=1,
        target_ci=0,
    )
    record = run_point(STRATEGIES[strategy], cfg, tmp_path / "point", 300)
    assert record["status"] == "ok", (record.get("reason"), record.get("stderr_tail"))
    assert record["config"]["activation_checkpointing"] is True and record["checkpointed_blocks"] == 2
    before = record["memory_before_model_per_rank_bytes"]
    assert len(before) == 2 and all(b > 0 for b in before) and record["peak_memory_bytes"] > max(before)


def test_fit_by_layers_helpers():
    from distbench.commands.fit import capped, layer_base, parse_cap
    from distbench.core.errors import BadInput

    assert parse_cap("600M") == 600 * 2**20 and parse_cap("1.5G") == int(1.5 * 2**30) and parse_cap(None) is None
    with pytest.raises(BadInput, match="--memory-cap must be a positive size"):
        parse_cap("lots")
    assert layer_base("llama", "125m") == "l{layers}-d768-h12-kv4"
    assert layer_base("gpt2", "tiny") == "l{layers}-d64-h4-v512"
    with pytest.raises(BadInput, match="--by layers applies to the decoder models"):
        layer_base("resnet18", None)
    ok = {"status": "ok", "peak_memory_per_rank_bytes": [300, 500], "memory_before_model_per_rank_bytes": [100, 100]}
    assert capped(ok, 400) is ok and capped(ok, None) is ok
    over = capped(ok, 399)
    assert over["status"] == "oom" and "--memory-cap" in over["reason"] and ok["status"] == "ok"
    assert capped({"status": "ok", "peak_memory_bytes": 5}, 1)["status"] == "failed"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model", "resnet18", "--by", "layers"], "Error: --by layers applies to the decoder models (gpt2, llama), "),
        (["--model", "llama", "--memory-cap", "-3G"], "Error: --memory-cap must be a positive size such as 600M or 2G"),
    ],
)
def test_fit_bad_input_is_one_line(capsys, args, message):
    code, out, err = _cli(capsys, ["fit", "--strategy", "ddp", "--gpus", "2", "--device", "cpu", *args])
    assert code == 2 and err.startswith(message) and err.count("\n") == 1 and out == ""


@pytest.mark.slow
def test_fit_llama_by_layers_under_a_memory_cap_fits_more_with_fsdp(tmp_path):
    """A CPU run with a limit: --memory-cap bounds each worker's peak RSS above its RSS before the model."""
    import json

    from tests.conftest import run_cli

    args = ["fit", "--model", "llama", "--model-size", "l1-d512-h8-kv4-v512", "--by", "layers", "--seq-len", "32"]
    args += ["--strategy", "ddp,fsdp", "--gpus", "2", "--device", "cpu", "--memory-cap", "400M", "--start", "4"]
    args += ["--max-batch", "64", "--tolerance", "25%", "--results", str(tmp_path / "f.db"), "--format", "json"]
    proc = run_cli(args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    document = json.loads(proc.stdout)
    assert document["by"] == "layers" and document["model_size_pattern"] == "l{layers}-d512-h8-kv4-v512"
    rows = {r["strategy"]: r for r in document["strategies"]}
    assert rows["ddp"]["largest_batch"] and rows["fsdp"]["largest_batch"] > rows["ddp"]["largest_batch"]
    assert rows["ddp"]["first_oom_batch"] and "--memory-cap" in rows["ddp"]["first_oom_reason"]


@pytest.mark.parametrize("family,size", [("gpt2", "124m"), ("llama", "125m"), ("llama", "tiny")])
def test_gradient_layout_is_the_torch_models_bucket_for_bucket(family, size):
    torch = pytest.importorskip("torch")
    from distbench.models import torch_models
    from distbench.workers.torch_common import bucket_sizes

    with torch.device("meta"):
        model = torch_models.build_model(family, model_size=size)
    shape = decoders.SIZES[family][size]
    assert decoders.gradient_tensors(shape) == [p.numel() for p in reversed(list(model.parameters()))]
    assert decoders.gradient_buckets(shape) == bucket_sizes(model)

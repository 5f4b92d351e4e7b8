"""The sharded strategies (issue 13): fsdp (FSDP2) and deepspeed-zero1/2/3 run for real on CPU workers at
N=1 and N=2 (gloo), are the same training as one device (verify, with the shards gathered for the
checksums), and a sweep records why their communication overhead is not measured."""

import os

import pytest

from distbench.core.strategies import STRATEGIES, Strategy, parse_strategies
from distbench.kinds.verify import DEFAULT_RTOL
from distbench.run.launch import run_point
from distbench.run.launchers import TORCHRUN
from distbench.run.plan import SweepOptions, make_plan
from tests.builders import point_config, verify
from tests.conftest import ROOT, have, require

SHARDED = {"fsdp": ("torch",), **{f"deepspeed-zero{k}": ("torch", "deepspeed") for k in (1, 2, 3)}}
PARAMS = [pytest.param(s, marks=require(*mods)) for s, mods in SHARDED.items()]
VERIFY = dict(
    model="resnet18",
    world_size=2,
    device="cpu",
    global_batch=4,
    steps=2,
    image_size=32,
    num_classes=10,
    threads=2,
    timeout_s=300,
)


def test_registry_group_launcher_and_why_no_comm():
    assert [s.name for s in parse_strategies(["sharded"])] == ["fsdp", "fsdp-hybrid", *list(SHARDED)[1:]]
    for name, mods in SHARDED.items():
        s = STRATEGIES[name]
        assert s.launcher == TORCHRUN.name and s.requires == mods and not s.needs_cuda_for_multi
        assert "shards training state" in s.no_comm_reason
    assert not {"fsdp", "deepspeed-zero1"} & {s.name for s in parse_strategies(())}  # not in the default sweep


def test_a_sweep_plans_no_comm_for_sharded_points():
    plan = make_plan(
        SweepOptions(model="resnet18", gpus=[1, 2], strategies=parse_strategies(["sharded", "ddp"]), device="cpu"),
        visible_gpus=0,
    )
    at2 = {p.strategy.name: p for p in plan.points if p.config.world_size == 2}
    assert at2["ddp"].config.measure_comm
    assert all(not at2[s].config.measure_comm and at2[s].skip_reason is None for s in SHARDED)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("strategy", PARAMS)
def test_each_sharded_strategy_runs_and_records_peak_memory(strategy, n, tmp_path):
    cfg = point_config(strategy, n, image_size=32, num_classes=10, steps=3, warmup=1, threads_per_worker=1, target_ci=0)
    record = run_point(STRATEGIES[strategy], cfg, tmp_path / "point", 300)
    assert record["status"] == "ok", (record.get("reason"), record.get("stderr_tail"))
    assert len(record["step_times_s"]) == 3 and min(record["step_times_s"]) > 0 and record["measured_window_s"] > 0
    assert record["launch"]["launcher"] == "torchrun"
    assert record["params"] == 11_181_642  # resnet18, 10 classes: counted before sharding, not one shard
    assert record["peak_memory_bytes"] > 100 * 2**20  # a worker's peak RSS: torch alone is more
    per_rank = record["peak_memory_per_rank_bytes"]
    assert (per_rank is None) if n == 1 else (len(per_rank) == 2 and max(per_rank) == record["peak_memory_bytes"])
    if strategy == "fsdp":
        assert record["fsdp"]["reshard_after_forward"] is True and record["fsdp"]["units"] == [
            "layer1.0",
            "layer1.1",
            "layer2.0",
            "layer2.1",
            "layer3.0",
            "layer3.1",
            "layer4.0",
            "layer4.1",
        ]  # resnet18's basic blocks
        # issue 20: no optimizer over the unsharded parameters (it would hold them in memory)
        assert record["fsdp"]["optimizer_built"] == "after sharding, over parameters of type DTensor"
    else:
        ds = record["deepspeed"]
        assert ds["zero_stage"] == int(strategy[-1]) and ds["backend"] == "gloo" and ds["accelerator"] == "cpu"
        assert ds["config"]["gradient_clipping"] == 0.0  # DeepSpeed's default would clip at 1.0
    print(
        f"\n[sharded] {strategy} N={n}: peak RSS {record['peak_memory_bytes'] / 2**20:.0f} MiB, "
        f"step median {sorted(record['step_times_s'])[1] * 1e3:.0f} ms"
    )


BROKEN = {"fsdp_sum": ("torch",), "zero_sum": ("torch", "deepspeed")}
"""Workers in tests/fault_workers that sum the gradients instead of averaging them."""


@pytest.fixture(scope="module")
def verdicts():
    """One verify of every sharded strategy and every broken worker installed here (the broken ones importable
    by the ranks): one single-device baseline run for all, each judged against it as when verified alone.
    {strategy: verdict}"""
    installed = lambda mods: all(have(m) for m in mods)  # noqa: E731
    strategies = [STRATEGIES[s] for s, mods in SHARDED.items() if installed(mods)]
    strategies += [
        Strategy(name=m, framework="torch", module=f"tests.fault_workers.{m}", launcher=TORCHRUN.name)
        for m, mods in BROKEN.items()
        if installed(mods)
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        results = verify(strategies=strategies, **VERIFY)
    assert [r["strategy"] for r in results] == [s.name for s in strategies]
    return {r["strategy"]: r for r in results}


@pytest.mark.slow
@require("torch", "deepspeed")
def test_verify_passes_for_every_sharded_strategy(verdicts):
    results = {s: verdicts[s] for s in SHARDED}
    for r in results.values():
        assert r["passed"] is True, r
        assert r["loss_max_rel_diff"] < DEFAULT_RTOL and r["update_max_rel_diff"] < DEFAULT_RTOL


@pytest.mark.slow
@pytest.mark.parametrize("module", [pytest.param(m, marks=require(*mods)) for m, mods in BROKEN.items()])
def test_summed_gradients_fail_verify(module, verdicts):
    r = verdicts[module]
    assert r["passed"] is False, r
    assert "weight updates differ" in r["reason"]
    assert r["update_max_rel_diff"] > 0.5  # updates ~2x the single-device ones at N=2

import pytest

from distbench.core.errors import BadInput
from distbench.core.strategies import STRATEGIES, parse_strategies
from distbench.run.devices import parse_gpus, resolve_device
from distbench.run.plan import SweepOptions, make_plan
from tests.builders import point_config


@pytest.mark.parametrize("text,expected", [("1,2,4", [1, 2, 4]), ("4,1", [1, 4]), (" 2 ", [2])])
def test_parse_gpus_ok(text, expected):
    assert parse_gpus(text) == expected


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "--gpus is empty"),
        ("0", "--gpus value '0' must be a positive device count"),
        ("-1", "--gpus value '-1' must be a positive device count"),
        ("two", "--gpus value 'two' is not a whole number"),
        ("1,2,2", "--gpus value '2' is duplicated"),
        ("1,,2", "has an empty entry"),
    ],
)
def test_parse_gpus_rejects(text, message):
    with pytest.raises(BadInput) as info:
        parse_gpus(text)
    assert message in str(info.value)
    assert info.value.exit_code == 2


def test_parse_strategies_comma_and_repeat_keep_registry_order():
    names = [s.name for s in parse_strategies(("ddp,torch", "horovod-tf"))]
    assert names == ["torch", "ddp", "horovod-tf"]
    core = ["torch", "dp", "ddp", "tf", "mirrored", "horovod-torch", "horovod-tf"]
    assert [s.name for s in parse_strategies(())] == core  # no --strategy: the core group
    assert [s.name for s in parse_strategies(("core",))] == core
    assert [s.name for s in parse_strategies(("all",))] == list(STRATEGIES)
    wrappers = [s.name for s in STRATEGIES.values() if s.group == "wrappers"]
    assert [s.name for s in parse_strategies(("wrappers,ddp",))] == ["ddp", *wrappers]
    with pytest.raises(BadInput, match="^unknown --strategy 'nope'; valid strategies: torch, dp, ddp"):
        parse_strategies(("nope",))


def test_resolve_device_cuda_requires_visible_gpus():
    with pytest.raises(BadInput, match="no CUDA GPU is visible"):
        resolve_device("cuda", [1], visible=0)
    with pytest.raises(BadInput, match="--gpus asks for 4 GPUs but only 2 are visible"):
        resolve_device("cuda", [1, 4], visible=2)
    assert resolve_device("cuda", [1, 2], visible=2).device == "cuda"
    assert resolve_device("auto", [1, 2], visible=2).device == "cuda"


def test_resolve_device_cpu_workers_say_so():
    choice = resolve_device("auto", [1, 2], visible=0)
    assert choice.device == "cpu"
    assert "CPU worker" in choice.note and "no CUDA GPU is visible" in choice.note


def _opts(**kw):
    base = dict(model="resnet50", gpus=[1, 2], strategies=parse_strategies(()), device="cpu")
    base.update(kw)
    return SweepOptions(**base)


def test_plan_baselines_first_at_n1_only_and_dp_skipped_on_cpu():
    plan = make_plan(_opts(), visible_gpus=0)
    got = [(p.strategy.name, p.config.world_size) for p in plan.points if p.config.baseline_threads is None]
    assert got[:2] == [("torch", 1), ("tf", 1)]
    assert ("torch", 2) not in got and ("tf", 2) not in got
    assert ("ddp", 1) in got and ("ddp", 2) in got
    dp = [p for p in plan.points if p.strategy.name == "dp"]
    assert len(dp) == 2 and all("DataParallel needs CUDA devices" in p.skip_reason for p in dp)
    assert plan.device.device == "cpu"
    # cores are split among the workers of a point
    ddp2 = next(p for p in plan.points if (p.strategy.name, p.config.world_size) == ("ddp", 2))
    ddp1 = next(p for p in plan.points if (p.strategy.name, p.config.world_size) == ("ddp", 1))
    assert ddp2.config.threads_per_worker <= ddp1.config.threads_per_worker


def test_plan_adds_missing_baseline_and_says_so():
    plan = make_plan(_opts(strategies=parse_strategies(("ddp",))), visible_gpus=0)
    assert [p.strategy.name for p in plan.points if p.config.baseline_threads is None] == ["torch", "ddp", "ddp"]
    assert plan.points[0].auto_added
    assert any("added the 'torch' baseline" in n for n in plan.notes)


def test_plan_strong_scaling_divides_the_global_batch():
    plan = make_plan(
        _opts(scaling="strong", batch_size=8, gpus=[1, 2, 4], strategies=parse_strategies(("ddp",))), visible_gpus=0
    )
    per = {p.config.world_size: p.config.per_device_batch for p in plan.points if p.strategy.name == "ddp"}
    assert per == {1: 8, 2: 4, 4: 2}
    with pytest.raises(BadInput, match="global batch 8 is not divisible by N=3"):
        make_plan(_opts(scaling="strong", batch_size=8, gpus=[3]), visible_gpus=0)


def test_plan_rejects_bad_values():
    with pytest.raises(
        BadInput, match=r"--model: unknown model 'resnet51' \(did you mean 'resnet50'\?\); valid models: "
    ):
        make_plan(_opts(model="resnet51"), visible_gpus=0)
    with pytest.raises(BadInput, match="--batch-size value 0 is not in the range 1..1048576"):
        make_plan(_opts(batch_size=0), visible_gpus=0)
    with pytest.raises(BadInput, match="too small for resnet50: the minimum is 32"):
        make_plan(_opts(image_size=16), visible_gpus=0)


def test_plan_skips_strategy_whose_framework_is_missing(monkeypatch):
    from distbench.core import strategies as strategies_mod

    monkeypatch.setattr(
        strategies_mod, "missing_modules", lambda s: ["horovod.torch"] if s.name == "horovod-torch" else []
    )
    plan = make_plan(_opts(strategies=parse_strategies(("horovod-torch",))), visible_gpus=0)
    hv = [p for p in plan.points if p.strategy.name == "horovod-torch"]
    assert hv and all(p.skip_reason.startswith("horovod.torch is not installed: run `make install`") for p in hv)


def test_multi_node_points_need_an_allocation(monkeypatch, tmp_path):
    for var in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DISTBENCH_CLUSTER_DIR", str(tmp_path))  # nor a one-machine cluster
    with pytest.raises(BadInput, match="--nodes 2 runs multi-node points inside a Slurm allocation"):
        make_plan(_opts(gpus=[2, 4], nodes=(1, 2)), visible_gpus=0)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    plan = make_plan(_opts(gpus=[2, 4], nodes=(1, 2)), visible_gpus=0)
    shapes = {(p.strategy.name, p.config.world_size, p.config.nodes) for p in plan.points}
    assert ("ddp", 4, 2) in shapes and ("horovod-tf", 2, 2) in shapes and ("mirrored", 4, 2) in shapes
    assert not any(k > 1 for s, n, k in shapes if s in ("torch", "tf", "dp"))  # one-process strategies
    with pytest.raises(BadInput, match="--nodes asks for 4 nodes but the Slurm allocation has 2"):
        make_plan(_opts(gpus=[4], nodes=(4,)), visible_gpus=0)


def test_multi_node_launch_uses_the_allocation(monkeypatch):
    from distbench.run.launch import build_command

    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[09-10]")
    cfg = point_config("ddp", 4, model="resnet50", nodes=2, device="cuda", per_device_batch=8)
    argv, _ = build_command(STRATEGIES["ddp"], cfg, "c.json", "r.json", base_env={})
    assert argv[:2] == ["srun", "--nodelist=gpu09,gpu10"]
    assert "--nnodes=2" in argv and "--nproc_per_node=2" in argv and "--rdzv_backend=c10d" in argv
    assert argv[argv.index("--rdzv_endpoint") + 1].startswith("gpu09:")
    hv = point_config("horovod-torch", 4, model="resnet50", nodes=2, device="cuda", per_device_batch=8)
    argv, _ = build_command(STRATEGIES["horovod-torch"], hv, "c.json", "r.json", base_env={})
    assert argv[argv.index("-H") + 1] == "gpu09:2,gpu10:2"

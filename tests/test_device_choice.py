"""Which device a sweep uses, and which points it skips, with the visible-GPU count injected:
`auto` uses any visible GPU (points needing more are skipped), device counts compare per node."""

import pytest

from distbench.core.errors import BadInput
from distbench.core.strategies import parse_strategies
from distbench.run import plan as plan_mod
from distbench.run.devices import resolve_device
from distbench.run.plan import SweepOptions, make_plan


def _plan(visible, gpus, nodes=(1,), device="auto", strategies=("ddp",)):
    opts = SweepOptions(
        model="resnet50", gpus=gpus, nodes=nodes, strategies=parse_strategies(strategies), device=device
    )
    return make_plan(opts, visible_gpus=visible)


def _skips(plan):
    return {(p.strategy.name, p.config.world_size, p.config.nodes): p.skip_reason for p in plan.points}


def test_auto_runs_what_fits_on_the_gpus_and_skips_the_rest():
    plan = _plan(visible=2, gpus=[1, 2, 4])
    assert plan.device.device == "cuda"
    assert {p.config.device for p in plan.points} == {"cuda"}
    assert _skips(plan) == {
        ("torch", 1, 1): None,
        ("ddp", 1, 1): None,
        ("ddp", 2, 1): None,
        ("ddp", 4, 1): "needs 4 GPUs, 2 visible",
    }
    assert "points needing more than 2 GPUs are skipped" in plan.device.note


def test_auto_uses_cpu_workers_only_without_a_gpu_and_cpu_when_asked():
    assert resolve_device("auto", [1, 2, 4], visible=0).device == "cpu"
    choice = resolve_device("cpu", [1, 2, 4], visible=2)
    assert choice.device == "cpu" and "--device cpu" in choice.note
    assert choice.unfit(4) is None  # CPU workers: any N up to the cap
    assert all(p.skip_reason is None for p in _plan(2, [1, 2, 4], device="cpu").points)


def test_cuda_refuses_a_point_that_cannot_fit_any_node():
    with pytest.raises(BadInput, match="^--gpus asks for 4 GPUs but only 2 are visible$"):
        resolve_device("cuda", [1, 4], visible=2)
    with pytest.raises(BadInput, match="^--gpus asks for 8 GPUs per node but only 4 are visible$"):
        resolve_device("cuda", [16], visible=4, nodes=(2,))


def test_multi_node_counts_compare_per_node(monkeypatch):
    """scale --nodes 2 --gpus 16 --device cuda on 8-GPU nodes: 8 per node fits."""
    choice = resolve_device("cuda", [16], visible=8, nodes=(2,))
    assert choice.device == "cuda" and choice.unfit(16, 2) is None
    from distbench.run import hosts

    monkeypatch.setattr(hosts, "check_allocation", lambda nodes: [f"node{i}" for i in range(nodes)])
    plan = _plan(visible=8, gpus=[8, 16], nodes=(1, 2), device="cuda")
    assert _skips(plan) == {
        ("torch", 1, 1): None,
        ("ddp", 8, 1): None,
        ("ddp", 8, 2): None,
        ("ddp", 16, 1): "needs 16 GPUs, 8 visible",
        ("ddp", 16, 2): None,
    }
    plan = _plan(visible=2, gpus=[8], nodes=(2,))  # auto, 2-GPU nodes: 4 per node is too many
    assert _skips(plan)[("ddp", 8, 2)] == "needs 4 GPUs per node, 2 visible"


def test_cpu_workers_are_capped_per_node(monkeypatch):
    monkeypatch.setattr(plan_mod, "cpu_cores", lambda: 2)
    assert resolve_device("cpu", [16], visible=0).device == "cpu"
    with pytest.raises(
        BadInput,
        match=r"^--gpus 17: CPU workers are limited to 16 on this machine "
        r"\(8 per core, 2 core\(s\)\)$",
    ):
        resolve_device("auto", [1, 17], visible=0)
    with pytest.raises(BadInput, match=r"^--gpus 64: CPU workers are limited to 16 per node"):
        resolve_device("cpu", [64], visible=0, nodes=(2,))
    assert resolve_device("cpu", [32], visible=0, nodes=(2,)).device == "cpu"


def test_comm_skips_rank_counts_beyond_the_visible_gpus(capsys, monkeypatch, tmp_path):
    from distbench.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("distbench.core.envinfo.visible_gpu_count", lambda: 1)
    # N=2 does not fit on 1 GPU: recorded skipped without launching anything; exit 0 (nothing failed)
    assert main(["comm", "--gpus", "2", "--backend", "gloo", "--sizes", "1K", "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert '"status": "skipped"' in out and "needs 2 GPUs, 1 visible" in out


def test_verify_refuses_a_count_beyond_the_visible_gpus(capsys, monkeypatch, tmp_path):
    from distbench.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("distbench.core.envinfo.visible_gpu_count", lambda: 1)
    assert main(["verify", "--gpus", "2"]) == 2
    assert capsys.readouterr().err == "Error: --gpus 2: needs 2 GPUs, 1 visible (use --device cpu for CPU workers)\n"

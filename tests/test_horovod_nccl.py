"""A Horovod build without NCCL on CUDA (issue 22, item 2) where the points run elsewhere: the Slurm and
Kubernetes planners keep the points (this machine's build says nothing of the image's or the nodes'),
and each rank checks its own build at init, so the point is recorded 'skipped' with the reason."""

from __future__ import annotations

import json
import types

import pytest

from distbench.core import horovod_nccl
from distbench.core.config import PointConfig
from distbench.core.strategies import parse_strategies
from distbench.run.plan import SweepOptions, make_plan
from distbench.slurm.plan import plan_sweep
from distbench.workers import comm_common, common
from tests.builders import point_config


def _opts():
    return SweepOptions(
        model="resnet18", gpus=[2], strategies=parse_strategies(["horovod-torch"]), device="cuda", image_size=32
    )


@pytest.fixture
def no_nccl_here(monkeypatch):
    monkeypatch.setattr(horovod_nccl, "nccl_built", lambda module: False)


def test_a_local_sweep_skips_horovod_on_cuda_without_nccl(no_nccl_here):
    (point,) = [p for p in make_plan(_opts(), visible_gpus=2).points if p.strategy.name == "horovod-torch"]
    assert point.skip_reason == horovod_nccl.reason("horovod.torch")


def test_a_cluster_sweep_keeps_horovod_points_planned_on_a_login_node_without_nccl(no_nccl_here):
    plan = plan_sweep(_opts(), [1])
    assert [p.strategy.name for p in plan.points if p.strategy.name == "horovod-torch"] == ["horovod-torch"]
    assert not any("NCCL" in n for n in plan.notes)


class FakeHvd(types.SimpleNamespace):
    __name__ = "horovod.torch"
    global_process_set = "all"

    def init(self, **kw):
        pass

    def nccl_built(self):
        return self.nccl


def _cfg(device: str) -> PointConfig:
    return point_config("horovod-torch", 1, device=device)


def test_a_rank_on_cuda_with_a_build_without_nccl_raises_point_skipped():
    with pytest.raises(common.PointSkipped, match="built without NCCL"):
        comm_common.horovod_init(FakeHvd(nccl=False), _cfg("cuda"))
    assert comm_common.horovod_init(FakeHvd(nccl=True), _cfg("cuda"))[True] == "all"
    assert comm_common.horovod_init(FakeHvd(nccl=False), _cfg("cpu"))[True] == "all"  # gloo on CPU workers


def test_point_skipped_is_a_skipped_record_with_its_reason(tmp_path, monkeypatch):
    cfg_path, out = tmp_path / "cfg.json", tmp_path / "out.json"
    cfg_path.write_text(_cfg("cuda").to_json())
    monkeypatch.setenv("RANK", "0")
    exits = []
    monkeypatch.setattr(common, "exit_now", exits.append)

    def body(cfg, out_path):
        raise common.PointSkipped(horovod_nccl.reason("horovod.torch"))

    common.run_worker("torch", body, ["--config", str(cfg_path), "--out", str(out)])
    record = json.loads(out.read_text())
    assert exits == [0]
    assert record["status"] == "skipped" and record["reason"] == horovod_nccl.reason("horovod.torch")

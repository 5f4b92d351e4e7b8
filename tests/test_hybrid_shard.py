"""fsdp-hybrid: FSDP2 hybrid sharding (a 2-D mesh, states sharded within a group of --shard-group ranks and
replicated across groups), planned like every strategy, its model-state formula over the group, and run for
real at N=4 as 2 groups of 2 on CPU workers (gloo)."""

from __future__ import annotations

import json

import pytest

from distbench.cli import main
from distbench.core.strategies import STRATEGIES
from distbench.kinds.plans import VerifyOptions, plan_verify
from distbench.kinds.verify import DEFAULT_RTOL
from distbench.models import decoders
from distbench.run.plan import SweepOptions, make_plan
from tests.builders import verify
from tests.conftest import require

HYBRID = STRATEGIES["fsdp-hybrid"]


def _plan(**kw):
    opts = SweepOptions(
        **{"model": "gpt2", "gpus": (2, 3, 4), "strategies": ("fsdp-hybrid",), "device": "cpu", "shard_group": 2, **kw}
    )
    return {p.config.world_size: p for p in make_plan(opts, visible_gpus=0).points if p.strategy is HYBRID}


def test_points_need_whole_shard_groups():
    points = _plan()
    assert points[3].skip_reason == "N=3 is not a multiple of --shard-group 2 (hybrid shard needs whole groups)"
    assert points[2].skip_reason is None and points[4].skip_reason is None
    assert points[4].config.shard_group == 2


def test_the_group_defaults_to_the_ranks_per_node():
    assert HYBRID.shard_degree(4, nodes=2) == 2 and HYBRID.shard_degree(4, nodes=1, shard_group=2) == 2
    assert STRATEGIES["fsdp"].shard_degree(4, nodes=2, shard_group=2) == 4  # full shard: over all N
    assert STRATEGIES["ddp"].shard_degree(4) == 1
    assert {p.skip_reason for p in _plan(shard_group=None).values()} == {None}  # one group of N on one node


def test_model_state_formula_divides_by_the_group_not_n():
    shape = decoders.decoder_shape("gpt2", "124m")
    params = decoders.parameter_count(shape)
    g = HYBRID.shard_degree(4, shard_group=2)
    hybrid = decoders.model_state_bytes(params, g, HYBRID.sharded_states)
    assert hybrid == pytest.approx(12 * params / 2)  # fp32 SGD + momentum: 12P/G
    assert decoders.model_state_bytes(params, g, HYBRID.sharded_states, "adam_mixed") == pytest.approx(16 * params / 2)
    full = decoders.model_state_bytes(params, 4, STRATEGIES["fsdp"].sharded_states)
    assert hybrid == pytest.approx(2 * full)  # replicated across the 2 groups
    assert HYBRID.traffic[0] == 1.5 and "across" in HYBRID.traffic[1]


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--strategy", "ddp", "--shard-group", "2"],
            "Error: --shard-group applies to fsdp-hybrid, which is not selected\n",
        ),
        (
            ["--strategy", "fsdp-hybrid", "--shard-group", "0"],
            "Error: Invalid value for '--shard-group': 0 is not in the range 1<=x<=1048576.\n",
        ),
    ],
)
@pytest.mark.parametrize("command", ["scale", "run", "profile", "verify", "slurm", "k8s"])
def test_bad_shard_group_exits_2_with_one_line(capsys, tmp_path, command, args, message):
    """Every command that takes --shard-group refuses it the same way, before planning or running anything."""
    where = ["--out", str(tmp_path / "out")] if command in ("slurm", "k8s") else ["--results", str(tmp_path / "r.db")]
    code = main([command, "--model", "gpt2", "--gpus", "4", "--device", "cpu", *args, *where])
    out = capsys.readouterr()
    assert (code, out.err, out.out) == (2, message, "")
    assert not list(tmp_path.iterdir())  # nothing written


def test_verify_skips_a_hybrid_point_that_is_not_whole_groups():
    opts = VerifyOptions(
        model="gpt2", gpus=3, strategies=(HYBRID,), global_batch=6, steps=1, device="cpu", shard_group=2
    )
    [base, hybrid] = plan_verify(opts, visible_gpus=0).points
    assert base.skip_reason is None and base.config.world_size == 1
    assert hybrid.skip_reason == "N=3 is not a multiple of --shard-group 2 (hybrid shard needs whole groups)"


@pytest.mark.slow
@require("torch")
def test_hybrid_shard_at_4_as_2_groups_of_2_trains_like_one_device():
    [r] = verify(
        model="gpt2",
        model_size="l2-d64-h4",
        seq_len=16,
        shard_group=2,
        world_size=4,
        strategies=[HYBRID],
        device="cpu",
        global_batch=8,
        steps=2,
        image_size=None,
        num_classes=10,
        threads=1,
        timeout_s=240,
    )
    assert r["passed"] is True and r["world_size"] == 4, r
    assert r["loss_max_rel_diff"] < DEFAULT_RTOL and r["update_max_rel_diff"] < DEFAULT_RTOL


@pytest.mark.slow
@require("torch")
def test_a_hybrid_sweep_point_records_its_mesh_and_placements(capsys, tmp_path):
    db = str(tmp_path / "r.db")
    args = ["--model", "gpt2", "--model-size", "tiny", "--seq-len", "32", "--gpus", "4", "--device", "cpu"]
    args += ["--strategy", "fsdp-hybrid", "--shard-group", "2", "--batch-size", "2", "--steps", "3"]
    assert main(["scale", *args, "--warmup", "1", "--target-ci", "0", "--results", db]) == 0
    capsys.readouterr()
    assert main(["results", "show", "latest", "--results", db, "--format", "json"]) == 0
    [r] = [p for p in json.loads(capsys.readouterr().out)["points"] if p["strategy"] == "fsdp-hybrid"]
    assert r["status"] == "ok" and r["world_size"] == 4 and r["backend"] == "gloo"
    assert r["fsdp"]["mesh"] == {"replicate": 2, "shard": 2}
    assert r["fsdp"]["parameter_placements"] == ["(Replicate(), Shard(dim=0))"]
    assert r["tokens_per_s"] == pytest.approx(r["throughput"] * 32)

"""What only a CUDA GPU can show (marker `gpu`: skipped, with the reason, where torch sees none; `make gpu-check`
runs them on a GPU machine): the plan resolves to the GPUs, and a real point trains on one with amp and the
channels-last layout its step really used."""

import json
import sqlite3

import pytest

from distbench.core.strategies import parse_strategies
from distbench.run.plan import SweepOptions, make_plan
from tests.conftest import quick, require, run_json

pytestmark = pytest.mark.gpu


@require("torch")
def test_auto_resolves_to_the_visible_gpus_and_amp_is_not_skipped():
    opts = SweepOptions(model="resnet18", gpus=[1], strategies=parse_strategies(("torch",)), precision="amp")
    plan = make_plan(opts)
    assert plan.device.device == "cuda" and plan.device.visible_gpus >= 1
    [point] = [p for p in plan.points if p.strategy.name == "torch"]
    assert point.config.device == "cuda" and point.skip_reason is None


@pytest.mark.slow
@require("torch")
def test_a_gpu_point_runs_amp_in_channels_last(tmp_path):
    db = tmp_path / "r.db"
    args = ["scale", "--gpus", "1", "--strategy", "torch", "--precision", "amp", "--channels-last"]
    _, [p] = run_json([*args, "--results", str(db), *quick(device="cuda")])
    assert p["status"] == "ok", p
    assert p["config"]["device"] == "cuda" and p["config"]["precision"] == "amp"
    record = json.loads(
        sqlite3.connect(db).execute("SELECT record_json FROM points WHERE id = ?", (p["point_id"],)).fetchone()[0]
    )
    assert record["probe"]["activation_dtype"] == "float16"
    assert record["probe"]["channels_last"] == {"input": True, "weights": True}

"""Workload knobs: each option changes what runs (checked in the record), disk data is really read
from disk, and options that cannot apply are rejected or recorded as not applicable."""

import json

import pytest

from distbench.core.errors import BadInput
from distbench.core.strategies import parse_strategies
from distbench.run.plan import SweepOptions, make_plan
from tests.builders import tiny_config
from tests.conftest import quick, require, run_json

SMALL = quick(device="cpu", timeout=None)


def _plan(**kw):
    base = dict(model="resnet18", gpus=[1, 2], strategies=parse_strategies(()), device="cpu")
    base.update(kw)
    return make_plan(SweepOptions(**base), visible_gpus=0)


def test_options_for_the_other_framework_are_rejected_or_recorded_not_applicable():
    with pytest.raises(BadInput, match=r"--xla does not apply to the selected strategies \(.*\): XLA is TensorFlow"):
        _plan(strategies=parse_strategies(("ddp",)), xla=True)
    with pytest.raises(BadInput, match="--compile does not apply to the selected strategies"):
        _plan(strategies=parse_strategies(("mirrored",)), compile=True)
    plan = _plan(compile=True)
    tf_points = [p for p in plan.points if p.strategy.framework == "tf"]
    assert all(not p.config.compile and p.config.not_applicable == ("--compile",) for p in tf_points)
    assert all(p.config.compile for p in plan.points if p.strategy.framework == "torch")
    assert any("--compile does not apply to tf, mirrored, horovod-tf" in n for n in plan.notes)


def test_token_and_image_options_are_checked_against_the_model():
    with pytest.raises(BadInput, match="--image-size does not apply to bert_base"):
        _plan(model="bert_base", image_size=64)
    with pytest.raises(BadInput, match="--seq-len does not apply to resnet18"):
        _plan(seq_len=16)
    with pytest.raises(BadInput, match="--seq-len 600 is too large for bert_base: the maximum is 512"):
        _plan(model="bert_base", seq_len=600)
    with pytest.raises(BadInput, match="--image-size 40 is not valid for unet: it must be a multiple of 16"):
        _plan(model="unet", image_size=40)
    assert _plan(model="bert_base").points[0].config.seq_len == 64  # CPU-sized default


def test_amp_is_skipped_on_cpu_with_a_reason():
    plan = _plan(precision="amp", strategies=parse_strategies(("ddp",)))
    assert all("needs a CUDA GPU; use --precision bf16 on CPU" in p.skip_reason for p in plan.points)


@pytest.mark.slow
@require("torch", "tensorflow")
def test_bf16_changes_the_activation_dtype(tmp_path):
    _, fp32 = run_json(["scale", "--gpus", "1", "--strategy", "torch,tf", "--results", str(tmp_path / "a.db"), *SMALL])
    _, bf16 = run_json(
        [
            "scale",
            "--gpus",
            "1",
            "--strategy",
            "torch,tf",
            "--precision",
            "bf16",
            "--results",
            str(tmp_path / "b.db"),
            *SMALL,
        ]
    )

    def dtypes(pts):
        return {p["strategy"]: json.loads(_record(tmp_path, p))["probe"]["activation_dtype"] for p in pts}

    assert dtypes(fp32) == {"torch": "float32", "tf": "float32"}
    assert dtypes(bf16) == {"torch": "bfloat16", "tf": "bfloat16"}


def _record(tmp_path, point):
    import sqlite3

    db = next(
        p
        for p in tmp_path.glob("*.db")
        if sqlite3.connect(p)
        .execute("SELECT 1 FROM points WHERE id = ? AND sweep_id = ?", (point["point_id"], point["sweep_id"]))
        .fetchone()
    )
    return (
        sqlite3.connect(db).execute("SELECT record_json FROM points WHERE id = ?", (point["point_id"],)).fetchone()[0]
    )


@pytest.mark.slow
@require("torch", "tensorflow")
def test_disk_data_is_read_from_disk_every_step(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_DATA", str(tmp_path / "data"))
    _, points = run_json(
        [
            "scale",
            "--gpus",
            "1,2",
            "--strategy",
            "ddp,mirrored",
            "--data",
            "disk",
            "--dataset-size",
            "32",
            "--loader-workers",
            "1",
            "--results",
            str(tmp_path / "r.db"),
            *SMALL,
        ],
        env={"DISTBENCH_DATA": str(tmp_path / "data")},
    )
    [folder] = list((tmp_path / "data").iterdir())
    assert len(list((folder / "x").glob("*.bin"))) == 32 and (folder / "meta.json").exists()
    for p in points:
        assert p["status"] == "ok", p
        record = json.loads(_record(tmp_path, p))
        assert record["config"]["data"] == "disk" and record["config"]["data_dir"] == str(folder)
        assert 0 < record["data_wait_fraction"] < 1  # time was really spent fetching batches


@require("torch")
def test_channels_last_reaches_the_tensors_the_step_uses():
    """The worker's own conversions (the model in build_model, each batch in to_device), read back the way the
    step records them (probe.channels_last): deleting either conversion fails here."""
    import torch

    from distbench.workers import torch_common as tc
    from distbench.workers.torch_data import to_device

    cpu = torch.device("cpu")
    layouts = {}
    for on in (True, False):
        cfg = tiny_config("torch", 1, channels_last=on)
        x = to_device(torch.randn(2, 3, 32, 32), cpu, cfg)
        layouts[on] = tc.channels_last_layout(x, tc.build_model(cfg, cpu, 0))
    assert layouts == {True: {"input": True, "weights": True}, False: {"input": False, "weights": False}}


@pytest.mark.slow
@require("torch")
def test_channels_last_and_compile_run(tmp_path):
    _, points = run_json(
        [
            "scale",
            "--gpus",
            "1",
            "--strategy",
            "torch",
            "--channels-last",
            "--compile",
            "--results",
            str(tmp_path / "r.db"),
            *SMALL,
        ],
        timeout=1200,
    )
    [p] = points
    assert p["status"] == "ok", p
    assert p["config"]["compile"] is True and p["config"]["channels_last"] is True
    # the layout the step really used (recorded from its tensors): the input batch and the conv weights
    assert json.loads(_record(tmp_path, p))["probe"]["channels_last"] == {"input": True, "weights": True}


@pytest.mark.slow
@require("tensorflow", "horovod.tensorflow")
def test_xla_runs_for_every_tf_strategy(tmp_path):
    _, points = run_json(
        [
            "scale",
            "--gpus",
            "2",
            "--strategy",
            "mirrored,horovod-tf",
            "--xla",
            "--results",
            str(tmp_path / "r.db"),
            *SMALL,
        ]
    )
    assert {p["strategy"]: p["status"] for p in points} == {"tf": "ok", "mirrored": "ok", "horovod-tf": "ok"}
    assert all(p["config"]["xla"] for p in points)

"""`distbench infer`: per-batch latency/throughput for both frameworks, stored like training points."""

import sqlite3

import pytest

from distbench.core.sections import InferSection
from distbench.kinds.infer import expand
from distbench.results.record import base_record
from tests.builders import point_config
from tests.conftest import require, run_cli, run_json


def test_expand_keeps_going_past_an_oom_batch():
    cfg = point_config("infer-torch", 1, device="cuda", per_device_batch=1, infer=InferSection(batch_sizes=(1, 512)))
    rec = base_record(cfg.to_dict(), strategy="infer-torch", framework="torch", status="ok")
    rec["per_batch"] = [
        {"batch": 1, "status": "ok", "times": [0.01, 0.02, 0.01]},
        {"batch": 512, "status": "oom", "reason": "OutOfMemoryError: CUDA out of memory"},
    ]
    ok, oom = expand(rec, cfg)
    assert ok["status"] == "ok" and ok["latency_median_s"] == 0.01 and ok["throughput"] == pytest.approx(3 / 0.04)
    assert oom["status"] == "oom" and oom["per_device_batch"] == 512 and oom["throughput"] is None


def test_bad_batch_sizes(capsys):
    from distbench.cli import main

    assert main(["infer", "--batch-sizes", "1,0"]) == 2
    assert capsys.readouterr().err == "Error: --batch-sizes value '0' must be a positive batch size\n"
    assert main(["infer", "--framework", "jax"]) == 2
    assert capsys.readouterr().err == "Error: --framework: unknown framework 'jax'; valid frameworks: torch, tf\n"
    assert main(["infer", "--framework", "pytorch"]) == 2
    assert capsys.readouterr().err == (
        "Error: --framework: unknown framework 'pytorch' (did you mean 'torch'?); valid frameworks: torch, tf\n"
    )


@pytest.mark.slow
@require("torch", "tensorflow")
def test_infer_both_frameworks(tmp_path):
    db = tmp_path / "r.db"
    _, points = run_json(
        [
            "infer",
            "--model",
            "resnet18",
            "--batch-sizes",
            "1,4",
            "--image-size",
            "32",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--device",
            "cpu",
            "--results",
            str(db),
        ]
    )
    assert [(p["framework"], p["per_device_batch"], p["status"]) for p in points] == [
        ("torch", 1, "ok"),
        ("torch", 4, "ok"),
        ("tf", 1, "ok"),
        ("tf", 4, "ok"),
    ]
    for p in points:
        assert 0 < p["latency_median_s"] <= p["latency_p95_s"]
        assert p["throughput"] > 0
    rows = sqlite3.connect(db).execute("SELECT strategy, per_device_batch FROM points ORDER BY id").fetchall()
    assert rows == [("infer-torch", 1), ("infer-torch", 4), ("infer-tf", 1), ("infer-tf", 4)]
    table = run_cli(
        [
            "infer",
            "--model",
            "resnet18",
            "--batch-sizes",
            "2",
            "--framework",
            "torch",
            "--image-size",
            "32",
            "--steps",
            "2",
            "--device",
            "cpu",
            "--results",
            str(db),
        ]
    )
    assert table.returncode == 0 and "latency median" in table.stdout and "(ms)" in table.stdout  # header may wrap

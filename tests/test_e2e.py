"""Real multi-process runs on CPU workers: every strategy at N=1 and N=2 on a tiny ResNet-50 config,
launched exactly as users launch them (torchrun, horovodrun, one process), through the CLI."""

import json
import sqlite3

import pytest

from distbench.results import stats
from distbench.results.record import undeclared_keys
from tests.builders import point_config
from tests.conftest import TINY, require, run_json

pytestmark = pytest.mark.slow

ALL_FRAMEWORKS = require("torch", "tensorflow", "horovod.torch", "horovod.tensorflow")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    db = tmp_path_factory.mktemp("store") / "results.db"
    # --target-ci: adaptive stopping as users get it by default (an explicit --steps alone turns it off)
    proc, points = run_json(
        ["scale", "--gpus", "1,2", "--device", "cpu", "--results", str(db), *TINY, "--target-ci", "2%"]
    )
    return proc, points, db


def _point(points, strategy, n):
    [p] = [
        p
        for p in points
        if p["strategy"] == strategy and p["world_size"] == n and not p["config"].get("baseline_threads")
    ]
    return p


@ALL_FRAMEWORKS
def test_every_strategy_runs_at_n1_and_n2(sweep):
    _, points, _ = sweep
    expected = {("torch", 1), ("tf", 1)} | {
        (s, n) for s in ("dp", "ddp", "mirrored", "horovod-torch", "horovod-tf") for n in (1, 2)
    }
    assert {(p["strategy"], p["world_size"]) for p in points} == expected
    for p in points:
        if p["strategy"] == "dp" or p["config"].get("baseline_threads"):  # per-core references: test_efficiency.py
            continue
        assert p["status"] == "ok", (p["strategy"], p["world_size"], p["reason"], p.get("stderr_tail"))
        assert p["throughput"] > 0
        assert p["measured_steps"] >= 3
        assert p["stopping"]["rule"] in ("target_ci_met", "max_time", "two_stage", "max_steps")
        if p["measured_steps"] >= stats.MIN_CI_STEPS and p["throughput_ci_low"] is None:  # refused, and why
            assert p["ci_note"].startswith("no within-run CI: the batch means stay autocorrelated")
        elif p["measured_steps"] >= stats.MIN_CI_STEPS:
            assert p["throughput_ci_low"] <= p["throughput"] <= p["throughput_ci_high"]
        else:  # too few steps for a within-run CI that covers: none, and the record says why
            assert p["throughput_ci_low"] is None and "within-run CI needs" in p["ci_note"]
        assert p["step_time_p5_s"] <= p["step_time_median_s"] <= p["step_time_p95_s"]
        assert p["device"] == "cpu" and p["scaling"] == "weak"
        assert p["global_batch"] == 2 * p["world_size"]
        # throughput is global samples over the measured time
        assert p["speedup"] == pytest.approx(p["throughput"] / _point(points, p["framework"], 1)["throughput"])
        assert p["efficiency"] == pytest.approx(p["speedup"] / p["world_size"])


@ALL_FRAMEWORKS
def test_baselines_define_speedup_one_and_wrappers_report_their_cost(sweep):
    _, points, _ = sweep
    assert _point(points, "torch", 1)["speedup"] == 1.0
    assert _point(points, "tf", 1)["speedup"] == 1.0
    for s in ("ddp", "mirrored", "horovod-torch", "horovod-tf"):
        p = _point(points, s, 1)
        assert p["wrapper_overhead"] == pytest.approx(1 - p["speedup"])


@ALL_FRAMEWORKS
def test_communication_overhead_is_measured_at_n2(sweep):
    _, points, _ = sweep
    for s in ("ddp", "mirrored", "horovod-torch", "horovod-tf"):
        p = _point(points, s, 2)
        assert p["comm_overhead"] < 1, p  # raw: may be below 0 when within the noise
        assert 0 <= p["overlap"] <= 1  # clipped for display; overlap_raw is not
        # one denominator: the overhead is over the headline step (the opening A), so headline step x overhead is
        # exposed comm (the split's own shares divide by its step, the mean of every A)
        split = p["comm_split"]
        assert p["allreduce_s"] > 0 and p["exposed_comm_s"] == pytest.approx(p["comm_overhead"] * p["time_per_step_s"])
        # one meaning of communication: exposed comm is the split's communication term (A - T), without the wait
        assert split["communication_s"] == pytest.approx(p["exposed_comm_s"])
        assert split["communication_s"] + split["wait_s"] + split["compute_s"] == pytest.approx(split["step_s"])
        assert p["grad_bytes"] == 4 * 25_557_032  # fp32 gradients of ResNet-50
        assert _point(points, s, 1)["comm_overhead"] is None  # nothing to synchronize at N=1


@ALL_FRAMEWORKS
def test_cpu_worker_telemetry_is_stored(sweep):
    _, points, db = sweep
    conn = sqlite3.connect(db)
    record = json.loads(
        conn.execute("SELECT record_json FROM points WHERE strategy = 'ddp' AND world_size = 2").fetchone()[0]
    )
    assert len(record["telemetry"]["cpu_util_mean"]) == 2  # one entry per worker process
    assert all(v > 0 for v in record["telemetry"]["rss_peak_bytes"].values())
    assert conn.execute("SELECT COUNT(*) FROM telemetry").fetchone()[0] > 0


@ALL_FRAMEWORKS
def test_dp_is_skipped_on_cpu_workers_not_faked(sweep):
    _, points, _ = sweep
    for n in (1, 2):
        p = _point(points, "dp", n)
        assert p["status"] == "skipped"
        assert p["throughput"] is None and p["speedup"] is None
        assert "DataParallel needs CUDA devices" in p["reason"]


@ALL_FRAMEWORKS
def test_output_says_cpu_workers_and_scaling(sweep):
    proc, _, _ = sweep
    assert "each 'GPU' below is a CPU worker process" in proc.stderr
    assert "weak scaling: the per-device batch is fixed at 2" in proc.stderr


@ALL_FRAMEWORKS
def test_every_point_is_in_the_store_with_steps_and_environment(sweep):
    _, points, db = sweep
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT id, strategy, world_size, status, record_json FROM points").fetchall()
    assert len(rows) == len(points)
    for pid, strategy, n, status, record_json in rows:
        steps = conn.execute("SELECT COUNT(*) FROM steps WHERE point_id = ?", (pid,)).fetchone()[0]
        assert (steps >= 3) if status == "ok" else (steps == 0)
        record = json.loads(record_json)
        assert record["config"]["world_size"] == n
        # The record schema is declared in one place (distbench.results.record.Record), and every key is in it.
        assert undeclared_keys(record) == set(), strategy
        for run in record.get("independent") or []:
            assert undeclared_keys(run) == set()
    sweep_row = conn.execute("SELECT status, env_json, command FROM sweeps").fetchone()
    assert sweep_row[0] == "complete"
    env = json.loads(sweep_row[1])
    assert env["packages"]["torch"] and env["packages"]["horovod"] and env["hostname"]
    assert "--gpus 1,2" in sweep_row[2]


@require("torch")
def test_strong_scaling_divides_the_batch(tmp_path):
    args = [a for a in TINY]
    args[args.index("--batch-size") + 1] = "4"
    _, points = run_json(
        [
            "scale",
            "--gpus",
            "2",
            "--strategy",
            "ddp",
            "--scaling",
            "strong",
            "--device",
            "cpu",
            "--results",
            str(tmp_path / "r.db"),
            *args,
        ]
    )
    ddp = _point(points, "ddp", 2)
    assert ddp["status"] == "ok", ddp.get("stderr_tail")
    assert ddp["per_device_batch"] == 2 and ddp["global_batch"] == 4 and ddp["scaling"] == "strong"
    assert _point(points, "torch", 1)["global_batch"] == 4


@require("torch")
def test_missing_framework_inside_the_worker_is_skipped_with_hint(tmp_path):
    """A worker whose framework import fails reports 'skipped' with an install hint, no traceback."""
    shim = tmp_path / "shim" / "horovod"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("")
    (shim / "torch.py").write_text(
        "raise ImportError('horovod.torch was built without PyTorch', name='horovod.torch')\n"
    )
    import os

    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "shim"), os.environ.get("PYTHONPATH", "")])}
    # run the worker module directly: horovodrun itself would need the real package

    cfg = point_config("horovod-torch", 1, model="resnet50", image_size=32, steps=1, warmup=0)
    (tmp_path / "c.json").write_text(cfg.to_json())
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "distbench.workers",
            "horovod_torch",
            "--config",
            str(tmp_path / "c.json"),
            "--out",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        timeout=300,
    )
    assert proc.returncode == 0
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["status"] == "skipped"
    assert (
        record["reason"]
        == "horovod.torch is not installed: run `make install` (creates .venv with torch, TensorFlow and Horovod)"
    )
    assert "Traceback" not in proc.stderr

"""`distbench verify`: every real strategy passes on CPU workers; deliberately broken ones fail."""

import os

import pytest

from distbench.core.strategies import Strategy
from distbench.kinds.verify import DEFAULT_RTOL, compare
from distbench.run.launchers import TORCHRUN
from tests.builders import verify
from tests.conftest import ROOT, require, run_cli

ARGS = dict(
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


@pytest.mark.slow
@require("torch", "tensorflow", "horovod.torch", "horovod.tensorflow")
def test_every_strategy_passes_on_cpu_workers(tmp_path):
    proc = run_cli(
        [
            "verify",
            "--results",
            str(tmp_path / "r.db"),  # verify stores its runs: not in the checkout
            "--model",
            "resnet18",
            "--gpus",
            "2",
            "--batch-size",
            "4",
            "--steps",
            "2",
            "--format",
            "json",
            "--device",
            "cpu",
        ]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    import json

    results = {r["strategy"]: r for r in json.loads(proc.stdout)}
    assert set(results) == {"dp", "ddp", "mirrored", "horovod-torch", "horovod-tf"}
    assert results["dp"]["passed"] is None and "DataParallel needs CUDA" in results["dp"]["reason"]
    for name in ("ddp", "mirrored", "horovod-torch", "horovod-tf"):
        r = results[name]
        assert r["passed"] is True, r
        assert r["loss_max_rel_diff"] < DEFAULT_RTOL and r["update_max_rel_diff"] < DEFAULT_RTOL


def _broken(module):
    return Strategy(name=module.rsplit(".", 1)[1], framework="torch", module=module, launcher=TORCHRUN.name)


BROKEN = ("ddp_sum", "ddp_same_data", "ddp_no_broadcast")


@pytest.fixture(scope="module")
def broken_verdicts():
    """One verify of the three broken workers (tests/fault_workers, importable by the ranks): one single-device
    baseline run for all three, each judged against it as when verified alone. {worker: verdict}"""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        results = verify(strategies=[_broken(f"tests.fault_workers.{name}") for name in BROKEN], **ARGS)
    assert [r["strategy"] for r in results] == list(BROKEN)
    return {r["strategy"]: r for r in results}


@pytest.mark.slow
@require("torch")
def test_summing_instead_of_averaging_fails(broken_verdicts):
    r = broken_verdicts["ddp_sum"]
    assert r["passed"] is False
    assert "weight updates differ" in r["reason"]
    assert r["update_max_rel_diff"] > 0.5  # updates ~2x the single-device ones at N=2


@pytest.mark.slow
@require("torch")
def test_feeding_every_worker_the_same_data_fails(broken_verdicts):
    r = broken_verdicts["ddp_same_data"]
    assert r["passed"] is False
    assert "losses differ from the single-device run" in r["reason"]


@pytest.mark.slow
@require("torch")
def test_a_missing_initial_broadcast_fails(broken_verdicts):
    r = broken_verdicts["ddp_no_broadcast"]
    assert r["passed"] is False
    assert "losses differ" in r["reason"]


def test_compare_math():
    base = {
        "strategy": "torch",
        "world_size": 1,
        "status": "ok",
        "verify_losses": [2.0, 1.9],
        "update_checksums": [[1.0, 0.1], [0.5, 0.0], [0.0, 0.0]],
    }
    good = dict(
        base,
        strategy="ddp",
        world_size=2,
        verify_losses=[2.0, 1.9000001],
        replica_max_rel_diff=0.0,
        update_checksums=[[1.00000001, 0.1], [0.5, 0.0], [0.0, 1.0]],
    )
    assert compare(good, base, 1e-4)["passed"] is True
    doubled = dict(good, update_checksums=[[2.0, 0.2], [1.0, 0.0], [0.0, 0.0]])
    verdict = compare(doubled, base, 1e-4)
    assert verdict["passed"] is False and verdict["update_max_rel_diff"] == pytest.approx(1.0)
    assert "2x the single-device one" in verdict["reason"]
    split = dict(good, replica_max_rel_diff=0.3)
    assert "replicas hold different weights" in compare(split, base, 1e-4)["reason"]

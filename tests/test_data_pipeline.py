"""`--data disk`: no epoch-boundary stalls, the page-cache status of the reads, multi-worker mirrored
really reading from disk, and a data wait that is unknown (None), never 0, when it was not timed."""

import json

import pytest

from distbench.core import datasets
from distbench.workers import common
from tests.builders import point_config, tiny_config
from tests.conftest import require
from tests.test_multinode import run_two_tf_workers


def _dataset(tmp_path, samples=8):
    return datasets.ensure_dataset(
        "resnet18", image_size=32, seq_len=None, num_classes=10, samples=samples, root=tmp_path / "data"
    )


def _cfg(folder, **kw):
    disk = dict(nodes=1, num_classes=10, steps=3, data="disk", data_dir=str(folder), loader_workers=1, prefetch=2)
    return tiny_config("ddp", 2, **{**disk, **kw})


@require("torch")
@pytest.mark.parametrize("world", [1, 2])
def test_the_loader_is_iterated_once_across_epochs(tmp_path, world):
    import torch

    from distbench.workers import torch_data

    folder = _dataset(tmp_path)
    cfg = _cfg(folder, world_size=world)
    batches = torch_data.make_batches(cfg, torch.device("cpu"), 0, world, 2)
    per_epoch = 8 // world // 2
    batches.next()
    first = batches._it
    seen = [batches.next() for _ in range(5 * per_epoch - 1)]
    # The same DataLoader iterator (its worker and prefetch queue) across 5 epochs: no restart.
    assert batches._it is first and first._num_workers == 1 and first._persistent_workers
    assert len(batches.waits) == 5 * per_epoch
    # Every epoch is a fresh shuffle of the rank's shard, not the same order repeated.
    labels = [b[1].tolist() for b in seen]
    assert len({json.dumps(labels[i : i + per_epoch]) for i in range(0, len(labels) - per_epoch + 1, per_epoch)}) > 1


@require("torch")
def test_repeating_sampler_starts_a_new_epoch_each_pass():
    from torch.utils.data import DistributedSampler

    from distbench.workers.torch_data import RepeatingSampler

    samplers = [DistributedSampler(range(8), num_replicas=2, rank=r, shuffle=True, seed=0) for r in range(2)]
    its = [iter(RepeatingSampler(s)) for s in samplers]
    epochs = [[[next(it) for _ in range(4)] for it in its] for _ in range(3)]
    assert all(sorted(a + b) == list(range(8)) for a, b in epochs)  # each pass: the ranks split the data
    assert samplers[0].epoch == 2 and len({tuple(e[0]) for e in epochs}) > 1  # reshuffled every epoch


def test_page_cache_status_of_a_just_written_dataset(tmp_path, monkeypatch):
    folder = _dataset(tmp_path)
    size = sum(p.stat().st_size for p in (folder / "x").iterdir()) + (folder / "y.bin").stat().st_size
    status = datasets.page_cache_status(folder)
    assert status["dataset_bytes"] == size and status["mem_available_bytes"] > size
    if have_fincore():
        assert status["resident_fraction"] == 1.0 and status["reads_from"] == "page cache"
        assert "100% of its 0.0 MB resident in the page cache (fincore)" in status["detail"]
    monkeypatch.setattr(datasets.shutil, "which", lambda _: None)
    status = datasets.page_cache_status(folder)
    assert status["resident_fraction"] is None and status["reads_from"] == "likely page cache"
    assert "residency not measured (no fincore)" in status["detail"]


def have_fincore() -> bool:
    return datasets.shutil.which("fincore") is not None


def test_data_wait_is_none_when_it_was_not_timed(tmp_path):
    disk = _cfg(tmp_path)
    synthetic = point_config("ddp", 2)
    none = common.data_wait_fields([], [0.1, 0.1], synthetic)
    assert none["data_wait_fraction"] is None and "not measured: no input pipeline" in none["data_wait_note"]
    untimed = common.data_wait_fields([], [0.1, 0.1], disk)
    assert untimed["data_wait_fraction"] is None and "did not time its input fetches" in untimed["data_wait_note"]
    timed = common.data_wait_fields([0.5, 0.01, 0.03], [0.1, 0.1], disk)  # warmup's wait is not counted
    assert timed["data_wait_fraction"] == pytest.approx(0.2)


@pytest.mark.slow
@require("tensorflow")
def test_multiworker_mirrored_reads_from_disk(tmp_path):
    folder = _dataset(tmp_path, samples=16)
    cfg = _cfg(folder, strategy="mirrored", nodes=2)
    record = run_two_tf_workers(cfg, tmp_path)
    assert 0 < record["data_wait_fraction"] < 1  # each worker's batches were fetched, and timed
    assert record["data_cache"]["dataset_bytes"] > 0 and record["data_cache"]["reads_from"]

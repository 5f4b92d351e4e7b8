"""Where a PyTorch worker's batches come from: one synthetic batch made once on the device (`--data synthetic`),
or a DataLoader over a distbench.core.datasets folder (`--data disk`), with the time each step waited for its batch."""

from __future__ import annotations

import time

from distbench.core import datasets
from distbench.core.config import PointConfig
from distbench.workers import common


def to_device(t, device, cfg: PointConfig):
    import torch

    t = t.to(device, non_blocking=True)
    if cfg.channels_last and t.dim() == 4 and t.is_floating_point():
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def make_batch(cfg: PointConfig, device, rank: int, batch: int):
    """Synthetic batch, made once and moved to the device before any timing.

    In verify mode every process makes the same global batch and takes its own shard.
    """
    from distbench.models import torch_models

    kw = dict(image_size=cfg.image_size, seq_len=cfg.seq_len, num_classes=cfg.num_classes, model_size=cfg.model_size)
    if cfg.verify:
        x, y = torch_models.synthetic_batch(cfg.model, cfg.global_batch, seed=cfg.seed, **kw)
        sl = common.rank_slice(cfg, rank)
        x, y = x[sl], y[sl]
    else:
        x, y = torch_models.synthetic_batch(cfg.model, batch, seed=cfg.seed + 1000 * (rank + 1), **kw)
    return to_device(x, device, cfg), to_device(y, device, cfg)


class DiskDataset:
    """Samples of a distbench.core.datasets folder; decoding (uint8 -> normalized float32) happens here,
    in the DataLoader's worker processes."""

    def __init__(self, folder: str):
        self.meta = datasets.load_meta(folder)
        self.paths = datasets.sample_paths(folder)
        self.targets = datasets.load_targets(folder)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import numpy as np
        import torch

        m = self.meta
        x = torch.from_numpy(np.fromfile(self.paths[i], dtype=m["x_dtype"]).reshape(m["x_shape"]))
        if m["x_dtype"] == "uint8":  # HWC image -> CHW float, normalized
            x = x.permute(2, 0, 1).float().div_(255.0).sub_(0.5).div_(0.25)
        else:
            x = x.long()
        y = torch.from_numpy(np.array(self.targets[i]))
        y = y.long() if m["y_dtype"] == "int32" else y.float().permute(2, 0, 1)
        return x, y


class Batches:
    """Where each step's batch comes from; records the time spent waiting for it. A loader is
    iterated once for the whole run (its sampler repeats: RepeatingSampler)."""

    def __init__(self, fixed=None, loader=None, device=None, cfg=None):
        self.fixed, self.loader, self.device, self.cfg = fixed, loader, device, cfg
        self.waits: list[float] = []
        self._it = None

    def next(self):
        if self.fixed is not None:
            return self.fixed
        t0 = time.perf_counter()
        if self._it is None:
            self._it = iter(self.loader)
        x, y = next(self._it)
        x, y = to_device(x, self.device, self.cfg), to_device(y, self.device, self.cfg)
        self.waits.append(time.perf_counter() - t0)
        return x, y


class RepeatingSampler:
    """`sampler`'s order over and over, a new epoch (set_epoch, so a new shuffle) each pass, never
    ending: the DataLoader's iterator is built once, so its workers and prefetch queue never drain
    and restart at an epoch boundary (like tf.data's .repeat()); batches run across epochs."""

    def __init__(self, sampler):
        self.sampler = sampler

    def __iter__(self):
        epoch = 0
        while True:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
            yield from self.sampler
            epoch += 1


def make_batches(cfg: PointConfig, device, rank: int, world: int, batch: int) -> Batches:
    if cfg.data == "synthetic":
        return Batches(fixed=make_batch(cfg, device, rank, batch))
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

    dataset = DiskDataset(cfg.data_dir)
    gen = torch.Generator().manual_seed(cfg.seed)
    sampler = (
        DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True)
        if world > 1
        else RandomSampler(dataset, generator=gen)
    )
    if len(sampler) < batch:
        raise ValueError(f"the disk dataset has {len(dataset)} samples: too few for a batch of {batch} per device")
    workers = cfg.loader_workers
    loader = DataLoader(
        dataset,
        batch_size=batch,
        sampler=RepeatingSampler(sampler),
        num_workers=workers,
        drop_last=True,
        pin_memory=cfg.pin_memory and device.type == "cuda",
        prefetch_factor=cfg.prefetch if workers > 0 else None,
        persistent_workers=workers > 0,
    )
    return Batches(loader=loader, device=device, cfg=cfg)

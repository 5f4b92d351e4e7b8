"""The PyTorch workload every torch strategy runs, and the driver that measures it.

A strategy module supplies a `Distribution` (how processes talk and how the model is wrapped);
everything else (model, data, loss, optimizer, the step, timing, verify mode, the record) is here,
once, so every torch strategy runs the identical workload.
"""
from __future__ import annotations

import os
from typing import Any

from distbench import stats
from distbench.config import PointConfig
from distbench.launchers import common


class Distribution:
    """Single-device default; strategies override what differs."""

    name = "single"
    backend: str | None = None
    rank = 0
    world = 1
    local_rank = 0

    def start(self, cfg: PointConfig) -> None:
        pass

    def wrap(self, cfg: PointConfig, model, optimizer, device):
        """Return (model to call, optimizer to step) for synchronized training."""
        return model, optimizer

    def gather(self, obj: Any) -> list:
        return [obj]

    def barrier(self) -> None:
        pass

    def mean(self, value: float) -> float:
        return value

    def allreduce_seconds(self, cfg: PointConfig, model, wrapped) -> list[float] | None:
        """Standalone time to all-reduce the gradient volume the way this strategy does."""
        return None

    def stop(self) -> None:
        pass


def configure_threads(cfg: PointConfig) -> None:
    import torch

    if cfg.device == "cpu":
        torch.set_num_threads(cfg.threads_per_worker)


def device_for(cfg: PointConfig, local_rank: int = 0):
    import torch

    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda was requested but torch sees no CUDA device")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def make_sync(device):
    import torch

    if device.type == "cuda":
        def sync(_: Any) -> None:
            torch.cuda.synchronize(device)
    else:
        def sync(_: Any) -> None:
            return None
    return sync


def build_model(cfg: PointConfig, device, seed: int):
    import torch

    from distbench.models import torch_models

    torch.manual_seed(seed)
    return torch_models.build_model(cfg.model, num_classes=cfg.num_classes, image_size=cfg.image_size).to(device)


def make_batch(cfg: PointConfig, device, rank: int, batch: int):
    """Synthetic batch, made once and moved to the device before any timing.

    In verify mode every process makes the same global batch and takes its own shard.
    """
    from distbench.models import torch_models

    if cfg.verify:
        x, y = torch_models.synthetic_batch(cfg.model, cfg.global_batch, image_size=cfg.image_size,
                                            num_classes=cfg.num_classes, seed=cfg.seed)
        sl = common.rank_slice(cfg, rank)
        x, y = x[sl], y[sl]
    else:
        x, y = torch_models.synthetic_batch(cfg.model, batch, image_size=cfg.image_size,
                                            num_classes=cfg.num_classes, seed=cfg.seed + 1000 * (rank + 1))
    return x.to(device), y.to(device)


def make_optimizer(cfg: PointConfig, model):
    import torch

    return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)


def make_step(cfg: PointConfig, model, optimizer, x, y):
    from distbench.models import torch_models

    loss_fn = torch_models.loss_fn(cfg.model)
    # Verify mode: BatchNorm/dropout in inference mode so a shard's forward pass does not depend on
    # the other shards; gradients then average exactly to the full-batch gradient.
    model.eval() if cfg.verify else model.train()

    def step():
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def grad_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def runtime_info(device) -> dict:
    import torch

    info = {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
        info["gpu_name"] = torch.cuda.get_device_name(device)
    return info


def _update_checksums(model, start: list) -> list[list[float]]:
    """Per tensor: [L2 norm of the weight update, sum of the update] (float64)."""
    out = []
    for p, p0 in zip(model.parameters(), start):
        d = (p.detach().double() - p0)
        out.append([float(d.norm()), float(d.sum())])
    return out


def run(cfg: PointConfig, out_path: str, strategy: str, dist: Distribution) -> None:
    """Build, (wrap), measure or verify, and let rank 0 write the record."""
    import torch

    dist.start(cfg)
    try:
        if dist.world != cfg.world_size:
            raise RuntimeError(f"launched with {dist.world} processes but the point asks for {cfg.world_size}")
        configure_threads(cfg)
        device = device_for(cfg, dist.local_rank)
        model = build_model(cfg, device, common.verify_seed(cfg, dist.rank))
        optimizer = make_optimizer(cfg, model)
        x, y = make_batch(cfg, device, dist.rank, cfg.per_device_batch)
        if cfg.sync:
            wrapped, optimizer = dist.wrap(cfg, model, optimizer, device)
        else:
            wrapped = model  # independent replicas: the same step, no gradient synchronization
        step = make_step(cfg, wrapped, optimizer, x, y)
        sync = make_sync(device)
        extra: dict = {"params": param_count(model), "grad_bytes": grad_bytes(model), "backend": dist.backend,
                       "runtime": runtime_info(device), "sync": cfg.sync}
        if cfg.verify:
            start = [p.detach().double().clone() for p in model.parameters()]
            losses = []
            for _ in range(cfg.steps):
                losses.append(dist.mean(float(step())))
            sums = _update_checksums(model, start)
            replicas = dist.gather(sums)
            extra.update(verify_losses=losses, update_checksums=sums,
                         replica_max_rel_diff=common.max_rel_diff(replicas))
            times, loss = [], losses[-1]
        else:
            times, loss, stopping = common.measure(step, sync, cfg, dist.gather)
            loss = float(loss)
            gathered = dist.gather(times)
            times = stats.merge_rank_step_times(gathered)
            extra.update(stopping=stopping, per_rank_step_times_s=gathered if dist.world > 1 else None)
            if cfg.measure_comm and cfg.sync and dist.world > 1:
                ar = dist.allreduce_seconds(cfg, model, wrapped)
                if ar:
                    extra.update(allreduce_samples_s=ar, allreduce_s=stats.percentile(ar, 50))
        common.check_loss(loss)
        if dist.rank == 0:
            common.emit(cfg, out_path, strategy=strategy, framework="torch", status="ok", step_times=times,
                        final_loss=loss, **extra)
    finally:
        dist.stop()


def bucket_sizes(model, cap_bytes: int = 25 * 1024 * 1024, first_bytes: int = 1024 * 1024) -> list[int]:
    """Element counts of DDP-style gradient buckets: parameters in reverse order, the first bucket
    capped at 1 MiB and the rest at 25 MiB (DDP's defaults)."""
    sizes, current, current_bytes, cap = [], 0, 0, first_bytes
    for p in reversed([p for p in model.parameters() if p.requires_grad]):
        nbytes = p.numel() * p.element_size()
        if current and current_bytes + nbytes > cap:
            sizes.append(current)
            current, current_bytes, cap = 0, 0, cap_bytes
        current += p.numel()
        current_bytes += nbytes
    if current:
        sizes.append(current)
    return sizes


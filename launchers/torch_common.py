"""The PyTorch workload every torch strategy runs: same model, data, loss, optimizer and step."""
from __future__ import annotations

import os
from typing import Any

from distbench.config import PointConfig


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


def build(cfg: PointConfig, device, rank: int = 0, batch: int | None = None):
    """Model (same initial weights on every rank), synthetic batch made once on the device, SGD."""
    import torch

    from distbench.models.torch_models import build_model

    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, num_classes=cfg.num_classes).to(device)
    batch = batch or cfg.per_device_batch
    gen = torch.Generator(device="cpu").manual_seed(cfg.seed + 1000 * (rank + 1))
    x = torch.randn(batch, 3, cfg.image_size, cfg.image_size, generator=gen).to(device)
    y = torch.randint(0, cfg.num_classes, (batch,), generator=gen).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    return model, optimizer, x, y


def make_step(model, optimizer, x, y):
    import torch

    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()

    def step():
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def make_sync(device):
    import torch

    if device.type == "cuda":
        def sync(_: Any) -> None:
            torch.cuda.synchronize(device)
    else:
        def sync(_: Any) -> None:
            return None
    return sync


def runtime_info(cfg: PointConfig, device) -> dict:
    import torch

    info = {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
        info["gpu_name"] = torch.cuda.get_device_name(device)
    return info


def param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())

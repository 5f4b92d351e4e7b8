"""The device a PyTorch worker runs on: which one, its threads and math mode (TF32, cuDNN autotuning, the
memory layout; verify mode's deterministic kernels), the wait before a clock read, and the runtime the record
names. torch is imported inside the functions, not at module import (as in torch_common)."""

from __future__ import annotations

import os
from typing import Any

from distbench.core.config import PointConfig


def configure_threads(cfg: PointConfig) -> dict:
    """CPU workers: intra-op threads = the worker's share of the cores. GPUs: the math mode both
    frameworks share (tf_device.configure): TF32 for float32 matmuls and convolutions as cfg.tf32
    says, cuDNN autotuning (cudnn.benchmark) on; verify mode keeps verify_determinism()'s settings
    (no TF32, deterministic kernels). Returns the math mode as the record keeps it."""
    import torch

    if cfg.device == "cpu":
        torch.set_num_threads(cfg.threads_per_worker)
        return {
            "tf32": None,
            "cudnn_autotune": None,
            "layout": _layout(cfg),
            "note": "CPU workers: TF32 and cuDNN do not apply",
        }
    if not cfg.verify:
        torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
        torch.backends.cudnn.allow_tf32 = cfg.tf32
        torch.backends.cudnn.benchmark = True
    matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    return {
        "tf32": matmul
        if matmul == conv
        else f"matmul {'on' if matmul else 'off'}, convolutions {'on' if conv else 'off'}",
        "cudnn_autotune": torch.backends.cudnn.benchmark,
        "layout": _layout(cfg),
        "note": "verify: deterministic kernels" if cfg.verify else None,
    }


def _layout(cfg: PointConfig) -> str | None:
    """Memory layout of image activations (None for token models)."""
    if cfg.image_size is None:
        return None
    return "channels_last (NHWC in memory)" if cfg.channels_last else "NCHW"


def device_for(cfg: PointConfig, local_rank: int = 0):
    import torch

    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda was requested but torch sees no CUDA device")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def verify_determinism() -> dict:
    """Verify mode: no TF32 (GPUs would otherwise run float32 matmuls and convolutions with a 10-bit
    mantissa) and deterministic kernels, so the CPU-calibrated tolerance applies. Ops with no
    deterministic CUDA kernel (e.g. adaptive average pooling's backward) warn instead of failing.
    Call before CUDA is used: cuBLAS reads CUBLAS_WORKSPACE_CONFIG when its handle is created."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    return {
        "deterministic_algorithms": "warn_only"
        if torch.is_deterministic_algorithms_warn_only_enabled()
        else torch.are_deterministic_algorithms_enabled(),
        "tf32": torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32,
        "cublas_workspace_config": os.environ["CUBLAS_WORKSPACE_CONFIG"],
    }


def make_sync(device):
    import torch

    if device.type == "cuda":

        def sync(_: Any) -> None:
            torch.cuda.synchronize(device)
    else:

        def sync(_: Any) -> None:
            return None

    return sync


def runtime_info(device) -> dict:
    import torch

    info = {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
        info["gpu_name"] = torch.cuda.get_device_name(device)
    return info

"""Environment capture for the sweep and every worker: package versions from installed metadata (no
heavy imports), the CPU from /proc/cpuinfo, memory from psutil, GPUs from NVML."""

from __future__ import annotations

import functools
import os
import platform
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ENV_PREFIXES = ("NCCL_", "HOROVOD_", "OMP_", "MKL_", "CUDA_VISIBLE_DEVICES", "TF_NUM_", "SLURM_JOB_ID", "SLURM_NNODES")


def package_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def git_sha() -> str | None:
    """The git commit of the distbench source tree, if it is a checkout."""
    here = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    sha = out.stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=5,
    )
    return sha + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def gpu_info() -> dict:
    """GPUs visible to NVML: models, memory, driver and CUDA driver version. Empty without a driver."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return {"available": False, "reason": f"NVML unavailable: {exc}"}
    text = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731 (older bindings: bytes)
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = [
            {
                "index": i,
                "name": text(pynvml.nvmlDeviceGetName(h)),
                "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
            }
            for i, h in enumerate(handles)
        ]
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return {
            "available": True,
            "count": count,
            "gpus": gpus,
            "driver": text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_driver": f"{cuda // 1000}.{(cuda % 1000) // 10}",
        }
    finally:
        pynvml.nvmlShutdown()


def visible_gpu_count() -> int:
    """GPUs this process may use: NVML's count, narrowed by CUDA_VISIBLE_DEVICES when it is set."""
    info = gpu_info()
    if not info.get("available"):
        return 0
    count = info["count"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [v for v in visible.split(",") if v.strip() and not v.strip().startswith("-")]
        count = min(count, len(entries))
    return count


def cuda_stack() -> dict:
    """CUDA, cuDNN and NCCL versions as torch sees them, and `nvidia-smi topo -m` (how the GPUs connect)."""
    out: dict = {}
    if package_version("torch"):
        try:
            import torch

            out["torch_cuda"] = torch.version.cuda
            if torch.version.cuda:
                out["cudnn"] = torch.backends.cudnn.version()
                try:
                    out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
                except Exception as exc:  # torch built without NCCL
                    out["nccl"] = f"unavailable: {exc}"
        except Exception as exc:  # a broken torch install must not stop a sweep
            out["torch_error"] = str(exc)
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            topo = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=20)
            out["nvidia_smi_topo"] = topo.stdout if topo.returncode == 0 else topo.stderr.strip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            out["nvidia_smi_topo"] = f"failed: {exc}"
    return out


WRAPPER_PACKAGES = ("accelerate", "lightning", "pytorch-ignite", "deepspeed", "mosaicml")
"""The wrapper strategies' libraries (None where not installed: mosaicml, whose releases need an older torch)."""


def capture_environment() -> dict:
    import psutil

    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_total_bytes": psutil.virtual_memory().total,
        "gpu": gpu_info(),
        "cuda_stack": cuda_stack(),
        "packages": {
            name: package_version(name)
            for name in (
                "distbench",
                "torch",
                "tensorflow",
                "tensorflow-cpu",
                "keras",
                "horovod",
                "numpy",
                "nvidia-ml-py",
                *WRAPPER_PACKAGES,
            )
        },
        "distbench_git_sha": git_sha(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
    }

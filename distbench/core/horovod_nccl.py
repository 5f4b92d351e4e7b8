"""Whether the installed Horovod carries GPU tensors with NCCL (issue 22, item 2).

A Horovod built without NCCL (a driver-only node has no nvcc to compile its GPU operations) still runs on
GPUs, but stages every CUDA tensor through host memory over Gloo: its speedups would sit next to NCCL DDP
in the table as if they were comparable. On CUDA such points are skipped with this reason. The question is
asked once per sweep and module, in a fresh interpreter (importing Horovod here would import torch or
TensorFlow into the parent, which never runs a framework).
"""

from __future__ import annotations

import functools
import subprocess
import sys

PROBE = "import sys, {module} as hvd; sys.stdout.write('1' if hvd.nccl_built() else '0')"
TIMEOUT_S = 180


@functools.cache
def nccl_built(module: str) -> bool | None:
    """hvd.nccl_built() of `module` (horovod.torch, horovod.tensorflow); None when it cannot be asked
    (not installed, does not import: the point then reports that itself)."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(module=module)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {"1": True, "0": False}.get(out.stdout.strip()) if out.returncode == 0 else None


def skip_reason(requires: tuple[str, ...], device: str) -> str | None:
    """Why a Horovod strategy's points are skipped on this device (None: they run)."""
    module = next((m for m in requires if m.startswith("horovod.")), None)
    if module is None or device != "cuda" or nccl_built(module) is not False:
        return None
    return reason(module)


def reason(module: str) -> str:
    """The skip reason of a Horovod `module` built without NCCL (the planner's, and the rank's own check
    where the point runs on another machine: a Slurm or Kubernetes job)."""
    return (
        f"{module} was built without NCCL (hvd.nccl_built() is false): on GPUs it would stage every tensor "
        "through host memory over Gloo, not comparable with NCCL DDP; rebuild it with a CUDA toolkit "
        "(scripts/install.sh --horovod-gpu-ops says why it was not)"
    )

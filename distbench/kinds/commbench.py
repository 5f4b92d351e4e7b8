"""`distbench comm`'s backends and message sizes, and its bandwidths (algbw, busbw: the nccl-tests
definitions, stated in the command's help)."""

from __future__ import annotations

import re

from distbench.core.errors import BadInput
from distbench.core.strategies import Strategy
from distbench.run.launchers import HOROVODRUN, PROCESS, TORCHRUN


def _backend(name: str, description: str, **kw) -> Strategy:
    """torch.distributed under torchrun unless `kw` says otherwise."""
    kw = {"framework": "torch", "module": "comm_torch", "launcher": TORCHRUN.name, "requires": ("torch",), **kw}
    return Strategy(name=f"comm-{name}", description=description, **kw)


BACKENDS: dict[str, Strategy] = {
    "gloo": _backend("gloo", "torch.distributed all_reduce, gloo"),
    "nccl": _backend("nccl", "torch.distributed all_reduce, NCCL (CUDA only)"),
    "mpi": _backend("mpi", "torch.distributed all_reduce, MPI (torch built with MPI)"),
    "horovod": _backend(
        "horovod",
        "horovod.torch allreduce",
        module="comm_horovod",
        launcher=HOROVODRUN.name,
        requires=("torch", "horovod.torch"),
    ),
    "tf": _backend(
        "tf",
        "tf.distribute MirroredStrategy all_reduce",
        framework="tf",
        module="comm_tf",
        launcher=PROCESS.name,
        requires=("tensorflow",),
    ),
}

_UNITS = {"": 1, "B": 1} | {
    unit + suffix: 1024**power for power, unit in enumerate("KMG", 1) for suffix in ("", "B", "IB")
}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise BadInput(f"bad message size {text!r}: use a number with an optional K, M or G suffix (powers of 1024)")
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value < 4:
        raise BadInput(f"message size {text!r} is below one float32 element (4 bytes)")
    return value


def parse_sizes(text: str, factor: int = 2) -> list[int]:
    """'1K:1G' -> [1K, 2K, 4K, ...] (factor 2 or 4); a comma list is taken as given."""
    if factor not in (2, 4):
        raise BadInput(f"--factor must be 2 or 4, got {factor}")
    if ":" in text:
        lo_text, _, hi_text = text.partition(":")
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        if lo > hi:
            raise BadInput(f"--sizes {text!r}: the first size is larger than the last")
        sizes = [lo]
        while sizes[-1] * factor <= hi:
            sizes.append(sizes[-1] * factor)
    else:
        sizes = sorted({parse_size(part) for part in text.split(",") if part.strip()})
        if not sizes:
            raise BadInput("--sizes is empty")
    return [s - s % 4 for s in sizes]


def default_backend(name: str | None, device: str) -> tuple[str, str | None]:
    """(--backend, a note when it was chosen here): nccl on CUDA GPUs, where gloo would stage every
    message through host memory and measure that instead; gloo on CPU workers."""
    if name:
        return name, None
    if device == "cuda":
        return "nccl", "--backend nccl: the default on CUDA GPUs (--backend gloo measures copies through host memory)"
    return "gloo", None


def get_backend(name: str) -> Strategy:
    try:
        return BACKENDS[name]
    except KeyError:
        raise BadInput(f"unknown backend {name!r}; valid backends: {', '.join(BACKENDS)}") from None

"""Which devices a plan runs on: --gpus / --nodes parsed and bounded, and the device resolved (CUDA GPUs when
visible, else CPU workers, with the note every output carries)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from distbench.core import envinfo
from distbench.core.errors import BadInput

MAX_DEVICES = 65536
"""Upper bound of any --gpus / --nodes value (resolve_device checks the device's own)."""
CPU_WORKERS_PER_CORE = 8
"""CPU workers per core and node at most (beyond it only the scheduler is measured)."""


def parse_counts(text: str, flag: str, noun: str, maximum: int) -> list[int]:
    """'1,2,4' -> [1, 2, 4], each value checked."""
    if text is None or not text.strip():
        raise BadInput(f"{flag} is empty: give a comma list of {noun}s, e.g. {flag} 1,2,4")
    values: list[int] = []
    for part in text.split(","):
        raw = part.strip()
        if not raw:
            raise BadInput(f"{flag} {text!r} has an empty entry: give a comma list such as 1,2,4")
        try:
            n = int(raw)
        except ValueError:
            raise BadInput(f"{flag} value {raw!r} is not a whole number") from None
        if n <= 0:
            raise BadInput(f"{flag} value {raw!r} must be a positive {noun}")
        if n > maximum:
            raise BadInput(f"{flag} value {raw!r} is not in the range 1..{maximum}")
        if n in values:
            raise BadInput(f"{flag} value {raw!r} is duplicated")
        values.append(n)
    return sorted(values)


def parse_gpus(text: str, flag: str = "--gpus", noun: str = "device") -> list[int]:
    return parse_counts(text, flag, f"{noun} count", MAX_DEVICES)


def cpu_cores() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@dataclass(frozen=True)
class DeviceChoice:
    device: str
    visible_gpus: int
    note: str
    """What a 'GPU' means in this run, for the user."""

    def unfit(self, n: int, nodes: int = 1) -> str | None:
        """Why N devices over `nodes` nodes cannot run on these GPUs (None: they fit)."""
        per_node = n // nodes
        if self.device != "cuda" or per_node <= self.visible_gpus:
            return None
        return f"needs {per_node} GPUs{' per node' if nodes > 1 else ''}, {self.visible_gpus} visible"


def per_node_counts(gpus: list[int], nodes=(1,)) -> dict[int, int]:
    """N -> the fewest devices per node any of its shapes (N over K nodes, K dividing N) needs."""
    return {n: min(n // k for k in nodes if n % k == 0) for n in gpus if any(n % k == 0 for k in nodes)}


def resolve_device(requested: str, gpus: list[int], visible: int | None = None, nodes=(1,)) -> DeviceChoice:
    """CUDA GPUs whenever one is visible (`auto`), else CPU workers. Per node, points needing more GPUs
    than visible are skipped under `auto`, refused under `cuda`."""
    visible = envinfo.visible_gpu_count() if visible is None else visible
    need = per_node_counts(gpus, nodes) or {max(gpus): max(gpus)}
    worst = max(need, key=need.get)
    per_node = " per node" if need[worst] != worst else ""
    gpu_word = lambda k: f"{k} GPU{'s' if k != 1 else ''}"  # noqa: E731
    if requested == "cuda" or (requested == "auto" and visible > 0):
        if visible == 0:
            raise BadInput("--device cuda: no CUDA GPU is visible on this machine (use --device cpu)")
        if requested == "cuda" and need[worst] > visible:
            raise BadInput(
                f"--gpus asks for {gpu_word(need[worst])}{per_node} but only {visible} "
                f"{'is' if visible == 1 else 'are'} visible"
            )
        note = f"running on {visible} visible CUDA GPU(s)"
        if need[worst] > visible:
            note += (
                f"; points needing more than {gpu_word(visible)}{per_node} are skipped "
                "(--nodes runs them across a Slurm allocation; --device cpu uses CPU workers)"
            )
        return DeviceChoice("cuda", visible, note)
    cores = cpu_cores()
    cap = CPU_WORKERS_PER_CORE * cores
    if need[worst] > cap:
        raise BadInput(
            f"--gpus {worst}: CPU workers are limited to {cap}{per_node} on this machine "
            f"({CPU_WORKERS_PER_CORE} per core, {cores} core(s))"
        )
    why = "no CUDA GPU is visible" if requested == "auto" else "--device cpu"
    note = (
        f"CPU workers ({why}): each 'GPU' below is a CPU worker process (gloo for torch.distributed "
        f"and Horovod, logical CPU devices for MirroredStrategy) sharing {cores} CPU core(s); "
        f"absolute numbers are CPU numbers, not GPU numbers"
    )
    if need[worst] > cores:
        note += f"; N > {cores} oversubscribes the cores, so speedup there is bounded by the CPU"
    return DeviceChoice("cpu", visible, note)

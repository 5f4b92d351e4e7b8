"""The strategy registry: what runs, in which framework, launched how.

Strategy names are part of the CLI. Each entry names the worker module in distbench.launchers that
runs inside the worker process(es) and the launcher that starts it.
"""
from __future__ import annotations

from dataclasses import dataclass

from distbench.errors import BadInput


@dataclass(frozen=True, kw_only=True)
class Strategy:
    name: str
    framework: str
    """'torch' or 'tf': which single-device baseline its speedup is measured against."""
    module: str
    """Worker module, run as `python -m distbench.launchers.<module>`."""
    launcher: str
    """'process' (one process), 'torchrun' or 'horovodrun'."""
    baseline: bool = False
    """A plain single-device loop: runs at N=1 only and defines speedup 1.0 for its framework."""
    needs_cuda_for_multi: bool = False
    """Cannot use CPU workers (DataParallel scatters over CUDA devices only)."""
    requires: tuple[str, ...] = ()
    """Python modules the worker imports; missing ones make the point 'skipped'."""
    description: str = ""


STRATEGIES: dict[str, Strategy] = {s.name: s for s in [
    Strategy(name="torch", framework="torch", module="torch_single", launcher="process", baseline=True,
             requires=("torch",), description="plain single-device PyTorch loop (baseline)"),
    Strategy(name="dp", framework="torch", module="torch_dp", launcher="process",
             needs_cuda_for_multi=True, requires=("torch",),
             description="torch.nn.DataParallel over N GPUs in one process"),
    Strategy(name="ddp", framework="torch", module="torch_ddp", launcher="torchrun",
             requires=("torch",), description="DistributedDataParallel, one process per device (torchrun)"),
    Strategy(name="tf", framework="tf", module="tf_single", launcher="process", baseline=True,
             requires=("tensorflow",), description="plain single-device TensorFlow custom step (baseline)"),
    Strategy(name="mirrored", framework="tf", module="tf_mirrored", launcher="process",
             requires=("tensorflow",), description="tf.distribute.MirroredStrategy over N devices"),
    Strategy(name="horovod-torch", framework="torch", module="horovod_torch", launcher="horovodrun",
             requires=("torch", "horovod.torch"),
             description="horovod.torch: gradient all-reduce + initial broadcast (horovodrun)"),
    Strategy(name="horovod-tf", framework="tf", module="horovod_tf", launcher="horovodrun",
             requires=("tensorflow", "horovod.tensorflow"),
             description="horovod.tensorflow: grouped all-reduce of gradients + variable broadcast"),
]}

FRAMEWORK_BASELINE = {"torch": "torch", "tf": "tf"}


def strategy_names() -> list[str]:
    return list(STRATEGIES)


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise BadInput(f"unknown strategy {name!r}; valid strategies: {', '.join(STRATEGIES)}") from None


def parse_strategies(values: tuple[str, ...] | list[str]) -> list[Strategy]:
    """Repeatable option and/or comma lists -> strategies in registry order, no duplicates."""
    names: list[str] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                raise BadInput(f"empty strategy name in {value!r}; valid strategies: {', '.join(STRATEGIES)}")
            get_strategy(part)
            if part not in names:
                names.append(part)
    if not names:
        return list(STRATEGIES.values())
    return [s for s in STRATEGIES.values() if s.name in names]

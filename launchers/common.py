"""Shared worker plumbing: argument parsing, the timed loop, and emitting the result record."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
from typing import Any, Callable

from distbench.config import PointConfig
from distbench.record import base_record, write_record

INSTALL_HINT = "run `make install` (creates .venv with torch, TensorFlow and Horovod)"

OOM_MARKERS = ("out of memory", "OutOfMemoryError", "ResourceExhaustedError", "OOM when allocating",
               "std::bad_alloc", "MemoryError")


def parse_args(argv: list[str] | None = None) -> tuple[PointConfig, str]:
    parser = argparse.ArgumentParser(description="distbench worker (one strategy, one point)")
    parser.add_argument("--config", required=True, help="PointConfig JSON file")
    parser.add_argument("--out", required=True, help="where rank 0 writes the result record")
    args = parser.parse_args(argv)
    with open(args.config) as fh:
        cfg = PointConfig.from_json(fh.read())
    return cfg, args.out


def timed_steps(step: Callable[[], Any], sync: Callable[[Any], None], warmup: int, steps: int) -> tuple[list[float], Any]:
    """Run warmup + steps training steps; return the measured per-step wall times and the last output.

    The device is synchronized before each clock read, so a step's time covers all its work. Warmup
    steps (graph tracing, compilation, allocator growth) are run but not recorded.
    """
    times: list[float] = []
    out = None
    sync(None)
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        out = step()
        sync(out)
        t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
    return times, out


def emit(cfg: PointConfig, out_path: str, *, strategy: str, framework: str, status: str,
         step_times: list[float] | None = None, reason: str | None = None, **extra: Any) -> None:
    record = base_record(cfg.to_dict(), strategy=strategy, framework=framework, status=status, reason=reason)
    record["step_times_s"] = list(step_times or [])
    record.update(extra)
    write_record(out_path, record)


def check_loss(loss: float) -> None:
    if not math.isfinite(loss):
        raise FloatingPointError(f"training diverged: loss is {loss}")


def run_worker(strategy: str, framework: str, body: Callable[[PointConfig, str], None],
               argv: list[str] | None = None) -> int:
    """Entry point of every worker module.

    A missing framework becomes a 'skipped' record with an install hint; running out of memory
    becomes an 'oom' record. Anything else propagates (non-zero exit): the parent records the point
    as 'failed' with the stderr tail.
    """
    cfg, out_path = parse_args(argv)
    is_rank0 = os.environ.get("RANK", os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))) == "0"
    try:
        body(cfg, out_path)
    except ImportError as exc:
        if is_rank0:
            emit(cfg, out_path, strategy=strategy, framework=framework, status="skipped",
                 reason=f"{exc.name or exc} is not installed: {INSTALL_HINT}")
        print(f"distbench worker: {exc}", file=sys.stderr)
        return 0
    except BaseException as exc:  # noqa: BLE001 - classify, then re-raise for the launcher
        text = f"{type(exc).__name__}: {exc}"
        if any(m in text for m in OOM_MARKERS) and is_rank0:
            emit(cfg, out_path, strategy=strategy, framework=framework, status="oom", reason=text[:500])
            traceback.print_exc()
            return 3
        raise
    return 0

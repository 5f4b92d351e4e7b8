"""Shared worker plumbing: argument parsing, the measured loop, verify steps, emitting the record."""
from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
import traceback
from typing import Any, Callable

from distbench import stats
from distbench.config import PointConfig
from distbench.record import base_record, write_record

INSTALL_HINT = "run `make install` (creates .venv with torch, TensorFlow and Horovod)"

OOM_MARKERS = ("out of memory", "OutOfMemoryError", "ResourceExhaustedError", "OOM when allocating",
               "std::bad_alloc", "MemoryError")

CHECK_EVERY = 5
"""With adaptive stopping, ranks agree on whether to go on every this many steps."""

Gather = Callable[[Any], list]


def single_gather(obj: Any) -> list:
    return [obj]


def parse_args(argv: list[str] | None = None) -> tuple[PointConfig, str]:
    parser = argparse.ArgumentParser(description="distbench worker (one strategy, one point)")
    parser.add_argument("--config", required=True, help="PointConfig JSON file")
    parser.add_argument("--out", required=True, help="where rank 0 writes the result record")
    args = parser.parse_args(argv)
    with open(args.config) as fh:
        cfg = PointConfig.from_json(fh.read())
    return cfg, args.out


def measure(step: Callable[[], Any], sync: Callable[[Any], None], cfg: PointConfig,
            gather: Gather = single_gather) -> tuple[list[float], Any, dict]:
    """Warmup, then measured steps; returns (per-step seconds, last output, how measuring stopped).

    The device is synchronized before each clock read, so a step's time covers all its work. Warmup
    steps (graph tracing, compilation, allocator growth) run but are not recorded. With a CI target
    (cfg.target_ci) measuring goes on past cfg.steps until the 95% CI half-width of throughput is
    within the target or cfg.max_time_s of measured time is spent; every rank takes the same
    decision because it is made on the gathered (slowest-rank) step times.
    """
    out = None
    sync(None)
    for _ in range(cfg.warmup):
        out = step()
        sync(out)
    times: list[float] = []
    stopping = {"rule": "fixed_steps", "target_ci": cfg.target_ci or None}
    window_start = time.time()  # wall clock, so the parent's telemetry can pick the measured window
    while True:
        t0 = time.perf_counter()
        out = step()
        sync(out)
        times.append(time.perf_counter() - t0)
        n = len(times)
        if n < cfg.steps:
            continue
        if cfg.target_ci <= 0:
            break
        if (n - cfg.steps) % CHECK_EVERY:
            continue
        merged = stats.merge_rank_step_times(gather(times))
        half = stats.relative_ci_half_width(merged)
        stopping["ci_half_width"] = half
        if half <= cfg.target_ci:
            stopping["rule"] = "target_ci_met"
            break
        if sum(merged) >= cfg.max_time_s:
            stopping["rule"] = "max_time"
            break
        if n >= cfg.max_steps:
            stopping["rule"] = "max_steps"
            break
    stopping["window"] = [window_start, time.time()]
    return times, out, stopping


def data_wait_fields(waits: list[float], times: list[float], cfg: PointConfig) -> dict:
    """Share of the measured step time spent waiting for input batches (this rank's)."""
    if cfg.data == "synthetic":
        return {"data_wait_fraction": 0.0, "data_wait_note": "synthetic data resident on the device"}
    measured = waits[-len(times):] if times else []
    return {"data_wait_fraction": sum(measured) / sum(times) if times else None,
            "data_wait_median_s": stats.percentile(measured, 50) if measured else None}


def _peak_rss_bytes() -> int:
    """This process's peak RSS: Linux's VmHWM (ru_maxrss would include a launcher's from before exec)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_memory(device: str) -> None:
    """Start a new peak (per batch size in `distbench infer`): CUDA's counters, or VmHWM on Linux."""
    torch = sys.modules.get("torch")
    if device == "cuda" and torch is not None and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()
    elif device == "cuda" and "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        for i in range(len(tf.config.list_logical_devices("GPU"))):
            tf.config.experimental.reset_memory_stats(f"GPU:{i}")
    elif device != "cuda":
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:  # not Linux: the peak stays the process's so far
            pass


def peak_memory_bytes(device: str) -> int | None:
    """Peak memory of this process's device(s): on GPUs the most any of its GPUs had allocated
    (torch.cuda.max_memory_allocated, or TensorFlow's allocator peak); on CPU workers the process's
    peak resident set. None when the framework reports nothing."""
    if device != "cuda":
        return _peak_rss_bytes()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return max(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count()))
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        gpus = tf.config.list_logical_devices("GPU")
        return max(tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"] for i in range(len(gpus))) or None
    return None


def measured_run(step: Callable[[], Any], sync: Callable[[Any], None], cfg: PointConfig, gather: Gather,
                 waits: list[float], allreduce: Callable[[], list[float] | None] | None = None
                 ) -> tuple[list[float], float, dict]:
    """The measured loop plus everything recorded with it, the same for every strategy: data wait,
    every rank's step times combined, how measuring stopped, and (synchronized points at N > 1
    that measure communication) the standalone all-reduce time. Returns (times, last loss, fields)."""
    times, loss, stopping = measure(step, sync, cfg, gather)
    fields = data_wait_fields(waits, times, cfg)
    gathered = gather(times)
    fields.update(stopping=stopping, per_rank_step_times_s=gathered if len(gathered) > 1 else None)
    peaks = gather(peak_memory_bytes(cfg.device))  # per rank (process)
    fields.update(peak_memory_bytes=max((p for p in peaks if p), default=None),
                  peak_memory_per_rank_bytes=peaks if len(peaks) > 1 else None,
                  peak_memory_source="max allocated per GPU" if cfg.device == "cuda" else "peak RSS per process")
    if allreduce is not None and cfg.measure_comm and cfg.sync and cfg.world_size > 1:
        ar = allreduce()
        if ar:
            fields.update(allreduce_samples_s=ar, allreduce_s=stats.percentile(ar, 50))
    return combine_ranks(gathered, cfg.sync), float(loss), fields


def time_collective(op: Callable[[], Any], barrier: Callable[[], None], iters: int = 10,
                    warmup: int = 2) -> list[float]:
    """Per-iteration seconds of a collective, each after a barrier so all ranks start together."""
    for _ in range(warmup):
        op()
    out = []
    for _ in range(iters):
        barrier()
        t0 = time.perf_counter()
        op()
        out.append(time.perf_counter() - t0)
    return out


def emit(cfg: PointConfig, out_path: str, *, strategy: str, framework: str, status: str,
         step_times: list[float] | None = None, reason: str | None = None, **extra: Any) -> None:
    record = base_record(cfg.to_dict(), strategy=strategy, framework=framework, status=status, reason=reason)
    record["step_times_s"] = list(step_times or [])
    record.update(extra)
    write_record(out_path, record)


def check_loss(loss: float) -> None:
    if not math.isfinite(loss):
        raise FloatingPointError(f"training diverged: loss is {loss}")


def verify_seed(cfg: PointConfig, rank: int) -> int:
    """In verify mode non-zero ranks start from different weights: only a correct initial
    broadcast from rank 0 makes the replicas equal to the single-device run."""
    return cfg.seed if (not cfg.verify or rank == 0) else cfg.seed + 7919 * rank


def rank_slice(cfg: PointConfig, rank: int) -> slice:
    """This rank's shard of the global batch (verify mode)."""
    return slice(rank * cfg.per_device_batch, (rank + 1) * cfg.per_device_batch)


def run_worker(strategy: str, framework: str, body: Callable[[PointConfig, str], None],
               argv: list[str] | None = None) -> int:
    """Entry point of every worker module.

    A missing framework becomes a 'skipped' record with an install hint; running out of memory
    becomes an 'oom' record. Anything else propagates (non-zero exit): the parent records the point
    as 'failed' with the stderr tail.
    """
    cfg, out_path = parse_args(argv)
    rank = os.environ.get("RANK", os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    is_rank0 = rank == "0"
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


def combine_ranks(per_rank: list[list[float]], synchronized: bool) -> list[float]:
    """Step times of the point from every rank's: for synchronized training a step lasts as long as
    its slowest rank; independent replicas drift apart step by step, so take the slowest rank's own
    series (the largest total) instead of a per-step maximum over unaligned steps."""
    if synchronized or len(per_rank) == 1:
        return stats.merge_rank_step_times(per_rank)
    return list(max(per_rank, key=sum))


def max_rel_diff(replicas: list) -> float:
    """Largest relative difference of any checksum between the first replica and the others."""
    worst = 0.0
    for other in replicas[1:]:
        for a, b in zip(replicas[0], other):
            for u, v in zip(a, b):
                worst = max(worst, abs(u - v) / max(abs(u), abs(v), 1e-12))
    return worst

"""Shared worker plumbing: argument parsing, the measured loop, verify steps, emitting the record."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import sys
import time
import traceback
from typing import Any, Callable

from distbench.core import phases
from distbench.core.config import PointConfig
from distbench.core.errors import INSTALL_HINT  # the same hint as the parent's skip rule
from distbench.core.failures import OOM_MARKERS
from distbench.core.rankguard import rank_of
from distbench.results import stats
from distbench.results.record import base_record, write_record
from distbench.workers.stopping import Gather, combine_ranks, measure


def parse_args(argv: list[str] | None = None) -> tuple[PointConfig, str]:
    parser = argparse.ArgumentParser(description="distbench worker (one strategy, one point)")
    parser.add_argument("--config", required=True, help="PointConfig JSON file")
    parser.add_argument("--out", required=True, help="where rank 0 writes the result record")
    args = parser.parse_args(argv)
    with open(args.config) as fh:
        cfg = PointConfig.from_json(fh.read())
    return cfg, args.out


def data_wait_fields(waits: list[float], times: list[float], cfg: PointConfig) -> dict:
    """Share of the measured step time spent waiting for input batches (this rank's); None (unknown,
    never 0) when the waits were not timed."""
    measured = waits[-len(times) :] if times else []
    if cfg.data == "synthetic" or not times or len(measured) < len(times):
        return {
            "data_wait_fraction": None,
            "data_wait_note": "not measured: "
            + (
                "no input pipeline (synthetic data resident on the device)"
                if cfg.data == "synthetic"
                else "this strategy's step did not time its input fetches"
            ),
        }
    return {
        "data_wait_fraction": sum(measured) / sum(times) if times else None,
        "data_wait_median_s": stats.percentile(measured, 50) if measured else None,
    }


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


def measured_run(
    step: Callable[[], Any],
    sync: Callable[[Any], None],
    cfg: PointConfig,
    gather: Gather,
    waits: list[float],
    allreduce: Callable[[], list[float] | None] | None = None,
    new_event: Callable[[], Any] | None = None,
) -> tuple[list[float], float, dict]:
    """The measured loop plus everything recorded with it, the same for every strategy: data wait,
    every rank's step times combined (for the step-time distribution), the measured window (for
    throughput: stats.window_throughput), how measuring stopped, and (synchronized points at N > 1
    that measure communication) the standalone all-reduce time. Returns (times, last loss, fields)."""
    times, loss, stopping = measure(step, sync, cfg, gather, new_event)
    stopping["clock"] = (
        "CUDA events per step, host synchronized at segment ends" if new_event else "host clock, device synchronized"
    )
    fields = data_wait_fields(waits, times, cfg)
    gathered = gather([times, stopping["segments_s"]])
    per_rank = [g[0] for g in gathered]
    window_s, _ = stats.window_throughput([g[1] for g in gathered], len(times), cfg.global_batch)
    fields.update(
        stopping=stopping, per_rank_step_times_s=per_rank if len(per_rank) > 1 else None, measured_window_s=window_s
    )
    peaks = gather(peak_memory_bytes(cfg.device))  # per rank (process)
    fields.update(
        peak_memory_bytes=max((p for p in peaks if p), default=None),
        peak_memory_per_rank_bytes=peaks if len(peaks) > 1 else None,
        peak_memory_source="max allocated per GPU" if cfg.device == "cuda" else "peak RSS per process",
    )
    if allreduce is not None and cfg.measure_comm and cfg.sync and cfg.world_size > 1:
        started = time.time()
        ar = allreduce()
        stopping["allreduce_window"] = [started, time.time()]
        if ar:
            fields.update(allreduce_samples_s=ar, allreduce_s=stats.percentile(ar, 50))
    # the tiny variant's steps are aligned by its collective, like the real step's
    return combine_ranks(per_rank, cfg.sync or is_tiny(cfg)), float(loss), fields


SEGMENT_VARIANTS = {"A": "synchronized", "T": "tiny collective", "B": "no-sync"}
"""The runs one process can measure (PointConfig.nosync_order): the real step (A), the tiny variant (T:
the no-sync variant plus one all-reduce of a single float per step over every rank, where the gradient
reduction was) and the no-sync variant (B)."""


TINY_MAX_ELEMENTS = 16
"""The tiny collective all-reduces min(16, gradient elements) float32 values: 64 bytes at most. A model
whose whole gradient is that small (the 'linear' model at --num-classes 2: 8 values) then exchanges the
same message in the real step and in the tiny variant, so its communication term must come out ~0
(collective libraries' latency depends on the element count at these sizes: gloo's all-reduce of 8 floats
took about 2 ms longer than of 1 float on 2 loaded cores)."""


def tiny_elements(grad_elements: int) -> int:
    return max(1, min(TINY_MAX_ELEMENTS, int(grad_elements)))


def is_tiny(cfg: PointConfig) -> bool:
    """The tiny-collective variant's segment (segment_configs marks it: PointConfig.tiny_collective)."""
    return cfg.tiny_collective


def segment_configs(cfg: PointConfig) -> list[tuple[str, PointConfig]]:
    """The measured runs of this process, in order, each with its letter (SEGMENT_VARIANTS): the point
    itself (its first 'A') and, with cfg.nosync_order (e.g. 'ATBTA', a palindrome so a steady drift of
    the machine weighs every variant alike), the variants and a closing real run: the same replicas,
    only the collective removed (B) or replaced by one tiny all-reduce (T) (Strategy.nosync_in_process).
    Every run has the same rule: a length fixed before it starts. With a CI target the first run is sized by a
    pilot (measure_two_stage), and every later run repeats its step count (fixed_steps).
    The standalone all-reduce benchmark (cfg.measure_comm) runs after the last synchronized run (the closing
    A of A T B T A), not between the first two: there it would put a gap on one side of the order only, and
    a drift of the machine across that gap would land on the split's terms (lift_allreduce moves its
    figures to the point)."""
    run = dataclasses.replace(cfg, nosync_order=None)
    if not cfg.nosync_order:
        return [("A", run)]
    variant = dataclasses.replace(run, sync=False, measure_comm=False, target_ci=0.0)
    tiny = dataclasses.replace(variant, tiny_collective=True)
    again = dataclasses.replace(run, measure_comm=False, target_ci=0.0)
    first = dataclasses.replace(run, measure_comm=False, two_stage=True)
    out: list[tuple[str, PointConfig]] = []
    for letter in cfg.nosync_order:
        first_a = letter == "A" and all(x != "A" for x, _ in out)
        out.append((letter, first if first_a else {"A": again, "T": tiny, "B": variant}[letter]))
    last_a = max(i for i, (letter, _) in enumerate(out) if letter == "A")
    out[last_a] = ("A", dataclasses.replace(out[last_a][1], measure_comm=cfg.measure_comm))
    return out


def lift_allreduce(extra: dict, segments: list[dict]) -> None:
    """The standalone all-reduce measured after the last run of an in-process order (segment_configs):
    its figures and its wall-clock window belong to the point (extra), not to that run's segment."""
    for seg in segments:
        for key in ("allreduce_samples_s", "allreduce_s"):
            if key in seg:
                extra[key] = seg.pop(key)
        window = seg.get("stopping", {}).pop("allreduce_window", None)
        if window is not None:
            extra["stopping"]["allreduce_window"] = window


def fixed_steps(cfg: PointConfig, measured: list[float]) -> PointConfig:
    """A run after the synchronized one in the same process: exactly as many steps as it measured."""
    return dataclasses.replace(cfg, steps=len(measured), target_ci=0.0) if measured else cfg


def segment_record(letter: str, times: list[float], loss: float, fields: dict, started: float) -> dict:
    """A run measured in the point's processes besides the point itself (PointConfig.nosync_order): what
    the parent needs to treat it as a run of its own. `started`: wall clock before it was (re)wrapped."""
    fields["stopping"]["segment_start"] = started
    return {"variant": letter, "step_times_s": times, "final_loss": float(loss), **fields}


def time_collective(
    op: Callable[[], Any], barrier: Callable[[], None], iters: int = 10, warmup: int = 2
) -> list[float]:
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


def emit(
    cfg: PointConfig,
    out_path: str,
    *,
    framework: str,
    status: str,
    strategy: str | None = None,
    step_times: list[float] | None = None,
    reason: str | None = None,
    **extra: Any,
) -> None:
    """Write the point's record; its strategy is the registry name the parent put in the config."""
    strategy = strategy or cfg.strategy
    record = base_record(cfg.to_dict(), strategy=strategy, framework=framework, status=status, reason=reason)
    record["step_times_s"] = list(step_times or [])
    record.update(extra)
    write_record(out_path, record)
    phases.mark("teardown")  # the record is written: what is left is shutting down


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


class PointSkipped(Exception):
    """Raised on every rank when the point cannot run as asked where it landed (its message is the reason):
    a 'skipped' record, not a failure."""


def run_worker(framework: str, body: Callable[[PointConfig, str], None], argv: list[str] | None = None) -> int:
    """Entry point of every worker module.

    A missing framework becomes a 'skipped' record with an install hint; running out of memory
    becomes an 'oom' record. On any exception the rank prints its traceback, leaves its exception
    line for the parent (DISTBENCH_RANK_DIR/error-<rank>.json) and exits at once with status 1
    (3 for out of memory): the parent names the root cause from the ranks' reports.
    """
    cfg, out_path = parse_args(argv)
    rank = str(rank_of(os.environ))
    is_rank0 = rank == "0"
    try:
        body(cfg, out_path)
    except ImportError as exc:
        if is_rank0:
            emit(
                cfg,
                out_path,
                framework=framework,
                status="skipped",
                reason=f"{exc.name or exc} is not installed: {INSTALL_HINT}",
            )
        print(f"distbench worker: {exc}", file=sys.stderr)
        return 0
    except PointSkipped as exc:
        if is_rank0:
            emit(cfg, out_path, framework=framework, status="skipped", reason=str(exc))
        print(f"distbench worker: skipped: {exc}", file=sys.stderr)
        exit_now(0)  # at once, like a failed rank: Horovod's atexit hooks would wait for the others
        return 0
    except BaseException as exc:  # noqa: BLE001 - report, then end this rank at once
        text = f"{type(exc).__name__}: {exc}".strip()
        oom = any(m in text for m in OOM_MARKERS)
        if oom and is_rank0:
            emit(cfg, out_path, framework=framework, status="oom", reason=text[:500])
        traceback.print_exc()
        _report_error(rank, text)
        # Exit now: a rank whose peers wait in a collective must not hang in interpreter shutdown
        # (Horovod's and gloo's atexit hooks would wait for them), or the launcher never learns.
        exit_now(3 if oom else 1)
    if "tensorflow" in sys.modules:
        # The record is written and the collectives are shut down: skip TensorFlow's interpreter teardown
        # (1.2-1.6 s per process measured here), part of every TF point's wall time.
        exit_now(0)
    return 0


def exit_now(status: int) -> None:
    """End this rank at once with `status`, output flushed, skipping atexit hooks and C++ destructors."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _report_error(rank: str, text: str) -> None:
    """This rank's own exception line for the parent (distbench.core.failures), next to its exit report."""
    folder = os.environ.get("DISTBENCH_RANK_DIR")
    if not folder:
        return
    try:
        path = os.path.join(folder, f"error-{rank}.json")
        with open(f"{path}.tmp", "w") as fh:
            json.dump({"rank": int(rank) if rank.isdigit() else rank, "error": text[:500]}, fh)
        os.replace(f"{path}.tmp", path)
    except OSError:
        pass


def max_rel_diff(replicas: list) -> float:
    """Largest relative difference of any checksum between the first replica and the others."""
    worst = 0.0
    for other in replicas[1:]:
        for a, b in zip(replicas[0], other):
            for u, v in zip(a, b):
                worst = max(worst, abs(u - v) / max(abs(u), abs(v), 1e-12))
    return worst


def strategy_distribution(module: str | None, plain: Callable[[], Any]):
    """The Distribution of a strategy from its worker module's make_distribution() (`module`: its module under
    distbench.workers, as the plan put it in the config; None: the framework's plain single-device one,
    `plain()`)."""
    import importlib

    return plain() if module is None else importlib.import_module(f"distbench.workers.{module}").make_distribution()

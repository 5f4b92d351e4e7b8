"""Worker side of `distbench comm`: the timed all-reduce loop shared by every backend."""

from __future__ import annotations

import time
from typing import Callable

from distbench.core import horovod_nccl
from distbench.workers import common


def sweep_sizes(
    cfg,
    *,
    make: Callable[[int], object],
    fill: Callable[[object], None],
    allreduce: Callable[[object], None],
    check: Callable[[object], bool],
    barrier: Callable[[], None],
    gather: Callable[[object], list],
) -> dict:
    """For each message size: warmup, then iterations each starting after a barrier; the tensor is
    refilled (outside the timed region) so every iteration's result can be checked."""
    section = cfg.comm_bench
    sizes = list(section.sizes)
    iters, warmup, budget = section.iters, section.warmup, section.max_time_per_size
    per_size, correct = [], []
    for size in sizes:
        t = make(size // 4)
        for _ in range(warmup):
            fill(t)
            allreduce(t)
        # Every rank must run the same number of iterations: decide from the slowest rank's probe.
        fill(t)
        barrier()
        t0 = time.perf_counter()
        allreduce(t)
        probe = max(gather(time.perf_counter() - t0))
        n = max(3, min(iters, int(budget / max(probe, 1e-9))))
        times, ok = [], check(t)
        for _ in range(n):
            fill(t)
            barrier()
            t0 = time.perf_counter()
            allreduce(t)
            times.append(time.perf_counter() - t0)
            ok = ok and check(t)
        gathered = gather(times)
        per_size.append([max(ts[i] for ts in gathered) for i in range(n)])
        correct.append(all(gather(ok)))
        del t
    out = summarize(sizes, per_size, cfg.world_size)
    out.update(correct=correct, iterations=[len(t) for t in per_size], per_size_times_s=per_size)
    return out


def horovod_backend(hvd, device: str) -> str:
    """What carries Horovod's all-reduce: NCCL for GPU tensors when Horovod was built with it;
    otherwise the controller's CPU path (Gloo or MPI; GPU tensors are then staged through host memory)."""
    if device == "cuda" and hvd.nccl_built():
        return "nccl"
    return "gloo" if hvd.gloo_enabled() else "mpi"


def horovod_init(hvd, cfg):
    """hvd.init(); returns {sync: process set} for the runs of this process: True, every rank; False (the
    no-sync variant at N > 1: alone, or measured in the same process with cfg.nosync_order), this rank's
    own set, registered for every rank at init: the same Horovod path (hooks, queue, fusion buffer,
    background thread), no other rank involved."""
    if cfg.world_size == 1 or (cfg.sync and not cfg.nosync_order):
        hvd.init()
        sets = {True: hvd.global_process_set, False: hvd.global_process_set}
    else:
        own = [hvd.ProcessSet([r]) for r in range(cfg.world_size)]
        hvd.init(process_sets=own)
        sets = {True: hvd.global_process_set, False: own[hvd.rank()]}
    if cfg.device == "cuda" and not hvd.nccl_built():  # planned elsewhere (Slurm, Kubernetes): checked here
        raise common.PointSkipped(horovod_nccl.reason(hvd.__name__))
    return sets


def emit_comm(cfg, out_path, strategy, framework, result: dict, backend: str) -> None:
    status = "ok" if all(result["correct"]) else "failed"
    reason = (
        None
        if status == "ok"
        else "all-reduce returned wrong values for sizes "
        + ", ".join(str(s) for s, c in zip(result["sizes_bytes"], result["correct"]) if not c)
    )
    common.emit(
        cfg, out_path, strategy=strategy, framework=framework, status=status, reason=reason, backend=backend, **result
    )


def summarize(sizes: list[int], per_size_times: list[list[float]], world_size: int) -> dict:
    """Median/p95 time and bandwidths (GB/s, 1e9 bytes) per size from per-iteration times."""
    from distbench.results import stats

    med, p95, alg, bus = [], [], [], []
    for size, times in zip(sizes, per_size_times):
        m = stats.percentile(times, 50)
        a, b = stats.bus_bandwidth(size, m, world_size)
        med.append(m)
        p95.append(stats.percentile(times, 95))
        alg.append(a / 1e9)
        bus.append(b / 1e9)
    return {"sizes_bytes": sizes, "time_median_s": med, "time_p95_s": p95, "algbw_gbps": alg, "busbw_gbps": bus}

"""Metric math: step-time statistics, throughput, speedup, efficiency. Pure functions, unit-tested."""
from __future__ import annotations

import math
import statistics
from typing import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    xs = sorted(samples)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def step_stats(step_times_s: Sequence[float], global_batch: int) -> dict:
    """Summary of measured per-step wall times (seconds) for a step of `global_batch` samples.

    throughput = global samples / total measured time (samples per second over the measured steps).
    """
    if not step_times_s:
        raise ValueError("no measured steps")
    if any(t <= 0 for t in step_times_s):
        raise ValueError("step times must be positive")
    total = float(sum(step_times_s))
    mean = total / len(step_times_s)
    stdev = statistics.stdev(step_times_s) if len(step_times_s) > 1 else 0.0
    return {
        "measured_steps": len(step_times_s),
        "throughput": global_batch * len(step_times_s) / total,
        "step_time_median_s": statistics.median(step_times_s),
        "step_time_p5_s": percentile(step_times_s, 5),
        "step_time_p95_s": percentile(step_times_s, 95),
        "step_time_mean_s": mean,
        "step_time_cv": stdev / mean,
    }


def speedup(throughput: float | None, baseline_throughput: float | None) -> float | None:
    """Throughput relative to the same framework's single-device baseline."""
    if not throughput or not baseline_throughput:
        return None
    return throughput / baseline_throughput


def efficiency(speedup_value: float | None, world_size: int) -> float | None:
    """Scaling efficiency = speedup / N (1.0 is perfect linear scaling)."""
    if speedup_value is None:
        return None
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    return speedup_value / world_size


def wrapper_overhead(throughput_n1: float | None, baseline_throughput: float | None) -> float | None:
    """Cost of the distribution wrapper on one device: 1 - throughput(strategy, 1) / baseline.

    Positive means the wrapper is slower than the plain loop.
    """
    if not throughput_n1 or not baseline_throughput:
        return None
    return 1.0 - throughput_n1 / baseline_throughput


def merge_rank_step_times(per_rank: Sequence[Sequence[float]]) -> list[float]:
    """Per step, the slowest rank's time: a synchronous step is done when its last rank is done."""
    if not per_rank:
        raise ValueError("no ranks")
    n = min(len(r) for r in per_rank)
    return [max(r[i] for r in per_rank) for i in range(n)]


def relative_ci_half_width(step_times_s: Sequence[float], z: float = 1.96) -> float:
    """Normal-approximation 95% CI half-width of the mean step time, relative to the mean.

    Throughput is samples / mean step time, so this is also (to first order) the relative CI
    half-width of throughput. Used for adaptive stopping, where it is evaluated often.
    """
    n = len(step_times_s)
    if n < 2:
        return math.inf
    mean = sum(step_times_s) / n
    return z * statistics.stdev(step_times_s) / math.sqrt(n) / mean


def bootstrap_throughput_ci(step_times_s: Sequence[float], global_batch: int, *, resamples: int = 2000,
                            level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap CI of throughput (global_batch * n / sum of resampled step times)."""
    import numpy as np

    x = np.asarray(step_times_s, dtype=float)
    if x.size < 2:
        raise ValueError("need at least 2 step times for a bootstrap CI")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    thr = global_batch * x.size / x[idx].sum(axis=1)
    lo, hi = np.quantile(thr, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def bootstrap_median_ci(values: Sequence[float], *, resamples: int = 2000, level: float = 0.95,
                        seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap CI of the median of `values` (e.g. throughput over repeats)."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    if x.size < 2:
        raise ValueError("need at least 2 values for a bootstrap CI")
    rng = np.random.default_rng(seed)
    meds = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    lo, hi = np.quantile(meds, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def comm_metrics(step_sync_s: float | None, step_independent_s: float | None,
                 allreduce_s: float | None) -> dict:
    """Exposed communication and overlap from the synchronized and independent step times.

    exposed_comm = step_sync - step_independent (clipped at 0: a negative difference is noise);
    comm_overhead = exposed_comm / step_sync; overlap = 1 - exposed_comm / standalone all-reduce
    time, clipped to [0, 1] (how much of the communication the strategy hides behind compute).
    """
    out = {"exposed_comm_s": None, "comm_overhead": None, "overlap": None,
           "exposed_comm_raw_s": None}
    if not step_sync_s or step_independent_s is None:
        return out
    raw = step_sync_s - step_independent_s
    exposed = max(0.0, raw)
    out.update(exposed_comm_raw_s=raw, exposed_comm_s=exposed, comm_overhead=exposed / step_sync_s)
    if allreduce_s and allreduce_s > 0:
        out["overlap"] = min(1.0, max(0.0, 1.0 - exposed / allreduce_s))
    return out


def bus_bandwidth(size_bytes: float, seconds: float, world_size: int) -> tuple[float, float]:
    """All-reduce bandwidths as nccl-tests defines them: algbw = S / t and
    busbw = algbw * 2 (n - 1) / n, in bytes per second."""
    if seconds <= 0:
        raise ValueError("seconds must be positive")
    if world_size < 1:
        raise ValueError("world_size must be >= 1")
    algbw = size_bytes / seconds
    return algbw, algbw * 2 * (world_size - 1) / world_size

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

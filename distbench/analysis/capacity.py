"""Capacity planning from measured points: devices needed per strategy for a target throughput or epoch time
(no extrapolation past the largest N measured)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from distbench.analysis.cis import steps_throughput_ci, throughput_ci
from distbench.analysis.records import (
    by_strategy,
    device_word,
    group_by_workload,
    is_comm,
    is_noisy,
    num,
    workload_label,
)


@dataclass
class CapacityRow:
    workload: str
    strategy: str
    measured: list[tuple[int, float]]
    """(N, throughput) for every successful measured point."""
    cis: list[tuple[float, float | None] | None] = field(default_factory=list)
    """Each measured point's 95% throughput CI (high None: unbounded), None where it has none."""
    noisy: list[bool] = field(default_factory=list)
    """Each measured point: flagged noisy (analysis.is_noisy)."""
    target_throughput: str | None = None
    epoch_times: list[tuple[int, float]] = field(default_factory=list)
    target_epoch: str | None = None


def capacity(
    points: Sequence[dict],
    *,
    target_throughput: float | None = None,
    epoch_samples: int | None = None,
    epoch_time_s: float | None = None,
    step_times: Callable[[dict], Sequence[float]] | None = None,
) -> list[CapacityRow]:
    """Devices needed per strategy, from measured points only (no extrapolation past the largest N). A point
    without a CI of its own gets the within-run one from its step times (`step_times`, e.g. Sweep.step_times)."""
    groups = group_by_workload(r for r in points if not is_comm(r) and num(r.get("throughput")))
    rows = []
    for key, pts in groups.items():
        word = device_word(pts)
        for strategy, spts in by_strategy(pts).items():
            measured = [(int(r["world_size"]), num(r["throughput"])) for r in spts]
            row = CapacityRow(
                workload=workload_label(key, groups),
                strategy=strategy,
                measured=measured,
                cis=[point_ci(r, step_times) for r in spts],
                noisy=[is_noisy(r) for r in spts],
            )
            missed = f"not reached at the largest measured N = {measured[-1][0]}"
            if target_throughput is not None:
                hit = next((r for r in spts if num(r["throughput"]) >= target_throughput), None)
                if hit is None:
                    row.target_throughput = f"{missed} ({measured[-1][1]:.2f} samples/s)"
                else:
                    row.target_throughput = _count(int(hit["world_size"]), word)
                    ci = throughput_ci(hit)
                    if ci and ci[0] < target_throughput:
                        row.target_throughput += (
                            f" (its 95% CI lower bound, {ci[0]:.2f} samples/s, is below the target)"
                        )
            if epoch_samples:
                row.epoch_times = [(n, epoch_samples / thr) for n, thr in measured]
                if epoch_time_s is not None:
                    hit = next((n for n, t in row.epoch_times if t <= epoch_time_s), None)
                    last = format_duration(row.epoch_times[-1][1])
                    row.target_epoch = f"{missed} ({last} per epoch)" if hit is None else _count(hit, word)
            rows.append(row)
    return rows


def point_ci(record: dict, step_times: Callable[[dict], Sequence[float]] | None) -> tuple[float, float] | None:
    """The record's own 95% throughput CI, else the within-run one from its step times (batch means), else None."""
    ci = throughput_ci(record)
    if ci is not None or step_times is None:
        return ci
    try:
        return steps_throughput_ci(step_times(record), num(record["throughput"]))
    except ValueError:  # too few steps, or batch means that stay autocorrelated
        return None


def _count(n: int, word: str) -> str:
    return f"{n} {word if n != 1 else word[:-1]}"


def format_duration(seconds: float) -> str:
    for below, unit, name in ((120, 1, "s"), (3600, 60, "min"), (172800, 3600, "h")):
        if seconds < below:
            return f"{seconds / unit:.1f} {name}"
    return f"{seconds / 86400:.1f} days"

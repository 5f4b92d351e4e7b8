"""The bucket pipeline: each gradient bucket is reduced once it is ready during backward and the link is free.

A timeline says, for each bucket in the order it is reduced, when its gradients are ready (as a fraction of the
backward pass elapsed) and what share of the gradient bytes it holds. Backward runs for `backward_s` seconds and
ends where the step's compute ends (time 0); bucket i is ready at -backward_s x (1 - ready_i). The buckets go
through one link in order (a framework's collectives on one communicator run one at a time, in issue order, and
each uses every tier of the network in turn: a hierarchical all-reduce's intra-node and inter-node phases are
parts of one bucket's cost), each taking `cost(share)` seconds. The exposed communication is how far past the end
of compute the last bucket finishes.

With k equal buckets ready at equal steps (`uniform`), the pipeline reduces to the closed form
max(T / k, T - W), W = backward_s (1 - 1/k): the exposure is the larger of the last bucket alone and the
transfer beyond the backward time after the first bucket. Timelines from the model's per-layer FLOPs
(`layers.flops_timeline`) or a one-device profile differ from it where the ready times are uneven.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence


@dataclass(frozen=True)
class Timeline:
    ready: tuple[float, ...]
    """Per bucket, in reduction order: the fraction of backward elapsed when its gradients are ready (0..1,
    non-decreasing; the first layer's gradients are among the last computed)."""
    shares: tuple[float, ...]
    """Per bucket: its share of the gradient bytes (they sum to 1)."""
    source: str
    """Where the ready times come from: uniform (assumed), model FLOPs, a profile."""
    notes: tuple[str, ...] = field(default=())

    @property
    def buckets(self) -> int:
        return len(self.ready)

    @property
    def equal(self) -> bool:
        """Every bucket holds the same share (each costs its share of the whole transfer)."""
        return max(self.shares) - min(self.shares) <= 1e-12

    def check(self) -> None:
        if not self.ready or len(self.ready) != len(self.shares):
            raise ValueError("a timeline needs one ready time and one share per bucket")
        if any(not 0 <= r <= 1 for r in self.ready) or any(b < a - 1e-12 for a, b in zip(self.ready, self.ready[1:])):
            raise ValueError(f"ready times must be non-decreasing fractions of backward: {self.ready}")
        if abs(sum(self.shares) - 1) > 1e-6 or any(s < 0 for s in self.shares):
            raise ValueError(f"bucket shares must be non-negative and sum to 1: {self.shares}")


def uniform(k: int, source: str = "uniform (assumed: equal buckets ready at equal steps of backward)") -> Timeline:
    """k equal buckets, bucket i (1-based) ready after i/k of backward."""
    k = max(1, int(k))
    return Timeline(tuple((i + 1) / k for i in range(k)), tuple(1 / k for _ in range(k)), source)


def schedule(timeline: Timeline, backward_s: float, cost: Callable[[float], float]) -> list[tuple[float, float, float]]:
    """(ready, start, end) seconds of each bucket, relative to the end of compute (negative: during backward)."""
    out = []
    free = -math.inf
    for r, share in zip(timeline.ready, timeline.shares):
        ready = -max(0.0, backward_s) * (1.0 - r)
        start = max(free, ready)
        free = start + cost(share)
        out.append((ready, start, free))
    return out


def exposed(timeline: Timeline, backward_s: float, cost: Callable[[float], float]) -> float:
    """Seconds the last bucket finishes after compute ends (0 when everything hid)."""
    if not timeline.ready:
        return 0.0
    return max(0.0, schedule(timeline, backward_s, cost)[-1][2])


def merge(ready: Sequence[float], sizes: Sequence[float], cap: float, first_cap: float | None = None) -> Timeline:
    """Buckets from per-parameter ready fractions and bytes, in the order the gradients are produced
    (DDP's rule: parameters in reverse order fill a bucket until it would pass `cap` bytes; the first bucket's cap
    is `first_cap` where the framework has one). A bucket is ready when its last parameter is."""
    if not sizes:
        return uniform(1)
    total = float(sum(sizes))
    out_r, out_s = [], []
    fill, limit, last = 0.0, first_cap or cap, 0.0
    for r, b in zip(ready, sizes):
        if fill and fill + b > limit:
            out_r.append(last)
            out_s.append(fill / total)
            fill, limit = 0.0, cap
        fill += b
        last = r
    out_r.append(last)
    out_s.append(fill / total)
    return Timeline(tuple(out_r), tuple(out_s), "")

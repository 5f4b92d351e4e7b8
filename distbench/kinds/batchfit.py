"""The search behind `distbench fit`, over any `trial(batch) -> record`: from `start` the batch doubles while
trials end 'ok' (up to `max_batch`), or halves while they end 'oom'; then it bisects between the largest ok
and the smallest oom until they are within `tolerance` (0: the exact limit). Any other end ('failed',
'timeout', ...) stops the search: its reason is the answer, never a guess about memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class BatchSearch:
    """Batches are the values passed to `trial`; records are what it returned."""

    tolerance: float
    max_batch: int
    trials: list[tuple[int, dict]] = field(default_factory=list)
    """Every (batch, record), in the order run."""
    largest: tuple[int, dict] | None = None
    """The largest batch that ran ok."""
    first_oom: tuple[int, dict] | None = None
    """The smallest batch that ran out of memory."""
    stopped: tuple[int, dict] | None = None
    """A trial that ended neither ok nor oom: the search stopped at it."""

    @property
    def reached_max_batch(self) -> bool:
        """`max_batch` itself ran ok: the real limit is that or more."""
        return self.largest is not None and self.largest[0] >= self.max_batch


def find_largest_batch(
    trial: Callable[[int], dict], *, start: int, max_batch: int, tolerance: float = 0.05
) -> BatchSearch:
    if not 1 <= start <= max_batch:
        raise ValueError(f"start {start} must be in 1..max_batch ({max_batch})")
    fit = BatchSearch(tolerance=tolerance, max_batch=max_batch)

    def run(batch: int) -> str:
        record = trial(batch)
        fit.trials.append((batch, record))
        status = record["status"]
        if status == "ok" and (fit.largest is None or batch > fit.largest[0]):
            fit.largest = (batch, record)
        elif status == "oom" and (fit.first_oom is None or batch < fit.first_oom[0]):
            fit.first_oom = (batch, record)
        elif status not in ("ok", "oom"):
            fit.stopped = (batch, record)
        return status

    batch = start
    status = run(batch)
    while status == "ok" and batch < max_batch:
        batch = min(2 * batch, max_batch)
        status = run(batch)
    while status == "oom" and fit.largest is None and batch > 1:
        batch //= 2
        status = run(batch)
    while fit.stopped is None and fit.largest and fit.first_oom:
        low, high = fit.largest[0], fit.first_oom[0]
        if high - low <= max(1.0, tolerance * low):
            break
        run((low + high) // 2)
    return fit

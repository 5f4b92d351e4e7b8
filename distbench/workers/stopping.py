"""The measured loop of a worker: warmup, a barrier, then timed steps until the CI target, the step cap or
--max-time stops it (`measure`), or a run sized in advance by a pilot (`measure_two_stage`); and the point's
step times from every rank's (`combine_ranks`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

from distbench.core import phases
from distbench.core.config import PointConfig
from distbench.results import stats

Gather = Callable[[Any], list]


def single_gather(obj: Any) -> list:
    return [obj]


def event_step_times(start: Any, events: list) -> list[float]:
    """Seconds from each step-end event to the next (the first from `start`): CUDA events' elapsed_time
    is in milliseconds, measured on the device between the two records."""
    out, prev = [], start
    for event in events:
        out.append(prev.elapsed_time(event) / 1e3)
        prev = event
    return out


def measure(
    step: Callable[[], Any],
    sync: Callable[[Any], None],
    cfg: PointConfig,
    gather: Gather = single_gather,
    new_event: Callable[[], Any] | None = None,
) -> tuple[list[float], Any, dict]:
    """Warmup, a barrier, then measured steps; returns (this rank's per-step seconds, last output,
    how measuring stopped, with this rank's timed segments).

    The device is synchronized before each clock read, so a step's time covers all its work; step
    times are back to back (each from the end of the previous step), so a segment's steps add up to
    its wall time. With `new_event` (torch on CUDA: torch.cuda.Event(enable_timing=True)) the host does not
    wait for the device every step, which would remove the CPU/GPU pipelining real training has: an event
    is recorded after each step, the host synchronizes only at the segment's end, and the step times are
    the device time between consecutive events (event_step_times); the segment's wall time stays the
    host's, from its start (the device idle: synchronized) to the synchronize at its end. Warmup steps (graph tracing, compilation, allocator growth) run but are not
    recorded. Every rank leaves a barrier (the strategy's own collective, `gather`) together before
    the first measured step; a segment runs from there, or from a stopping check (also a collective),
    to the end of the rank's last step before the next check (window_throughput).

    Adaptive stopping (cfg.target_ci > 0): after cfg.steps, the ranks look at the batch-means CI of
    the gathered (slowest-rank) step times only at stats.next_look() step counts, and stop at the
    first look where its relative half width is within the target, or when cfg.max_time_s (the next
    look is brought forward to end at about the time limit) or cfg.max_steps is reached. Every rank
    takes the same decision from the same gathered data.
    """
    if cfg.target_ci > 0 and cfg.two_stage:
        return measure_two_stage(step, sync, cfg, gather, new_event)
    out = None
    sync(None)
    phases.mark("warmup")
    warmup_start = time.time()  # wall clock: the parent splits the point's wall time with it
    for _ in range(cfg.warmup):
        out = step()
        sync(out)
    times: list[float] = []
    segments: list[float] = []
    stopping: dict = {"rule": "fixed_steps", "target_ci": cfg.target_ci or None}
    goal, limit = cfg.steps, None
    gather(None)  # the barrier: all ranks start the measured window together
    phases.mark("measuring")
    window_start = time.time()  # wall clock, so the parent's telemetry can pick the measured window
    while True:
        t0 = seg_start = time.perf_counter()
        if new_event is not None:
            events, start = [], new_event()
            start.record()
            while len(times) + len(events) < goal:
                out = step()
                events.append(new_event())
                events[-1].record()
            sync(out)  # the segment's end: the host waits for the device once
            t0 = time.perf_counter()
            times.extend(event_step_times(start, events))
        while len(times) < goal:
            out = step()
            sync(out)
            t1 = time.perf_counter()
            times.append(t1 - t0)
            t0 = t1
        segments.append(t0 - seg_start)
        if cfg.target_ci <= 0:
            break
        gathered = gather([times, segments])
        n = len(times)
        ci = stats.step_time_ci(combine_ranks([g[0] for g in gathered], cfg.sync))
        elapsed = sum(max(seg) for seg in zip(*(g[1] for g in gathered)))
        stopping["ci_half_width"] = ci["rel_half_width"] if ci else None
        if stats.target_met(ci, cfg.target_ci):
            stopping["rule"] = "target_ci_met"
            break
        out_of_time = 0 < cfg.max_time_s <= elapsed
        if limit or out_of_time or n >= cfg.max_steps:
            stopping["rule"] = limit or ("max_time" if out_of_time else "max_steps")
            break
        goal = min(stats.next_look(n), cfg.max_steps)
        if cfg.max_time_s > 0 and elapsed * goal / n > cfg.max_time_s:
            goal, limit = max(n + 1, int(cfg.max_time_s * n / elapsed)), "max_time"
        elif goal == cfg.max_steps:
            limit = "max_steps"
    stopping["window"] = [window_start, time.time()]
    stopping["warmup_start"] = warmup_start
    stopping["segments_s"] = segments
    return times, out, stopping


def measure_two_stage(
    step: Callable[[], Any],
    sync: Callable[[Any], None],
    cfg: PointConfig,
    gather: Gather,
    new_event: Callable[[], Any] | None = None,
) -> tuple[list[float], Any, dict]:
    """The point's window when every run of an in-process order (A T B T A) must follow the same rule: a pilot
    (after the warmup; up to stats.PILOT_STEPS steps within stats.PILOT_SHARE of --max-time; not part of any
    figure, its slowest-rank step times kept in the record), then a window of K steps fixed in advance from what
    is left of --max-time at the pilot's mean pace (stats.two_stage_steps), which every later run repeats
    (fixed_steps).
    Adaptive stopping on the first run alone biased its mean against the fixed-length runs beside it, and the
    split takes differences of these means. Every rank takes the same decisions from the same gathered data."""
    plain = dataclasses.replace(cfg, target_ci=0.0, two_stage=False)
    first = min(max(cfg.steps, 1), stats.PILOT_STEPS)
    pilot_times, _, pilot = measure(step, sync, dataclasses.replace(plain, steps=first), gather, new_event)
    segments = list(pilot["segments_s"])

    def slowest() -> tuple[list[float], float]:
        gathered = gather([pilot_times, segments])
        return combine_ranks([g[0] for g in gathered], cfg.sync), sum(max(s) for s in zip(*(g[1] for g in gathered)))

    combined, pilot_s = slowest()
    more = stats.two_stage_pilot_steps(len(combined), pilot_s, cfg.max_time_s)
    if more:
        extra_times, _, rest = measure(step, sync, dataclasses.replace(plain, warmup=0, steps=more), gather, new_event)
        pilot_times = pilot_times + extra_times
        segments += rest["segments_s"]
        combined, pilot_s = slowest()
    ci = stats.step_time_ci(combined)  # kept in the record; it decides nothing
    k, why = stats.two_stage_steps(len(combined), pilot_s, max(cfg.steps, 1), cfg.max_steps, cfg.max_time_s)
    times, out, stopping = measure(step, sync, dataclasses.replace(plain, warmup=0, steps=k), gather, new_event)
    stopping.update(
        rule="two_stage",
        target_ci=cfg.target_ci,
        warmup_start=pilot["warmup_start"],
        two_stage={
            "pilot_steps": len(combined),
            "pilot_step_times_s": combined,
            "pilot_s": pilot_s,
            "pilot_window": [pilot["window"][0], stopping["window"][0]],
            "pilot_ci_half_width": ci["rel_half_width"] if ci else None,
            "steps": k,
            "sized_by": why,
        },
    )
    return times, out, stopping


def combine_ranks(per_rank: list[list[float]], synchronized: bool) -> list[float]:
    """Step times of the point from every rank's: for synchronized training a step lasts as long as
    its slowest rank; independent replicas drift apart step by step, so take the slowest rank's own
    series (the largest total) instead of a per-step maximum over unaligned steps. These describe
    the step-time distribution and its CI; throughput comes from the measured window."""
    if synchronized or len(per_rank) == 1:
        return stats.merge_rank_step_times(per_rank)
    return list(max(per_rank, key=sum))

"""What a sweep asks its points when it profiles them (`--profile` on run/scale, `distbench profile`): the
request rides to the worker in PointConfig.profiling (core.sections.ProfileSection: steps, trace_dir, not part of a point's
identity), put on the planned points here (the plan itself is plan.make_plan's). A strategy whose worker has
no profiling hook, or a trace folder that cannot be written, does not stop the sweep: its points are measured
(without a profile, or without a trace file) and the command then ends with one line naming the flag
(`Profiling.problem`, exit 2)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from distbench.core.errors import BadInput
from distbench.core.sections import ProfileSection
from distbench.profile.hooks import STEPS
from distbench.profile.trace import check_trace_folder


@dataclasses.dataclass
class Profiling:
    plan: object
    """The plan with the request on every point that can be profiled."""
    trace_dir: Path | None
    problem: str | None = None
    """One line naming the flag, raised as BadInput after the points were measured (None: nothing wrong)."""

    def finish(self) -> None:
        if self.problem:
            raise BadInput(self.problem)


def with_profiling(plan, trace_dir: str | Path, *, flag: str = "--profile", dir_flag: str = "--results", steps=STEPS):
    """`plan` with its points asking to be profiled (PointConfig.profiling); traces into `trace_dir`.
    A strategy with no profiler is measured unprofiled; an unwritable `trace_dir` means breakdowns without
    trace files. Either is the returned Profiling's `problem`."""
    problems = []
    try:
        folder: Path | None = check_trace_folder(trace_dir, dir_flag)
    except BadInput as exc:
        folder = None
        problems.append(f"{exc}; the points were measured and profiled, their trace files not kept")
    points, unprofiled = [], []
    for p in plan.points:
        if p.strategy.no_profiler_reason:  # the registry says why (Strategy.no_profiler_reason)
            if not p.skip_reason and p.strategy not in unprofiled:
                unprofiled.append(p.strategy)
            points.append(p)
            continue
        ask = ProfileSection(steps=steps, trace_dir=str(folder) if folder else None)
        cfg = dataclasses.replace(p.config, profiling=ask)
        points.append(dataclasses.replace(p, config=cfg))
    for s in unprofiled:
        problems.insert(
            0, f"{flag}: strategy {s.name} has no profiler ({s.no_profiler_reason}); it was measured unprofiled"
        )
    return Profiling(dataclasses.replace(plan, points=points), folder, "; ".join(problems) or None)

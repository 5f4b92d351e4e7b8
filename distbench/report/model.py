"""The report as data: `build_report` turns a sweep into the sections that apply (sections.py), made of the
plain blocks (blocks.py) that the HTML template and the Markdown renderer both walk."""

from __future__ import annotations

from distbench import analysis as an
from distbench.analysis import Sweep
from distbench.report.blocks import Figure, Plot, Report, Text
from distbench.report.sections import SECTIONS, Inputs
from distbench.report.tables import capacity_table, sweep_when

CPU_NOTE = (
    "This sweep ran on CPU workers (device = cpu), not GPUs: each 'GPU' was a CPU worker process and "
    "the workers shared the machine's CPU cores. Absolute numbers are CPU numbers, and the scaling "
    "seen here says little about scaling on GPUs."
)


def build_report(
    sweep: Sweep,
    plots: list[Plot],
    *,
    target_throughput: float | None = None,
    epoch_samples: int | None = None,
    epoch_time: float | None = None,
    prediction: dict | None = None,
) -> Report:
    """The whole report as data: the sweep's header, the CPU-workers callout and the sections that apply."""
    inputs = Inputs(
        sweep=sweep,
        summary=an.summarize(sweep),
        plots={p.name: p for p in plots},
        capacity=capacity_table(sweep, target_throughput, epoch_samples, epoch_time),
        capacity_asked=target_throughput is not None or bool(epoch_samples),
        prediction=prediction,
    )
    sections = [s for s in (build(inputs) for build in SECTIONS) if s]
    for plot in plots:  # a plot no builder names goes at the end of its own section
        home = next((s for s in sections if s.id == plot.section), None)
        if home and plot.name not in inputs.placed:
            home.blocks.append(Figure(plot))
    i = sweep.info
    return Report(
        sweep_id=sweep.id,
        when=sweep_when(i),
        command=str(i.get("command") or "-"),
        store_path=str(sweep.store_path),
        callout=Text(CPU_NOTE, "callout", "CPU workers.") if sweep.cpu_workers else None,
        sections=sections,
        plots=plots,
    )

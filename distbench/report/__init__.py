"""Presenting a stored sweep: terminal tables (`results list/show`, terminal.py), exports (exports.py) and
the report: ONE self-contained HTML file (plots inline as SVG data URIs, inline CSS, a Content-Security-Policy
that forbids any network load), a Markdown twin with the plots beside it as PNG, and a CSV of the points.
Both documents render one data model (model.py: the sections of sections.py, built from the tables of tables.py
and wrappers.py, as the blocks of blocks.py) with the plots of plots.py (render.py renders them)."""

from distbench.report.exports import export, have_pyarrow
from distbench.report.model import build_report
from distbench.report.plots import make_plots
from distbench.report.render import CSP, MARKER_JS, md, render_html, render_markdown, write_report
from distbench.report.terminal import points_table, sweep_header, sweeps_table

__all__ = [
    "CSP",
    "MARKER_JS",
    "build_report",
    "export",
    "have_pyarrow",
    "make_plots",
    "md",
    "points_table",
    "render_html",
    "render_markdown",
    "sweep_header",
    "sweeps_table",
    "write_report",
]

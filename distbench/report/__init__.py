"""Presenting a stored sweep: terminal tables (`results list/show`), exports, and the report.

`write_report` makes ONE self-contained HTML file (plots inline as base64 SVG data URIs, inline CSS, a
Content-Security-Policy that forbids any network load), a Markdown twin for a PR or wiki with the
plots written beside it as PNG, and a CSV of the points. Both documents render one data model:

    model.py     build_report: the sweep as sections of plain blocks (text, lists, tables, figures)
    plots.py     PLOTS: the matplotlib plots, one entry each
    render.py    HTML (jinja2, distbench/templates/report.html.j2, autoescaped) and Markdown; write_report
    terminal.py  rich tables for `distbench results list|show`
    exports.py   `distbench results export` (CSV/Parquet/JSON) and the spreadsheet-formula guard

    from distbench.analysis import open_store, load_sweep
    from distbench.report import write_report
    with open_store("distbench-results/distbench.db") as store:
        files = write_report(load_sweep(store, "latest"), "report.html", target_throughput=1000)
"""

from distbench.report.exports import check_writable, export, have_pyarrow, safe_csv, spreadsheet_safe  # noqa: F401
from distbench.report.model import Plot, build_report, wall_table as _wall_table  # noqa: F401
from distbench.report.plots import PLOTS, _mpl, _n_axis, _render, make_plots  # noqa: F401 (_*: distbench.predict)
from distbench.report.render import CSP, MARKER_JS, ReportFiles, md, render_html  # noqa: F401
from distbench.report.render import render_markdown, write_report  # noqa: F401
from distbench.report.terminal import points_table, sweep_header, sweeps_table, wrapper_lines  # noqa: F401

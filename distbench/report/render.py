"""The report's two renderings of one `Report` (blocks.py, built by model.py): HTML (templates/report.html.j2) and Markdown."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jinja2

from distbench import analysis as an
from distbench import predict as predict_mod
from distbench.analysis import Sweep
from distbench.core.errors import BadInput
from distbench.report import converge as converge_report
from distbench.report.blocks import Bullets, Details, Figure, Grid, Heading, Plot, Report, Table, Text
from distbench.report.exports import check_writable, safe_csv, spreadsheet_safe
from distbench.report.model import build_report
from distbench.report.plots import make_plots

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


@cache
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("distbench", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["svg_data_uri"] = lambda plot: "data:image/svg+xml;base64," + base64.b64encode(plot.svg).decode("ascii")
    env.tests["numeric"] = _numeric
    return env


def _numeric(text) -> bool:
    """A cell that reads as a number ("12.5", "-3%", "1,024"): right-aligned in the HTML tables."""
    t = str(text).replace("%", "").replace(",", "").replace("-", "", 1).replace(".", "", 1).strip()
    return t.isdigit()


MARKER_JS = _templates().loader.get_source(_templates(), "report-ready.js")[0]


def render_html(report: Report) -> str:
    return _templates().get_template("report.html.j2").render(r=report, csp=CSP)


# -- Markdown
_MD_HTML = re.compile(r"<(?=[A-Za-z/!?])|&(?=[A-Za-z#])")
"""A '<' that could open an HTML tag, comment or autolink, an '&' that could open an entity: only these are
escaped (with a backslash), so '82 < 150' and 'torch<2.7.1' read as written."""


def md(text) -> str:
    """Store text for Markdown tables and paragraphs as text, not HTML: a '<' or '&' that Markdown would read
    as a tag or an entity gets a backslash (no HTML entities: the raw file reads as text), backslashes and
    pipes are escaped, line breaks neutralised."""
    text = str(text).replace("\\", "\\\\")
    return _MD_HTML.sub(lambda m: "\\" + m.group(0), text).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def md_table(headers, rows) -> str:
    """A Markdown table whose cells cannot start a spreadsheet formula (see spreadsheet_safe)."""
    line = lambda cells: "| " + " | ".join(md(spreadsheet_safe(c)) for c in cells) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "---|" * len(headers), *map(line, rows)])


def _md_block(b, images: dict[str, str]) -> list[str]:
    match b:
        case Text():
            text = (f"**{md(b.lead)}** " if b.lead else "") + md(b.text)
            return [f"> {text}" if b.style == "callout" else text]
        case Bullets():
            return ["\n".join(f"- {md(item)}" for item in b.items)]
        case Heading():
            return [f"### {md(b.text)}"]
        case Table():
            return [md_table(b.headers, b.rows)]
        case Figure():
            caption = [f"*{md(b.plot.caption)}*"] if b.plot.caption else []
            return [f"![{md(b.plot.title)}]({images[b.plot.name]})", *caption]
        case Grid():
            return [p for f in b.figures for p in _md_block(f, images)]
        case Details():
            return []  # verbatim stderr tails: the HTML page only
    raise TypeError(f"no Markdown for {type(b).__name__}")


def render_markdown(report: Report, *, images: dict[str, str], csv_name: str) -> str:
    """`images`: plot name -> the PNG's file name next to the Markdown."""
    r = report
    out = [
        f"# distbench report: sweep {md(r.sweep_id)}",
        f"{md(r.when)}. Command: <code>{md(r.command)}</code>. Points as CSV: [{md(csv_name)}]({csv_name}).",
    ]
    out += _md_block(r.callout, images) if r.callout else []
    for section in r.sections:
        out.append(f"## {md(section.title)}")
        out += [p for b in section.blocks for p in _md_block(b, images)]
    return "\n\n".join(out) + "\n"


# -- the files
@dataclass
class ReportFiles:
    html: Path
    markdown: Path
    csv: Path
    images: list[Path]


def write_report(sweep: Sweep, out: str | Path, **capacity) -> ReportFiles:
    """Write <out>.html, <out>.md, <out>-points.csv and <out>-<plot>.png next to each other. `capacity`:
    build_report's target_throughput, epoch_samples and epoch_time."""
    html_path = Path(out)
    if html_path.suffix.lower() not in (".html", ".htm"):
        raise BadInput(f"--out {out}: give an .html file name (the Markdown, CSV and plots are written next to it)")
    md_path, csv_path = html_path.with_suffix(".md"), html_path.with_name(f"{html_path.stem}-points.csv")
    if capacity.get("epoch_time") is not None and not capacity.get("epoch_samples"):
        raise BadInput("--epoch-time needs --epoch-samples (how many samples one epoch has)")
    for path in (html_path, md_path, csv_path):
        check_writable(path)
    try:
        html_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"cannot write {html_path}: {exc.strerror or exc}") from None
    plots = make_plots(sweep) + converge_report.plots(sweep)  # time to accuracy (distbench converge)
    prediction = predict_mod.latest_for(sweep.store_path, sweep.id)  # predicted capacity (distbench predict)
    if prediction:
        svg, png, caption = predict_mod.plot_images(prediction)
        plots.append(Plot("predicted", "Predicted throughput", svg, png, caption))
    report = build_report(sweep, plots, prediction=prediction, **capacity)
    converge_report.add_section(report, sweep, plots)
    images = {p.name: html_path.with_name(f"{html_path.stem}-{p.name}.png") for p in plots}
    page = render_html(report)
    markdown = render_markdown(report, images={k: v.name for k, v in images.items()}, csv_name=csv_path.name)
    try:
        for p in plots:
            images[p.name].write_bytes(p.png)
        csv_path.write_text(safe_csv(an.points_frame(sweep)))
        md_path.write_text(markdown)
        html_path.write_text(page)
    except OSError as exc:
        raise BadInput(f"cannot write {exc.filename or html_path}: {exc.strerror or exc}") from None
    return ReportFiles(html=html_path, markdown=md_path, csv=csv_path, images=list(images.values()))

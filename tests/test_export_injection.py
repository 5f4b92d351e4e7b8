"""Hostile strings in result records (a record JSON someone hands you) travel through `distbench collect`
into the report's HTML (escaped), Markdown tables and CSV, and `results export --csv`: no cell may start
a spreadsheet formula (OWASP: prefix ' to text cells that begin with = + - @ tab or CR), numbers stay numbers."""

from __future__ import annotations

import csv
import re

import pytest

from distbench.cli import main
from distbench.results.record import write_record
from tests.builders import point

FORMULA = "=cmd|' /C calc'!A0"
HOSTILE = [FORMULA, "@SUM(1)", "+1", "-1+2", "\t=1+1", "\r=1+1", '=HYPERLINK("http://x","y")']
HTML_ATTACK = "<img src=x onerror=alert(1)>"
DANGER = ("=", "+", "-", "@", "\t", "\r")


def _number(cell: str) -> bool:
    try:
        float(cell.replace(",", "").rstrip("%"))
        return True
    except ValueError:
        return False


def _formula_cells(cells) -> list[str]:
    """Cells a spreadsheet would run: they begin with a formula character and are not a plain number
    (a lone "-" is the reports' placeholder for a missing value)."""
    return [c for c in cells if c.startswith(DANGER) and c != "-" and not _number(c)]


@pytest.fixture
def collected(tmp_path, capsys):
    folder, db = tmp_path / "records", tmp_path / "r.db"
    records = [
        point("torch", 1, 0.1, model=HOSTILE[2], device=HOSTILE[3]),
        point(FORMULA, 2, 0.1, model=HOSTILE[2], wrapper_overhead=-0.25),
        point(HOSTILE[1], 2, status="failed", reason=HOSTILE[3]),
        point(HOSTILE[4], 4, status="failed", reason=HOSTILE[5]),
        point(HTML_ATTACK, 4, status="oom", reason=HOSTILE[6]),
    ]
    records[1][HOSTILE[6]] = "-1+2"  # a hostile extra field: it becomes a CSV column (header and cell)
    records[1]["hostile_negative"] = -3.5  # a number stays a number
    for i, r in enumerate(records):
        write_record(folder / f"r{i}.json", r)
    assert main(["collect", str(folder), "--results", str(db)]) == 0
    capsys.readouterr()
    return db, records


def _csv_rows(path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def _check_csv(rows: list[list[str]]) -> None:
    header, body = rows[0], rows[1:]
    cells = [c for row in rows for c in row]
    assert _formula_cells(cells) == []
    column = {name: [row[i] for row in body] for i, name in enumerate(header)}
    strategies = column["strategy"]
    assert "'" + FORMULA in strategies and "'@SUM(1)" in strategies and "'\t=1+1" in strategies
    assert HTML_ATTACK in strategies  # not a formula: CSV is not HTML, left as it is
    assert "'-1+2" in column["reason"] and "'\r=1+1" in column["reason"] and "'" + HOSTILE[6] in column["reason"]
    assert set(column["model"]) == {"'+1", "resnet50"}
    assert "'" + HOSTILE[6] in header and "'-1+2" in column["'" + HOSTILE[6]]
    assert "-3.5" in column["hostile_negative"] and "-0.25" in column["wrapper_overhead"]  # numbers untouched
    assert float(column["world_size"][0]) == 1 and all(_number(v) for v in column["world_size"])


def test_results_export_csv_neutralises_formulas(collected, tmp_path, capsys):
    db, _ = collected
    out = tmp_path / "points.csv"
    assert main(["results", "export", "latest", "--csv", str(out), "--results", str(db)]) == 0
    err = capsys.readouterr().err.splitlines()  # the latest line wraps at the terminal's width
    assert err[0].startswith("latest: sweep ") and err[-1] == f"wrote {out}"
    _check_csv(_csv_rows(out))
    assert main(["results", "export", "latest", "--csv", "-", "--results", str(db)]) == 0
    assert capsys.readouterr().out == out.read_bytes().decode()


def test_report_csv_markdown_and_html_are_safe(collected, tmp_path, capsys):
    db, _ = collected
    html_path = tmp_path / "report.html"
    assert main(["report", "latest", "--out", str(html_path), "--results", str(db)]) == 0, capsys.readouterr().err
    _check_csv(_csv_rows(tmp_path / "report-points.csv"))

    markdown = (tmp_path / "report.md").read_text()
    table_cells = [
        c.strip() for line in markdown.splitlines() if line.startswith("| ") for c in re.split(r"(?<!\\)\|", line)[1:-1]
    ]
    assert len(table_cells) > 50
    assert _formula_cells(table_cells) == []
    assert "'=cmd\\|' /C calc'!A0" in table_cells and "'@SUM(1)" in table_cells and "'-1+2" in table_cells
    assert "'+1" in table_cells  # the model column
    assert any(re.fullmatch(r"\d+\.\d+", c) for c in table_cells)  # measured numbers are still numbers
    # Markdown reads as text: the tag's "<" is backslash-escaped (never an HTML entity), so no tag is made
    assert "\\" + HTML_ATTACK in markdown and HTML_ATTACK not in markdown.replace("\\" + HTML_ATTACK, "")
    assert "&lt;" not in markdown

    page = html_path.read_text()
    assert HTML_ATTACK not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "=cmd|&#39; /C calc&#39;!A0" in page and "onerror=alert" not in page.replace(
        "&lt;img src=x onerror=alert(1)&gt;", ""
    )

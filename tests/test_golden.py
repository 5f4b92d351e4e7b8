"""Before/after byte comparisons of what users read from one recorded sweep: `results show` (terminal and
JSON) and the Markdown report. A restructure must leave these files unchanged; a change that means to
change them rewrites them with DISTBENCH_UPDATE_GOLDEN=1 and the diff is reviewed with the change.

The sweep is tests/builders.scaling_records() (hand-checkable numbers) stored under a fixed sweep id and
clock, so the outputs are the same on every machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distbench.cli import main
from distbench.results import store as store_mod
from distbench.results.store import Store
from tests.builders import add_sweep, point, scaling_records

GOLDEN = Path(__file__).parent / "data" / "golden"
UPDATE = os.environ.get("DISTBENCH_UPDATE_GOLDEN") == "1"
SWEEP = "20260101-000000-golden"


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "_now", lambda: "2026-01-01T00:00:00+00:00")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("TZ", "UTC")
    db = tmp_path / "golden.db"
    records = scaling_records() + [
        point("tf", 1, 0.12, framework="tensorflow"),
        point("mirrored", 2, 0.13, framework="tensorflow"),
    ]
    for i, r in enumerate(records):
        r["record_id"] = f"golden-{i:02d}"  # a fresh uuid4 otherwise
    with Store(db) as store:
        real_start = store.start_sweep
        store.start_sweep = lambda **kw: real_start(**kw, sweep_id=SWEEP)
        add_sweep(store, records)
    return db


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.write_text(text)
        if not UPDATE:
            pytest.fail(f"{path} did not exist: written now; review and commit it")
    assert text == path.read_text(), f"{name} changed: rerun with DISTBENCH_UPDATE_GOLDEN=1 if that is meant"


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_results_show_is_unchanged(recorded, capsys, fmt):
    assert main(["results", "show", SWEEP, "--results", str(recorded), "--format", fmt]) == 0
    check(f"show.{'txt' if fmt == 'table' else 'json'}", capsys.readouterr().out)


def test_markdown_report_is_unchanged(recorded, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", SWEEP, "--results", str(recorded), "--out", str(out)]) == 0
    check("report.md", out.with_suffix(".md").read_text().replace(str(tmp_path), "TMP"))

"""`distbench results list|show|export` and `distbench report` through the real entry point: exit codes,
exact one-line errors, files untouched, outputs written."""

from __future__ import annotations

import json
import sqlite3

import click
import pandas as pd
import pytest

from distbench import report as report_mod
from distbench.cli import cli, main
from distbench.commands import results as results_cmd
from distbench.results.store import SCHEMA_VERSION, Store
from tests.builders import add_sweep, point, scaling_records


def _run(capsys, args):
    """(exit code, stdout, stderr without the line naming the sweep 'latest' picked: test_first_run.py checks it)."""
    code = main(args)
    out = capsys.readouterr()
    err = "".join(line for line in out.err.splitlines(keepends=True) if not line.startswith("latest: sweep "))
    return code, out.out, err


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "r.db"
    with Store(path) as s:
        old = add_sweep(s, [point("torch", 1, 0.1)], command="distbench run --strategy torch")
        new = add_sweep(s, scaling_records())
    return path, old, new


def test_list_shows_recent_sweeps_with_point_counts(capsys, store):
    path, old, new = store
    code, out, err = _run(capsys, ["results", "list", "--results", str(path)])
    assert code == 0, err
    assert out.index(new) < out.index(old)  # newest first
    assert "8/9" in out and "1/1" in out  # ok/total (dp was skipped)
    code, out, _ = _run(capsys, ["results", "list", "--results", str(path), "--format", "json", "--limit", "1"])
    [row] = json.loads(out)
    assert row["id"] == new and row["points_ok"] == 8 and row["points_total"] == 9
    assert row["command"] == "distbench scale --gpus 1,2,4" and row["status"] == "complete"


def test_show_prints_the_points_table(capsys, store):
    path, old, new = store
    code, out, err = _run(capsys, ["results", "show", "latest", "--results", str(path)])
    assert code == 0, err
    assert f"sweep {new}: complete" in out and "horovod-torch" in out
    assert "skipped [1]" in out and "\n[1] DataParallel needs CUDA devices\n" in out  # the reason under the table
    assert "1-device wrapper cost: ddp at N=1 is 5.0% slower" in out
    assert out.count("(samples/s)") == 1  # no CI recorded: no CI column
    code, out, _ = _run(capsys, ["results", "show", old, "--results", str(path), "--format", "json"])
    doc = json.loads(out)
    assert doc["sweep"]["id"] == old and doc["points"][0]["strategy"] == "torch"
    assert len(doc["points"][0]["step_times_s"]) == 200


def test_show_has_a_ci_column_when_recorded(capsys, tmp_path):
    with Store(tmp_path / "r.db") as s:
        add_sweep(s, [point("torch", 1, 0.1, throughput_ci_low=38.5, throughput_ci_high=41.25)])
    code, out, _ = _run(capsys, ["results", "show", "--results", str(tmp_path / "r.db")])
    assert code == 0 and out.count("(samples/s)") == 2 and "38.50-41.25" in out


def test_export_csv_and_json(capsys, store, tmp_path):
    path, _, new = store
    csv, js = tmp_path / "p.csv", tmp_path / "p.json"
    code, _, err = _run(
        capsys, ["results", "export", new, "--results", str(path), "--csv", str(csv), "--json", str(js)]
    )
    assert code == 0, err
    assert err == f"wrote {csv}\nwrote {js}\n"
    frame = pd.read_csv(csv)
    assert len(frame) == 9 and list(frame.columns[:4]) == ["sweep_id", "point_id", "strategy", "framework"]
    assert frame.loc[frame.strategy == "ddp", "efficiency"].round(2).tolist() == [0.95, 0.9, 0.85, 0.6]
    doc = json.loads(js.read_text())
    assert doc["sweep"]["id"] == new and len(doc["points"]) == 9
    code, out, _ = _run(capsys, ["results", "export", "latest", "--results", str(path), "--csv", "-"])
    assert code == 0 and out.startswith("sweep_id,point_id,strategy")


def test_export_parquet_without_pyarrow(capsys, store, tmp_path, monkeypatch):
    path, _, _ = store
    monkeypatch.setattr("distbench.report.exports.have_pyarrow", lambda: False)
    target = tmp_path / "p.parquet"
    code, out, err = _run(capsys, ["results", "export", "--results", str(path), "--parquet", str(target)])
    assert code == 2 and out == ""
    assert err == "Error: --parquet needs pyarrow, which is not installed: pip install pyarrow\n"
    assert not target.exists()


@pytest.mark.skipif(not report_mod.have_pyarrow(), reason="pyarrow not installed")
def test_export_parquet(capsys, store, tmp_path):
    path, _, _ = store
    code, _, err = _run(capsys, ["results", "export", "--results", str(path), "--parquet", str(tmp_path / "p.pq")])
    assert code == 0, err
    assert len(pd.read_parquet(tmp_path / "p.pq")) == 9


def test_export_needs_a_target(capsys, store):
    code, _, err = _run(capsys, ["results", "export", "--results", str(store[0])])
    assert code == 2
    assert err == "Error: nothing to export: give --csv PATH, --parquet PATH or --json PATH\n"


def test_unwritable_output_paths_exit_2(capsys, store, tmp_path):
    path = str(store[0])
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    target = blocker / "out.csv"
    code, out, err = _run(capsys, ["results", "export", "--results", path, "--csv", str(target)])
    assert code == 2 and out == ""
    assert err == f"Error: cannot write {target}: {blocker} is not a folder\n"
    code, _, err = _run(capsys, ["results", "export", "--results", path, "--json", str(tmp_path)])
    assert code == 2 and err == f"Error: cannot write {tmp_path}: it is a folder\n"
    html = blocker / "sub" / "report.html"
    code, _, err = _run(capsys, ["report", "--results", path, "--out", str(html)])
    assert code == 2 and err == f"Error: cannot write {html}: {blocker} is not a folder\n"


def test_unknown_sweep_lists_recent_ids(capsys, store):
    path, old, new = store
    for args in (["results", "show", "nope"], ["results", "export", "nope", "--csv", "x.csv"], ["report", "nope"]):
        code, out, err = _run(capsys, [*args, "--results", str(path)])
        assert code == 2 and out == ""
        assert err == f"Error: unknown sweep 'nope'; recent sweeps: {new}, {old}\n"


def test_a_file_that_is_not_a_store_is_refused_untouched(capsys, tmp_path):
    bogus = tmp_path / "notes.db"
    bogus.write_bytes(b"not sqlite at all" * 20)
    before = bogus.read_bytes()
    for args in (["results", "list"], ["results", "show"], ["report", "--out", str(tmp_path / "r.html")]):
        code, _, err = _run(capsys, [*args, "--results", str(bogus)])
        assert code == 2
        assert err == f"Error: {bogus} is not a distbench results store (left untouched)\n"
    assert bogus.read_bytes() == before


def test_a_newer_schema_is_refused_untouched(capsys, tmp_path):
    path = tmp_path / "r.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.close()
    before = path.read_bytes()
    code, _, err = _run(capsys, ["results", "list", "--results", str(path)])
    assert code == 2
    assert err == (
        f"Error: {path} has store schema {SCHEMA_VERSION + 1}, newer than this distbench understands "
        f"({SCHEMA_VERSION}): upgrade distbench (file left untouched)\n"
    )
    assert path.read_bytes() == before


def test_a_missing_store_is_not_created(capsys, tmp_path):
    path = tmp_path / "none" / "r.db"
    code, _, err = _run(capsys, ["results", "list", "--results", str(path)])
    assert code == 2
    assert err == (
        f"Error: no results store at {path} (run `distbench scale` first, or pass --results PATH or set "
        "DISTBENCH_RESULTS)\n"
    )
    assert not path.parent.exists()


def test_an_empty_store_has_no_latest(capsys, tmp_path):
    path = tmp_path / "r.db"
    Store(path).close()
    code, _, err = _run(capsys, ["results", "show", "latest", "--results", str(path)])
    assert code == 2 and err == f"Error: {path} has no sweeps yet (run `distbench scale` first)\n"


def test_report_cli_writes_html_md_csv_and_plots(capsys, store, tmp_path):
    path, _, _ = store
    out_html = tmp_path / "rep" / "r.html"
    code, _, err = _run(
        capsys,
        [
            "report",
            "--results",
            str(path),
            "--out",
            str(out_html),
            "--target-throughput",
            "100",
            "--epoch-samples",
            "1000000",
            "--epoch-time",
            "7200",
        ],
    )
    assert code == 0, err
    assert " ".join(err.split()) == (  # wrapped at words to the terminal's width
        f"wrote {out_html}, {out_html.with_suffix('.md')}, {tmp_path / 'rep' / 'r-points.csv'} and 4 plot(s)"
    )
    assert "devices for an epoch within 2.0 h" in out_html.read_text()


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--out", "report.txt"],
            "--out report.txt: give an .html file name (the Markdown, CSV and plots are written next to it)",
        ),
        (["--epoch-time", "60"], "--epoch-time needs --epoch-samples (how many samples one epoch has)"),
    ],
)
def test_report_bad_options(capsys, store, args, message):
    code, out, err = _run(capsys, ["report", "--results", str(store[0]), *args])
    assert code == 2 and out == ""
    assert err == f"Error: {message}\n"


def test_usage_errors_are_one_line(capsys, store):
    code, _, err = _run(capsys, ["report", "--results", str(store[0]), "--target-throughput", "-5"])
    assert code == 2 and err.count("\n") == 1 and err.startswith("Error: Invalid value for '--target-throughput'")


def test_every_new_command_has_help_with_an_example():
    commands = [results_cmd.results, *results_cmd.results.commands.values(), results_cmd.report, results_cmd.compare]
    for cmd in commands:
        assert cmd.help and "Example:" in cmd.help, cmd.name
        for param in cmd.params:
            if isinstance(param, click.Option):
                assert param.help, f"{cmd.name} {param.opts[0]} has no help"
    assert {"results", "report", "compare"} <= set(cli.commands)

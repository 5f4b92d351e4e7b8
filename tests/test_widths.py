"""Every table, note and listing a command prints fits the terminal: COLUMNS=120 and COLUMNS=80, on stdout and
on stderr (the planning notes, the `latest:` line, `models`). A one-line error is one line by design and is
left out of the count."""

from __future__ import annotations

import pytest

from distbench.cli import main
from distbench.commands import scale as scale_cmd
from distbench.core.errors import BadInput
from distbench.results.store import Store
from tests.builders import add_sweep, point, scaling_records


def _widest(text: str) -> int:
    return max((len(line.rstrip()) for line in text.splitlines() if not line.startswith("Error: ")), default=0)


@pytest.fixture(params=[120, 80])
def columns(request, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(request.param))
    return request.param


def test_planning_notes_fit(columns, capsys, monkeypatch, tmp_path):
    def stop(*args, **kwargs):
        raise BadInput("stopped before running points")

    monkeypatch.setattr(scale_cmd, "run_plan", stop)
    args = ["scale", "--gpus", "1,2,4", "--device", "cpu", "--model", "resnet18", "--max-time", "5"]
    assert main([*args, "--results", str(tmp_path / "r.db")]) == 2
    err = capsys.readouterr().err
    assert "note:" in err and "measuring up to 5 s a point" in " ".join(err.split())
    assert _widest(err) <= columns, err


def test_models_fits(columns, capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr()
    assert "resnet18" in out.out and "counting each model's forward FLOPs" in out.err
    assert _widest(out.out) <= columns and _widest(out.err) <= columns, out.out


def test_latest_line_fits(columns, capsys, tmp_path):
    db = tmp_path / "r.db"
    long_command = "distbench scale --gpus 1,2 --strategy ddp,fsdp,accelerate,lightning --model resnet18 --steps 50"
    with Store(db) as store:
        add_sweep(store, scaling_records(), command=long_command)
        for _ in range(3):
            add_sweep(store, [dict(point("torch", 1, 0.01), kind="inference")], command="distbench infer --model cnn")
    assert main(["report", "latest", "--results", str(db), "--out", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    assert "latest: sweep" in err and "passed over 3 newer sweep(s)" in " ".join(err.split())
    assert _widest(err) <= columns, err


def test_compare_fits(columns, capsys, tmp_path):
    """compare's table, its summary and its undecided verdict (exit 3, on stderr) fit the width."""
    from tests.test_compare import _pair

    path, sa, sb, _, _ = _pair(tmp_path, r=1)
    assert main(["compare", sa, sb, "--results", str(path)]) == 3
    out = capsys.readouterr()
    assert "could not be judged" in out.err and "--allow-undecided accepts this" in " ".join(out.err.split())
    assert _widest(out.out) <= columns and _widest(out.err) <= columns, out.err

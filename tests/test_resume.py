"""Ctrl-C keeps finished points and marks the sweep interrupted; --resume re-runs only what is missing."""

import json
import signal
import sqlite3
import subprocess
import time

import psutil
import pytest

from tests.conftest import DISTBENCH, TINY, require, run_cli

pytestmark = pytest.mark.slow
FAST = [a for a in TINY if a not in ("--timeout", "300")] + [
    "--target-ci",
    "0",
    "--no-comm",
    "--device",
    "cpu",
    "--telemetry-interval",
    "0",
]


def _rows(db):
    """The points stored so far; none while the sweep is still creating the store's tables."""
    conn = sqlite3.connect(db)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'points'").fetchone():
            return []
        return conn.execute("SELECT strategy, world_size, status FROM points ORDER BY id").fetchall()
    finally:
        conn.close()


@require("torch")
def test_ctrl_c_keeps_finished_points_and_resume_finishes_the_sweep(tmp_path):
    db = tmp_path / "r.db"
    proc = subprocess.Popen(
        [*DISTBENCH, "scale", "--gpus", "1,2", "--strategy", "ddp", "--results", str(db), "--timeout", "300", *FAST],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 600
    while time.time() < deadline and not (db.exists() and len(_rows(db)) >= 1):
        time.sleep(0.5)
    assert _rows(db), "the first point never finished"
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1].startswith("Interrupted by SIGINT: every finished point is kept in sweep ")
    assert "Traceback" not in err
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, "worker processes outlived the interrupted sweep"
    conn = sqlite3.connect(db)
    [(sweep_id, status)] = conn.execute("SELECT id, status FROM sweeps").fetchall()
    conn.close()
    assert status == "interrupted"
    kept = _rows(db)
    assert ("torch", 1, "ok") in kept

    resumed = run_cli(["scale", "--resume", sweep_id, "--results", str(db), "--format", "json"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "kept from sweep" in resumed.stderr
    points = json.loads(resumed.stdout)
    assert [
        (p["strategy"], p["world_size"], p["status"]) for p in points if not p["config"].get("baseline_threads")
    ] == [  # per-core baselines: tests/test_efficiency.py
        ("torch", 1, "ok"),
        ("ddp", 1, "ok"),
        ("ddp", 2, "ok"),
    ]
    assert sorted(_rows(db)) == sorted((p["strategy"], p["world_size"], p["status"]) for p in points)  # no duplicates
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT status FROM sweeps").fetchone()[0] == "complete"


@require("torch")
def test_resume_reruns_failed_points_with_a_longer_timeout(tmp_path):
    db = tmp_path / "r.db"
    first = run_cli(["scale", "--gpus", "1", "--strategy", "torch", "--results", str(db), "--timeout", "0.2", *FAST])
    assert first.returncode == 1  # its one point failed
    assert "no point succeeded: 1 of 1 point(s) ran (1 timeout)" in first.stderr
    assert _rows(db) == [("torch", 1, "timeout")]
    second = run_cli(["scale", "--resume", "latest", "--results", str(db), "--timeout", "300", *FAST])
    assert second.returncode == 0, second.stderr[-2000:]
    assert _rows(db) == [("torch", 1, "ok")]


def test_resume_unknown_sweep(tmp_path, capsys):
    from distbench.cli import main
    from distbench.results.store import Store

    Store(tmp_path / "r.db").close()
    assert main(["scale", "--resume", "nope", "--results", str(tmp_path / "r.db")]) == 2
    assert capsys.readouterr().err == "Error: unknown sweep 'nope'; recent sweeps: none\n"

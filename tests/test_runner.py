"""The one point runner (distbench.run.runner): its skip rule, its commit path, Ctrl-C, and the commands that use
it (verify's points stored like the others). Fake measure hooks: no process is started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distbench import analysis as an
from distbench.cli import main
from distbench.core import strategies
from distbench.core.config import point_key
from distbench.core.errors import INSTALL_HINT
from distbench.core.strategies import STRATEGIES, Strategy
from distbench.results.record import base_record, undeclared_keys
from distbench.results.store import Store, StoreWriteError
from distbench.run import runner
from distbench.run.launchers import PROCESS
from distbench.run.plan import PlannedPoint
from distbench.run.signals import Interrupted
from tests.builders import point_config, verify
from tests.conftest import require, run_cli

FAKE = Strategy(name="fake", framework="torch", module="fake_worker", launcher=PROCESS.name)


def _point(n=1, batch=4, strategy=FAKE, skip=None, **kw) -> PlannedPoint:
    cfg = point_config(strategy.name, n, model="mlp", per_device_batch=batch, **kw)
    return PlannedPoint(strategy, cfg, skip)


def _fake_measure(statuses: dict | None = None, calls: list | None = None):
    """A measure hook: the status given for (N, batch) (default ok), one step time, a work folder with a file."""

    def measure(point, workdir: Path) -> dict:
        cfg = point.config
        if calls is not None:
            calls.append((cfg.world_size, cfg.per_device_batch))
        workdir.mkdir(parents=True)
        (workdir / "stderr.log").write_text("log")
        status = (statuses or {}).get((cfg.world_size, cfg.per_device_batch), "ok")
        record = base_record(cfg.to_dict(), strategy=point.strategy.name, framework="torch", status=status)
        record["step_times_s"] = [0.1]
        if status != "ok":
            record["reason"], record["workdir"] = f"it went {status}", str(workdir)
        return record

    return measure


def test_the_skip_rule_is_not_installed_then_the_plan_then_an_earlier_oom():
    missing = Strategy(name="x", framework="torch", module="x", launcher=PROCESS.name, requires=("no_such_module_db",))
    oom = base_record(_point(batch=2).config.to_dict(), strategy="fake", framework="torch", status="oom")
    assert strategies.not_installed(missing) == f"no_such_module_db is not installed: {INSTALL_HINT}"
    assert strategies.not_installed(FAKE) is None
    assert runner.skip_reason(_point(strategy=missing, skip="needs 4 GPUs, 2 visible"), oom).startswith(
        "no_such_module_db is not installed"
    )
    assert runner.skip_reason(_point(skip="needs 4 GPUs, 2 visible"), oom) == "needs 4 GPUs, 2 visible"
    assert runner.skip_reason(_point(), oom) == "not tried: batch 2 ran out of memory at this strategy and N"
    assert runner.skip_reason(_point()) is None


def test_every_point_is_committed_skipped_ones_too_and_an_oom_skips_the_larger_batches(tmp_path):
    points = [_point(1, 2), _point(1, 4), _point(1, 8), _point(2, 2, skip="needs 2 GPUs, 1 visible"), _point(2, 4)]
    points.append(_point(1, 4, seed=1))  # the batch that ran out, another seed (converge): tried again
    calls, seen = [], []
    kind = runner.Kind(_fake_measure({(1, 4): "oom"}, calls))
    with Store(tmp_path / "r.db") as store:
        sid = store.start_sweep(command="test", version="0", git_sha=None, env={}, options={}, notes=[])
        records = runner.run_points(
            points, store, sid, kind, workdir=tmp_path / "work", progress=lambda *a: seen.append(a[:3])
        )
        stored = store.points(sid)
    assert calls == [(1, 2), (1, 4), (2, 4), (1, 4)]  # batch 8 not tried after batch 4 ran out; N=2 batch 2 skipped
    assert [r["status"] for r in records] == ["ok", "oom", "skipped", "skipped", "ok", "oom"]
    assert records[2]["reason"] == "not tried: batch 4 ran out of memory at this strategy and N"
    assert records[2]["after_oom"] is True and records[3]["after_oom"] is False and "after_oom" not in records[0]
    assert [(r["point_id"], r["status"]) for r in stored] == [(r["point_id"], r["status"]) for r in records]
    assert all(r["sweep_id"] == sid and r["auto_added"] is False for r in stored)
    assert seen[:2] == [("start", 1, 6), ("done", 1, 6)] and len(seen) == 12
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["002-fake-n1-k1", "006-fake-n1-k1"]  # ok ones go


def test_ctrl_c_while_measuring_commits_the_point_interrupted_and_stops_the_sweep(tmp_path):
    def measure(point, workdir):
        if point.config.world_size == 2:
            raise Interrupted(15)
        return _fake_measure()(point, workdir)

    with pytest.raises(Interrupted):
        with runner.new_sweep(str(tmp_path / "r.db"), "test", {"kind": "test"}, [], command="distbench test") as sweep:
            sweep.run([_point(1), _point(2), _point(4)], runner.Kind(measure))
    with Store(tmp_path / "r.db") as store:
        [row] = store.sweeps()
        points = store.points(row["id"])
        notes = json.loads(store.sweep(row["id"])["notes_json"])
    assert row["status"] == "interrupted" and notes == ["interrupted by SIGTERM"]
    assert [(p["world_size"], p["status"]) for p in points] == [(1, "ok"), (2, "interrupted")]  # N=4 never ran
    assert points[1]["reason"] == "stopped by SIGTERM while it was measured"
    assert points[1]["workdir"].endswith("002-fake-n2-k1")


def test_a_store_that_cannot_be_written_loses_no_record(tmp_path, monkeypatch, capsys):
    def full(self, sweep_id, record):
        raise StoreWriteError("cannot commit point: database or disk is full (3 tries)")

    with Store(tmp_path / "r.db") as store:
        sid = store.start_sweep(command="test", version="0", git_sha=None, env={}, options={}, notes=[])
        monkeypatch.setattr(Store, "add_point", full)
        [record] = runner.run_points(
            [_point()], store, sid, runner.Kind(_fake_measure()), workdir=tmp_path / "w", records_dir=tmp_path / "rec"
        )
    saved = tmp_path / "rec" / f"{sid}-001-fake-n1.json"
    assert record["point_id"] is None and json.loads(saved.read_text())["record_id"] == record["record_id"]
    assert "database or disk is full" in capsys.readouterr().err


def test_a_kind_that_makes_several_records_of_a_point_and_kept_points(tmp_path):
    """infer's shape: one run, a record per batch size; a resumed sweep's point is kept, not measured."""

    def per_batch(point, record):
        return [dict(record, per_device_batch=b, record_id=f"{record['record_id']}-{b}") for b in (1, 8)]

    calls, told = [], []
    old = _point(2)
    kept = {point_key("fake", old.config.to_dict()): {"status": "ok", "strategy": "fake", "kept": True}}
    kind = runner.Kind(_fake_measure(calls=calls), finish=per_batch, kept=lambda p, r: told.append(r))
    records = runner.run_points(
        [_point(1), old], None, "s1", kind, workdir=tmp_path / "w", kept=kept, records_dir=tmp_path / "rec"
    )
    assert calls == [(1, 4)] and told == [kept[point_key("fake", old.config.to_dict())]]
    assert [r.get("per_device_batch") for r in records] == [1, 8, None]
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == ["s1-001-fake-n1-1.json", "s1-001-fake-n1-2.json"]
    assert all("point_id" not in r for r in records)  # no store: nothing committed


def _verify_worker(strategy, cfg, workdir, timeout_s, telemetry_interval_s=0.0):
    """run_point for verify: the same losses and updates as one device (ddp), twice the updates (a sum)."""
    record = base_record(cfg.to_dict(), strategy=strategy.name, framework=strategy.framework, status="ok")
    scale = 2.0 if strategy.name == "summing" else 1.0
    record.update(verify_losses=[2.3, 2.2], update_checksums=[[0.5 * scale, 0.1]], replica_max_rel_diff=0.0)
    return record


def test_verify_stores_every_run_with_its_verdict_and_keeps_them_out_of_the_scaling_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "run_point", _verify_worker)
    summing = Strategy(name="summing", framework="torch", module="x", launcher=PROCESS.name)
    db = str(tmp_path / "r.db")
    with runner.new_sweep(db, "verify", {"kind": "verify"}, []) as sweep:
        verdicts = verify(
            model="mlp",
            world_size=2,
            strategies=[STRATEGIES["ddp"], STRATEGIES["dp"], summing],
            device="cpu",
            global_batch=4,
            steps=2,
            image_size=None,
            num_classes=10,
            sweep=sweep,
        )
    assert [(v["strategy"], v["passed"]) for v in verdicts] == [("ddp", True), ("dp", None), ("summing", False)]
    assert verdicts[1]["reason"].startswith("DataParallel needs CUDA devices")
    with Store(db) as store:
        loaded = an.load_sweep(store, "latest")
    points = {p["strategy"]: p for p in loaded.points}
    assert [p["strategy"] for p in loaded.points] == ["torch", "ddp", "dp", "summing"]
    assert points["torch"]["status"] == "ok" and "verdict" not in points["torch"]  # the baseline
    assert points["ddp"]["verdict"]["passed"] is True and points["summing"]["verdict"]["passed"] is False
    assert points["dp"]["status"] == "skipped" and points["dp"]["verdict"] == verdicts[1]
    assert not [undeclared_keys(p) for p in points.values() if undeclared_keys(p)]  # the schema has them all
    assert all(an.is_verify(p) for p in loaded.points) and loaded.scaling_points == []


def test_results_show_lists_a_verify_sweep(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "run_point", _verify_worker)
    db = str(tmp_path / "r.db")
    args = ["--model", "mlp", "--gpus", "2", "--strategy", "ddp", "--device", "cpu", "--results", db]
    assert main(["verify", *args, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert [v["passed"] for v in json.loads(out)] == [True]
    assert err.splitlines()[-1].startswith(f"results stored in {db} (sweep ")
    assert main(["results", "show", "latest", "--results", db]) == 0
    shown = capsys.readouterr().out
    assert shown.count("(verify run)") == 2 and "Traceback" not in shown


@pytest.mark.slow
@require("torch")
def test_a_real_verify_stores_its_runs(tmp_path):
    """The quickest real verify (mlp, ddp at N=2, one step): both runs are points of a 'verify' sweep."""
    db = tmp_path / "r.db"
    args = ["verify", "--model", "mlp", "--strategy", "ddp", "--gpus", "2", "--batch-size", "2", "--steps", "1"]
    proc = run_cli([*args, "--device", "cpu", "--timeout", "300", "--results", str(db), "--format", "json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    [verdict] = json.loads(proc.stdout)
    assert verdict["strategy"] == "ddp" and verdict["passed"] is True, verdict
    with Store(db) as store:
        [sweep] = store.sweeps()
        points = store.points(sweep["id"])
        options = json.loads(store.sweep(sweep["id"])["options_json"])
    assert sweep["status"] == "complete" and options["kind"] == "verify"
    assert [(p["strategy"], p["world_size"], p["status"]) for p in points] == [("torch", 1, "ok"), ("ddp", 2, "ok")]
    assert points[1]["verdict"] == verdict and all(p["config"]["verify"] for p in points)
    assert len(points[0]["verify_losses"]) == 1


def test_verify_refuses_a_results_file_that_is_not_a_store_in_one_line(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database\n")
    args = ["verify", "--results", str(bad), "--device", "cpu", "--gpus", "2", "--model", "mlp", "--strategy", "ddp"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"Error: {bad} is not a distbench results store (left untouched)\n")
    assert "Traceback" not in err and bad.read_text() == "not a database\n"


def test_run_prints_its_point_in_a_table_and_where_it_stored_it(tmp_path, monkeypatch, capsys):
    """`distbench run`'s table output, from the records a real run would return (the real run of this command on
    CPU workers: tests/test_readme_commands.py, its `run` row)."""
    from distbench.kinds import measure

    def worker(strategy, cfg, workdir, timeout_s, telemetry_interval_s=0.0):
        record = base_record(cfg.to_dict(), strategy=strategy.name, framework=strategy.framework, status="ok")
        record.update(step_times_s=[0.1 * cfg.world_size] * 3, measured_window_s=0.3 * cfg.world_size)
        return record

    monkeypatch.setattr(measure, "run_point", worker)
    db = tmp_path / "r.db"
    args = ["run", "--strategy", "ddp", "--gpus", "2", "--device", "cpu", "--results", str(db), "--no-comm"]
    assert main([*args, "--model", "mlp", "--steps", "3", "--warmup", "1", "--target-ci", "0"]) == 0
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if line.split()[:2] == ["ddp", "2"]]
    assert " ok " in f"{row} "
    assert f"results stored in {db} (sweep " in out

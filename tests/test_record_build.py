"""The record built in one place (distbench.results.record.build_record and the stages that return their fields) and
stored once (distbench.results.store: step times in `steps` only, the config in record_json only; store schema 1
migrated on open). Fast: no processes."""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest

from distbench.results import record as rec
from distbench.results import store as store_mod
from distbench.results.record import base_record, build_record
from distbench.results.store import Store

# Store schema 1 as distbench wrote it up to this change (config_json column, step times in record_json too).
V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sweeps (
    id TEXT PRIMARY KEY, started TEXT NOT NULL, finished TEXT, status TEXT NOT NULL,
    command TEXT, version TEXT, git_sha TEXT, env_json TEXT, options_json TEXT, notes_json TEXT);
CREATE TABLE points (
    id INTEGER PRIMARY KEY AUTOINCREMENT, sweep_id TEXT NOT NULL REFERENCES sweeps(id),
    record_id TEXT UNIQUE,
    strategy TEXT NOT NULL, framework TEXT NOT NULL, model TEXT, world_size INTEGER NOT NULL,
    nodes INTEGER, device TEXT, scaling TEXT, per_device_batch INTEGER, global_batch INTEGER,
    status TEXT NOT NULL, reason TEXT, throughput REAL, step_time_median_s REAL,
    step_time_p5_s REAL, step_time_p95_s REAL, step_time_cv REAL, speedup REAL, efficiency REAL,
    wrapper_overhead REAL, config_json TEXT NOT NULL, record_json TEXT NOT NULL, finished TEXT NOT NULL);
CREATE INDEX points_sweep ON points(sweep_id);
CREATE TABLE steps (
    point_id INTEGER NOT NULL REFERENCES points(id), idx INTEGER NOT NULL, seconds REAL NOT NULL,
    PRIMARY KEY (point_id, idx));
CREATE TABLE telemetry (
    point_id INTEGER NOT NULL REFERENCES points(id), t REAL NOT NULL, source TEXT NOT NULL,
    metric TEXT NOT NULL, value REAL);
"""


def _record(strategy="ddp", n=2, status="ok", times=(0.1, 0.25, 0.125)):
    cfg = {"model": "resnet50", "world_size": n, "per_device_batch": 4, "device": "cpu", "scaling": "weak"}
    r = base_record(cfg, strategy=strategy, framework="torch", status=status)
    r["step_times_s"] = list(times)
    r["throughput"] = 42.0 if status == "ok" else None
    return r


def _sweep(store: Store) -> str:
    return store.start_sweep(command="distbench test", version="0", git_sha=None, env={}, options={}, notes=[])


# -- build_record -------------------------------------------------------------------------------------------
def test_build_record_merges_the_stages_in_their_order_in_place():
    record = _record()
    same = build_record(
        record,
        derived={"speedup": 1.5, "efficiency": 0.75},
        launch={"launch": {"argv": ["x"]}, "speedup": 0.0},  # an earlier stage: overwritten by `derived`
        mfu={"mfu": 0.25, "mfu_note": "n"},
    )
    assert same is record
    assert record["speedup"] == 1.5 and record["efficiency"] == 0.75 and record["mfu"] == 0.25
    assert record["launch"] == {"argv": ["x"]}
    assert list(rec.BUILD_STAGES) == ["launch", "measurement", "mfu", "derived", "sweep"]


def test_build_record_refuses_an_unknown_stage_or_an_undeclared_key():
    with pytest.raises(ValueError, match=r"unknown record stage\(s\) \['peaks'\]"):
        build_record(_record(), peaks={"mfu": 0.1})
    with pytest.raises(ValueError, match=r"mfu fields not declared in distbench.results.record.Record: \['mfu_pct'\]"):
        build_record(_record(), mfu={"mfu_pct": 10})
    assert build_record(_record(), launch=None, mfu={})["status"] == "ok"  # nothing to add


def test_headline_fields_are_declared_and_the_store_columns_come_from_them():
    declared = set(rec.Record.__annotations__)
    assert set(rec.HEADLINE_FIELDS) <= declared and len(set(rec.HEADLINE_FIELDS)) == len(rec.HEADLINE_FIELDS)
    assert store_mod.POINT_COLUMNS == rec.COLUMN_FIELDS and set(rec.COLUMN_FIELDS) <= set(rec.HEADLINE_FIELDS)
    assert set(rec.STEP_STAT_FIELDS) <= declared


# -- stored once --------------------------------------------------------------------------------------------
def test_a_record_is_stored_once_and_read_back_whole(tmp_path):
    ok, empty, bare = _record(), _record("torch", 1, status="failed", times=()), _record("tf", 1, status="skipped")
    del bare["step_times_s"]
    before = json.dumps([ok, empty, bare], sort_keys=True)
    with Store(tmp_path / "r.db") as store:
        sid = _sweep(store)
        ids = [store.add_point(sid, r) for r in (ok, empty, bare)]
        assert json.dumps([ok, empty, bare], sort_keys=True) == before  # add_point leaves the record alone
        columns = [r[1] for r in store.conn.execute("PRAGMA table_info(points)")]
        assert "config_json" not in columns
        texts = [json.loads(t) for (t,) in store.conn.execute("SELECT record_json FROM points ORDER BY id")]
        assert "step_times_s" not in texts[0] and texts[0]["config"] == ok["config"]  # steps: in `steps` only
        assert texts[1]["step_times_s"] == [] and "step_times_s" not in texts[2]
        assert store.steps(ids[0]) == ok["step_times_s"]
        back = store.points(sid)
        for stored, original, pid in zip(back, (ok, empty, bare), ids):
            assert stored == {**original, "point_id": pid}
            assert list(stored) == [*sorted(original), "point_id"]  # key order as before (record_json sorted)
        frame = store.points_frame(sid)
        assert [json.loads(c) for c in frame["config_json"]] == [r["config"] for r in (ok, empty, bare)]
        assert list(frame.columns).index("config_json") + 1 == list(frame.columns).index("record_json")


def _v1_store(path) -> dict:
    """A store as schema 1 wrote it, by hand: two points (one deleted), the second with steps."""
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    conn.execute("INSERT INTO meta VALUES ('app', 'distbench'), ('schema_version', '1')")
    conn.execute("INSERT INTO sweeps (id, started, status) VALUES ('s1', '2026-01-01', 'complete')")
    old = _record()
    old["speedup"] = 1.75
    cols = store_mod.POINT_COLUMNS
    for rid in ("gone", "kept"):
        conn.execute(
            f"INSERT INTO points (sweep_id, record_id, {', '.join(cols)}, config_json, record_json, finished) "
            f"VALUES ('s1', ?, {', '.join('?' * len(cols))}, ?, ?, '2026-01-01')",
            (rid, *(old.get(c) for c in cols), json.dumps(old["config"]), json.dumps(old, sort_keys=True)),
        )
    conn.execute("DELETE FROM points WHERE record_id = 'gone'")  # id 1 is not given out again
    conn.executemany("INSERT INTO steps VALUES (2, ?, ?)", list(enumerate(old["step_times_s"])))
    conn.execute("INSERT INTO telemetry VALUES (2, 0.5, 'psutil', 'cpu', 50.0)")
    conn.commit()
    conn.close()
    return old


def test_a_schema_1_store_is_migrated_on_open_and_reads_the_same(tmp_path):
    path = tmp_path / "old.db"
    old = _v1_store(path)
    with Store(path) as store:
        assert store.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "2"
        assert "config_json" not in [r[1] for r in store.conn.execute("PRAGMA table_info(points)")]
        [point] = store.points("s1")
        assert point == {**old, "point_id": 2}
        assert "step_times_s" not in json.loads(store.conn.execute("SELECT record_json FROM points").fetchone()[0])
        assert store.conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert len(store.telemetry(2)) == 1
        assert {r[1] for r in store.conn.execute("PRAGMA index_list(points)")} >= {"points_sweep"}
        new_id = store.add_point("s1", _record("torch", 1))
        assert new_id == 3  # after the deleted point's id, as before the migration
        assert [p["step_times_s"] for p in store.points("s1")] == [old["step_times_s"], [0.1, 0.25, 0.125]]
    with Store(path) as store:  # a second open finds schema 2: nothing to do
        assert len(store.points("s1")) == 2


def test_a_newer_store_schema_is_still_refused(tmp_path):
    path = tmp_path / "r.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(store_mod.BadInput, match="has store schema 3, newer than this distbench understands"):
        Store(path)


# -- the store prints nothing -------------------------------------------------------------------------------
class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_the_store_logs_its_survived_faults_instead_of_printing(tmp_path, monkeypatch, capfd):
    assert not hasattr(store_mod, "click")
    lines = _Lines()
    logger = logging.getLogger("distbench.results.store")
    logger.addHandler(lines)
    monkeypatch.setattr(logger, "propagate", False)  # only this handler: nothing reaches stderr
    monkeypatch.setattr(store_mod, "WRITE_BACKOFF_S", 0.0)
    try:
        with Store(tmp_path / "r.db") as store:
            sid = _sweep(store)

            def full(*a, **k):
                raise sqlite3.OperationalError("database or disk is full")

            monkeypatch.setattr(store, "_write", lambda what, fn: store_mod.Store._write(store, what, full))
            store.finish_sweep(sid, "complete")
    finally:
        logger.removeHandler(lines)
    assert lines.lines == [
        f"error: cannot mark sweep {sid} 'complete' in results store {tmp_path / 'r.db'}: database or disk is "
        "full (3 tries); it stays 'running' there"
    ]
    assert capfd.readouterr().err == ""


# -- the stages return their fields and leave the record alone -----------------------------------------------
def _frozen(record: dict) -> str:
    return json.dumps(record, sort_keys=True, default=str)


def test_the_launch_stage_returns_its_fields():
    from distbench.run.launch import launch_fields, outcome_fields

    assert outcome_fields("ok", 0, "tail", []) == {}
    failed = outcome_fields("failed", 1, "Traceback\nRuntimeError: boom\n", [{"rank": 1}])
    assert failed == {"stderr_tail": "Traceback\nRuntimeError: boom\n", "ranks": [{"rank": 1}]}
    late = outcome_fields("ok", -6, "terminate called without an active exception\n", [])
    assert late["launch_note"].startswith("a rank failed in teardown, after rank 0 wrote the record")
    assert set(late) == {"launch_note", "teardown_tail"}

    record = _record(status="failed")
    before = _frozen(record)
    launch = {"argv": ["torchrun"], "returncode": 1, "workdir": "/w"}
    fields = launch_fields(record, launch, stopped="teardown", samples=None, sampler=None, cfg=None)
    assert _frozen(record) == before
    assert list(fields) == ["launch_note", "launch", "workdir"] and fields["workdir"] == "/w"
    assert "hung in teardown" in fields["launch_note"]


def test_the_measurement_stage_returns_its_fields():
    from distbench.kinds.measure import combine_repeats, repeat_fields

    runs = [_record(times=[0.1] * 5), _record(times=[0.2] * 5)]
    first = _record(times=[0.1] * 5)
    before = _frozen(first)
    fields = repeat_fields([rec.add_step_metrics(dict(r)) for r in runs], first)
    assert _frozen(first) == before
    assert fields["measured_steps"] == 10 and fields["ci_scope"] == "run-to-run (t over 2 repeats)"
    assert rec.undeclared_keys(fields) == set()
    combined = combine_repeats([dict(r) for r in runs])
    assert {k: combined[k] for k in fields} == fields  # the combined record is the first run's plus these


def test_derive_merges_mfu_then_the_derived_fields(monkeypatch):
    from distbench.core import mfu
    from distbench.kinds.sweep import derive, derived_fields

    monkeypatch.setattr(mfu, "train_flops_per_sample", lambda config: (None, "not counted here"))  # no torch import

    base, ddp = _record("torch", 1, times=[0.1] * 5), _record("ddp", 2, times=[0.1] * 5)
    base.update(throughput=40.0, measured_steps=5, device="cuda")
    ddp.update(throughput=60.0, measured_steps=5, device="cuda")  # no per-core efficiency (CPU workers only)
    before = _frozen(ddp)
    assert derived_fields(ddp, {"torch": base}) == {"speedup": 1.5, "efficiency": 0.75}
    assert _frozen(ddp) == before
    out = derive(ddp, {"torch": base})
    assert out is ddp and ddp["speedup"] == 1.5 and ddp["efficiency"] == 0.75
    assert ddp["wrapper_overhead"] is None and ddp["efficiency_per_core"] is None  # always present
    assert ddp["mfu_note"] == "not counted here" and ddp["mfu"] is None  # the mfu stage ran too
    lonely = derive(_record("ddp", 2, times=[0.1] * 5), {})
    assert lonely["speedup"] is None and lonely["speedup_note"] == "no successful 'torch' baseline in this sweep"

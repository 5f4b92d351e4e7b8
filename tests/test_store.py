import json
import sqlite3
import threading

import pytest

from distbench.core.errors import BadInput
from distbench.results.record import base_record
from distbench.results.store import SCHEMA_VERSION, Store


def _record(strategy="ddp", n=2, status="ok", times=(0.1, 0.2)):
    cfg = {"model": "resnet50", "world_size": n, "per_device_batch": 4, "device": "cpu", "scaling": "weak"}
    r = base_record(cfg, strategy=strategy, framework="torch", status=status)
    r["step_times_s"] = list(times)
    r["throughput"] = 42.0
    return r


def _sweep(store):
    return store.start_sweep(
        command="distbench test", version="0", git_sha=None, env={"hostname": "h"}, options={}, notes=[]
    )


def test_points_and_steps_round_trip(tmp_path):
    with Store(tmp_path / "r.db") as store:
        sid = _sweep(store)
        pid = store.add_point(sid, _record())
        store.finish_sweep(sid, "complete")
        assert store.steps(pid) == [0.1, 0.2]
        [point] = store.points(sid)
        assert point["strategy"] == "ddp" and point["throughput"] == 42.0
        assert store.sweep(sid)["status"] == "complete"
        frame = store.points_frame(sid)
        assert list(frame["strategy"]) == ["ddp"]
        assert json.loads(frame["config_json"][0])["per_device_batch"] == 4


def test_unknown_sweep_lists_recent_ids(tmp_path):
    with Store(tmp_path / "r.db") as store:
        sid = _sweep(store)
        with pytest.raises(BadInput, match=f"unknown sweep 'nope'; recent sweeps: {sid}"):
            store.sweep("nope")


def test_newer_schema_is_refused_and_untouched(tmp_path):
    path = tmp_path / "r.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.close()
    before = path.read_bytes()
    with pytest.raises(BadInput, match="newer than this distbench understands"):
        Store(path)
    assert path.read_bytes() == before


def test_foreign_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(BadInput, match="is not a distbench results store"):
        Store(path)


def test_two_writers_at_once_keep_all_points(tmp_path):
    path = tmp_path / "r.db"
    Store(path).close()
    errors = []

    def writer(tag):
        try:
            with Store(path) as store:
                sid = _sweep(store)
                for i in range(25):
                    store.add_point(sid, _record(strategy=f"{tag}{i}"))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with Store(path) as store:
        assert len(store.points_frame()) == 50

"""Store faults: a commit that fails (disk full, I/O error) is retried, then saved as a JSON record that
`distbench collect` brings back; a corrupt store is refused in one line and left untouched; two processes
may create one new store at the same moment; and a real full disk (a small tmpfs, when running as root).

Faults marked "simulated" are raised by a wrapper around the real SQLite connection, as SQLite raises them;
the tmpfs test fills a real file system."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from distbench.cli import main
from distbench.core.errors import BadInput
from distbench.kinds import sweep as sweep_mod
from distbench.results import store as store_mod
from distbench.results.record import read_record
from distbench.results.store import Store, StoreWriteError
from tests.builders import point
from tests.conftest import quick

TINY = quick()


class FaultyConnection:
    """Simulated fault: the next `failures` statements that start with `prefix` raise
    sqlite3.OperationalError(error), the way SQLite reports a full disk or an I/O error."""

    def __init__(self, conn, prefix: str, failures: int, error: str):
        self.conn, self.prefix, self.failures, self.error, self.tries = conn, prefix, failures, error, 0

    def _maybe_fail(self, sql: str) -> None:
        if sql.lstrip().startswith(self.prefix):
            self.tries += 1
            if self.failures:
                self.failures -= 1
                raise sqlite3.OperationalError(self.error)

    def execute(self, sql, *args):
        self._maybe_fail(sql)
        return self.conn.execute(sql, *args)

    def executemany(self, sql, *args):
        self._maybe_fail(sql)
        return self.conn.executemany(sql, *args)

    def __getattr__(self, name):
        return getattr(self.conn, name)

    def __enter__(self):
        self.conn.__enter__()
        return self

    def __exit__(self, *exc):
        return self.conn.__exit__(*exc)


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setattr(store_mod, "WRITE_BACKOFF_S", 0.01)


def _sweep(store: Store) -> str:
    return store.start_sweep(command="distbench test", version="0", git_sha=None, env={}, options={}, notes=[])


def _faulty(store: Store, prefix: str, failures: int, error: str) -> FaultyConnection:
    store.conn = FaultyConnection(store.conn, prefix, failures, error)
    return store.conn


def _store_with_points(path: Path, n: int = 20) -> None:
    with Store(path) as store:
        sid = _sweep(store)
        for i in range(n):
            store.add_point(sid, point("ddp", 2, 0.1, steps=300))
        store.finish_sweep(sid, "complete")


# -- a failing commit --------------------------------------------------------------------------------------
def test_an_io_error_mid_commit_is_retried_and_the_point_stored_once(tmp_path, capsys, fast_retries):
    with Store(tmp_path / "r.db") as store:
        sid = _sweep(store)
        conn = _faulty(store, "INSERT INTO steps", 2, "disk I/O error")  # after the points row: rolled back
        record = point("ddp", 2, 0.1, steps=5)
        pid = store.commit_point(sid, record)
        assert conn.tries == 3 and pid is not None
        assert store.steps(pid) == record["step_times_s"]
        assert len(store.points(sid)) == 1
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("error", ["database or disk is full", "disk I/O error"])
def test_a_commit_that_keeps_failing_is_saved_as_json_and_collected_back(tmp_path, capsys, fast_retries, error):
    db = tmp_path / "results" / "r.db"
    record = point("ddp", 2, 0.1, steps=5)
    with Store(db) as store:
        sid = _sweep(store)
        conn = _faulty(store, "INSERT INTO points", 99, error)
        assert store.commit_point(sid, record) is None
        assert conn.tries == store_mod.WRITE_TRIES
        assert store.points(sid) == []
        conn.failures = 0
        store.finish_sweep(sid, "complete")  # the store can be written again: the sweep is not left running
        assert store.sweep(sid)["status"] == "complete"
    [saved] = db.parent.glob("unsaved-*.json")
    assert saved.name == f"unsaved-{sid}-ddp-n2-{record['record_id'][:8]}.json"
    err = capsys.readouterr().err
    assert err == (
        f"error: cannot commit point ddp N=2 in results store {db}: {error} (3 tries); the point's record "
        f"is saved in {saved} (bring it back with: distbench collect {db.parent})\n"
    )
    assert read_record(saved)["step_times_s"] == record["step_times_s"]
    assert [p.name for p in db.parent.iterdir() if p.name.startswith(".rec-")] == []

    assert main(["collect", str(db.parent), "--results", str(db)]) == 0
    with Store(db) as store:
        [back] = [p for s in store.sweeps() for p in store.points(s["id"])]
        assert back["record_id"] == record["record_id"] and store.steps(back["point_id"]) == record["step_times_s"]


def test_the_fallback_goes_to_records_dir_when_given(tmp_path, capsys, fast_retries):
    target = tmp_path / "records" / "sweep-001-ddp-n2.json"
    record = point("ddp", 2, 0.1, steps=5)
    with Store(tmp_path / "r.db") as store:
        sid = _sweep(store)
        _faulty(store, "INSERT INTO points", 99, "database or disk is full")
        assert store.commit_point(sid, record, fallback=target) is None
    assert read_record(target)["record_id"] == record["record_id"]
    assert f"the point's record is saved in {target} " in capsys.readouterr().err
    assert list(tmp_path.glob("unsaved-*")) == []


def test_a_sweep_row_that_cannot_be_finished_says_so_in_one_line(tmp_path, capsys, fast_retries):
    db = tmp_path / "r.db"
    with Store(db) as store:
        sid = _sweep(store)
        conn = _faulty(store, "UPDATE sweeps", 99, "database or disk is full")
        store.finish_sweep(sid, "complete")  # never raises
        assert store.sweep(sid)["status"] == "running"
        assert capsys.readouterr().err == (
            f"error: cannot mark sweep {sid} 'complete' in results store {db}: "
            "database or disk is full (3 tries); it stays 'running' there\n"
        )
        conn.failures = 0
        store.finish_sweep(sid, "interrupted", note="interrupted by SIGTERM")
        assert store.sweep(sid)["status"] == "interrupted"
        assert store.sweep(sid)["notes_json"] == '["interrupted by SIGTERM"]'


def test_a_sweep_that_cannot_start_is_one_error(tmp_path, fast_retries):
    with Store(tmp_path / "r.db") as store:
        _faulty(store, "INSERT INTO sweeps", 99, "database or disk is full")
        with pytest.raises(
            StoreWriteError,
            match=r"^cannot start a sweep in results store .*r\.db: database or "
            r"disk is full \(3 tries\)$",
        ):
            _sweep(store)


def test_a_skipped_point_of_a_real_sweep_survives_a_failing_store(tmp_path, capsys, monkeypatch, fast_retries):
    """The sweep path (`distbench run`): the commit fails, the JSON is written, the command ends cleanly."""
    db = tmp_path / "r.db"
    add_point = Store.add_point

    def failing_add_point(self, sweep_id, record):
        _faulty(self, "INSERT INTO points", 99, "database or disk is full")
        try:
            return add_point(self, sweep_id, record)
        finally:
            self.conn = self.conn.conn

    monkeypatch.setattr(Store, "add_point", failing_add_point)
    code = main(
        [
            "run",
            "--strategy",
            "dp",
            "--gpus",
            "2",
            *TINY,
            "--results",
            str(db),
            "--records-dir",
            str(tmp_path / "records"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Traceback" not in err
    [saved] = (tmp_path / "records").glob("*-dp-n2.json")
    assert f"database or disk is full (3 tries); the point's record is saved in {saved} " in err
    assert read_record(saved)["status"] == "skipped"
    with Store(db) as store:
        [sweep] = store.sweeps()
        assert sweep["status"] == "complete" and store.points(sweep["id"]) == []


# -- a corrupt store ---------------------------------------------------------------------------------------
def _corrupt_page(path: Path, page: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(page * 4096)
        fh.write(bytes(range(256)) * 16)


@pytest.mark.parametrize("page", [1, "middle"])
def test_a_corrupt_store_is_refused_untouched(tmp_path, capsys, page):
    db = tmp_path / "r.db"
    _store_with_points(db)
    page = os.path.getsize(db) // 4096 // 2 if page == "middle" else page
    _corrupt_page(db, page)
    before = db.read_bytes()
    commands = [
        ["results", "list"],
        ["results", "show"],
        ["report", "--out", str(tmp_path / "out" / "r.html")],
        ["results", "export", "--csv", str(tmp_path / "out.csv")],
        ["scale", "--gpus", "1", "--strategy", "torch", *TINY],
        ["run", "--strategy", "torch", *TINY],
    ]
    for args in commands:
        code, err = main([*args, "--results", str(db)]), capsys.readouterr().err
        assert code == 2, (args, err)
        assert err.startswith(f"Error: results store {db} is corrupt (") and err.count("\n") == 1, err
        assert err.endswith("); left untouched: restore it from a backup or pass --results NEW.db\n")
    assert db.read_bytes() == before
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.csv").exists()


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path, capsys):
    db = tmp_path / "r.db"
    db.write_bytes(b"\x00garbage, not a database" * 400)
    before = db.read_bytes()
    for args in (
        ["results", "list"],
        ["report", "--out", str(tmp_path / "r.html")],
        ["scale", "--gpus", "1", "--strategy", "torch", *TINY],
    ):
        assert main([*args, "--results", str(db)]) == 2
        assert capsys.readouterr().err == f"Error: {db} is not a distbench results store (left untouched)\n"
    assert db.read_bytes() == before


# -- two processes create one store ------------------------------------------------------------------------
def _create_and_write(path: str, barrier, results) -> None:
    barrier.wait(timeout=30)
    try:
        with Store(path) as store:
            sid = _sweep(store)
            store.add_point(sid, point("ddp", 2, 0.1, steps=3))
            store.finish_sweep(sid, "complete")
        results.put("ok")
    except BaseException as exc:  # reported by the parent
        results.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("refusals,opens", [(3, True), (10**6, False)])
def test_a_locked_wal_switch_on_open_is_retried_until_the_open_deadline(tmp_path, monkeypatch, refusals, opens):
    """SQLite answers the switch to WAL with 'database is locked' at once (no busy timeout) while another
    process creates the same store: opening retries it, up to OPEN_WAIT_S, then one line naming the store."""
    connect, left, opened = sqlite3.connect, [refusals], []

    def faulty(*args, **kw):
        conn = FaultyConnection(connect(*args, **kw), "PRAGMA journal_mode", 0, "database is locked")
        conn.failures, left[0] = min(left[0], 1), max(left[0] - 1, 0)  # the next `refusals` opens refused
        opened.append(conn)
        return conn

    monkeypatch.setattr(store_mod.sqlite3, "connect", faulty)
    monkeypatch.setattr(store_mod, "OPEN_WAIT_S", 0.5)
    path = tmp_path / "r.db"
    if opens:
        with Store(path) as store:
            assert len(opened) == 4 and store.conn is opened[-1]
            assert store.sweeps() == []
        return
    with pytest.raises(BadInput, match=f"^cannot write results store {re.escape(str(path))}: database is locked$"):
        Store(path)
    assert len(opened) > 1


@pytest.mark.slow
def test_processes_creating_one_new_store_at_once_all_succeed(tmp_path):
    ctx = mp.get_context("fork")
    tries, procs_per_try, failures = 10, 4, []
    deadline = time.monotonic() + 120
    for t in range(tries):
        path = str(tmp_path / f"try{t}" / "r.db")  # the folder does not exist yet either
        barrier, results = ctx.Barrier(procs_per_try), ctx.Queue()
        procs = [ctx.Process(target=_create_and_write, args=(path, barrier, results)) for _ in range(procs_per_try)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
        outcomes = [results.get(timeout=5) for p in procs if p.exitcode == 0]
        failures += [o for o in outcomes if o != "ok"] + ["hung or crashed"] * (procs_per_try - len(outcomes))
        with Store(path) as store:
            assert len(store.sweeps()) == len([o for o in outcomes if o == "ok"])
            assert all(s["status"] == "complete" for s in store.sweeps())
    assert failures == []


# -- a real full disk --------------------------------------------------------------------------------------
def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    return filler


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root; run the suite as root to test a real full disk")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_real_full_disk_loses_no_point(small_disk, tmp_path, capsys, monkeypatch):
    """`distbench run` whose store's disk fills up before the point is committed (ENOSPC, not simulated):
    the record is saved as JSON elsewhere, the command ends cleanly, and `collect` brings it back."""
    db = small_disk / "results" / "r.db"
    Store(db).close()
    spill = tmp_path / "tmp"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))  # the fallback after the store's own (full) folder
    derive, points = sweep_mod.derive, []

    def fill_then_derive(record, baselines):  # the disk fills up between the point and its commit
        points.append(record)
        _fill(small_disk)
        return derive(record, baselines)

    monkeypatch.setattr(sweep_mod, "derive", fill_then_derive)
    started = time.monotonic()
    code = main(["run", "--strategy", "dp", "--gpus", "2", *TINY, "--results", str(db)])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    [saved] = spill.glob("unsaved-*.json")
    [record] = points
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert lines == [
        f"error: cannot commit point dp N=2 in results store {db}: database or disk is full (3 tries); the point's "
        f"record is saved in {saved} (bring it back with: distbench collect {spill})",
        f"error: cannot mark sweep {record['sweep_id']} 'complete' in results store {db}: database or disk is full "
        "(3 tries); it stays 'running' there",
    ]
    assert [p for p in db.parent.iterdir() if p.suffix == ".json" or p.name.startswith(".rec-")] == []

    monkeypatch.setattr(sweep_mod, "derive", derive)  # collect derives too: no more filling
    os.remove(small_disk / "filler")  # room again: nothing was lost
    assert main(["collect", str(spill), "--results", str(db)]) == 0, capsys.readouterr().err
    with Store(db) as store:
        [back] = [p for s in store.sweeps() for p in store.points(s["id"])]
        assert back["record_id"] == record["record_id"] and back["reason"] == record["reason"]
    print(f"full-disk sweep: {elapsed:.1f} s, 1 point, 0 lost")


def test_a_measured_record_survives_a_real_full_disk(small_disk, tmp_path, capsys):
    """Every step time and telemetry sample of a point whose commit hits ENOSPC comes back through collect."""
    db = small_disk / "r.db"
    record = point("ddp", 2, 0.1, steps=2000)
    record["telemetry_samples"] = [[0.5 * i, "cpu0", "cpu_util", 50.0 + i % 7] for i in range(500)]
    with Store(db) as store:
        sid = _sweep(store)
        _fill(small_disk)
        started = time.monotonic()
        assert store.commit_point(sid, record, fallback=tmp_path / "records" / "p.json") is None
        elapsed = time.monotonic() - started
    assert "database or disk is full (3 tries)" in capsys.readouterr().err
    os.remove(small_disk / "filler")
    assert main(["collect", str(tmp_path / "records"), "--results", str(db)]) == 0
    with Store(db) as store:
        [back] = [p for s in store.sweeps() for p in store.points(s["id"])]
        assert store.steps(back["point_id"]) == record["step_times_s"]
        assert store.telemetry(back["point_id"]).values.tolist() == record["telemetry_samples"]
    print(f"full-disk commit: detected and saved as JSON in {elapsed:.2f} s")


def test_a_full_disk_that_frees_up_marks_the_sweep(small_disk, tmp_path, capsys, monkeypatch):
    """The point cannot be committed, but space comes back before the sweep ends: the row is not left running."""
    db = small_disk / "r.db"
    Store(db).close()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    derive, finish = sweep_mod.derive, Store.finish_sweep
    monkeypatch.setattr(sweep_mod, "derive", lambda r, b: (_fill(small_disk), derive(r, b))[1])

    def free_then_finish(self, *args, **kwargs):
        os.remove(small_disk / "filler")
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(Store, "finish_sweep", free_then_finish)
    assert main(["run", "--strategy", "dp", "--gpus", "2", *TINY, "--results", str(db)]) == 0
    assert "database or disk is full (3 tries)" in capsys.readouterr().err
    assert len(list(tmp_path.glob("unsaved-*.json"))) == 1
    with Store(db) as store:
        assert [s["status"] for s in store.sweeps()] == ["complete"]

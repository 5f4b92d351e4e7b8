"""The results store: an embedded SQLite database (pandas reads it for analysis) with the tables of `_SCHEMA`
and `_PREDICTIONS` (`distbench predict` output, never mixed into points; added to older stores on open).
Each point is committed in its own transaction as soon as it finishes; WAL mode and a busy timeout let two
sweeps write (and create) one store at once. Faults: `_write`, `commit_point`, `_check_existing`.

A record is kept once: its headline fields as columns (distbench.results.record.COLUMN_FIELDS, for queries), the
record itself in `record_json` (its `config` included), its step times in `steps` only (`points()` puts
`step_times_s` back) and its telemetry samples in `telemetry`. Store schema 1 also kept the config in a
`config_json` column and the step times in `record_json`: such stores are migrated on open (`_migrate_v1`).
The store owns every query and prints nothing: a fault it survives is logged on the `distbench.results.store`
logger (the CLI shows it as one line on stderr; see distbench.cli)."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import random
import secrets
import sqlite3
import tempfile
import time
from pathlib import Path

from distbench.core.errors import BadInput, DistbenchError
from distbench.results.record import COLUMN_FIELDS, write_record

SCHEMA_VERSION = 2
"""1: the config also in `config_json`, the step times also in `record_json`; 2: each kept once."""
log = logging.getLogger(__name__)
DEFAULT_PATH = Path("distbench-results") / "distbench.db"
WRITE_TRIES = 3
WRITE_BACKOFF_S = 0.25  # doubled after each failed try
OPEN_WAIT_S = 60.0  # how long opening waits out other processes creating the same store

_POINTS = """CREATE TABLE IF NOT EXISTS {name} (
    id INTEGER PRIMARY KEY AUTOINCREMENT, sweep_id TEXT NOT NULL REFERENCES sweeps(id),
    record_id TEXT UNIQUE,
    strategy TEXT NOT NULL, framework TEXT NOT NULL, model TEXT, world_size INTEGER NOT NULL,
    nodes INTEGER, device TEXT, scaling TEXT, per_device_batch INTEGER, global_batch INTEGER,
    status TEXT NOT NULL, reason TEXT, throughput REAL, step_time_median_s REAL,
    step_time_p5_s REAL, step_time_p95_s REAL, step_time_cv REAL, speedup REAL, efficiency REAL,
    wrapper_overhead REAL, record_json TEXT NOT NULL, finished TEXT NOT NULL)"""
_POINTS_INDEX = "CREATE INDEX IF NOT EXISTS points_sweep ON points(sweep_id)"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY, started TEXT NOT NULL, finished TEXT, status TEXT NOT NULL,
    command TEXT, version TEXT, git_sha TEXT, env_json TEXT, options_json TEXT, notes_json TEXT);
{_POINTS.format(name="points")};
{_POINTS_INDEX};
CREATE TABLE IF NOT EXISTS steps (
    point_id INTEGER NOT NULL REFERENCES points(id), idx INTEGER NOT NULL, seconds REAL NOT NULL,
    PRIMARY KEY (point_id, idx));
CREATE TABLE IF NOT EXISTS telemetry (
    point_id INTEGER NOT NULL REFERENCES points(id), t REAL NOT NULL, source TEXT NOT NULL,
    metric TEXT NOT NULL, value REAL);
"""
_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
_PREDICTIONS = """CREATE TABLE IF NOT EXISTS predictions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, sweep_id TEXT, created TEXT NOT NULL, command TEXT, version TEXT,
    prediction_json TEXT NOT NULL)"""

POINT_COLUMNS = COLUMN_FIELDS
"""The record's fields kept as columns of `points` besides record_json (declared in distbench.results.record)."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_sweep_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


class StoreWriteError(DistbenchError):
    """A write to the store still failed after WRITE_TRIES tries (disk full, I/O error, corrupt page)."""


class Store:
    def __init__(self, path: str | os.PathLike = DEFAULT_PATH):
        self.path = Path(path)
        if self.path.exists() and self.path.stat().st_size > 0:
            self._check_existing()
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BadInput(f"cannot create the results folder {self.path.parent}: {exc.strerror}") from None
        # SQLite can answer a lock taken by a process creating the store at the same moment (the switch to WAL,
        # WAL recovery) with "database is locked" without waiting on the busy timeout: such opens are retried.
        deadline = time.monotonic() + OPEN_WAIT_S
        while True:
            try:
                self.conn = self._open()
                break
            except sqlite3.Error as exc:
                transient = isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))
                if not transient or time.monotonic() > deadline:
                    raise BadInput(f"cannot write results store {self.path}: {exc}") from None
                time.sleep(random.uniform(0.05, 0.15))  # jittered, so the openers do not retry in step
        self.conn.isolation_level = ""  # back to implicit transactions, committed by `with self.conn`

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        except sqlite3.Error as exc:
            raise BadInput(f"cannot open results store {self.path}: {exc}") from None
        conn.row_factory = sqlite3.Row
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            self._create_schema(conn)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        """Create the tables unless they exist, holding the write lock from the check to the commit, so a
        second process creating the same store waits (busy timeout) and then finds them."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            tables = {r[0] for r in conn.execute(_TABLES)}
            if "meta" not in tables:
                if tables:
                    raise self._not_a_store()
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    conn.execute(statement)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('app', 'distbench')")
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            else:
                row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if int(row[0] if row else "0") < 2:
                    _migrate_v1(conn)
                    log.warning(
                        "note: %s was migrated to results-store schema %d (each record kept once); distbench "
                        "versions before it can read but no longer write it",
                        self.path,
                        SCHEMA_VERSION,
                    )
            conn.execute(_PREDICTIONS)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _check_existing(self) -> None:
        """Read-only checks before anything may write: a distbench store of a schema we understand, its
        pages intact. An empty SQLite file (another process is creating the store right now) passes."""

        def corrupt(why) -> BadInput:
            why = "; ".join(line for line in str(why).splitlines() if not line.startswith("***"))  # one line
            return BadInput(
                f"results store {self.path} is corrupt ({why}); left untouched: restore it from a backup "
                "or pass --results NEW.db"
            )

        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30.0)
            try:
                tables = {r[0] for r in conn.execute(_TABLES)}
                if not tables:
                    return
                rows = dict(conn.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
                check = conn.execute("PRAGMA quick_check(1)").fetchone()[0] if rows.get("app") == "distbench" else "ok"
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:  # not SQLite, corrupt pages, unreadable
            if "not a database" in str(exc):
                raise self._not_a_store() from None
            if isinstance(exc, sqlite3.OperationalError):
                raise BadInput(f"cannot read results store {self.path}: {exc} (left untouched)") from None
            raise corrupt(exc) from None
        if rows.get("app") != "distbench":
            raise self._not_a_store()
        if check != "ok":
            raise corrupt(check)
        version = int(rows.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise BadInput(
                f"{self.path} has store schema {version}, newer than this distbench "
                f"understands ({SCHEMA_VERSION}): upgrade distbench (file left untouched)"
            )

    def _not_a_store(self) -> BadInput:
        return BadInput(f"{self.path} is not a distbench results store (left untouched)")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- writing
    def _write(self, what: str, fn):
        """Run fn() in one transaction. A failed write (disk full, I/O error, still locked after the busy
        timeout) is rolled back and tried again, WRITE_TRIES times in all with a doubling backoff; other
        database errors (a corrupt page) are not retried. Raises StoreWriteError, one line."""
        for attempt in range(1, WRITE_TRIES + 1):
            try:
                with self.conn:
                    return fn()
            except sqlite3.DatabaseError as exc:
                if not isinstance(exc, sqlite3.OperationalError) or attempt == WRITE_TRIES:
                    raise StoreWriteError(
                        f"cannot {what} in results store {self.path}: {exc} "
                        f"({attempt} tr{'y' if attempt == 1 else 'ies'})"
                    ) from None
                time.sleep(WRITE_BACKOFF_S * 2 ** (attempt - 1))

    def start_sweep(
        self,
        *,
        command: str,
        version: str,
        git_sha: str | None,
        env: dict,
        options: dict,
        notes: list[str],
        sweep_id: str | None = None,
    ) -> str:
        sweep_id = sweep_id or new_sweep_id()
        self._write(
            "start a sweep",
            lambda: self.conn.execute(
                "INSERT INTO sweeps (id, started, status, command, version, git_sha, env_json, options_json,"
                " notes_json) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                (
                    sweep_id,
                    _now(),
                    command,
                    version,
                    git_sha,
                    json.dumps(env, sort_keys=True),
                    json.dumps(options, sort_keys=True, default=str),
                    json.dumps(notes),
                ),
            ),
        )
        return sweep_id

    def finish_sweep(self, sweep_id: str, status: str, note: str | None = None) -> None:
        """Mark the sweep finished (`note`, e.g. what interrupted it, is added to its notes). Never raises:
        a store that still cannot be written after the retries is logged in one line (the CLI: stderr)."""

        def update():
            self.conn.execute("UPDATE sweeps SET finished = ?, status = ? WHERE id = ?", (_now(), status, sweep_id))
            if note:
                row = self.conn.execute("SELECT notes_json FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
                notes = json.loads(row["notes_json"] or "[]") if row else []
                self.conn.execute(
                    "UPDATE sweeps SET notes_json = ? WHERE id = ?", (json.dumps([*notes, note]), sweep_id)
                )

        try:
            self._write(f"mark sweep {sweep_id} {status!r}", update)
        except StoreWriteError as exc:
            log.error("error: %s; it stays 'running' there", exc)

    def reopen_sweep(self, sweep_id: str) -> None:
        self.sweep(sweep_id)  # unknown id -> BadInput listing recent ones
        self._write(
            f"reopen sweep {sweep_id}",
            lambda: self.conn.execute(
                "UPDATE sweeps SET status = 'running', finished = NULL WHERE id = ?", (sweep_id,)
            ),
        )

    def delete_point(self, point_id: int) -> None:
        def delete():
            for table, column in (("steps", "point_id"), ("telemetry", "point_id"), ("points", "id")):
                self.conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (point_id,))

        self._write(f"delete point {point_id}", delete)

    def add_prediction(self, sweep_id: str | None, created: str, command: str, version: str, document: str) -> int:
        """One row in `predictions` (distbench predict; never in points). Raises StoreWriteError."""
        sql = "INSERT INTO predictions (sweep_id, created, command, version, prediction_json) VALUES (?, ?, ?, ?, ?)"
        return self._write(
            "save a prediction",
            lambda: self.conn.execute(sql, (sweep_id, created, command, version, document)).lastrowid,
        )

    def has_record(self, record_id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM points WHERE record_id = ?", (record_id,)).fetchone() is not None

    def add_point(self, sweep_id: str, record: dict) -> int:
        """Commit one finished point (its row, every step time and telemetry sample) atomically; the record
        itself is not changed. Raises StoreWriteError."""

        def insert() -> int:
            cur = self.conn.execute(
                f"INSERT INTO points (sweep_id, record_id, {', '.join(POINT_COLUMNS)}, record_json,"
                f" finished) VALUES (?, ?, {', '.join('?' * len(POINT_COLUMNS))}, ?, ?)",
                (
                    sweep_id,
                    record.get("record_id"),
                    *(record.get(c) for c in POINT_COLUMNS),
                    record_json(record),
                    _now(),
                ),
            )
            point_id = cur.lastrowid
            self.conn.executemany(
                "INSERT INTO steps (point_id, idx, seconds) VALUES (?, ?, ?)",
                [(point_id, i, t) for i, t in enumerate(record.get("step_times_s") or [])],
            )
            self.conn.executemany(
                "INSERT INTO telemetry (point_id, t, source, metric, value) VALUES (?, ?, ?, ?, ?)",
                [(point_id, *s) for s in record.get("telemetry_samples") or []],
            )
            return point_id

        return self._write(f"commit point {record.get('strategy')} N={record.get('world_size')}", insert)

    def commit_point(self, sweep_id: str, record: dict, fallback: str | os.PathLike | None = None) -> int | None:
        """`add_point`, or, when the store still cannot be written, save the record as JSON in the format
        `distbench collect` reads (whole: its step times included; at `fallback`, else next to the store, else
        in the temp folder), log where in one line (the CLI: stderr) and return None: a measured point is never
        lost to a store fault."""
        try:
            return self.add_point(sweep_id, record)
        except StoreWriteError as exc:
            error = exc
        doc = json.loads(json.dumps(record, sort_keys=True, default=str))
        name = (
            f"unsaved-{sweep_id}-{record.get('strategy')}-n{record.get('world_size')}-"
            f"{str(record.get('record_id'))[:8]}.json"
        )
        for path in [
            *([Path(fallback)] if fallback else []),
            self.path.parent / name,
            Path(tempfile.gettempdir()) / name,
        ]:
            try:
                write_record(path, doc)
            except OSError:
                continue
            log.error(
                "error: %s; the point's record is saved in %s (bring it back with: distbench collect %s)",
                error,
                path,
                path.parent,
            )
            return None
        log.error("error: %s; saving its record as JSON failed too: the point is lost", error)
        return None

    # -- reading
    def _frame(self, query: str, params=None):
        import pandas as pd

        return pd.read_sql_query(query, self.conn, params=params)

    def telemetry(self, point_id: int):
        return self._frame("SELECT t, source, metric, value FROM telemetry WHERE point_id = ? ORDER BY t", (point_id,))

    def sweeps(self, limit: int = 20) -> list[dict]:
        query = "SELECT id, started, finished, status, command FROM sweeps ORDER BY started DESC, rowid DESC LIMIT ?"
        return [dict(r) for r in self.conn.execute(query, (limit,))]

    def sweeps_with_counts(self, limit: int = 20) -> list[dict]:
        """Recent sweeps, newest first, with their point counts (ok and total)."""
        rows = self.conn.execute(
            "SELECT s.id, s.started, s.finished, s.status, s.command, COUNT(p.id) AS points_total, "
            "COALESCE(SUM(p.status = 'ok'), 0) AS points_ok FROM sweeps s LEFT JOIN points p ON p.sweep_id = s.id "
            "GROUP BY s.id ORDER BY s.started DESC, s.rowid DESC LIMIT ?",
            (limit,),
        )
        return [dict(r) for r in rows]

    def points(self, sweep_id: str) -> list[dict]:
        """The sweep's records in the order they were stored, each with its `point_id` and its `step_times_s`
        from the steps table, as it was committed (a record whose JSON does not parse reads as an empty
        record, so one damaged row does not hide the others)."""
        rows = self.conn.execute("SELECT id, record_json FROM points WHERE sweep_id = ? ORDER BY id", (sweep_id,))
        rows = [(r["id"], _loads(r["record_json"])) for r in rows]
        steps = self.sweep_steps(sweep_id) if rows else {}
        return [dict(with_steps(record, steps.get(point_id)), point_id=point_id) for point_id, record in rows]

    def sweep_steps(self, sweep_id: str) -> dict[int, list[float]]:
        """point id -> its per-step samples, for every point of the sweep."""
        steps: dict[int, list[float]] = {}
        for r in self.conn.execute(
            "SELECT s.point_id, s.seconds FROM steps s JOIN points p ON p.id = s.point_id "
            "WHERE p.sweep_id = ? ORDER BY s.point_id, s.idx",
            (sweep_id,),
        ):
            steps.setdefault(r["point_id"], []).append(r["seconds"])
        return steps

    def steps(self, point_id: int) -> list[float]:
        return [
            r["seconds"]
            for r in self.conn.execute("SELECT seconds FROM steps WHERE point_id = ? ORDER BY idx", (point_id,))
        ]

    def sweep(self, sweep_id: str) -> dict:
        row = self.conn.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
        if row is None:
            recent = ", ".join(s["id"] for s in self.sweeps(5)) or "none"
            raise BadInput(f"unknown sweep {sweep_id!r}; recent sweeps: {recent}")
        return dict(row)

    def points_frame(self, sweep_id: str | None = None):
        """The points rows as a table; `config_json` (a column of its own up to store schema 1) is the
        record's config as JSON text, before `record_json`."""
        where = " WHERE sweep_id = ?" if sweep_id else ""
        frame = self._frame(f"SELECT * FROM points{where} ORDER BY id", (sweep_id,) if sweep_id else None)
        configs = [json.dumps(_loads(text).get("config", {}), sort_keys=True) for text in frame["record_json"]]
        frame.insert(int(frame.columns.get_loc("record_json")), "config_json", configs)
        return frame


def record_json(record: dict) -> str:
    """The text `points.record_json` keeps of a record: all of it except what has a table of its own (the
    step times, when there are any: `steps`; the telemetry samples: `telemetry`)."""
    kept = {
        k: v
        for k, v in record.items()
        if k != "telemetry_samples" and not (k == "step_times_s" and isinstance(v, list) and v)
    }
    return json.dumps(kept, sort_keys=True, default=str)


def with_steps(record: dict, steps: list[float] | None) -> dict:
    """A record read from `record_json` with its step times back from the steps table, keys in the order
    they were stored (sorted), as the record was committed. A damaged (empty) record stays empty."""
    if not record or not steps:
        return record
    return dict(sorted({**record, "step_times_s": steps}.items()))


def _migrate_v1(conn: sqlite3.Connection) -> None:
    """Store schema 1 -> 2, inside the caller's write transaction (foreign keys not yet enforced): `points` is
    rebuilt without `config_json` (the config is in record_json too) and its record_json without the step
    times the steps table holds (SQLite's way to change a table: a new one, the rows copied, then renamed)."""
    stepped = {r[0] for r in conn.execute("SELECT DISTINCT point_id FROM steps")}
    columns = [r[1] for r in conn.execute("PRAGMA table_info(points)") if r[1] != "config_json"]
    seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'points'").fetchone()
    conn.execute(_POINTS.format(name="points_v2"))
    at, key = columns.index("record_json"), columns.index("id")
    insert = f"INSERT INTO points_v2 ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    for row in conn.execute(f"SELECT {', '.join(columns)} FROM points ORDER BY id").fetchall():
        row = list(row)
        record = _loads(row[at])
        if row[key] in stepped and record:
            row[at] = record_json(record)
        conn.execute(insert, row)
    conn.execute("DROP TABLE points")  # its index goes with it
    conn.execute("ALTER TABLE points_v2 RENAME TO points")
    conn.execute(_POINTS_INDEX)
    if seq is not None:  # the ids of deleted points are not given out again
        conn.execute("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'points'", (seq[0],))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def _loads(text: str | None) -> dict:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def latest_prediction(path: str | os.PathLike, sweep_id: str) -> tuple[int, str, str] | None:
    """(id, command, prediction_json) of the newest prediction made from `sweep_id`, read-only; None when there
    is none, no store or a store without the table (the report must render without it)."""
    if not path or not Path(path).exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            query = "SELECT id, command, prediction_json FROM predictions WHERE sweep_id = ? ORDER BY id DESC LIMIT 1"
            row = conn.execute(query, (sweep_id,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return tuple(row) if row else None

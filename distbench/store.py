"""The results store: an embedded SQLite database (pandas reads it for analysis).

Schema (version 1):
  meta(key, value)                          -- app = 'distbench', schema_version
  sweeps(id, started, finished, status, command, version, git_sha, env_json, options_json, notes_json)
  points(id, sweep_id, record_id, strategy, framework, model, world_size, nodes, device, scaling,
         per_device_batch, global_batch, status, reason, throughput, step_time_median_s,
         step_time_p5_s, step_time_p95_s, step_time_cv, speedup, efficiency, wrapper_overhead,
         config_json, record_json, finished)
  steps(point_id, idx, seconds)             -- every measured step time
  telemetry(point_id, t, source, metric, value)

Each point is committed in its own transaction as soon as it finishes. WAL mode and a busy
timeout let two sweeps write the same store at once.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
import sqlite3
from pathlib import Path

from distbench.errors import BadInput

SCHEMA_VERSION = 1
DEFAULT_PATH = Path("distbench-results") / "distbench.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY, started TEXT NOT NULL, finished TEXT, status TEXT NOT NULL,
    command TEXT, version TEXT, git_sha TEXT, env_json TEXT, options_json TEXT, notes_json TEXT);
CREATE TABLE IF NOT EXISTS points (
    id INTEGER PRIMARY KEY AUTOINCREMENT, sweep_id TEXT NOT NULL REFERENCES sweeps(id),
    record_id TEXT UNIQUE,
    strategy TEXT NOT NULL, framework TEXT NOT NULL, model TEXT, world_size INTEGER NOT NULL,
    nodes INTEGER, device TEXT, scaling TEXT, per_device_batch INTEGER, global_batch INTEGER,
    status TEXT NOT NULL, reason TEXT, throughput REAL, step_time_median_s REAL,
    step_time_p5_s REAL, step_time_p95_s REAL, step_time_cv REAL, speedup REAL, efficiency REAL,
    wrapper_overhead REAL, config_json TEXT NOT NULL, record_json TEXT NOT NULL, finished TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS points_sweep ON points(sweep_id);
CREATE TABLE IF NOT EXISTS steps (
    point_id INTEGER NOT NULL REFERENCES points(id), idx INTEGER NOT NULL, seconds REAL NOT NULL,
    PRIMARY KEY (point_id, idx));
CREATE TABLE IF NOT EXISTS telemetry (
    point_id INTEGER NOT NULL REFERENCES points(id), t REAL NOT NULL, source TEXT NOT NULL,
    metric TEXT NOT NULL, value REAL);
"""

POINT_COLUMNS = ("strategy", "framework", "model", "world_size", "nodes", "device", "scaling",
                 "per_device_batch", "global_batch", "status", "reason", "throughput",
                 "step_time_median_s", "step_time_p5_s", "step_time_p95_s", "step_time_cv", "speedup",
                 "efficiency", "wrapper_overhead")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_sweep_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


class Store:
    """A distbench results database. Refuses files that are not distbench stores, untouched."""

    def __init__(self, path: str | os.PathLike = DEFAULT_PATH):
        self.path = Path(path)
        existed = self.path.exists() and self.path.stat().st_size > 0
        if existed:
            self._check_existing()
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BadInput(f"cannot create the results folder {self.path.parent}: {exc.strerror}") from None
        try:
            self.conn = sqlite3.connect(self.path, timeout=30.0)
        except sqlite3.Error as exc:
            raise BadInput(f"cannot open results store {self.path}: {exc}") from None
        self.conn.row_factory = sqlite3.Row
        try:
            self.conn.execute("PRAGMA busy_timeout = 30000")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            if not existed:
                with self.conn:
                    self.conn.executescript(_SCHEMA)
                    self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('app', 'distbench')")
                    self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                                      (str(SCHEMA_VERSION),))
        except sqlite3.Error as exc:
            raise BadInput(f"cannot write results store {self.path}: {exc}") from None

    def _check_existing(self) -> None:
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30.0)
            try:
                rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            finally:
                conn.close()
        except sqlite3.Error:
            raise BadInput(f"{self.path} is not a distbench results store (left untouched)") from None
        if rows.get("app") != "distbench":
            raise BadInput(f"{self.path} is not a distbench results store (left untouched)")
        version = int(rows.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise BadInput(f"{self.path} has store schema {version}, newer than this distbench "
                           f"understands ({SCHEMA_VERSION}): upgrade distbench (file left untouched)")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- writing -------------------------------------------------------------------------------
    def start_sweep(self, *, command: str, version: str, git_sha: str | None, env: dict,
                    options: dict, notes: list[str], sweep_id: str | None = None) -> str:
        sweep_id = sweep_id or new_sweep_id()
        with self.conn:
            self.conn.execute(
                "INSERT INTO sweeps (id, started, status, command, version, git_sha, env_json, options_json,"
                " notes_json) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                (sweep_id, _now(), command, version, git_sha, json.dumps(env, sort_keys=True),
                 json.dumps(options, sort_keys=True, default=str), json.dumps(notes)))
        return sweep_id

    def finish_sweep(self, sweep_id: str, status: str) -> None:
        with self.conn:
            self.conn.execute("UPDATE sweeps SET finished = ?, status = ? WHERE id = ?",
                              (_now(), status, sweep_id))

    def reopen_sweep(self, sweep_id: str) -> None:
        self.sweep(sweep_id)  # unknown id -> BadInput listing recent ones
        with self.conn:
            self.conn.execute("UPDATE sweeps SET status = 'running', finished = NULL WHERE id = ?", (sweep_id,))

    def delete_point(self, point_id: int) -> None:
        with self.conn:
            self.conn.execute("DELETE FROM steps WHERE point_id = ?", (point_id,))
            self.conn.execute("DELETE FROM telemetry WHERE point_id = ?", (point_id,))
            self.conn.execute("DELETE FROM points WHERE id = ?", (point_id,))

    def has_record(self, record_id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM points WHERE record_id = ?", (record_id,)).fetchone() is not None

    def add_point(self, sweep_id: str, record: dict) -> int:
        """Commit one finished point (its row, and every step time) atomically."""
        values = [record.get(c) for c in POINT_COLUMNS]
        with self.conn:
            cur = self.conn.execute(
                f"INSERT INTO points (sweep_id, record_id, {', '.join(POINT_COLUMNS)}, config_json, record_json,"
                f" finished) VALUES (?, ?, {', '.join('?' * len(POINT_COLUMNS))}, ?, ?, ?)",
                (sweep_id, record.get("record_id"), *values, json.dumps(record.get("config", {}), sort_keys=True),
                 json.dumps({k: v for k, v in record.items() if k != "telemetry_samples"}, sort_keys=True,
                            default=str), _now()))
            point_id = cur.lastrowid
            self.conn.executemany("INSERT INTO steps (point_id, idx, seconds) VALUES (?, ?, ?)",
                                  [(point_id, i, t) for i, t in enumerate(record.get("step_times_s") or [])])
            self.conn.executemany("INSERT INTO telemetry (point_id, t, source, metric, value) VALUES (?, ?, ?, ?, ?)",
                                  [(point_id, *s) for s in record.get("telemetry_samples") or []])
        return point_id

    # -- reading -------------------------------------------------------------------------------
    def telemetry(self, point_id: int):
        import pandas as pd

        return pd.read_sql_query("SELECT t, source, metric, value FROM telemetry WHERE point_id = ? ORDER BY t",
                                 self.conn, params=(point_id,))

    def sweeps(self, limit: int = 20) -> list[dict]:
        rows = self.conn.execute("SELECT id, started, finished, status, command FROM sweeps "
                                 "ORDER BY started DESC, rowid DESC LIMIT ?", (limit,)).fetchall()
        return [dict(r) for r in rows]

    def points(self, sweep_id: str) -> list[dict]:
        rows = self.conn.execute("SELECT id, record_json FROM points WHERE sweep_id = ? ORDER BY id",
                                 (sweep_id,)).fetchall()
        return [dict(json.loads(r["record_json"]), point_id=r["id"]) for r in rows]

    def steps(self, point_id: int) -> list[float]:
        return [r["seconds"] for r in self.conn.execute(
            "SELECT seconds FROM steps WHERE point_id = ? ORDER BY idx", (point_id,))]

    def sweep(self, sweep_id: str) -> dict:
        row = self.conn.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
        if row is None:
            recent = ", ".join(s["id"] for s in self.sweeps(5)) or "none"
            raise BadInput(f"unknown sweep {sweep_id!r}; recent sweeps: {recent}")
        return dict(row)

    def points_frame(self, sweep_id: str | None = None):
        import pandas as pd

        query = "SELECT * FROM points" + (" WHERE sweep_id = ?" if sweep_id else "") + " ORDER BY id"
        return pd.read_sql_query(query, self.conn, params=(sweep_id,) if sweep_id else None)

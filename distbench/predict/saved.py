"""Predictions in the results store: their own table, never the measured points."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path


def save(store, sweep_id: str | None, command: str, document: dict) -> int:
    """One row in the `predictions` table (never in points: measured tables stay measured)."""
    from distbench import __version__

    return store.add_prediction(sweep_id, document["created"], command, __version__, json.dumps(document, default=str))


def latest_for(store_path: str, sweep_id: str) -> dict | None:
    """The newest stored prediction made from this sweep, or None (also for stores without the table)."""
    if not store_path or not Path(store_path).exists():
        return None
    try:
        with closing(sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)) as conn:
            row = conn.execute(
                "SELECT id, command, prediction_json FROM predictions WHERE sweep_id = ? ORDER BY id DESC LIMIT 1",
                (sweep_id,),
            ).fetchone()
    except sqlite3.Error:
        return None
    if row is None:
        return None
    return {**json.loads(row[2]), "prediction_id": row[0], "command": row[1]}

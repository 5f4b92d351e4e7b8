"""Predictions in the results store: their own table, never the measured points."""

from __future__ import annotations

import json

from distbench.results.store import latest_prediction


def save(store, sweep_id: str | None, command: str, document: dict) -> int:
    """One row in the `predictions` table (never in points: measured tables stay measured)."""
    from distbench import __version__

    return store.add_prediction(sweep_id, document["created"], command, __version__, json.dumps(document, default=str))


def latest_for(store_path: str, sweep_id: str) -> dict | None:
    """The newest stored prediction made from this sweep, or None (also for stores without the table)."""
    row = latest_prediction(store_path, sweep_id)
    if row is None:
        return None
    return {**json.loads(row[2]), "prediction_id": row[0], "command": row[1]}

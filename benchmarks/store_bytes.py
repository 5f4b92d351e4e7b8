"""What storing each record once saves: schema-1 stores (the config in `config_json` and again in `record_json`,
the step times in `steps` and again in `record_json`) against the same stores migrated to schema 2.

Each store given is copied, measured, opened with the current Store (which migrates it), measured again and
VACUUMed both times, so the file sizes compare like with like. Every record is read back before and after and
must be identical (the step times come back from the `steps` table).

    python benchmarks/store_bytes.py STORE.db [STORE.db ...] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

from distbench.results.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mdsection import write_section  # noqa: E402


def _vacuumed_size(path: Path) -> int:
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.execute("VACUUM")
    finally:
        con.close()
    return path.stat().st_size


def _v1_records(path: Path) -> tuple[dict[int, dict], int, int, int]:
    """The records as schema 1 kept them (record_json whole), the bytes of record_json and config_json, and
    the step samples in the steps table."""
    con = sqlite3.connect(path)
    try:
        version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        if int(version) != 1:
            raise SystemExit(f"{path}: schema {version}, not a schema-1 store")
        rows = con.execute("SELECT id, record_json, config_json FROM points").fetchall()
        steps = con.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
    finally:
        con.close()
    records = {pid: json.loads(text) for pid, text, _ in rows}
    return records, sum(len(t) for _, t, _ in rows), sum(len(c) for _, _, c in rows), steps


def measure(store: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "r.db"
        shutil.copy(store, copy)
        before, record_bytes, config_bytes, steps = _v1_records(copy)
        size_before = _vacuumed_size(copy)
        with Store(copy) as s:  # migrates to the current schema
            after = {r["point_id"]: r for sid in [x["id"] for x in s.sweeps(10_000)] for r in s.points(sid)}
            kept_bytes = sum(len(t) for (t,) in s.conn.execute("SELECT record_json FROM points"))
        same = all({k: v for k, v in after[pid].items() if k != "point_id"} == rec for pid, rec in before.items())
        size_after = _vacuumed_size(copy)
    return {
        "store": str(store),
        "points": len(before),
        "steps": steps,
        "v1_text": record_bytes + config_bytes,
        "v2_text": kept_bytes,
        "v1_file": size_before,
        "v2_file": size_after,
        "same": same and len(after) == len(before),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+", type=Path)
    ap.add_argument("--write", help="write the section into this markdown file")
    args = ap.parse_args()
    rows = [measure(p) for p in args.stores]
    lines = [
        "## Records stored once (store schema 2)",
        "",
        "`python benchmarks/store_bytes.py STORE.db ...` on schema-1 stores written by real CPU-worker runs:",
        "the text of `record_json` + `config_json` before, of `record_json` after the migration, and the file",
        "size, both VACUUMed. Every record reads back identical after it (step times from the `steps` table).",
        "The saving is the config once and the step times once: it grows with the steps a point measures (these",
        "points measured few: short test sweeps).",
        "",
        "| store | points | step samples | record text, schema 1 | schema 2 | file, schema 1 | schema 2 | records identical |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {Path(r['store']).parent.name}/{Path(r['store']).name} | {r['points']} | {r['steps']} | {r['v1_text']:,} B | "
            f"{r['v2_text']:,} B ({r['v2_text'] / r['v1_text']:.0%}) | {r['v1_file']:,} B | {r['v2_file']:,} B "
            f"({r['v2_file'] / r['v1_file']:.0%}) | {'yes' if r['same'] else 'NO'} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section(args.write, text)
    if not all(r["same"] for r in rows):
        raise SystemExit("a record read back differently after the migration")


if __name__ == "__main__":
    main()

"""`distbench results export`: a sweep as CSV, Parquet or JSON, and the guards every written file shares
(a writable path; no spreadsheet formula in a CSV or Markdown cell)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

from distbench import analysis as an
from distbench.analysis import Sweep
from distbench.core.errors import BadInput


def check_writable(path: str | Path) -> None:
    """Refuse, before any work, an output path that cannot be a file (its folder is a file, or it is a folder)."""
    path = Path(path)
    parent = next((p for p in path.parents if p.exists()), None)
    if parent and not parent.is_dir():
        raise BadInput(f"cannot write {path}: {parent} is not a folder")
    if path.is_dir():
        raise BadInput(f"cannot write {path}: it is a folder")


def _write_text(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from None


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NEGATIVE_NUMBER = re.compile(r"-((\d[\d,]*(\.\d*)?|\.\d+)(e[+-]?\d+)?%?)?")  # "-12.5", "-3%", "-1e-05", "-"


def spreadsheet_safe(value):
    """Neutralise formula injection (OWASP): a text cell that begins with = + - @ tab or CR gets a leading
    ' so a spreadsheet shows it as text instead of running it. Numbers, and text that is only a negative
    number (or the "-" placeholder), stay as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NEGATIVE_NUMBER.fullmatch(value):
        return "'" + value
    return value


def safe_csv(frame) -> str:
    """The frame as CSV with every text cell and header passed through `spreadsheet_safe`. Lines end in
    CRLF (RFC 4180) so that a cell holding a bare CR is quoted too, instead of starting a new row."""
    frame = frame.rename(columns=spreadsheet_safe)
    for col in frame.select_dtypes(exclude="number").columns:  # text columns; numbers are never touched
        frame[col] = frame[col].map(spreadsheet_safe)
    return frame.to_csv(index=False, lineterminator="\r\n")


def have_pyarrow() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def export(
    sweep: Sweep, *, csv: str | None = None, parquet: str | None = None, json_path: str | None = None
) -> list[str]:
    """Write the sweep as CSV / Parquet (one row per point, pandas) and/or JSON (the full records and
    their step times). '-' writes CSV or JSON to stdout. Returns the paths written."""
    if not (csv or parquet or json_path):
        raise BadInput("nothing to export: give --csv PATH, --parquet PATH or --json PATH")
    if parquet and not have_pyarrow():
        raise BadInput("--parquet needs pyarrow, which is not installed: pip install pyarrow")
    if sum(p == "-" for p in (csv, json_path)) > 1:
        raise BadInput("only one of --csv and --json can write to stdout ('-')")
    files = [p for p in (csv, parquet, json_path) if p and p != "-"]
    for path in files:
        check_writable(path)
    frame = an.points_frame(sweep) if (csv or parquet) else None
    if csv:
        _write_text(csv, safe_csv(frame))
    if parquet:
        try:
            frame.to_parquet(parquet, index=False)
        except OSError as exc:
            raise BadInput(f"cannot write {parquet}: {exc.strerror or exc}") from None
    if json_path:
        _write_text(json_path, json.dumps(an.sweep_document(sweep), indent=2, sort_keys=True, default=str) + "\n")
    return files

"""Profiled points side by side: one breakdown's table, several breakdowns in one table with the difference
per category against the first, and sentences that name the largest differences from the data (the
categories, their times, their operation counts and top operations; no explanation the data does not hold)."""

from __future__ import annotations

from typing import Callable

from distbench.profile.categories import CATEGORIES, LABELS, NOT_ON_GPU

MIN_SENTENCE_SHARE = 0.05
"""A category difference gets a sentence when it is at least this share of the reference's step."""
MAX_SENTENCES = 3


def profiled(records: list[dict]) -> list[dict]:
    """The records that carry a breakdown, in their order."""
    return [r for r in records if isinstance(r.get("profile"), dict) and r["profile"].get("categories")]


def point_label(record: dict) -> str:
    return f"{record.get('strategy')} N={record.get('world_size')}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f}%"


def _top(entry: dict, n: int = 2) -> str:
    return ", ".join(f"{name} {secs * 1e3:.2f} ms" for name, secs, _ in (entry.get("top") or [])[:n]) or "-"


def breakdown_rows(record: dict, categories: tuple[str, ...] | None = None) -> tuple[list[str], list[list[str]]]:
    """One point's breakdown: per category its time per step, share of the step, ops per step, top ops; then
    the categories' sum, the clock's step and what is left over."""
    prof = record["profile"]
    headers = ["category", "ms/step", "share", "ops/step", "top operations (ms/step)"]
    rows = []
    for c in categories or CATEGORIES:
        entry = prof["categories"].get(c) or {}
        if "not_applicable" in entry:
            rows.append([LABELS[c], entry["not_applicable"], "", "", ""])
            continue
        ops = entry.get("ops")
        rows.append(
            [LABELS[c], _ms(entry.get("s")), _pct(entry.get("share")), "-" if ops is None else f"{ops:g}", _top(entry)]
        )
    rows += _total_rows(prof, lambda v: [v, "", "", ""])
    return headers, rows


def _total_rows(prof: dict, pad) -> list[list[str]]:
    left = prof.get("left_over_s")
    verdict = "" if left is None else (" (within 10%)" if prof.get("within_tolerance") else " (MORE than 10%)")
    return [
        ["sum of the categories", *pad(_ms(prof.get("sum_s")))],
        ["profiled step, clock (mean)", *pad(_ms(prof.get("clock_step_s")))],
        ["left over" + verdict, *pad(_ms(left))],
        ["timed step, unprofiled (median)", *pad(_ms(prof.get("timed_step_median_s")))],
    ]


def side_by_side(records: list[dict], categories: tuple[str, ...] | None = None) -> tuple[list[str], list[list[str]]]:
    """Every profiled point's ms/step (share) per category, and each later point's difference from the first."""
    recs = profiled(records)
    if not recs:
        return [], []
    ref = recs[0]
    headers = ["category", *(f"{point_label(r)} ms (share)" for r in recs)]
    headers += [f"{point_label(r)} - {point_label(ref)} ms" for r in recs[1:]]
    rows = []
    for c in categories or CATEGORIES:
        cells, diffs = [], []
        ref_s = ref["profile"]["categories"].get(c, {}).get("s")
        for r in recs:
            entry = r["profile"]["categories"].get(c) or {}
            if "not_applicable" in entry:
                cells.append(NOT_ON_GPU)
            else:
                cells.append(f"{_ms(entry.get('s'))} ({_pct(entry.get('share'))})")
        for r in recs[1:]:
            s = (r["profile"]["categories"].get(c) or {}).get("s")
            diffs.append("-" if s is None or ref_s is None else f"{(s - ref_s) * 1e3:+.2f}")
        rows.append([LABELS[c], *cells, *diffs])
    for name, key in (("sum of the categories", "sum_s"), ("profiled step, clock", "clock_step_s")):
        values = [r["profile"].get(key) for r in recs]
        diffs = ["-" if v is None or values[0] is None else f"{(v - values[0]) * 1e3:+.2f}" for v in values[1:]]
        rows.append([name, *(_ms(v) for v in values), *diffs])
    return headers, rows


def sentences(records: list[dict], noisy: Callable[[dict], bool] | None = None) -> list[str]:
    """The largest differences of each later profiled point against the first, in words, from the numbers;
    with `noisy` (analysis.is_noisy), the step sentence says which compared point is flagged noisy."""
    recs = profiled(records)
    if len(recs) < 2:
        return []
    ref = recs[0]
    out = []
    for other in recs[1:]:
        out.append(_step_sentence(ref, other) + noisy_note([ref, other], noisy))
        ref_step = ref["profile"].get("clock_step_s") or ref["profile"].get("sum_s") or 0.0
        diffs = []
        for c in CATEGORIES:
            a, b = ref["profile"]["categories"].get(c) or {}, other["profile"]["categories"].get(c) or {}
            if "s" in a and "s" in b:
                diffs.append((abs(b["s"] - a["s"]), c, a, b))
        diffs.sort(key=lambda d: -d[0])
        said = 0
        for size, c, a, b in diffs:
            if said >= MAX_SENTENCES or ref_step <= 0 or size < MIN_SENTENCE_SHARE * ref_step:
                break
            out.append(_category_sentence(point_label(ref), a, point_label(other), b, c))
            said += 1
        if not said:
            out.append(
                f"No category differs by {MIN_SENTENCE_SHARE:.0%} of {point_label(ref)}'s step or more between "
                f"{point_label(ref)} and {point_label(other)}."
            )
    return out


def _step_sentence(ref: dict, other: dict) -> str:
    a, b = ref["profile"].get("clock_step_s"), other["profile"].get("clock_step_s")
    ta, tb = ref["profile"].get("timed_step_median_s"), other["profile"].get("timed_step_median_s")
    text = f"Profiled step: {point_label(ref)} {_ms(a)} ms, {point_label(other)} {_ms(b)} ms"
    if a and b:
        text += f" ({b / a:.2f}x)"
    if ta and tb:
        text += f"; the timed, unprofiled steps: {_ms(ta)} and {_ms(tb)} ms ({tb / ta:.2f}x)"
    return text + "."


def noisy_note(records: list[dict], noisy: Callable[[dict], bool] | None) -> str:
    """' X is flagged noisy (step-time CV 56%): ...' for the compared points that are noisy, else ''."""
    out = []
    for r in records:
        if noisy is not None and noisy(r):
            cv = r.get("step_time_cv")
            cv_text = f" (step-time CV {cv:.0%})" if isinstance(cv, (int, float)) else ""
            out.append(f"{point_label(r)} is flagged noisy{cv_text}")
    if not out:
        return ""
    return " " + "; ".join(out) + ": a ratio from a noisy point can be off by more than its spread; profile again."


def _category_sentence(name_a: str, a: dict, name_b: str, b: dict, c: str) -> str:
    more, less = (name_b, name_a) if b["s"] >= a["s"] else (name_a, name_b)
    hi, lo = (b, a) if b["s"] >= a["s"] else (a, b)
    text = (
        f"{more} spends {(hi['s'] - lo['s']) * 1e3:.2f} ms more a step in {LABELS[c]} than {less} "
        f"({hi['s'] * 1e3:.2f} vs {lo['s'] * 1e3:.2f} ms, {_pct(hi.get('share'))} vs {_pct(lo.get('share'))} "
        "of the step)"
    )
    if hi.get("ops") is not None and lo.get("ops") is not None and hi["ops"] != lo["ops"]:
        text += f" in {hi['ops']:g} operations a step against {lo['ops']:g}"
    text += f"; {more}'s largest there: {_top(hi)}"
    if lo.get("top"):
        text += f"; {less}'s: {_top(lo)}"
    return text + "."


def profile_columns(prof: dict) -> dict:
    """A breakdown as flat export columns: profile.<category>_s and profile.<category>_share per category (a
    GPU-only category on CPU workers: its 'not on a GPU'), the sum, the clock's step and what is left over."""
    out: dict = {}
    for c in CATEGORIES:
        entry = (prof.get("categories") or {}).get(c) or {}
        if "not_applicable" in entry:
            out[f"profile.{c}_s"] = entry["not_applicable"]
            out[f"profile.{c}_share"] = entry["not_applicable"]
        else:
            out[f"profile.{c}_s"] = entry.get("s")
            out[f"profile.{c}_share"] = entry.get("share")
    for key in ("steps", "sum_s", "clock_step_s", "left_over_s", "within_tolerance", "timed_step_median_s"):
        out[f"profile.{key}"] = prof.get(key)
    return out

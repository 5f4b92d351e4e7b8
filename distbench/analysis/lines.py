"""The sentences `scale` and `run` print under their table about single points: the 1-device wrapper cost and
how the points stopped measuring. Each names a point by strategy and N, plus its batch size when the sweep has
several and its sequence length when it has one (records.point_axes)."""

from __future__ import annotations

from distbench.analysis.records import point_axes, series_name
from distbench.core.strategies import FRAMEWORK_BASELINE


def wrapper_lines(records: list[dict]) -> list[str]:
    """'1-device wrapper cost: ddp at N=1 (seq 64) is 5.0% slower than the plain 'torch' loop ...', one per
    point that has a wrapper cost."""
    lines = []
    for r in records:
        if r.get("wrapper_overhead") is not None:
            cost = r["wrapper_overhead"]
            axes = point_axes(r, records)
            where = f" ({', '.join(axes)})" if axes else ""
            lines.append(
                f"1-device wrapper cost: {r['strategy']} at N=1{where} is "
                f"{abs(cost):.1%} {'slower' if cost >= 0 else 'faster'} than the plain "
                f"{FRAMEWORK_BASELINE.get(r['framework'], r['framework'])!r} loop (CIs: distbench report)"
            )
    return lines


def stopping_line(records: list[dict]) -> str | None:
    """Which points met the CI target and which ran out of measuring time."""
    rules: dict[str, list[str]] = {}
    for r in records:
        rule = (r.get("stopping") or {}).get("rule")
        if r.get("status") == "ok" and rule:
            name = " ".join([f"{series_name(r)}@{r['world_size']}", *point_axes(r, records)])
            rules.setdefault(rule, []).append(name)
    if not rules or set(rules) == {"fixed_steps"}:
        return None
    parts = []
    if rules.get("target_ci_met"):
        parts.append(f"{len(rules['target_ci_met'])} point(s) reached the CI target")
    if rules.get("two_stage"):
        parts.append(
            f"{len(rules['two_stage'])} point(s) with a split ran windows sized in advance from --max-time and a "
            "pilot's pace (two-stage, not adaptive)"
        )
    if rules.get("max_time"):
        parts.append(
            f"{len(rules['max_time'])} stopped at --max-time before reaching it ({', '.join(rules['max_time'])})"
        )
    if rules.get("max_steps"):
        parts.append(f"{len(rules['max_steps'])} stopped at the step cap")
    return ("stopping: " if rules.get("two_stage") else "adaptive stopping: ") + "; ".join(parts)

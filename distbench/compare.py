"""Comparing two sweeps (another distbench version, another machine): throughput ratio B/A per point.

Points match when their whole point key (distbench.config.point_key) is equal. Each ratio gets a 95% CI
(analysis.throughput_ratio_ci; coverage simulated in cisim.throughput_ratio: 97-98% for a nominal 95% on
AR(1) step series with phi up to 0.8 and outliers). A change is flagged only when it is beyond the noise
(the CI excludes 1) AND larger than the threshold; a point ok in A and broken in B is a regression too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.markup import escape
from rich.table import Table

from distbench.analysis import Sweep, is_comm, num, record_key, series_name, throughput_ratio_ci, workload_label
from distbench.config import PointKey
from distbench.errors import BadInput, DistbenchError
from distbench.output import fmt_num, table

BROKEN = ("failed", "timeout", "oom")

VERDICT_STYLE = {
    "regression": "bold red",
    "improvement": "green",
    "failed in B": "bold red",
    "fixed in B": "green",
    "within noise": "dim",
    "below threshold": "dim",
    "no CI": "yellow",
    "not measured": "yellow",
}


class RegressionFound(DistbenchError):
    """B regressed: one line on stderr, exit 1 (the CI-gate outcome)."""

    exit_code = 1


def parse_threshold(text: str) -> float:
    """'5%' -> 0.05, '0.05' -> 0.05. A bare number of 1 or more is ambiguous and refused."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BadInput(f"--threshold {text!r} is not a percentage (e.g. 5%) or a fraction (e.g. 0.05)") from None
    if not raw.endswith("%") and value >= 1:
        raise BadInput(f"--threshold {text!r} is ambiguous: write {raw}% for a percentage or a fraction below 1")
    if not 0 <= value < 1:
        raise BadInput(f"--threshold {text!r} must be between 0% and 100%")
    return value


def key_dict(key: PointKey) -> dict:
    """The key as JSON: strategy, world_size, nodes, batch (the --batch-size value) and every workload field."""
    fields = key._asdict()
    workload = fields.pop("workload")
    return {**fields, **dict(workload)}


def key_label(key: PointKey) -> str:
    w = dict(key.workload)
    where = f" over {key.nodes} nodes" if key.nodes > 1 else ""
    return f"{key.strategy} N={key.world_size}{where} {w.get('model')} batch={key.batch} {w.get('scaling')}"


def key_differences(a: PointKey, b: PointKey) -> list[str]:
    """'precision fp32 in A, bf16 in B' for every field of the two keys' workloads (and batch) that differs."""
    wa, wb = {**dict(a.workload), "batch": a.batch}, {**dict(b.workload), "batch": b.batch}
    return [
        f"{name} {wa.get(name)} in A, {wb.get(name)} in B"
        for name in dict.fromkeys([*wa, *wb])
        if wa.get(name) != wb.get(name)
    ]


@dataclass
class PointComparison:
    key: PointKey
    a: dict
    b: dict
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    ci_method: str = ""
    verdict: str = ""
    note: str = ""

    def to_json(self) -> dict:
        ci_low, ci_high = self.ci or (None, None)
        return {
            **key_dict(self.key),
            "per_device_batch": self.a.get("per_device_batch"),
            "status_a": self.a.get("status"),
            "status_b": self.b.get("status"),
            "throughput_a": num(self.a.get("throughput")),
            "throughput_b": num(self.b.get("throughput")),
            "ratio": self.ratio,
            "ci_low": ci_low,
            "ci_high": ci_high,
            "ci_method": self.ci_method or None,
            "verdict": self.verdict,
            "note": self.note or None,
            "point_id_a": self.a.get("point_id"),
            "point_id_b": self.b.get("point_id"),
        }


@dataclass
class Comparison:
    sweep_a: str
    sweep_b: str
    threshold: float
    points: list[PointComparison] = field(default_factory=list)
    only_a: list[PointKey] = field(default_factory=list)
    only_b: list[PointKey] = field(default_factory=list)
    differ: list[tuple[PointKey, PointKey, list[str]]] = field(default_factory=list)
    """Same strategy, N and nodes in A and B but another workload: (key A, key B, differing fields)."""
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[PointComparison]:
        return [p for p in self.points if p.verdict in ("regression", "failed in B")]

    @property
    def improvements(self) -> list[PointComparison]:
        return [p for p in self.points if p.verdict in ("improvement", "fixed in B")]

    def to_json(self) -> dict:
        return {
            "sweep_a": self.sweep_a,
            "sweep_b": self.sweep_b,
            "threshold": self.threshold,
            "regressions": len(self.regressions),
            "improvements": len(self.improvements),
            "points": [p.to_json() for p in self.points],
            "unmatched_a": [key_dict(k) for k in self.only_a],
            "unmatched_b": [key_dict(k) for k in self.only_b],
            "workloads_differ": [{"a": key_dict(a), "b": key_dict(b), "differences": d} for a, b, d in self.differ],
            "notes": self.notes,
        }

    def no_match_message(self) -> str:
        why = (
            f": their workloads differ ({'; '.join(self.differ[0][2])})"
            if self.differ
            else " (same strategy, N, nodes, batch size and workload)"
        )
        return f"no points of {self.sweep_a} and {self.sweep_b} match{why}: nothing to compare"


def _index(sweep: Sweep, side: str, notes: list[str]) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    repeated = set()
    for r in sweep.points:
        if is_comm(r):
            continue
        key = record_key(r)
        if key in out:
            repeated.add(key)
            # keep a successful point over a later unsuccessful repeat, else the later point
            if out[key].get("status") == "ok" and r.get("status") != "ok":
                continue
        out[key] = r
    notes += [
        f"{side} has several points for {key_label(k)}; the last successful one is used"
        for k in sorted(repeated, key=str)
    ]
    return out


def judge(ratio: float, ci: tuple[float, float] | None, threshold: float) -> str:
    """regression / improvement only when the CI excludes 1 and the change exceeds the threshold."""
    if ci is None:
        return "no CI"
    lo, hi = ci
    if lo <= 1 <= hi:
        return "within noise"
    if hi < 1 and 1 - ratio > threshold:
        return "regression"
    if lo > 1 and ratio - 1 > threshold:
        return "improvement"
    return "below threshold"


def compare_sweeps(sweep_a: Sweep, sweep_b: Sweep, *, threshold: float = 0.05, seed: int = 0) -> Comparison:
    result = Comparison(sweep_a=sweep_a.id, sweep_b=sweep_b.id, threshold=threshold)
    index_a = _index(sweep_a, "A", result.notes)
    index_b = _index(sweep_b, "B", result.notes)
    if any(is_comm(r) for r in sweep_a.points + sweep_b.points):
        result.notes.append("communication micro-benchmark records (comm-*) are not compared")
    for key in (k for k in index_a if k in index_b):
        a, b = index_a[key], index_b[key]
        pc = PointComparison(key=key, a=a, b=b)
        sa, sb = a.get("status"), b.get("status")
        thr_a, thr_b = num(a.get("throughput")), num(b.get("throughput"))
        if sa == "ok" and sb in BROKEN:
            pc.verdict, pc.note = "failed in B", f"{sb}: {b.get('reason') or 'no reason recorded'}"
        elif sa in BROKEN and sb == "ok":
            pc.verdict, pc.note = "fixed in B", f"was {sa} in A"
        elif sa != "ok" or sb != "ok":
            pc.verdict = "not measured"
            pc.note = "; ".join(
                f"{side}: {r.get('status')}" + (f" ({r.get('reason')})" if r.get("reason") else "")
                for side, r in (("A", a), ("B", b))
                if r.get("status") != "ok"
            )
        elif not thr_a or not thr_b:
            pc.verdict, pc.note = "no CI", "a throughput is missing"
        else:
            pc.ratio = thr_b / thr_a
            pc.ci, how = throughput_ratio_ci(sweep_a, a, sweep_b, b, seed=seed)
            pc.ci_method = how if pc.ci else ""
            pc.verdict = judge(pc.ratio, pc.ci, threshold)
            noisy = [side for side, r in (("A", a), ("B", b)) if r.get("noisy")]
            notes = [] if pc.ci else [f"{how}: not flagged"]
            if noisy:
                notes.append(f"flagged noisy in {' and '.join(noisy)}")
            pc.note = "; ".join(notes)
        result.points.append(pc)
    only_a = [k for k in index_a if k not in index_b]
    only_b = [k for k in index_b if k not in index_a]
    for ka in list(only_a):  # the same point measured on another workload: say what differs
        kb = next((k for k in only_b if k[:3] == ka[:3]), None)
        if kb is not None:
            result.differ.append((ka, kb, key_differences(ka, kb)))
            only_a.remove(ka)
            only_b.remove(kb)
    result.only_a, result.only_b = only_a, only_b
    return result


def comparison_table(result: Comparison) -> Table:
    columns = ["strategy", "N", "workload", "A\n(samples/s)", "B\n(samples/s)", "B/A", "95% CI", "verdict"]
    t = table(
        f"B = {result.sweep_b} vs A = {result.sweep_a} (threshold {result.threshold:.1%})",
        columns,
        right={"N", *columns[3:-1]},
    )
    workloads = [p.key[3:] for p in result.points]
    for p in result.points:
        verdict = f"[{VERDICT_STYLE.get(p.verdict, 'white')}]{p.verdict}[/]"
        if p.note:
            verdict += f" ({escape(p.note)})"
        t.add_row(
            escape(series_name(p.a)),
            str(p.key.world_size),
            escape(workload_label(p.key[3:], workloads)),
            fmt_num(p.a.get("throughput"), ".2f"),
            fmt_num(p.b.get("throughput"), ".2f"),
            fmt_num(p.ratio, ".3f"),
            f"{p.ci[0]:.3f}-{p.ci[1]:.3f}" if p.ci else "-",
            verdict,
        )
    return t


def gate(result: Comparison) -> None:
    """Raise RegressionFound (exit 1) when B regressed beyond the noise and the threshold, or broke a point."""
    if result.regressions:
        names = ", ".join(f"{series_name(p.a)} N={p.key.world_size}" for p in result.regressions)
        raise RegressionFound(
            f"{len(result.regressions)} regression(s) in {result.sweep_b} vs {result.sweep_a} "
            f"beyond the noise and the {result.threshold:.1%} threshold: {names}"
        )


def summary_lines(result: Comparison) -> list[str]:
    lines = [
        f"only in {side} (unmatched): {key_label(key)}"
        for side, keys in (("A", result.only_a), ("B", result.only_b))
        for key in keys
    ]
    lines += [f"not compared, the workloads differ: {key_label(ka)}: {'; '.join(d)}" for ka, _, d in result.differ]
    lines += [
        "compared workload: " + ", ".join(f"{k} {v}" for k, v in workload)
        for workload in dict.fromkeys(p.key.workload for p in result.points)
    ]
    lines += [f"note: {n}" for n in result.notes]
    n_reg, n_imp = len(result.regressions), len(result.improvements)
    lines.append(
        f"{n_reg} regression(s), {n_imp} improvement(s) beyond the noise and the {result.threshold:.1%} "
        f"threshold, over {len(result.points)} matched point(s)"
    )
    return lines

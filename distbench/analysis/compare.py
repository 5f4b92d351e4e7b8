"""Comparing two sweeps (another distbench version, another machine): throughput ratio B/A per point.

Points match when their whole point key (distbench.core.config.point_key) is equal. Two sweeps are separate runs,
so the noise that matters is run to run: each point's variance of log throughput comes from its repeats (R >= 2
on both sides: pooled over A's and B's, moderated across the points: distbench.results.gatestats), or from a
noise floor, an A/A pair of sweeps (`--noise-floor`; Welch where one side has repeats and the other the floor).
Each ratio gets a t on log throughput, a 95% CI and a p-value; regressions are one family, tested one-sided
with Holm across the points, improvements another. A change is flagged only when it survives the correction AND
is larger than the threshold; a point ok in A and broken in B is a regression too. Without repeats or a floor
the verdict is "not enough repeats to say", and a gate that could not judge a point exits 3 (Undecided). The
gate's family-wise false alarm and power: benchmarks/gate_power.py (tests/test_ci_coverage.py). Where B's run-to-run
noise differs from A's across the points (which the pooled t does not allow for), a note says so
(distbench.analysis.gatenotes).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

import numpy as np

from distbench.analysis import Sweep, is_comm, num, record_key, series_name, workload_label
from distbench.analysis.drift import drift_note
from distbench.analysis.gatenotes import unshared_noise
from distbench.analysis.output import table_width
from distbench.analysis.records import tokens_per_s
from distbench.core.config import PointKey
from distbench.core.errors import BadInput, DistbenchError
from distbench.results import gatestats, stats

BROKEN = ("failed", "timeout", "oom")

VERDICT_STYLE = {
    "regression": "bold red",
    "improvement": "green",
    "failed in B": "bold red",
    "fixed in B": "green",
    "within noise": "dim",
    "below threshold": "dim",
    "not enough repeats to say": "yellow",
    "no CI": "yellow",
    "not measured": "yellow",
}
NOT_ENOUGH = "not enough repeats to say"
CODE_VERDICT = {0: "within noise", -1: "regression", 1: "improvement", 2: "below threshold"}
FLOOR_FALSE_ALARM_MAX = 0.093
"""The highest family false alarm on a noise floor in benchmarks/gate_power.py's table (docs/benchmarks.md; a test
checks the two agree)."""
MODERATION_CAVEAT = (
    "judged at {how}: the run-to-run variances are moderated across the points, which assumes the points of a "
    "sweep share a noise level; on a noise floor the simulated family false alarm exceeds 5% "
    f"(up to {FLOOR_FALSE_ALARM_MAX:.0%}) where "
    "one point is much noisier than the rest or the run-to-run noise is skewed, and at R = 2 a 10% regression at "
    "3% run-to-run noise is caught in only a "
    "quarter to a half of comparisons (docs/benchmarks.md), so confirm a flagged point with --repeats 3 or more"
)
"""Said beside the verdict when a point was judged on 1 df per side (R = 2, or one run with a noise floor)."""


class RegressionFound(DistbenchError):
    """B regressed: one line on stderr, exit 1 (the CI-gate outcome)."""

    exit_code = 1


class Undecided(DistbenchError):
    """No regression found, but some points could not be judged (a gate must not pass them silently): one
    line on stderr, exit 3, unless --allow-undecided."""

    exit_code = 3


UNDECIDED_VERDICTS = (NOT_ENOUGH, "no CI", "not measured")
"""Verdicts that judge nothing: one run on a side and no floor, a missing throughput, a point skipped or
interrupted on a side (a point failed on both sides is a stable result, not undecided)."""


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
    seq = f" seq={w['seq_len']}" if w.get("seq_len") else ""
    return f"{key.strategy} N={key.world_size}{where} {w.get('model')} batch={key.batch}{seq} {w.get('scaling')}"


def _shown(value) -> str:
    return "not set" if value is None else str(value)


def key_differences(a: PointKey, b: PointKey) -> list[str]:
    """'precision fp32 in A, bf16 in B' for every field of the two keys' workloads (and batch) that differs."""
    wa, wb = {**dict(a.workload), "batch": a.batch}, {**dict(b.workload), "batch": b.batch}
    return [
        f"{name} {_shown(wa.get(name))} in A, {_shown(wb.get(name))} in B"
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
    p_value: float | None = None
    p_holm: float | None = None
    df: float | None = None
    repeats: tuple[int, int] = (1, 1)

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
            "p_value": self.p_value,
            "p_holm": self.p_holm,
            "df": self.df,
            "repeats_a": self.repeats[0],
            "repeats_b": self.repeats[1],
            "verdict": self.verdict,
            "note": self.note or None,
            "point_id_a": self.a.get("point_id"),
            "point_id_b": self.b.get("point_id"),
            # a token model's point: its throughputs in tokens/s too (samples/s x the sequence length)
            **(
                {"tokens_per_s_a": tokens_per_s(self.a), "tokens_per_s_b": tokens_per_s(self.b)}
                if (self.a.get("config") or {}).get("seq_len")
                else {}
            ),
        }


@dataclass
class Comparison:
    sweep_a: str
    sweep_b: str
    threshold: float
    noise_floor: str | None = None
    points: list[PointComparison] = field(default_factory=list)
    only_a: list[PointKey] = field(default_factory=list)
    only_b: list[PointKey] = field(default_factory=list)
    differ: list[tuple[PointKey, PointKey, list[str]]] = field(default_factory=list)
    """Same strategy, N and nodes in A and B but another workload: (key A, key B, differing fields)."""
    notes: list[str] = field(default_factory=list)
    noise_ratio: dict | None = None
    """B's run-to-run sd over A's across the points with repeats on both sides (gatestats.noise_ratio)."""
    level_simulated_apart: bool = False
    """A note says the simulated family false alarm of this kind of comparison is not the design's 5%."""

    def label(self, p: PointComparison) -> str:
        """The point's key as a label: strategy, N, model, scaling, batch, and every workload field that differs
        among the compared points (so no two points of the comparison read alike)."""
        return f"{series_name(p.a)} N={p.key.world_size} {workload_label(p.key[3:], [q.key[3:] for q in self.points])}"

    @property
    def regressions(self) -> list[PointComparison]:
        return [p for p in self.points if p.verdict in ("regression", "failed in B")]

    @property
    def undecided(self) -> list[str]:
        """What the gate could not judge, one label each: points whose verdict judges nothing (UNDECIDED_VERDICTS,
        except failed on both sides), unmatched points, and points measured on another workload."""
        out = [
            f"{self.label(p)} ({p.verdict})"
            for p in self.points
            if p.verdict in UNDECIDED_VERDICTS and not (p.a.get("status") in BROKEN and p.b.get("status") in BROKEN)
        ]
        out += [
            f"{key_label(k)} (only in {side})" for side, keys in (("A", self.only_a), ("B", self.only_b)) for k in keys
        ]
        return out + [f"{key_label(ka)} (workloads differ)" for ka, _, _ in self.differ]

    @property
    def improvements(self) -> list[PointComparison]:
        return [p for p in self.points if p.verdict in ("improvement", "fixed in B")]

    def to_json(self) -> dict:
        return {
            "sweep_a": self.sweep_a,
            "sweep_b": self.sweep_b,
            "threshold": self.threshold,
            "noise_floor": self.noise_floor,
            "alpha": gatestats.ALPHA,
            "regressions": len(self.regressions),
            "improvements": len(self.improvements),
            "undecided": self.undecided,
            "points": [p.to_json() for p in self.points],
            "unmatched_a": [key_dict(k) for k in self.only_a],
            "unmatched_b": [key_dict(k) for k in self.only_b],
            "workloads_differ": [{"a": key_dict(a), "b": key_dict(b), "differences": d} for a, b, d in self.differ],
            "notes": self.notes,
            "noise_ratio": self.noise_ratio,
        }

    def no_match_message(self) -> str:
        if self.differ:
            diffs = self.differ[0][2]
            why = f"the workloads differ: {'; '.join(diffs[:2])}" + (f" and {len(diffs) - 2} more" if diffs[2:] else "")
        else:
            why = "same strategy, N, nodes, batch size and workload"
        return f"nothing to compare: no point of B matches one of A ({why})"


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


def log_repeats(record: dict) -> list[float]:
    """Log throughput of each successful repeat of a point (its one throughput when it ran once)."""
    reps = [num(r.get("throughput")) for r in record.get("repeats") or [] if r.get("status", "ok") == "ok"]
    reps = [v for v in reps if v and v > 0]
    if len(reps) < 2:
        thr = num(record.get("throughput"))
        return [math.log(thr)] if thr and thr > 0 else []
    return [math.log(v) for v in reps]


def side_variances(logs: dict[tuple, list[float]]) -> dict[tuple, tuple[float, float]]:
    """Per point with R >= 2: (moderated run-to-run variance of log throughput, its df) across one sweep."""
    keys = [k for k, v in logs.items() if len(v) >= 2]
    if not keys:
        return {}
    var = np.array([np.var(logs[k], ddof=1) for k in keys])
    df = np.array([len(logs[k]) - 1 for k in keys], dtype=float)
    post, df_post, _, _ = gatestats.moderate(var, df)
    return {k: (float(v), float(d)) for k, v, d in zip(keys, post, df_post)}


def noise_floor(index_a: dict[tuple, dict], index_c: dict[tuple, dict]) -> tuple[dict, tuple | None]:
    """Run-to-run variance of log throughput per point from an A/A pair (A and C, a second run of A): the
    squared difference of the two runs' mean logs, d^2 / (1/R_a + 1/R_c), one df per point, moderated across
    the points; and (s0^2, df) for points the floor did not measure (None below 3 points)."""
    keys = [k for k in index_a if k in index_c and index_a[k].get("status") == index_c[k].get("status") == "ok"]
    logs = {k: (log_repeats(index_a[k]), log_repeats(index_c[k])) for k in keys}
    keys = [k for k in keys if logs[k][0] and logs[k][1]]
    if not keys:
        return {}, None
    var = np.array(
        [(np.mean(logs[k][1]) - np.mean(logs[k][0])) ** 2 / (1 / len(logs[k][0]) + 1 / len(logs[k][1])) for k in keys]
    )
    post, df_post, s0, d0 = gatestats.moderate(var, np.ones(len(keys)))
    prior = None
    if len(keys) >= 3:
        prior = (float(s0[0]), float(min(d0[0], len(keys))))
    return {k: (float(v), float(d)) for k, v, d in zip(keys, post, df_post)}, prior


def compare_sweeps(
    sweep_a: Sweep, sweep_b: Sweep, *, threshold: float = 0.05, floor: Sweep | None = None
) -> Comparison:
    """Match the points of A and B and judge each ratio B/A on run-to-run noise (module docstring).
    `floor`: a second run of A (an A/A pair) whose differences from A give the noise floor."""
    result = Comparison(sweep_a=sweep_a.id, sweep_b=sweep_b.id, threshold=threshold)
    index_a = _index(sweep_a, "A", result.notes)
    index_b = _index(sweep_b, "B", result.notes)
    floor_var, floor_prior = {}, None
    if floor is not None:
        result.noise_floor = floor.id
        floor_var, floor_prior = noise_floor(index_a, _index(floor, "the noise floor", result.notes))
        if not floor_var:
            result.notes.append(f"the noise floor {floor.id} shares no successful point with {sweep_a.id}: unused")
    drift = drift_note(sweep_a, sweep_b, index_a, index_b)
    if drift and floor is None:
        result.notes.append(drift)
    if any(is_comm(r) for r in sweep_a.points + sweep_b.points):
        result.notes.append("communication micro-benchmark records (comm-*) are not compared")
    tested: list[PointComparison] = []
    logs_a: dict[tuple, list[float]] = {}
    logs_b: dict[tuple, list[float]] = {}
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
            logs_a[key], logs_b[key] = log_repeats(a), log_repeats(b)
            pc.ratio = thr_b / thr_a
            pc.repeats = (len(logs_a[key]), len(logs_b[key]))
            tested.append(pc)
        result.points.append(pc)
    _judge(tested, logs_a, logs_b, floor_var, floor_prior, result)
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


def _judge(tested: list[PointComparison], logs_a, logs_b, floor_var, floor_prior, result: Comparison) -> None:
    """t per point on log throughput, Holm across the points (one-sided for regressions): with repeats on both
    sides the point's variance pooled over them, else each side's own (repeats, or the noise floor), Welch."""
    both = gatestats.pooled_variances(logs_a, logs_b)
    result.noise_ratio, note = unshared_noise(logs_a, logs_b)
    if note:
        result.notes.append(note)
        result.level_simulated_apart = True
    var_a, var_b = side_variances(logs_a), side_variances(logs_b)

    def side(var: dict, key: tuple) -> tuple:
        if key in var:
            return (*var[key], "repeats")
        got = floor_var.get(key) or floor_prior
        return (*got, "noise floor") if got else (None, None, "")

    rows, weak = [], set()
    for pc in tested:
        (va, da, how_a), (vb, db, how_b) = side(var_a, pc.key), side(var_b, pc.key)
        if va is None or vb is None:
            rows.append((math.nan, math.nan, math.nan))
            need = " and ".join(name for name, v in (("A", va), ("B", vb)) if v is None)
            pc.verdict = NOT_ENOUGH
            pc.note = f"fewer than 2 successful repeats in {need}"  # the summary line says what would do
            continue
        ra, rb = len(logs_a[pc.key]), len(logs_b[pc.key])
        weak.update(
            "R = 1 with a noise floor" if how == "noise floor" else "R = 2"
            for how, r in ((how_a, ra), (how_b, rb))
            if how == "noise floor" or r == 2
        )
        shared = how_a == how_b == "noise floor"
        if pc.key in both:
            v, df = both[pc.key]
            d, se = np.mean(logs_b[pc.key]) - np.mean(logs_a[pc.key]), math.sqrt(v * (1 / ra + 1 / rb))
            test = "t on log throughput, the variance pooled over A's and B's repeats"
        else:
            d, se, df = gatestats.welch(
                np.mean(logs_a[pc.key]), va, ra, da, np.mean(logs_b[pc.key]), vb, rb, db, shared=shared
            )
            test = "t on log throughput, one noise floor for both" if shared else "Welch t on log throughput"
        rows.append((float(d), float(se), float(df)))
        pc.df = float(df)
        hw = stats.t_crit(max(1, min(gatestats.DF_MAX, math.floor(df + 1e-9)))) * float(se)
        pc.ci = (math.exp(d - hw), math.exp(d + hw))
        pc.ratio = math.exp(d)  # of the geometric means (the records' throughput at R >= 2)
        pc.ci_method = (
            f"{test}, R={ra} ({how_a}) vs R={rb} ({how_b}), df {df:.1f}; Holm over the points, one-sided for "
            "regressions"
        )
    if not rows:
        return
    if weak and sum(not math.isnan(row[1]) for row in rows) >= 3:  # moderation needs 3 points
        result.notes.append(MODERATION_CAVEAT.format(how=" and ".join(sorted(weak))))
        result.level_simulated_apart |= "R = 1 with a noise floor" in weak
    d, se, df = (np.array(col) for col in zip(*rows))
    p, adj, code = gatestats.verdict_codes(d, se, df, result.threshold)
    for pc, pv, pa, c in zip(tested, p, adj, code):
        if math.isnan(c):
            continue
        pc.p_value, pc.p_holm, pc.verdict = float(pv), float(pa), CODE_VERDICT[int(c)]
        notes = [f"flagged noisy in {side}" for side, r in (("A", pc.a), ("B", pc.b)) if r.get("noisy")]
        pc.note = "; ".join(notes)


def gate(result: Comparison, *, allow_undecided: bool = False) -> None:
    """Raise RegressionFound (exit 1) when B regressed beyond the run-to-run noise (Holm-corrected) and the
    threshold, or broke a point; else Undecided (exit 3) when some point could not be judged (Comparison.
    undecided), unless `allow_undecided`."""
    if result.regressions:
        names = ", ".join(result.label(p) for p in result.regressions)
        raise RegressionFound(
            f"{len(result.regressions)} regression(s) in {result.sweep_b} vs {result.sweep_a} "
            f"beyond the run-to-run noise and the {result.threshold:.1%} threshold: {names}"
        )
    if result.undecided and not allow_undecided:
        head = f"no regression found, but {len(result.undecided)} point(s) could not be judged"
        listed, width = f"{head}: {'; '.join(result.undecided)}; --allow-undecided accepts this", table_width()
        short = f"{head} (their verdicts above); --allow-undecided accepts this"
        raise Undecided(textwrap.fill(listed if len(listed) <= width else short, width))


def summary_lines(result: Comparison) -> list[str]:
    lines = [
        f"only in {side} (unmatched): {key_label(key)}"
        for side, keys in (("A", result.only_a), ("B", result.only_b))
        for key in keys
    ]
    lines += [f"not compared, the workloads differ: {key_label(ka)}: {'; '.join(d)}" for ka, _, d in result.differ]
    lines += [
        "compared workload: " + ", ".join(f"{k} {v}" for k, v in workload if v is not None)
        for workload in dict.fromkeys(p.key.workload for p in result.points)
    ]
    lines += [f"note: {n}" for n in result.notes]
    n_reg, n_imp = len(result.regressions), len(result.improvements)
    tested = [p for p in result.points if p.p_value is not None]
    unknown = sum(p.verdict == NOT_ENOUGH for p in result.points)
    floor = f", noise floor from {result.noise_floor} (A/A)" if result.noise_floor else ""
    design = " (the design level; see the notes)" if result.level_simulated_apart else ""
    lines.append(
        f"run-to-run noise: t on log throughput, Holm over {len(tested)} tested point(s) (one-sided for regressions) "
        f"at a family-wise {gatestats.ALPHA:.0%}{design}{floor}"
    )
    if unknown:
        lines.append(
            f"{unknown} point(s) with fewer than 2 successful repeats on a side: {NOT_ENOUGH} "
            "(--repeats 2+ or --noise-floor)"
        )
    lines.append(
        f"{n_reg} regression(s), {n_imp} improvement(s) beyond the run-to-run noise and the {result.threshold:.1%} "
        f"threshold, over {len(result.points)} matched point(s)"
    )
    return lines

"""Reading a sweep back from the results store, and the analysis the report, `results` and `compare` share.

Everything here works on the stored result records (`points.record_json`) plus the per-step samples
(`steps` table); it never re-measures. Optional record fields (CIs, `noisy`, communication and
input-pipeline measurements, `telemetry`) are used when present; without them the analysis says what
it cannot tell instead of guessing.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from distbench.config import PointKey, is_per_core_baseline, point_key
from distbench import split, stats
from distbench.errors import BadInput
from distbench.store import Store
from distbench.strategies import FRAMEWORK_BASELINE, STRATEGIES

EFFICIENCY_TARGET = 0.80
"""Efficiency below this is reported as 'scaling drops'."""
CV_NOISY = 0.10
"""Step-time coefficient of variation above which a point counts as noisy (when the record has no `noisy`)."""
COMM_LARGE = 0.20
DRIFT_FLAG = 0.10
"""|closing A / first A - 1| above which the split's summary line says the machine's pace moved in the point."""
"""comm_overhead (exposed communication / step time) at or above which communication is named as the limit."""
DATA_WAIT_LARGE = 0.10
"""data_wait_fraction at or above which the input pipeline is named as the limit."""
SUPERLINEAR = 1.10
"""Efficiency above this is called out as implausible for the same per-device work (weak scaling)."""
Z95 = 1.959963984540054  # two-sided 95% normal quantile


# -- opening the store and finding a sweep
def open_store(path: str | os.PathLike) -> Store:
    """Open an existing store for reading; a missing file is an error here (reading must not create one)."""
    path = Path(path)
    if not path.exists():
        raise BadInput(f"no results store at {path} (run `distbench scale` first, or pass --results PATH)")
    if path.is_dir():
        raise BadInput(f"{path} is a folder, not a results store (pass the .db file to --results)")
    return Store(path)


def list_sweeps(store: Store, limit: int = 20) -> list[dict]:
    """Recent sweeps, newest first, with their point counts (ok and total)."""
    return store.sweeps_with_counts(limit)


def resolve_sweep_id(store: Store, sweep: str) -> str:
    """'latest' -> the newest sweep's id; an unknown id -> BadInput listing recent ids (from Store.sweep)."""
    if sweep == "latest":
        recent = store.sweeps(1)
        if not recent:
            raise BadInput(f"{store.path} has no sweeps yet (run `distbench scale` first)")
        return recent[0]["id"]
    return store.sweep(sweep)["id"]


# -- the loaded sweep
@dataclass
class Sweep:
    """One sweep as stored: its row (env/options/notes parsed) and its points, each with `point_id`."""

    info: dict
    points: list[dict]
    steps: dict[int, list[float]] = field(default_factory=dict)
    store_path: str = ""

    @property
    def id(self) -> str:
        return self.info["id"]

    def step_times(self, record: dict) -> list[float]:
        """Per-step samples from the `steps` table, falling back to the record's own list."""
        times = self.steps.get(record.get("point_id"))
        return list(times) if times else list(record.get("step_times_s") or [])

    @property
    def scaling_points(self) -> list[dict]:
        """Successful training points (no comm micro-benchmarks or per-core baselines)."""
        return [r for r in self.points if r.get("status") == "ok" and not is_comm(r) and not is_per_core_baseline(r)]

    @property
    def comm_points(self) -> list[dict]:
        return [r for r in self.points if r.get("status") == "ok" and is_comm(r)]

    @property
    def problem_points(self) -> list[dict]:
        """Points that did not produce a measurement: skipped, failed, timeout, oom."""
        return [r for r in self.points if r.get("status") != "ok"]

    @property
    def cpu_workers(self) -> bool:
        return any(r.get("device") == "cpu" for r in self.points)


def _loads(text: str | None, default):
    try:
        return json.loads(text) if text else default
    except ValueError:
        return default


def load_sweep(store: Store, sweep: str) -> Sweep:
    """Load a sweep (id or 'latest') with every point's record and per-step samples."""
    sweep_id = resolve_sweep_id(store, sweep)
    info = dict(store.sweep(sweep_id))
    for key, default in (("env", {}), ("options", {}), ("notes", [])):
        info[key] = _loads(info.pop(f"{key}_json", None), default)
    points = store.points(sweep_id)
    for record in points:
        record.setdefault("sweep_id", sweep_id)
    steps = store.sweep_steps(sweep_id)
    return Sweep(info=info, points=points, steps=steps, store_path=str(store.path))


# -- small record helpers
def num(value) -> float | None:
    """A finite float, or None (for missing, NaN, non-numeric and boolean values)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def is_comm(record: dict) -> bool:
    """A communication micro-benchmark record (`distbench comm`), not a training point."""
    return str(record.get("strategy", "")).startswith("comm") or "busbw_gbps" in record


def is_baseline(record: dict) -> bool:
    strategy = STRATEGIES.get(str(record.get("strategy")))
    return bool(strategy and strategy.baseline)


def throughput_ci(record: dict) -> tuple[float, float] | None:
    """The record's own 95% CI of throughput, when it has a sane one."""
    lo, hi = num(record.get("throughput_ci_low")), num(record.get("throughput_ci_high"))
    if lo is None or hi is None or lo <= 0 or hi < lo:
        return None
    return lo, hi


def scaled_ci(record: dict, value_key: str, baseline: dict | None = None) -> tuple[float, float] | None:
    """95% CI of speedup or efficiency. With the baseline's CI too, both are combined on the log scale
    (speedup = throughput / baseline throughput); else only the point's own throughput CI is used."""
    ci, value, estimate = throughput_ci(record), num(record.get(value_key)), num(record.get("throughput"))
    if ci is None or value is None or not estimate:
        return None
    base_ci = throughput_ci(baseline) if baseline and baseline is not record else None
    base_thr = num(baseline.get("throughput")) if baseline else None
    if base_ci and base_thr:
        ci = ratio_ci_from_cis(base_thr, base_ci, estimate, ci)
        estimate /= base_thr
    # the value scales with the estimate (throughput, or speedup when the baseline is included)
    return value * ci[0] / estimate, value * ci[1] / estimate


def baseline_for(record: dict, points: Iterable[dict]) -> dict | None:
    """The (last) successful single-device baseline of the record's framework and workload, if measured."""
    return next(
        (
            r
            for r in reversed(list(points))
            if is_baseline(r)
            and r.get("status") == "ok"
            and r.get("framework") == record.get("framework")
            and workload_key(r) == workload_key(record)
        ),
        None,
    )


def is_noisy(record: dict) -> bool:
    """Flagged `noisy` by the measurement, or (when the record has no flag) step-time CV above CV_NOISY."""
    if record.get("noisy") is not None:
        return bool(record["noisy"])
    cv = num(record.get("step_time_cv"))
    return cv is not None and cv > CV_NOISY


def record_key(record: dict) -> PointKey:
    return point_key(record.get("strategy"), record.get("config") or record)


def workload_key(record: dict) -> tuple:
    """Everything but strategy, N and nodes: points with equal keys lie on one set of scaling curves."""
    key = record_key(record)
    return key.workload, key.batch


def workload_label(key: tuple, among: Iterable[tuple] = ()) -> str:
    """'resnet50 (weak scaling, batch 8)', plus every other workload field whose value differs among
    the keys in `among` (e.g. 'precision bf16'), so groups that differ only there are told apart."""
    workload, batch = key
    fields = dict(workload)
    others = [dict(w) for w, _ in among]
    details = [f"{fields['scaling']} scaling"] if fields.get("scaling") else []
    details += [f"batch {batch}"] if batch else []
    details += [
        f"{name} {value}"
        for name, value in workload
        if name not in ("model", "scaling") and any(o.get(name) != value for o in others)
    ]
    model = fields.get("model")
    return f"{model} ({', '.join(details)})" if details else str(model)


def series_name(record: dict) -> str:
    """A strategy's curve: 'ddp', or 'ddp (2 nodes)' for its points spread over 2 nodes."""
    nodes = int(record.get("nodes") or (record.get("config") or {}).get("nodes") or 1)
    threads = (record.get("config") or {}).get("baseline_threads")
    return (
        str(record.get("strategy"))
        + (f" ({nodes} nodes)" if nodes > 1 else "")
        + (f" ({threads} thread{'s' if threads != 1 else ''}, per-core reference)" if threads else "")
        + (" (fp16 weights and communication)" if record.get("precision_note") else "")  # deepspeed amp
    )


def point_name(record: dict) -> str:
    return f"{series_name(record)} N={record.get('world_size')}"


def group_by_workload(points: Iterable[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for r in points:
        groups.setdefault(workload_key(r), []).append(r)
    return groups


def by_strategy(points: Iterable[dict]) -> dict[str, list[dict]]:
    """series_name (strategy, with its node count when > 1) -> its points sorted by N. The points
    should share one workload (group_by_workload); at a repeated N the later point wins."""
    out: dict[str, dict[int, dict]] = {}
    for r in points:
        out.setdefault(series_name(r), {})[int(r.get("world_size") or 0)] = r
    return {s: [pts[n] for n in sorted(pts)] for s, pts in out.items()}


def device_word(points: Sequence[dict]) -> str:
    return "CPU workers" if any(r.get("device") == "cpu" for r in points) else "GPUs"


# -- CIs from step times and ratio CIs
def steps_throughput_ci(step_times_s: Sequence[float], throughput: float) -> tuple[float, float]:
    """Within-run 95% CI of a record's throughput from its step times (batch means,
    stats.step_time_ci), for records that carry no CI of their own."""
    times = list(step_times_s)
    ci = stats.step_time_ci(times) if times and min(times) > 0 else None
    if ci is None and len(times) >= stats.MIN_CI_STEPS:
        raise ValueError("no within-run CI: the batch means stay autocorrelated")
    if ci is None:
        raise ValueError(f"too few steps ({len(times)} < {stats.MIN_CI_STEPS})")
    lo, hi = stats.rate_ci(throughput, ci["rel_half_width"])
    if hi is None:
        raise ValueError("a CI wider than the estimate")
    return lo, hi


def log_se(ci: tuple[float, float], df: float | None = None) -> float:
    """Standard error on the log scale of a value with this 95% CI: a t-interval with `df` degrees of
    freedom (a normal one when df is None)."""
    crit = stats.t_crit(max(1, math.floor(df + 1e-9))) if df else Z95
    return (math.log(ci[1]) - math.log(ci[0])) / (2 * crit)


def ci_df(record: dict) -> int | None:
    """Degrees of freedom of the record's own throughput CI: R - 1 for a t-interval over R repeats, else None
    (a within-run CI's df is not stored; it is taken as normal)."""
    reps = [r for r in record.get("repeats") or [] if r.get("status", "ok") == "ok"]
    return len(reps) - 1 if len(reps) >= 2 and str(record.get("ci_scope") or "").startswith("run-to-run") else None


def ratio_ci_from_cis(
    a: float,
    ci_a: tuple[float, float],
    b: float,
    ci_b: tuple[float, float],
    df_a: float | None = None,
    df_b: float | None = None,
) -> tuple[float, float]:
    """CI of b/a from each side's 95% CI, combined on the log scale (delta method, independent sides); a
    side's CI with df degrees of freedom is a t-interval, and the two combine with Welch-Satterthwaite df."""
    se_a, se_b = log_se(ci_a, df_a), log_se(ci_b, df_b)
    se = math.hypot(se_a, se_b)
    r = math.log(b / a)
    if se == 0 or not (df_a or df_b):
        return math.exp(r - Z95 * se), math.exp(r + Z95 * se)
    df = se**4 / sum(s**4 / d for s, d in ((se_a, df_a), (se_b, df_b)) if d and s > 0)
    crit = stats.t_crit(max(1, math.floor(df + 1e-9)))
    return math.exp(r - crit * se), math.exp(r + crit * se)


def throughput_ratio_ci(sweep_a: "Sweep", a: dict, sweep_b: "Sweep", b: dict) -> tuple[tuple[float, float] | None, str]:
    """CI of throughput(b) / throughput(a) and how it was obtained ('records': both records' CIs,
    'batch means': both from step times, 'mixed'), or (None, why not)."""
    thr_a, thr_b = num(a.get("throughput")), num(b.get("throughput"))
    if not thr_a or not thr_b:
        return None, "no throughput"
    ci_a, ci_b = throughput_ci(a), throughput_ci(b)
    how = "records" if ci_a and ci_b else "mixed" if ci_a or ci_b else "batch means"
    df_a, df_b = ci_df(a) if ci_a else None, ci_df(b) if ci_b else None
    try:
        ci_a = ci_a or steps_throughput_ci(sweep_a.step_times(a), thr_a)
        ci_b = ci_b or steps_throughput_ci(sweep_b.step_times(b), thr_b)
    except ValueError as exc:
        return None, str(exc)
    return ratio_ci_from_cis(thr_a, ci_a, thr_b, ci_b, df_a, df_b), how


# -- findings for the summary
@dataclass
class Summary:
    """What the sweep shows, as plain-text sentences grouped by topic (renderers escape them)."""

    best: list[str] = field(default_factory=list)
    drops: list[str] = field(default_factory=list)
    wrapper: list[str] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def sections(self) -> list[tuple[str, list[str]]]:
        titled = (
            ("Which strategy scales best", self.best),
            (f"Where efficiency drops below {EFFICIENCY_TARGET:.0%}", self.drops),
            ("1-device wrapper cost", self.wrapper),
            ("What limited scaling", self.limits),
            ("Where the step goes: compute, straggler wait, communication", self.steps),
            ("Notes", self.notes),
        )
        return [(title, lines) for title, lines in titled if lines]


def best_strategy(points: Sequence[dict], sweep: "Sweep | None" = None) -> dict | None:
    """Highest efficiency at the largest N measured (non-baseline strategies with a known efficiency).

    None without such strategies. 'ranking' holds (strategy, efficiency, record) at n, best first; 'tied' the
    strategies not distinguishable from the best at 95%, 'undecided' those with no CI to tell, 'within_run_only'
    those the best beats only beyond the within-run noise (a point ran once: no run-to-run CI, and two points
    are separate runs), 'missing' those measured elsewhere but not at n.
    """
    strategy_points = [r for r in points if not is_baseline(r) and not is_comm(r)]
    candidates = [r for r in strategy_points if num(r.get("efficiency")) is not None]
    if not candidates:
        return None
    n_max = max(int(r["world_size"]) for r in candidates)
    at_n = by_strategy(r for r in candidates if int(r["world_size"]) == n_max)
    ranking = sorted(((s, num(pts[-1]["efficiency"]), pts[-1]) for s, pts in at_n.items()), key=lambda t: -t[1])
    best_s, best_e, best_r = ranking[0]
    tied, undecided, within_run_only = [], [], []
    for s, e, r in ranking[1:]:
        ci = efficiency_ratio_ci(best_r, r, sweep)
        if ci is None:
            undecided.append(s)
        elif ci[1] >= 1:
            tied.append(s)
        elif not (ci_df(best_r) and ci_df(r)):
            within_run_only.append(s)
    measured = {series_name(r) for r in strategy_points}
    return {
        "n": n_max,
        "best": best_s,
        "efficiency": best_e,
        "record": best_r,
        "ranking": ranking,
        "tied": tied,
        "undecided": undecided,
        "within_run_only": within_run_only,
        "missing": sorted(measured - set(at_n)),
    }


def efficiency_ratio_ci(best: dict, other: dict, sweep: "Sweep | None") -> tuple[float, float] | None:
    """95% CI of efficiency(other) / efficiency(best) at the same N, from the throughput ratio's CI
    (records' CIs or batch means over step times); the baselines' uncertainty is not included."""
    thr_b, thr_o = num(best.get("throughput")), num(other.get("throughput"))
    eff_b, eff_o = num(best.get("efficiency")), num(other.get("efficiency"))
    if not (thr_b and thr_o and eff_b and eff_o):
        return None
    if sweep is None:
        ci_b, ci_o = throughput_ci(best), throughput_ci(other)
        ci = ratio_ci_from_cis(thr_b, ci_b, thr_o, ci_o) if ci_b and ci_o else None
    else:
        ci, _ = throughput_ratio_ci(sweep, best, sweep, other)
    if ci is None:
        return None
    scale = (eff_o / thr_o) / (eff_b / thr_b)  # baseline ratio when the frameworks differ, else 1
    return ci[0] * scale, ci[1] * scale


def efficiency_drop(points: Sequence[dict]) -> dict | None:
    """For one strategy's points (sorted by N): the smallest N with efficiency below EFFICIENCY_TARGET."""
    known = [r for r in points if num(r.get("efficiency")) is not None]
    if not known:
        return None
    below = [r for r in known if num(r["efficiency"]) < EFFICIENCY_TARGET]
    return {
        "below_at": int(below[0]["world_size"]) if below else None,
        "efficiency": num(below[0]["efficiency"]) if below else None,
        "largest_n": int(known[-1]["world_size"]),
        "largest_efficiency": num(known[-1]["efficiency"]),
    }


def limiting_factors(record: dict) -> tuple[list[str], list[str]]:
    """(causes the record's measurements show, measurements it lacks) for one point."""
    causes, missing = [], []
    n = record.get("world_size")
    parts = record.get("comm_split") or {}
    comm = num(parts.get("communication_share")) if parts else num(record.get("comm_overhead"))
    what = "communication" if parts else "exposed communication"
    if comm is None:
        missing.append("communication")
    elif comm >= COMM_LARGE:
        causes.append(f"communication ({what} is {comm:.0%} of the step at N={n})")
    causes.extend(wait_causes(record, n))
    wait = num(record.get("data_wait_fraction"))
    if wait is None:
        missing.append("input-pipeline")
    elif wait >= DATA_WAIT_LARGE:
        causes.append(f"input pipeline (workers wait for data {wait:.0%} of the step at N={n})")
    if is_noisy(record):
        cv = num(record.get("step_time_cv"))
        flag = "flagged noisy" if record.get("noisy") else "noisy"
        detail = f", step-time CV {cv:.0%}" if cv is not None else ""
        causes.append(f"noise (the N={n} point is {flag}{detail}: its efficiency is uncertain)")
    return causes, missing


def summarize(sweep: Sweep) -> Summary:
    summary = Summary()
    groups = group_by_workload(sweep.scaling_points)
    multi = len(groups) > 1
    for key, points in groups.items():
        prefix = f"{workload_label(key, groups)}: " if multi else ""
        _summarize_group(sweep, points, prefix, summary)
    if not groups:
        summary.notes.append("The sweep has no successful training points, so nothing about scaling can be said.")
    if sweep.cpu_workers:
        summary.notes.append(
            "Measured on CPU workers, not GPUs: the workers share the machine's cores, so these "
            "numbers describe CPU behaviour and say little about GPU scaling."
        )
    noisy = [r for r in sweep.scaling_points if is_noisy(r)]
    if noisy:
        names = ", ".join(point_name(r) for r in noisy)
        summary.notes.append(
            f"{len(noisy)} point(s) are noisy (flagged, or step-time CV above {CV_NOISY:.0%}): "
            f"{names}. Differences smaller than their spread are not meaningful."
        )
    for base in filter(is_baseline, noisy):
        cv = num(base.get("step_time_cv"))
        summary.notes.append(
            f"The {base['strategy']!r} baseline is noisy"
            + (f" (step-time CV {cv:.0%})" if cv is not None else "")
            + f": every {base['framework']} speedup and efficiency is divided by it and "
            "inherits that uncertainty."
        )
    superlinear = [
        r for r in sweep.scaling_points if (num(r.get("efficiency")) or 0) > SUPERLINEAR and not is_baseline(r)
    ]
    if superlinear:
        names = ", ".join(f"{point_name(r)} ({num(r['efficiency']):.0%})" for r in superlinear)
        summary.notes.append(
            f"Efficiency above {SUPERLINEAR:.0%} ({names}) is more than linear scaling allows "
            "for the same per-device work; it usually means the baseline ran slower than it "
            "should (e.g. other load on the machine), not that the strategy is that good. "
            "Re-measure before relying on it."
        )
    unlike = [r for r in sweep.scaling_points if r.get("precision_note")]
    if unlike:
        names = ", ".join(point_name(r) for r in unlike)
        summary.notes.append(f"{names}: {unlike[0]['precision_note']}; compare their numbers with that in mind.")
    if sweep.problem_points:
        summary.notes.append(
            f"{len(sweep.problem_points)} point(s) did not produce a measurement (listed with their reasons below)."
        )
    return summary


def _summarize_group(sweep: Sweep, points: list[dict], prefix: str, summary: Summary) -> None:
    summary.best.append(prefix + _best_line(sweep, points))
    baselines = {r["framework"]: r for r in points if is_baseline(r)}
    for strategy, pts in by_strategy(r for r in points if not is_baseline(r)).items():
        name = prefix + strategy
        summary.drops.append(_drop_line(name, efficiency_drop(pts)))
        one = next((r for r in pts if int(r["world_size"]) == 1), None)
        if one is not None:
            summary.wrapper.append(_wrapper_line(name, sweep, one, baselines.get(one.get("framework"))))
        limit = _limit_line(name, pts, baselines)
        if limit:
            summary.limits.append(limit)
    summary.steps.extend(prefix + line for line in split_lines(points))


def wait_causes(record: dict, n) -> list[str]:
    """The split's straggler-wait term as limiting factors. The term also holds the latency of meeting once
    per step (the tiny collective's), which at short steps can be most of it: where the record has per-rank
    step times, the ranks' jitter at their own pace (stragglers.jitter_wait_s) is named stragglers and the
    rest synchronization latency; without them (mirrored: one process) the term is named as both."""
    parts = record.get("comm_split") or {}
    wait, step = num(parts.get("wait_share")), num(parts.get("step_s"))
    jitter = num((record.get("stragglers") or {}).get("jitter_wait_s"))
    if wait is None or wait < COMM_LARGE:
        return []
    if jitter is None or not step:
        return [
            f"stragglers or synchronization latency (the straggler wait term, the slowest rank plus one few-byte "
            f"collective's latency per step, is {wait:.0%} of the step at N={n})"
        ]
    out, strag = [], jitter / step
    if strag >= COMM_LARGE:
        out.append(f"stragglers (the ranks' step-to-step jitter costs {strag:.0%} of the step at N={n})")
    if wait - strag >= COMM_LARGE:
        out.append(
            f"synchronization latency (meeting once per step, one few-byte collective, is {wait - strag:.0%} of "
            f"the step at N={n}, beyond the stragglers' {strag:.0%})"
        )
    return out


def split_lines(records: Iterable[dict]) -> list[str]:
    """Per successful point at N > 1: where its step goes (distbench.split: compute, straggler wait and
    communication, each with its CI; the rank that was slowest most often), or why it has no such split."""
    out = []
    for r in records:
        if r.get("status") != "ok" or int(r.get("world_size") or 1) < 2:
            continue
        line = split.split_line(r)
        if line:
            parts = r["comm_split"]
            cis = any(parts.get(f"{k}_ci") for k in ("compute", "wait", "communication"))
            out.append(f"{point_name(r)}: {line} ({'95% CIs, ' if cis else ''}{parts['ci_scope']}).")
            after = num(r.get("sync_after_variant_ratio"))
            if after is not None and abs(after - 1) > DRIFT_FLAG:
                out[-1] += (
                    f" The real step after its variants ran at {after:.2f}x its first throughput: the machine's pace "
                    "moved within the point; A T B T A cancels a steady trend, not this."
                )
        elif r.get("comm_note") or r.get("split_note"):
            out.append(f"{point_name(r)}: no three-term split: {r.get('comm_note') or r.get('split_note')}.")
    return out


def _best_line(sweep: Sweep, points: list[dict]) -> str:
    best = best_strategy(points, sweep)
    if best is None:
        return (
            "No strategy has a known efficiency (no successful single-device baseline "
            "in this sweep), so scaling is not assessed."
        )
    if best["n"] == 1:
        return "Only N=1 was measured, so scaling is not assessed."
    line = f"{best['best']} scales best: {best['efficiency']:.0%} efficiency at N={best['n']}, the largest N measured"
    others = [f"{s} {e:.0%}" for s, e, _ in best["ranking"][1:]]
    line += (
        f" (then {', '.join(others)})." if others else ". It is the only strategy with a successful point at that N."
    )
    if best["tied"]:
        line += (
            f" {', '.join(best['tied'])} {'is' if len(best['tied']) == 1 else 'are'} within the 95% CI "
            "of it, so the ranking between them is not settled by these measurements."
        )
    if best["undecided"]:
        steps = min(len(sweep.step_times(r)) for _, _, r in best["ranking"])
        line += (
            f" Whether it beats {', '.join(best['undecided'])} is not settled: there is no CI "
            f"(records without CIs and {steps} step(s) per point, fewer than {stats.MIN_CI_STEPS} "
            "for a within-run CI)."
        )
    if best["within_run_only"]:
        line += (
            f" Its lead over {', '.join(best['within_run_only'])} is beyond the within-run noise only: a point ran "
            "once, and separate runs differ by more (--repeats 2 or more measures that)."
        )
    if is_noisy(best["record"]):
        line += " That point is noisy."
    if best["missing"]:
        line += f" No successful point at N={best['n']} for: {', '.join(best['missing'])}."
    return line


def _drop_line(name: str, drop: dict | None) -> str:
    target = f"{EFFICIENCY_TARGET:.0%}"
    if drop is None:
        return f"{name}: efficiency unknown (no successful baseline)."
    if drop["below_at"] is None:
        return (
            f"{name}: at or above {target} at every measured N "
            f"(up to N={drop['largest_n']}, {drop['largest_efficiency']:.0%})."
        )
    if drop["below_at"] == 1:
        return (
            f"{name}: already below {target} at N=1 ({drop['efficiency']:.0%}): the 1-device wrapper cost "
            f"alone; {drop['largest_efficiency']:.0%} at N={drop['largest_n']}."
        )
    return f"{name}: drops below {target} at N={drop['below_at']} ({drop['efficiency']:.0%})."


def _wrapper_line(name: str, sweep: Sweep, one: dict, base: dict | None) -> str:
    base_name = FRAMEWORK_BASELINE.get(one.get("framework"), "baseline")
    cost = num(one.get("wrapper_overhead"))
    if cost is None or base is None:
        return f"{name}: unknown (no successful {base_name!r} baseline in this sweep)."
    line = f"{name} at N=1 is {abs(cost):.1%} {'slower' if cost >= 0 else 'faster'} than the plain {base_name!r} loop"
    ci, how = throughput_ratio_ci(sweep, base, sweep, one)
    if ci is None:
        return f"{line} (no CI: {how})."
    lo, hi = 1 - ci[1], 1 - ci[0]
    noise = ": within the measurement noise." if lo <= 0 <= hi else "."
    if noise == "." and not (ci_df(base) and ci_df(one)):
        noise = ": beyond the within-run noise only (one run each; --repeats 2 or more for the run-to-run noise)."
    return f"{line} (95% CI of the cost {lo:+.1%} to {hi:+.1%}){noise}"


def _limit_line(name: str, points: list[dict], baselines: dict[str, dict]) -> str | None:
    """What limited the strategy at its largest N below EFFICIENCY_TARGET (None: no efficiency at N > 1)."""

    multi = [r for r in points if int(r["world_size"]) > 1 and num(r.get("efficiency")) is not None]
    if not multi:
        return None
    below = [r for r in multi if num(r["efficiency"]) < EFFICIENCY_TARGET]
    if not below:
        return (
            f"{name}: no limit within the measured range (efficiency at or above "
            f"{EFFICIENCY_TARGET:.0%} up to N={multi[-1]['world_size']})."
        )
    last = below[-1]
    causes, missing = limiting_factors(last)
    if causes:
        line = f"{name}: {'; '.join(causes)}."
    else:
        why = (
            f"the records carry no {' or '.join(missing)} measurements"
            if missing
            else "communication and input-pipeline measurements are below their thresholds"
        )
        line = f"{name}: not determined from these measurements ({why})."
    shared = shared_cores_note(last, baselines.get(last.get("framework")))
    return f"{line} {shared}" if shared else line


def shared_cores_note(record: dict, baseline: dict | None) -> str | None:
    """On CPU workers, a fact from the configs: did N workers get more CPU threads in total than the baseline?"""
    if record.get("device") != "cpu" or not baseline:
        return None
    n = int(record.get("world_size") or 0)
    tpw = num((record.get("config") or {}).get("threads_per_worker"))
    base_tpw = num((baseline.get("config") or {}).get("threads_per_worker"))
    if not tpw or not base_tpw or tpw * n > base_tpw:
        return None
    return (
        f"On CPU workers the N={n} workers ran {tpw:g} thread(s) each ({tpw * n:g} in total) where the "
        f"baseline ran {base_tpw:g}: they split the same cores, so little or no speedup is expected here."
    )


# -- capacity planning
@dataclass
class CapacityRow:
    workload: str
    strategy: str
    measured: list[tuple[int, float]]
    """(N, throughput) for every successful measured point."""
    target_throughput: str | None = None
    epoch_times: list[tuple[int, float]] = field(default_factory=list)
    target_epoch: str | None = None


def capacity(
    points: Sequence[dict],
    *,
    target_throughput: float | None = None,
    epoch_samples: int | None = None,
    epoch_time_s: float | None = None,
) -> list[CapacityRow]:
    """Devices needed per strategy, from measured points only (no extrapolation past the largest N)."""
    groups = group_by_workload(r for r in points if not is_comm(r) and num(r.get("throughput")))
    rows = []
    for key, pts in groups.items():
        word = device_word(pts)
        for strategy, spts in by_strategy(pts).items():
            measured = [(int(r["world_size"]), num(r["throughput"])) for r in spts]
            row = CapacityRow(workload=workload_label(key, groups), strategy=strategy, measured=measured)
            missed = f"not reached at the largest measured N = {measured[-1][0]}"
            if target_throughput is not None:
                hit = next((r for r in spts if num(r["throughput"]) >= target_throughput), None)
                if hit is None:
                    row.target_throughput = f"{missed} ({measured[-1][1]:.2f} samples/s)"
                else:
                    row.target_throughput = _count(int(hit["world_size"]), word)
                    ci = throughput_ci(hit)
                    if ci and ci[0] < target_throughput:
                        row.target_throughput += (
                            f" (its 95% CI lower bound, {ci[0]:.2f} samples/s, is below the target)"
                        )
            if epoch_samples:
                row.epoch_times = [(n, epoch_samples / thr) for n, thr in measured]
                if epoch_time_s is not None:
                    hit = next((n for n, t in row.epoch_times if t <= epoch_time_s), None)
                    last = format_duration(row.epoch_times[-1][1])
                    row.target_epoch = f"{missed} ({last} per epoch)" if hit is None else _count(hit, word)
            rows.append(row)
    return rows


def _count(n: int, word: str) -> str:
    return f"{n} {word if n != 1 else word[:-1]}"


def format_duration(seconds: float) -> str:
    for below, unit, name in ((120, 1, "s"), (3600, 60, "min"), (172800, 3600, "h")):
        if seconds < below:
            return f"{seconds / unit:.1f} {name}"
    return f"{seconds / 86400:.1f} days"


# -- where the wall time goes
WALL_PARTS = (
    ("startup", "launch to first step"),
    ("warmup", "warmup"),
    ("measuring", "measuring"),
    ("no_sync", "no-sync variant"),
    ("allreduce", "all-reduce benchmark"),
    ("teardown", "teardown"),
    ("unattributed", "unattributed"),
)
"""The phases of a point's wall time, in order, with their names for people."""


def _span(pair) -> float | None:
    if not isinstance(pair, (list, tuple)) or len(pair) < 2 or num(pair[0]) is None or num(pair[1]) is None:
        return None
    return max(0.0, num(pair[1]) - num(pair[0]))


def _run_split(run: dict) -> dict[str, float | None]:
    """One launched process tree: the parent's launch start and wall time (run['launch']) against the
    worker's wall-clock stamps (run['stopping']: warmup_start, window, allreduce_window). Differences
    between clocks of two nodes can only shrink a phase to 0, never make it negative."""
    launch, st = run.get("launch") or {}, run.get("stopping") or {}
    wall, start = num(launch.get("wall_s")), num(launch.get("started"))
    window = st.get("window") or (None, None)
    first, m0, m1 = num(st.get("warmup_start")), num(window[0]), num(window[1])
    out: dict[str, float | None] = {
        "total": wall,
        "measuring": _span(window),
        "warmup": _span((first, m0)),
        "allreduce": _span(st.get("allreduce_window")),
    }
    if out["allreduce"] is None and out["measuring"] is not None and run.get("allreduce_s") is None:
        out["allreduce"] = 0.0  # no all-reduce benchmark in this run
    out["startup"] = _span((start, first))
    end = start + wall if start is not None and wall is not None else None
    out["teardown"] = None if None in (end, m1, out["allreduce"]) else max(0.0, end - m1 - out["allreduce"])
    # The no-sync variant measured in this run's processes (PointConfig.nosync_order): before the
    # synchronized run's warmup (B A), inside startup; after its window (A B), inside teardown.
    span = st.get("nosync_span")
    out["no_sync"] = _span(span) or 0.0
    phase = "startup" if span and first is not None and num(span[1]) <= first else "teardown"
    if out["no_sync"] and out[phase] is not None:
        out[phase] = max(0.0, out[phase] - out["no_sync"])
    return out


def wall_split(record: dict) -> dict[str, float | None] | None:
    """Seconds of one point's wall time per phase (WALL_PARTS keys, plus 'total'): launch to first step
    (process start, imports, model and data, process-group init), warmup, measuring, the no-sync variant
    (its whole run), the standalone all-reduce benchmark and teardown (gathering results, writing the
    record, processes exiting), summed over repeats. A phase the record cannot place is None and its
    seconds are 'unattributed'. None for a point that was never launched (skipped)."""
    repeats = record.get("repeats") or []
    runs = repeats if repeats and all(r.get("launch") for r in repeats) else [record]
    variant = record.get("independent")
    variants = [v for v in (variant if isinstance(variant, list) else [variant]) if isinstance(v, dict)]
    splits = [_run_split(r) for r in runs if (r.get("launch") or {}).get("wall_s") is not None]
    if not splits:
        return None
    out = {
        key: _sum_known([s[key] for s in splits]) for key in ("startup", "warmup", "measuring", "allreduce", "teardown")
    }
    # variants that ran as process trees of their own (an in-process one is inside its run's wall time)
    walls = [
        num((v.get("launch") or {}).get("wall_s"))
        for v in variants
        if not (v.get("stopping") or {}).get("segment_start")
    ]
    out["no_sync"] = _sum_known(walls + [s["no_sync"] for s in splits])
    out["total"] = sum(s["total"] for s in splits) + sum(w for w in walls if w is not None)
    out["unattributed"] = max(0.0, out["total"] - sum(v for k, v in out.items() if k != "total" and v))
    return out


def _sum_known(values: list[float | None]) -> float | None:
    """The sum, or None when any value is unknown."""
    return None if None in values else sum(values)


def wall_split_total(records: Iterable[dict]) -> dict[str, float] | None:
    """The sweep's points together: seconds per phase (a phase unknown for a point counts as unattributed)."""
    splits = [s for s in (wall_split(r) for r in records) if s]
    if not splits:
        return None
    out = {k: sum(s.get(k) or 0.0 for s in splits) for k, _ in WALL_PARTS[:-1]}
    total = sum(s["total"] for s in splits)
    return {**out, "total": total, "unattributed": max(0.0, total - sum(out.values()))}


def wall_split_line(records: Iterable[dict]) -> str | None:
    """'wall time of the points: 250 s; measuring 59% (148 s), launch to first step 27%, ...' or None."""
    split = wall_split_total(records)
    if not split or not split["total"]:
        return None
    total = split["total"]
    parts = [
        f"{label} {split[k] / total:.0%}" + (f" ({split[k]:.0f} s)" if k == "measuring" else "")
        for k, label in WALL_PARTS
        if split[k] >= 0.005 * total or k == "measuring"
    ]
    return f"wall time of the points: {total:.0f} s; " + ", ".join(parts)


# -- communication and telemetry fields
COMM_FIELDS = ("comm_overhead", "exposed_comm_s", "allreduce_s", "grad_bytes", "overlap", "data_wait_fraction")


def comm_breakdown(record: dict) -> dict | None:
    """Split the step (its window mean time per step, the statistic exposed_comm_s is a difference of) into
    compute alone, compute overlapped with communication, and exposed communication (seconds), from
    whichever of exposed_comm_s / comm_overhead / allreduce_s / overlap exist."""
    step = num((record.get("comm_split") or {}).get("step_s")) or num(record.get("time_per_step_s"))
    overhead = num(record.get("comm_overhead"))
    exposed = num(record.get("exposed_comm_s"))
    if exposed is None and overhead is not None and step:
        exposed = overhead * step
    if exposed is None or not step:
        return None
    exposed = max(0.0, exposed)  # for display: the record keeps the raw (possibly negative) value
    allreduce, overlap = num(record.get("allreduce_s")), num(record.get("overlap"))
    if allreduce is not None:
        hidden = max(0.0, allreduce - exposed)
    elif overlap is not None and overlap < 1:
        hidden = exposed * overlap / (1 - overlap)
    else:
        hidden = 0.0
    exposed = min(exposed, step)
    hidden = min(hidden, step - exposed)
    return {
        "step_s": step,
        "compute_only_s": step - exposed - hidden,
        "overlapped_s": hidden,
        "exposed_s": exposed,
        "overlap": overlap,
        "comm_overhead": overhead,
        "allreduce_s": allreduce,
    }


def has_comm_fields(record: dict) -> bool:
    """Has a communication or input-pipeline measurement (grad_bytes alone is a size, not a measurement)."""
    return any(num(record.get(k)) is not None for k in COMM_FIELDS if k != "grad_bytes")


TELEMETRY_META = {"window", "samples", "source", "sources", "interval_s", "t", "pids"}
"""Telemetry keys that describe the sampling, not the point."""


def telemetry_values(record: dict) -> dict[str, float]:
    """Scalar telemetry per point: per-GPU / per-worker lists or {worker: value} dicts become their
    maximum; sampling metadata (window, sample count) is left out."""
    tel = record.get("telemetry")
    if not isinstance(tel, dict):
        return {}
    out = {}
    unscoped = int(record.get("nodes") or 1) > 1 and not tel.get("energy_scope")
    for key, value in tel.items():
        if key in TELEMETRY_META or (key == "energy_per_sample_j" and unscoped):
            continue  # (older multi-node records divided one node's energy by every node's samples)
        if isinstance(value, dict):
            value = list(value.values())
        elif isinstance(value, bool):
            value = float(value)
        values = [v for v in map(num, value if isinstance(value, (list, tuple)) else [value]) if v is not None]
        if values:
            out[key] = max(values)

    return out


# -- tabular export
FRAME_COLUMNS = (
    *"sweep_id point_id strategy framework model world_size nodes device scaling per_device_batch global_batch "
    "status reason throughput throughput_ci_low throughput_ci_high speedup efficiency wrapper_overhead "
    "step_time_median_s step_time_p5_s step_time_p95_s step_time_cv measured_steps noisy".split(),
    *COMM_FIELDS,
)
_SKIP_IN_FRAME = {"step_times_s", "per_rank_step_times_s", "config", "launch", "stderr_tail", "telemetry"}


def points_frame(sweep: Sweep):
    """One row per point: the fixed columns above, then any other scalar record fields, then
    telemetry as `telemetry.<name>` columns. Lists and dicts become JSON text."""
    import pandas as pd

    rows = []
    for r in sweep.points:
        row = {c: r.get(c) for c in FRAME_COLUMNS}
        for k, v in r.items():
            if k not in row and k not in _SKIP_IN_FRAME:
                row[k] = json.dumps(v, sort_keys=True, default=str) if isinstance(v, (list, dict)) else v
        tel = r.get("telemetry") if isinstance(r.get("telemetry"), dict) else {}
        for k, v in tel.items():
            row[f"telemetry.{k}"] = json.dumps(v) if isinstance(v, (list, dict)) else v
        row["config"] = json.dumps(r.get("config", {}), sort_keys=True, default=str)
        rows.append(row)
    # The fixed columns stay even when the whole sweep lacks them (e.g. CI before it is recorded), so
    # exports from different sweeps have the same leading layout.
    columns = dict.fromkeys([*FRAME_COLUMNS, *(k for row in rows for k in row if k != "config")])
    return pd.DataFrame(rows, columns=[*columns, "config"])


def sweep_document(sweep: Sweep) -> dict:
    """The sweep row and every full record with its steps, JSON-able."""
    return {"sweep": sweep.info, "points": [{**r, "step_times_s": sweep.step_times(r)} for r in sweep.points]}

"""The sweep's summary in sentences: which strategy scales best, where efficiency drops below the target, the
1-device wrapper cost, what limited scaling, where the step goes, and notes (noise, CPU workers, superlinear
points, failed points). Used by the report, `results show` and `compare`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from distbench.analysis.cis import ci_df, efficiency_ratio_ci, throughput_ratio_ci
from distbench.analysis.records import (
    CV_NOISY,
    by_strategy,
    group_by_workload,
    is_baseline,
    is_comm,
    is_noisy,
    num,
    point_name,
    series_name,
    workload_key,
    workload_label,
)
from distbench.analysis.sweep import Sweep, is_converge
from distbench.core.strategies import FRAMEWORK_BASELINE
from distbench.results import split, stats

EFFICIENCY_TARGET = 0.80
"""Efficiency below this is reported as 'scaling drops'."""
COMM_LARGE = 0.20
"""comm_overhead (exposed communication / step time) at or above which communication is named as the limit."""
DRIFT_FLAG = 0.10
"""|closing A / first A - 1| above which the split's summary line says the machine's pace moved in the point."""
DATA_WAIT_LARGE = 0.10
"""data_wait_fraction at or above which the input pipeline is named as the limit."""
SUPERLINEAR = 1.10
"""Efficiency above this is called out as implausible for the same per-device work (weak scaling)."""


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


EFFICIENCY_NAMES = {"efficiency": "efficiency", "efficiency_per_core": "per-core efficiency"}
"""How the summary names the efficiency it reads (efficiency_key)."""


def efficiency_key(points: Iterable[dict]) -> str:
    """The efficiency the summary and the efficiency plot read: on CPU workers with a per-core baseline, the
    per-core figure (the whole-machine one sets workers that share the cores against a baseline that had them
    all), else the efficiency. One key for all the points, so that their figures compare: per core only when
    every point with an efficiency (baselines aside) has a per-core one."""
    known = [r for r in points if not is_baseline(r) and num(r.get("efficiency")) is not None]
    per_core = bool(known) and all(num(r.get("efficiency_per_core")) is not None for r in known)
    return "efficiency_per_core" if per_core else "efficiency"


def efficiency_keys(points: Iterable[dict]) -> dict[tuple, str]:
    """efficiency_key per workload group (workload_key): what the summary reads for each group, and so what the
    efficiency plot draws for it."""
    return {group: efficiency_key(pts) for group, pts in group_by_workload(points).items()}


def best_strategy(points: Sequence[dict], sweep: "Sweep | None" = None, key: str | None = None) -> dict | None:
    """Highest efficiency (`key`: efficiency_key by default) at the largest N measured (non-baseline strategies
    with a known efficiency).

    None without such strategies. 'ranking' holds (strategy, efficiency, record) at n, best first; 'tied' the
    strategies not distinguishable from the best at 95%, 'undecided' those with no CI to tell, 'within_run_only'
    those the best beats only beyond the within-run noise (a point ran once: no run-to-run CI, and two points
    are separate runs), 'missing' those measured elsewhere but not at n.
    """
    key = key or efficiency_key(points)
    strategy_points = [r for r in points if not is_baseline(r) and not is_comm(r)]
    candidates = [r for r in strategy_points if num(r.get(key)) is not None]
    if not candidates:
        return None
    n_max = max(int(r["world_size"]) for r in candidates)
    at_n = by_strategy(r for r in candidates if int(r["world_size"]) == n_max)
    ranking = sorted(((s, num(pts[-1][key]), pts[-1]) for s, pts in at_n.items()), key=lambda t: -t[1])
    best_s, best_e, best_r = ranking[0]
    tied, undecided, within_run_only = [], [], []
    for s, e, r in ranking[1:]:
        ci = efficiency_ratio_ci(best_r, r, sweep, key)
        if ci is None:
            undecided.append(s)
        elif ci[1] >= 1:
            tied.append(s)
        elif not (ci_df(best_r) and ci_df(r)):
            within_run_only.append(s)
    measured = {series_name(r) for r in strategy_points}
    return {
        "n": n_max,
        "key": key,
        "best": best_s,
        "efficiency": best_e,
        "record": best_r,
        "ranking": ranking,
        "tied": tied,
        "undecided": undecided,
        "within_run_only": within_run_only,
        "missing": sorted(measured - set(at_n)),
    }


def efficiency_drop(points: Sequence[dict], key: str = "efficiency") -> dict | None:
    """For one strategy's points (sorted by N): the smallest N with efficiency (`key`) below EFFICIENCY_TARGET."""
    known = [r for r in points if num(r.get(key)) is not None]
    if not known:
        return None
    below = [r for r in known if num(r[key]) < EFFICIENCY_TARGET]
    return {
        "below_at": int(below[0]["world_size"]) if below else None,
        "efficiency": num(below[0][key]) if below else None,
        "largest_n": int(known[-1]["world_size"]),
        "largest_efficiency": num(known[-1][key]),
    }


CPU_WORKERS_NOTE = (
    "Measured on CPU workers, not GPUs: the workers share the machine's cores, so these "
    "numbers describe CPU behaviour and say little about GPU scaling."
)
"""The summary's note on a CPU-workers sweep (the HTML/Markdown report says it once, in its callout)."""


def synthetic_data(record: dict) -> bool:
    """The point trained on synthetic tensors made once on the device (--data synthetic): no input pipeline."""
    return (record.get("config") or {}).get("data", "synthetic") == "synthetic"


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
        if not synthetic_data(record):  # synthetic data has no input pipeline to measure
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
    # time-to-accuracy runs (distbench converge) measure no scaling: their section of the report says what they show
    converge = [r for r in sweep.scaling_points if is_converge(r)]
    groups = group_by_workload(r for r in sweep.scaling_points if not is_converge(r))
    multi = len(groups) > 1
    for key, points in groups.items():
        prefix = f"{workload_label(key, groups)}: " if multi else ""
        _summarize_group(sweep, points, prefix, summary)
    if not groups and converge:
        summary.notes.append(
            "A time-to-accuracy sweep (distbench converge): its results, speedups against its N=1 baselines "
            "included, are in the time-to-accuracy section; throughput scaling was not measured here."
        )
    elif not groups:
        summary.notes.append("The sweep has no successful training points, so nothing about scaling can be said.")
    if sweep.cpu_workers:
        summary.notes.append(CPU_WORKERS_NOTE)
    # every successful point the points table lists (per-core baselines and verify runs too), so the counts agree
    flagged = [r for r in sweep.points if r.get("status") == "ok" and not is_comm(r) and is_noisy(r)]
    if flagged:
        names = ", ".join(point_name(r) for r in flagged)
        summary.notes.append(
            f"{len(flagged)} point(s) are noisy (flagged, or step-time CV above {CV_NOISY:.0%}): "
            f"{names}. Differences smaller than their spread are not meaningful."
        )
    noisy = [r for r in sweep.scaling_points if is_noisy(r)]
    for base in filter(is_baseline, noisy):
        cv = num(base.get("step_time_cv"))
        summary.notes.append(
            f"The {base['strategy']!r} baseline is noisy"
            + (f" (step-time CV {cv:.0%})" if cv is not None else "")
            + f": every {base['framework']} speedup and efficiency is divided by it and "
            "inherits that uncertainty."
        )
    keys = efficiency_keys(sweep.scaling_points)  # per workload group, as _summarize_group reads it
    superlinear = [
        (r, k)
        for r in sweep.scaling_points
        if (num(r.get(k := keys[workload_key(r)])) or 0) > SUPERLINEAR and not is_baseline(r)
    ]
    if superlinear:
        names = ", ".join(f"{point_name(r)} ({EFFICIENCY_NAMES[k]} {num(r[k]):.0%})" for r, k in superlinear)
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
    key = efficiency_key(points)
    summary.best.append(prefix + _best_line(sweep, points, key))
    baselines = {r["framework"]: r for r in points if is_baseline(r)}
    which = " (per-core efficiency)" if key == "efficiency_per_core" else ""
    for strategy, pts in by_strategy(r for r in points if not is_baseline(r)).items():
        name = prefix + strategy
        summary.drops.append(_drop_line(name + which, efficiency_drop(pts, key)))
        one = next((r for r in pts if int(r["world_size"]) == 1), None)
        if one is not None:
            summary.wrapper.append(_wrapper_line(name, sweep, one, baselines.get(one.get("framework"))))
        limit = _limit_line(name + which, pts, baselines, key)
        if limit:
            summary.limits.append(limit)
    summary.steps.extend(prefix + line for line in split_lines(points))


def wait_causes(record: dict, n) -> list[str]:
    """The split's straggler-wait term as limiting factors. The term also holds the latency of meeting once
    per step (the tiny collective's), which at short steps can be most of it: where the record has per-rank
    step times, what a per-step meeting costs at the ranks' own pace (stragglers.mean_wait_s: a slower rank's
    steady lead and the step-to-step jitter) is named stragglers and the rest synchronization latency; without
    them (mirrored: one process) the term is named as both."""
    parts = record.get("comm_split") or {}
    wait, step = num(parts.get("wait_share")), num(parts.get("step_s"))
    info = record.get("stragglers") or {}
    jitter = num(info.get("mean_wait_s", info.get("jitter_wait_s")))
    if wait is None or wait < COMM_LARGE:
        return []
    if jitter is None or not step:
        return [
            f"stragglers or synchronization latency (the straggler wait term, the slowest rank plus one few-byte "
            f"collective's latency per step, is {wait:.0%} of the step at N={n})"
        ]
    out, strag = [], jitter / step
    if strag >= COMM_LARGE:
        out.append(
            f"stragglers (waiting for the slowest rank at the ranks' own pace costs {strag:.0%} of the step at N={n})"
        )
    if wait - strag >= COMM_LARGE:
        out.append(
            f"synchronization latency (meeting once per step, one few-byte collective, is {wait - strag:.0%} of "
            f"the step at N={n}, beyond the stragglers' {strag:.0%})"
        )
    return out


def split_lines(records: Iterable[dict]) -> list[str]:
    """Per successful point at N > 1: where its step goes (distbench.results.split: compute, straggler wait and
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


def _best_line(sweep: Sweep, points: list[dict], key: str = "efficiency") -> str:
    best = best_strategy(points, sweep, key)
    if best is None:
        return (
            "No strategy has a known efficiency (no successful single-device baseline "
            "in this sweep), so scaling is not assessed."
        )
    if best["n"] == 1:
        return "Only N=1 was measured, so scaling is not assessed."
    line = (
        f"{best['best']} scales best: {best['efficiency']:.0%} {EFFICIENCY_NAMES[key]} at N={best['n']}, "
        "the largest N measured"
    )
    whole = num(best["record"].get("efficiency"))
    if key == "efficiency_per_core" and whole is not None:
        line += (
            f" (CPU workers: per core is against the baseline on one worker's threads; against the baseline on the "
            f"whole machine it is {whole:.0%})"
        )
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
    if key == "efficiency" and best["record"].get("device") == "cpu":
        line += " On CPU workers this is the whole-machine efficiency: not every point has a per-core baseline."
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


def _limit_line(name: str, points: list[dict], baselines: dict[str, dict], key: str = "efficiency") -> str | None:
    """What limited the strategy at its largest N below EFFICIENCY_TARGET (efficiency `key`; None: no efficiency
    at N > 1)."""

    multi = [r for r in points if int(r["world_size"]) > 1 and num(r.get(key)) is not None]
    if not multi:
        return None
    below = [r for r in multi if num(r[key]) < EFFICIENCY_TARGET]
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
            else "communication is below its threshold; synthetic data, so no input pipeline"
            if synthetic_data(last)
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

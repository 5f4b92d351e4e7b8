"""Where a synchronized step's time goes (issue 20): communication, waiting for stragglers, compute.

A point whose strategy measures its variants in its own processes (Strategy.nosync_in_process) runs,
per repeat, ORDER in one process tree (distbench/workers/common.segment_configs): the real step (A), the tiny
variant (T: the no-sync step plus one all-reduce of a single float per step over every rank, where the
gradient reduction was) and the no-sync variant (B). ORDER is a palindrome, so a steady drift of the
machine over the run weighs A, T and B alike and cancels in their differences, at every repeat count.

One statistic throughout: each run's window mean time per step (its measured window, barrier to the
slowest rank's last step, over its steps: what throughput is computed from); a variant run twice in a
repeat counts as the mean of its two runs.

* communication = A - T: moving the gradients, beyond meeting once per step;
* straggler wait = T - compute: the ranks meeting once per step, so each step lasts as long as its slowest
  rank (plus the tiny all-reduce's own latency, a few bytes);
* compute = the ranks' own pace, their mean: B (the no-sync step, whose window ends with the slowest rank)
  less the slowest rank's steady lead over the ranks' mean (stragglers' pace_gap_s, from B's per-rank step
  times; 0 where B has none). A persistently slow rank is so a wait of the others, not compute: ranks at 100
  and 110 ms with no jitter give compute 105 ms and a wait of 5 ms plus the tiny collective's latency.

They add up to A exactly. Each has a 95% CI: with R >= 2 repeats a paired t over the repeats' values
(run to run; the values are kept, `<term>_per_repeat`); with one, Welch from the batch-means standard
errors of the runs involved (the noise within those runs only, the windows taken as independent: a
non-linear drift between the windows, which the palindrome does not cancel, is not covered).

The tiny collective's own latency (one all-reduce of a few bytes per step) lands in the straggler wait,
not in communication: communication = A - T is the cost of the gradient bytes beyond the latency floor of
meeting once per step. At short steps that floor can be most of the "wait" (gloo on CPU workers: 1-4 ms).
For a strategy whose replicas step together in one process (mirrored), the no-sync step itself ends
with its slowest replica, so the per-step wait for stragglers is in compute and T - B is that floor alone.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

from distbench.results import stats

ORDER = "ATBTA"
TERMS = (("communication", "A", "T"), ("wait", "T", "P"), ("compute", "P", None))
"""(term, minuend, subtrahend) over the runs' letters; P is B at the ranks' own mean pace (pace_runs)."""
STATISTIC = "window mean time per step (measured window / steps), every run alike"
WITHIN_RUN_SCOPE = (
    "within-run noise of one repeat's runs (batch means; Welch for a difference, the windows taken as "
    "independent: drift between them beyond a steady trend not covered)"
)


def letter_means(rep: dict[str, list[dict]]) -> dict[str, float]:
    """One repeat's runs by letter -> each letter's mean window time per step."""
    return {k: statistics.fmean(r["time_per_step_s"] for r in runs) for k, runs in rep.items() if runs}


def _within_run_se(runs: list[dict]) -> tuple[float, float] | None:
    """(standard error, Satterthwaite df) of the mean of `runs`' window means, from each run's batch
    means (scaled to its window mean); None when a run is too short for batch means."""
    parts = []
    for r in runs:
        ci = stats.step_time_ci(r["step_times_s"])
        if ci is None:
            return None
        parts.append((ci["se"] * r["time_per_step_s"] / ci["mean"] / len(runs), ci["df"]))
    var = sum(se**2 for se, _ in parts)
    if var == 0:
        return 0.0, float(sum(df for _, df in parts))
    return math.sqrt(var), var**2 / sum(se**4 / df for se, df in parts)


def term(reps: Sequence[dict[str, list[dict]]], hi: str, lo: str | None) -> tuple[float, list | None, str]:
    """(estimate, [low, high] or None, what the CI covers) of mean(hi) - mean(lo) (or mean(hi) alone)."""
    means = [letter_means(rep) for rep in reps]
    values = [m[hi] - (m[lo] if lo else 0.0) for m in means]
    estimate = statistics.fmean(values)
    if len(values) > 1:
        _, low, high = stats.mean_ci(values)
        return estimate, [low, high], f"run-to-run (paired t over {len(values)} repeats)"
    a = _within_run_se(reps[0][hi])
    b = _within_run_se(reps[0][lo]) if lo else (0.0, 1.0)
    if a is None or b is None:
        return estimate, None, f"no CI: a within-run CI needs at least {stats.MIN_CI_STEPS} steps per run"
    scope = WITHIN_RUN_SCOPE
    if a[0] == 0 and b[0] == 0:
        return estimate, [estimate, estimate], scope
    if lo:
        low, high = stats.difference_ci(means[0][hi], a[0], a[1], means[0][lo], b[0], b[1])
        return estimate, [low, high], scope
    hw = stats.t_crit(max(1, math.floor(a[1]))) * a[0]
    return estimate, [estimate - hw, estimate + hw], scope


def pace_gap(per_rank: Sequence[Sequence[float]] | None) -> float:
    """The slowest rank's steady lead: max over ranks of their mean step time - the ranks' mean (0 without
    per-rank step times of two ranks or more)."""
    means = [statistics.fmean(x) for x in per_rank or [] if x]
    return max(means) - statistics.fmean(means) if len(means) > 1 else 0.0


def pace_runs(runs: list[dict]) -> list[dict]:
    """B's runs at the ranks' own mean pace: each run's window mean and step times less its pace_gap."""
    out = []
    for r in runs:
        gap = pace_gap(r.get("per_rank_step_times_s"))
        out.append(
            {**r, "time_per_step_s": r["time_per_step_s"] - gap, "step_times_s": [t - gap for t in r["step_times_s"]]}
        )
    return out


def three_terms(reps: Sequence[dict[str, list[dict]]], tiny_calls: int | None = None) -> dict:
    """The record's comm_split from R repeats, each {'A': [...], 'T': [...], 'B': [...]} runs (with
    time_per_step_s and step_times_s; B's per_rank_step_times_s where measured: compute is the ranks' mean
    pace)."""
    reps = [{**rep, "P": pace_runs(rep["B"])} for rep in reps]
    step = statistics.fmean(letter_means(rep)["A"] for rep in reps)
    out: dict = {"step_s": step, "statistic": STATISTIC, "order": ORDER, "repeats": len(reps)}
    means = [letter_means(rep) for rep in reps]
    for name, hi, lo in TERMS:
        value, ci, scope = term(reps, hi, lo)
        out[f"{name}_per_repeat"] = [m[hi] - (m[lo] if lo else 0.0) for m in means]
        out[f"{name}_s"] = value
        out[f"{name}_ci"] = ci
        out[f"{name}_share"] = value / step if step else None
        out["ci_scope"] = scope  # the same for every term
    if tiny_calls is not None:
        out["tiny_collective_calls"] = tiny_calls
    return out


def comm_fields(comm_split: dict, allreduce_s: float | None, headline_step_s: float | None = None) -> dict:
    """exposed_comm_s, comm_overhead, overlap (stats.comm_metrics) and their CI from the split's communication
    term (A - T), not A - B: one meaning of communication, without the straggler wait. comm_overhead divides it
    by the point's headline time per step (`headline_step_s`: the opening A's, what the point's throughput is
    computed from), so headline step x overhead is the communication term; the split's own shares divide by
    its step (the mean of every A, opening and closing), which the split line shows beside them. Without
    `headline_step_s` the split's step is the denominator."""
    step, comm = headline_step_s or comm_split["step_s"], comm_split["communication_s"]
    ci = comm_split.get("communication_ci")
    out = stats.comm_metrics(step, step - comm, allreduce_s, tuple(ci) if ci else None)
    out["exposed_comm_ci_scope"] = comm_split.get("ci_scope")
    return out


def with_split_comm(record: dict) -> dict:
    """The record with its communication fields from its split, where it has one and they were stored another
    way (A - B, or an overhead over the split's step rather than the headline step): read-time, so old stores'
    tables and exports do not count the wait twice and every overhead shares the headline step's denominator."""
    split = record.get("comm_split")
    if not split or split.get("communication_s") is None or not split.get("step_s"):
        return record
    fields = comm_fields(split, record.get("allreduce_s"), record.get("time_per_step_s"))
    if all(record.get(k) == fields[k] for k in ("exposed_comm_s", "comm_overhead")):
        return record
    return {**record, **fields}


def stragglers(per_rank_runs: Sequence[Sequence[Sequence[float]]], source: str) -> dict | None:
    """Who the stragglers are, from per-rank step times (per run: one list per rank), steps aligned by
    index within each run: per rank, the share of steps it was the slowest, how long the other ranks
    would wait on it per step (averaged over all steps: its contribution to the wait), and how long it
    would wait itself per step (max over ranks - its own). None with fewer than two ranks.

    From the no-sync variant, whose ranks do not meet: step k of two ranks ran at different times, so
    this is what a per-step meeting would cost at each rank's own pace, not a measured wait. The mean wait
    (mean_wait_s) splits into the slowest rank's steady lead (pace_gap_s: max over ranks of their mean
    step - the ranks' mean; in the three-term split it is wait, compute being the ranks' mean pace) and
    step-to-step jitter (jitter_wait_s: the rest). A run whose ranks measured different step counts cannot be aligned: left out (skipped_runs)."""
    steps: list[tuple[float, ...]] = []
    skipped = 0
    for per_rank in per_rank_runs:
        if not per_rank or len(per_rank) < 2:
            continue
        if len({len(x) for x in per_rank}) > 1:
            skipped += 1
            continue
        steps.extend(zip(*per_rank))
    if not steps:
        return None
    ranks = len(steps[0])
    slowest, others_wait, own_wait = [0] * ranks, [0.0] * ranks, [0.0] * ranks
    for step in steps:
        worst = max(step)
        k = step.index(worst)
        slowest[k] += 1
        others_wait[k] += sum(worst - t for t in step) / (ranks - 1)
        for r, t in enumerate(step):
            own_wait[r] += worst - t
    n = len(steps)
    means = [sum(step[r] for step in steps) / n for r in range(ranks)]
    mean_wait = sum(own_wait) / (n * ranks)
    pace_gap = max(means) - sum(means) / ranks
    return {
        "source": source,
        "steps": n,
        "skipped_runs": skipped,
        "mean_wait_s": mean_wait,
        "pace_gap_s": pace_gap,
        "jitter_wait_s": mean_wait - pace_gap,
        "ranks": [
            {
                "rank": r,
                "slowest_share": slowest[r] / n,
                "others_wait_s": others_wait[r] / n,
                "own_wait_s": own_wait[r] / n,
            }
            for r in range(ranks)
        ],
    }


def worst_straggler(record: dict) -> dict | None:
    """The rank that was slowest most often, from the record's stragglers, or None."""
    info = record.get("stragglers") or {}
    ranks = info.get("ranks") or []
    return max(ranks, key=lambda r: r["slowest_share"]) if ranks else None


LABELS = {"compute": "compute", "wait": "straggler wait", "communication": "communication"}


def below_zero_phrase(value_s: float, ci: Sequence[float] | None) -> str | None:
    """For a term below 0, what that means in a few words (None at or above 0): within noise of 0 (its 95% CI
    includes 0), no CI to judge it, or beyond its CI (the machine's pace moved between the runs)."""
    if value_s >= 0:
        return None
    if ci is None:
        return "below 0 with no CI to judge it, too few steps: read it as 0 within unmeasured noise"
    if ci[0] <= 0 <= ci[1]:
        return "below 0 is within noise of 0: its 95% CI includes 0"
    return "below 0 beyond its 95% CI: the machine's pace moved between the runs, so this split is not reliable"


def term_text(value_s: float, ci: Sequence[float] | None, digits: int = 1) -> str:
    """A term in ms with its 95% CI ('12.0 ms [8.0, 16.0]'); below 0 with no CI, never a bare negative: '≈0 ms
    (-6.0 measured, no CI)'."""
    value = f"{value_s * 1e3:.{digits}f}"
    if ci:
        return f"{value} ms [{ci[0] * 1e3:.{digits}f}, {ci[1] * 1e3:.{digits}f}]"
    return f"≈0 ms ({value} measured, no CI)" if value_s < 0 else f"{value} ms"


def overhead_below_zero(record: dict) -> str | None:
    """For a comm_overhead below 0 (the communication term measured below 0; a time cannot be negative), what
    it measured, where its 95% CI is and what that means ('-8% measured, 95% CI [-20%, 4%]: within noise of
    0'); None at or above 0. The CI is the exposed time's over the overhead's denominator."""
    value = record.get("comm_overhead")
    if not isinstance(value, (int, float)) or value >= 0:
        return None
    exposed, low, high = (record.get(k) for k in ("exposed_comm_s", "exposed_comm_ci_low", "exposed_comm_ci_high"))
    if low is None or high is None or not exposed:
        return f"{value:.0%} measured, no CI to judge it: read it as 0 within unmeasured noise"
    step = exposed / value
    text = f"{value:.0%} measured, 95% CI [{low / step:.0%}, {high / step:.0%}]"
    if low <= 0 <= high:
        return f"{text}: within noise of 0"
    return f"{text}: beyond its CI, the machine's pace moved between the runs"


def overhead_cell(record: dict, shown: str) -> str:
    """The comm overhead cell: '≈0' where it measured below 0 (overhead_below_zero says what), else `shown`."""
    return "≈0" if overhead_below_zero(record) else shown


def overhead_legend(named: Sequence[tuple[str, dict]]) -> str | None:
    """The line under a table whose comm overhead shows '≈0': each such point (name, record) with what it
    measured and its CI; None when none shows it."""
    parts = [f"{name}: {text}" for name, r in named if (text := overhead_below_zero(r))]
    if not parts:
        return None
    return "comm overhead ≈0 = the communication term measured below 0 (a time cannot be negative): " + "; ".join(parts)


def below_zero_note(name: str, value_s: float, ci: Sequence[float] | None) -> str | None:
    """below_zero_phrase with the term's name (a time cannot be negative: a term below 0 is noise, or the
    machine's pace moved between runs)."""
    phrase = below_zero_phrase(value_s, ci)
    return f"{LABELS.get(name, name)} {phrase}" if phrase else None


def split_line(record: dict) -> str | None:
    """'mean step 120 ms = compute 100 ms + straggler wait 12 ms [8, 16] + communication 8 ms [3, 13]' (ms,
    95% CIs), then a phrase per term below 0 (below_zero_note), or None when the record has no three-term
    split. The step is the real step's window mean (the split's statistic), labelled apart from the table's
    step median."""
    split = record.get("comm_split")
    if not split:
        return None

    def ms(name: str) -> str:
        return term_text(split[f"{name}_s"], split.get(f"{name}_ci"))

    text = (
        f"mean step {split['step_s'] * 1e3:.1f} ms = compute {ms('compute')} + straggler wait {ms('wait')} "
        f"+ communication {ms('communication')}"
    )
    for name in LABELS:
        note = below_zero_note(name, split[f"{name}_s"], split.get(f"{name}_ci"))
        if note:
            text += f" ({note})"
    worst = worst_straggler(record)
    if worst is not None:
        text += (
            f"; rank {worst['rank']} slowest in {worst['slowest_share']:.0%} of steps, "
            f"the others would wait {worst['others_wait_s'] * 1e3:.1f} ms per step on it (at the no-sync pace)"
        )
    info = record.get("stragglers") or {}
    if info.get("mean_wait_s") is not None:
        text += (
            f"; stragglers explain {info['mean_wait_s'] * 1e3:.1f} ms of the wait (steady pace gap "
            f"{info.get('pace_gap_s', 0) * 1e3:.1f} ms, jitter {info.get('jitter_wait_s', 0) * 1e3:.1f} ms), "
            "the rest is meeting once per step"
        )
    return text

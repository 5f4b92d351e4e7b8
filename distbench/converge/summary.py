"""MLPerf-style statistics of converge runs: per (strategy, N) over its seeds, and between strategies.

* Time to target per (strategy, N), MLPerf Training's rule (training_rules.adoc, "Benchmark Results", since
  rules version 0.7): the fastest and the slowest run are dropped and the rest averaged (from 3 runs on: MLPerf
  drops them for every benchmark), and one run that did not reach the target counts
  as the slowest run (so it is the one dropped); with more non-converged runs than that the point "did not
  converge". A run that failed (crashed, timed out, out of memory) counts as not converged: nothing shows that
  it would have. A skipped or interrupted run is not counted at all: the point is "incomplete" if it has no
  other runs, and its verdict names them. The spread (min, max, standard deviation) is over the runs that
  converged.
* Time-to-target speedup of a strategy against its framework's single-device baseline: the ratio of the two
  MLPerf means (the times to target the table shows). Its 95% interval: Welch's t on log times (centred on the
  ratio of geometric means), when every run on both sides converged (with fewer than 2 runs on a side: no
  interval); a run that crossed the target within the first COARSE_EVALS evaluations enters it by both ends of
  its evaluation interval, not its interpolated time (the interpolation is unreliable there), and one that
  crossed at the first evaluation leaves no interval. Where a non-converged run was counted as the slowest, its
  time is unknown (only that it exceeds the budget): no interval. The interval covers the seed-to-seed
  (run-to-run) spread: each seed is a fresh process tree with its own initialization and data order on the same
  machine; not other machines.
* Throughput speedup from the same runs (training samples / training seconds), so the gap between the two is
  visible.
* Equivalence: a strategy's final accuracy (after the same budget) against the same training on one device's
  or its framework's reference strategy's at the same N (_compare), by two one-sided tests (TOST) at a stated
  margin (EQUIVALENCE_MARGIN, accuracy as a fraction): "equivalent" when the 90% interval of the difference lies
  inside the margin, "different" when it lies wholly outside it, else "inconclusive". Seeds are paired where
  both sides ran the same seeds (the same initialization and data order).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Iterable

from distbench.core.strategies import FRAMEWORK_BASELINE, FRAMEWORK_REFERENCE
from distbench.results import stats

MLPERF_MIN_RUNS = 3
"""From this many runs the fastest and the slowest are dropped (see trimmed)."""
COUNTED = ("ok", "failed", "timeout", "oom")
"""Statuses a run is counted under MLPerf's rule with (failed, timed out, out of memory: not converged); skipped and
interrupted runs are not counted (incomplete)."""
COARSE_EVALS = 2
"""A run whose first evaluation at or above the target is one of the first COARSE_EVALS (eval_step_at_target <=
COARSE_EVALS x eval_every_steps) crossed too early for the interpolation: tests/convergesim.py's baseline sweep."""
EQUIVALENCE_MARGIN = 0.005
"""Default margin of the equivalence test: 0.5 accuracy points (accuracy as a fraction)."""
CI_SCOPE = (
    "run to run (seed to seed): each seed is a fresh process tree with its own initialization and data order on "
    "this machine; Welch t on log times, only where every run on both sides converged; a run that reached the "
    "target within the first two evaluations enters it by both ends of its evaluation interval"
)
NOT_CONVERGED = math.inf
"""A run that did not reach the target, in the olympic mean: slower than any run that did."""


def trimmed(n: int) -> int:
    """Runs dropped at each end of the olympic mean of n runs: 1 from MLPERF_MIN_RUNS (3) on, as MLPerf Training
    drops the fastest and slowest of every benchmark's runs; none below."""
    return 1 if n >= MLPERF_MIN_RUNS else 0


def olympic_mean(values: list[float]) -> float | None:
    """MLPerf's mean: with at least MLPERF_MIN_RUNS values, without the smallest and the largest. A value of
    NOT_CONVERGED (a run that did not reach the target) is the slowest; None when one remains after the trim
    (more runs did not converge than are dropped: the point did not converge) or there are no values."""
    if not values:
        return None
    v = sorted(values)
    k = trimmed(len(v))
    if k:
        v = v[k:-k]
    if any(math.isinf(x) for x in v):
        return None
    return sum(v) / len(v)


def welch_log_ratio(ref: list[float], other: list[float], level: float = stats.CI_LEVEL) -> dict | None:
    """ratio = geomean(ref) / geomean(other) (a speedup when these are times) with a Welch t-interval on the
    difference of mean logs (df: Welch-Satterthwaite, rounded down). None with fewer than 2 runs on a side."""
    if len(ref) < 2 or len(other) < 2 or min(ref + other) <= 0:
        return None
    la, lb = [math.log(t) for t in ref], [math.log(t) for t in other]
    d = statistics.fmean(la) - statistics.fmean(lb)
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    se = math.sqrt(va + vb)
    if se == 0:
        return {"ratio": math.exp(d), "low": math.exp(d), "high": math.exp(d), "df": None, "scope": CI_SCOPE}
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
    h = stats.t_crit(max(1, int(df)), level) * se
    return {"ratio": math.exp(d), "low": math.exp(d - h), "high": math.exp(d + h), "df": df, "scope": CI_SCOPE}


def time_bounds(c: dict) -> tuple[float, float, float]:
    """(interpolated time to target, low, high) of a converged run: low = high = the time, except for a run that
    crossed within the first COARSE_EVALS evaluations, whose bounds are its evaluation interval's
    (train_s_bracket)."""
    t = c["train_s_to_target"]
    every, at, bracket = c.get("eval_every_steps"), c.get("eval_step_at_target"), c.get("train_s_bracket")
    if every and at is not None and bracket and at <= COARSE_EVALS * every:
        return t, bracket[0], bracket[1]
    return t, t, t


NO_CI_FEW_RUNS = "no interval: needs 2 or more converged runs on both sides"
NO_CI_FIRST_EVAL = "no interval: a run reached the target at its first evaluation"
NO_CI_NOT_CONVERGED = "no interval: a run that did not converge was counted as the slowest (its time is unknown)"
NO_CI_CELL = {
    NO_CI_FEW_RUNS: "(no CI: fewer than 2 converged runs on a side)",
    NO_CI_FIRST_EVAL: "(no CI: a run reached the target at its first evaluation)",
    NO_CI_NOT_CONVERGED: "(no CI: a run did not converge)",
}
"""Why a time-to-target speedup has no interval (the note's opening), and the words its table cell adds."""


def speedup_interval(ref: list[tuple], other: list[tuple], level: float = stats.CI_LEVEL) -> tuple[dict | None, str]:
    """(the 95% interval of the time-to-target speedup ref / other, a note) from time_bounds of each side's runs:
    welch_log_ratio of the interpolated times where no run crossed early; else its low end from (ref's low
    bounds, other's high bounds) and its high end from (ref's high, other's low), so it spans the evaluation
    intervals of the early runs. None (and why) where a run crossed at the first evaluation (its low bound is
    0) or a side has fewer than 2 runs."""
    ci = welch_log_ratio([t for t, _, _ in ref], [t for t, _, _ in other], level)
    if ci is None:
        return None, NO_CI_FEW_RUNS
    early = sum(lo != hi for _, lo, hi in ref + other)
    if not early:
        return ci, ""
    advice = "use a finer --eval-every"
    if min(lo for _, lo, _ in ref + other) <= 0:
        return None, f"{NO_CI_FIRST_EVAL} ({advice})"
    low = welch_log_ratio([lo for _, lo, _ in ref], [hi for _, _, hi in other], level)
    high = welch_log_ratio([hi for _, _, hi in ref], [lo for _, lo, _ in other], level)
    note = (
        f"{early} runs reached the target within the first {COARSE_EVALS} evaluations: the interval spans their "
        f"evaluation intervals ({advice})"
    )
    return {**ci, "low": low["low"], "high": high["high"], "early_runs": early}, note


def _conv(record: dict) -> dict | None:
    return record.get("converge") if record.get("status") == "ok" else None


def _seed(record: dict):
    return (record.get("config") or {}).get("seed")


def summarize(records: Iterable[dict], margin: float = EQUIVALENCE_MARGIN) -> list[dict]:
    """One row per (strategy, N), in the order first seen. margin: the equivalence test's margin (accuracy as a
    fraction)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["strategy"], r["world_size"])].append(r)
    rows = []
    for (strategy, n), every_run in groups.items():
        runs = [r for r in every_run if r.get("status") in COUNTED]
        incomplete = len(every_run) - len(runs)
        done = [c for c in map(_conv, runs) if c is not None]
        reached = [c for c in done if c["reached"]]
        times = [c["train_s_to_target"] for c in reached]
        epochs = [c["epochs_to_target"] for c in reached]
        finals = [c["final_accuracy"] for c in done]
        throughputs = [c["throughput"] for c in done if c.get("throughput")]
        missing = [NOT_CONVERGED] * (len(runs) - len(reached))  # failed or not converged: the slowest
        allowed = trimmed(len(runs))
        enough = bool(reached) and len(missing) <= allowed

        def mean(values):
            return olympic_mean(values + missing) if enough else None

        if not runs:
            verdict = f"incomplete: all {incomplete} runs were skipped or interrupted"
        elif enough:
            verdict = "converged"
        else:
            rule = (
                f"MLPerf's rule counts at most {allowed} as the dropped slowest run"
                if allowed
                else f"with fewer than {MLPERF_MIN_RUNS} runs none is dropped, so every run must reach it"
            )
            verdict = (
                f"did not converge: {len(missing)} of {len(runs)} runs did not reach the target within the budget "
                f"(or failed); {rule}"
            )
        if incomplete and runs:
            verdict += f" ({incomplete} more skipped or interrupted, not counted)"
        rows.append(
            {
                "strategy": strategy,
                "framework": every_run[0]["framework"],
                "world_size": n,
                "global_batch": every_run[0].get("global_batch"),
                "runs": len(runs),
                "incomplete": incomplete,
                "failed": len(runs) - len(done),
                "converged": len(reached),
                "not_converged": len(done) - len(reached),
                "time_to_target_s": mean(times),
                "time_min_s": min(times, default=None),
                "time_max_s": max(times, default=None),
                "time_std_s": statistics.stdev(times) if len(times) > 1 else None,
                "times_s": times,
                "time_bounds_s": [time_bounds(c) for c in reached],
                "seeds": [_seed(r) for r in runs if _conv(r) is not None],
                "epochs_to_target": mean(epochs),
                "epochs": epochs,
                "steps_to_target": mean([c["steps_to_target"] for c in reached]),
                "eval_s": statistics.fmean(c["eval_s"] for c in done) if done else None,
                "final_accuracy": statistics.fmean(finals) if finals else None,
                "final_accuracy_std": statistics.stdev(finals) if len(finals) > 1 else None,
                "final_accuracies": finals,
                "val_samples": done[0]["val_samples"] if done else None,
                "throughput": math.exp(statistics.fmean(math.log(t) for t in throughputs)) if throughputs else None,
                "throughputs": throughputs,
                "lr": done[0]["lr"] if done else None,
                "dropped_fastest_slowest": allowed > 0,
                "not_converged_counted_slowest": len(missing) if enough else 0,
                "verdict": verdict,
            }
        )
    _compare(rows, margin)
    return rows


EQUIVALENCE_REFERENCE = FRAMEWORK_REFERENCE
"""At N > 1 a strategy's accuracy is compared with this strategy's at the same N (the same global batch and LR):
the single-device baseline runs at N=1 only, with a smaller global batch."""


def _equivalence_reference(r: dict, rows: list[dict], base: dict) -> dict | None:
    if r["world_size"] == 1:
        return base.get(r["framework"])
    same_n = [q for q in rows if q["framework"] == r["framework"] and q["world_size"] == r["world_size"]]
    preferred = [q for q in same_n if q["strategy"] == EQUIVALENCE_REFERENCE.get(r["framework"])]
    return (preferred or same_n or [None])[0]


def _compare(rows: list[dict], margin: float = EQUIVALENCE_MARGIN) -> None:
    """Speedups against each framework's baseline at N=1, and the equivalence verdict (in place): at N=1 against
    the baseline, at N > 1 against the framework's reference strategy at the same N (EQUIVALENCE_REFERENCE);
    accuracy_diff_vs_baseline keeps the large-batch difference from the N=1 baseline apart."""
    base = {
        r["framework"]: r for r in rows if r["world_size"] == 1 and r["strategy"] == FRAMEWORK_BASELINE[r["framework"]]
    }
    for r in rows:
        ref = base.get(r["framework"])
        r["reference"] = f"{ref['strategy']} N=1" if ref else None
        eq_ref = _equivalence_reference(r, rows, base)
        r["equivalence_reference"] = f"{eq_ref['strategy']} N={eq_ref['world_size']}" if eq_ref else None
        r.update(_equivalence(r, eq_ref, margin) if eq_ref else _NO_VERDICT)
        if ref is None:
            r.update(
                throughput_speedup=None,
                time_speedup=None,
                time_speedup_ci=None,
                time_speedup_note=None,
                accuracy_diff_vs_baseline=None,
            )
            continue
        fa, fb = r["final_accuracy"], ref["final_accuracy"]
        r["accuracy_diff_vs_baseline"] = fa - fb if fa is not None and fb is not None else None
        r["throughput_speedup"] = r["throughput"] / ref["throughput"] if r["throughput"] and ref["throughput"] else None
        both = r["time_to_target_s"] and ref["time_to_target_s"]
        all_converged = r["converged"] == r["runs"] and ref["converged"] == ref["runs"]
        # one estimator: the ratio of the MLPerf means (the times to target shown); the interval is Welch's on logs
        r["time_speedup"] = ref["time_to_target_s"] / r["time_to_target_s"] if both else None
        ci, note = None, None
        if both and not all_converged:
            note = NO_CI_NOT_CONVERGED
        elif both:
            ci, note = speedup_interval(ref["time_bounds_s"], r["time_bounds_s"])
        r["time_speedup_ci"] = ci
        r["time_speedup_note"] = note or None


_NO_VERDICT = {"equivalence": None, "equivalent": None, "equivalence_note": None, "accuracy_diff_ci90": None}
EQUIVALENCE_VERDICTS = ("equivalent", "different", "inconclusive")


def tost(a: list[float], b: list[float], margin: float, paired: bool = False) -> dict | None:
    """Two one-sided tests (Schuirmann 1987) of the difference mean(a) - mean(b) against the margin, each at 5%:
    the 90% t-interval of the difference (paired: over the per-seed differences, df n-1; else Welch) inside
    (-margin, margin) -> "equivalent"; wholly outside it -> "different" (the difference exceeds the margin at
    5%); else "inconclusive". None with fewer than 2 values on a side."""
    if len(a) < 2 or len(b) < 2 or (paired and len(a) != len(b)):
        return None
    if paired:
        d = [x - y for x, y in zip(a, b)]
        diff, se, df = statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d)), len(d) - 1
    else:
        diff = statistics.fmean(a) - statistics.fmean(b)
        va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else len(a) + len(b) - 2
    h = stats.t_crit(max(1, int(df)), 0.90) * se if se > 0 else 0.0
    low, high = diff - h, diff + h
    if -margin < low and high < margin:
        verdict = "equivalent"
    elif low > margin or high < -margin:
        verdict = "different"
    else:
        verdict = "inconclusive"
    return {"verdict": verdict, "diff": diff, "low": low, "high": high, "se": se, "df": df, "paired": paired}


def _equivalence(r: dict, ref: dict, margin: float = EQUIVALENCE_MARGIN) -> dict:
    a, b = r["final_accuracies"], ref["final_accuracies"]
    if r is ref or not a or not b:
        return dict(_NO_VERDICT)
    diff = statistics.fmean(a) - statistics.fmean(b)
    sa, sb = r.get("seeds") or [], ref.get("seeds") or []
    paired = (
        None not in sa + sb and len(set(sa)) == len(sa) == len(a) and sorted(sa) == sorted(sb) and len(sb) == len(b)
    )
    if paired:
        by_seed = dict(zip(sb, b))
        b = [by_seed[s] for s in sa]
    test = tost(a, b, margin, paired)
    if test is None:
        return {
            **_NO_VERDICT,
            "equivalence_note": "needs 2 or more seeds on both sides",
            "accuracy_diff": diff,
        }
    how = "paired by seed" if paired else "Welch"
    note = (
        f"{test['verdict']}: final accuracy {diff:+.4f} vs {r['equivalence_reference']}, 90% interval "
        f"[{test['low']:+.4f}, {test['high']:+.4f}] ({how}), margin +-{margin:.4f} (TOST at 5%)"
    )
    return {
        "equivalence": test["verdict"],
        "equivalent": {"equivalent": True, "different": False}.get(test["verdict"]),
        "equivalence_note": note,
        "accuracy_diff": diff,
        "accuracy_diff_ci90": [test["low"], test["high"]],
    }


def fmt(v, spec: str, dash: str = "-") -> str:
    return dash if v is None else format(v, spec)


def speed_and_time_cells(r: dict) -> tuple[str, str]:
    """A summary row's time-to-target speedup (with its CI) and time to target (with the seeds' range),
    as the terminal table and the report both show them."""
    ci = r.get("time_speedup_ci")
    speed = fmt(r.get("time_speedup"), ".2f")
    if ci:
        speed += f" [{ci['low']:.2f}, {ci['high']:.2f}]"
    elif r.get("time_speedup_note"):
        note = r["time_speedup_note"]
        speed += " " + next((cell for why, cell in NO_CI_CELL.items() if note.startswith(why)), "(no CI)")
    time_text = fmt(r["time_to_target_s"], ".3g", "did not converge")
    if r["time_min_s"] is not None:
        time_text += f" ({r['time_min_s']:.3g}-{r['time_max_s']:.3g})"
    return speed, time_text

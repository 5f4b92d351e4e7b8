"""MLPerf-style statistics of converge runs: per (strategy, N) over its seeds, and between strategies.

* Time to target per (strategy, N): the mean over the seeds that reached it, dropping the fastest and the
  slowest run when there are at least 5 (MLPerf Training's olympic mean), the spread (min, max, standard
  deviation) and the count of runs that did not converge within the budget (kept, never dropped). When fewer
  than half of the runs converged there is no mean: the point "did not converge".
* Time-to-target speedup of a strategy against its framework's single-device baseline: the ratio of geometric
  means of the converged seeds' times with a 95% Welch t-interval on log times (with fewer than 2 runs on a
  side: the ratio of the means, no interval). It covers the seed-to-seed (run-to-run) spread: each seed is
  a fresh process tree with its own initialization and data order on the same machine; not other machines.
* Throughput speedup from the same runs (training samples / training seconds), so the gap between the two is
  visible.
* Equivalence: a strategy's final accuracy (after the same budget) against the same training on one device's
  or its framework's reference strategy's at the same N (_compare), flagged when the difference exceeds twice
  its standard error and one validation sample.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Iterable

from distbench import stats
from distbench.strategies import FRAMEWORK_BASELINE

MLPERF_MIN_RUNS = 5
CI_SCOPE = (
    "run to run (seed to seed): each seed is a fresh process tree with its own initialization and data order on "
    "this machine; Welch t on log times"
)


def olympic_mean(values: list[float]) -> float | None:
    """Mean; with at least MLPERF_MIN_RUNS values, without the smallest and the largest."""
    if not values:
        return None
    v = sorted(values)
    if len(v) >= MLPERF_MIN_RUNS:
        v = v[1:-1]
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


def _conv(record: dict) -> dict | None:
    return record.get("converge") if record.get("status") == "ok" else None


def summarize(records: Iterable[dict]) -> list[dict]:
    """One row per (strategy, N), in the order first seen."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["strategy"], r["world_size"])].append(r)
    rows = []
    for (strategy, n), runs in groups.items():
        done = [c for c in map(_conv, runs) if c is not None]
        reached = [c for c in done if c["reached"]]
        times = [c["train_s_to_target"] for c in reached]
        epochs = [c["epochs_to_target"] for c in reached]
        finals = [c["final_accuracy"] for c in done]
        throughputs = [c["throughput"] for c in done if c.get("throughput")]
        enough = len(reached) * 2 >= len(runs) and reached
        rows.append(
            {
                "strategy": strategy,
                "framework": runs[0]["framework"],
                "world_size": n,
                "global_batch": runs[0].get("global_batch"),
                "runs": len(runs),
                "failed": len(runs) - len(done),
                "converged": len(reached),
                "not_converged": len(done) - len(reached),
                "time_to_target_s": olympic_mean(times) if enough else None,
                "time_min_s": min(times, default=None),
                "time_max_s": max(times, default=None),
                "time_std_s": statistics.stdev(times) if len(times) > 1 else None,
                "times_s": times,
                "epochs_to_target": olympic_mean(epochs) if enough else None,
                "epochs": epochs,
                "steps_to_target": olympic_mean([c["steps_to_target"] for c in reached]) if enough else None,
                "eval_s": statistics.fmean(c["eval_s"] for c in done) if done else None,
                "final_accuracy": statistics.fmean(finals) if finals else None,
                "final_accuracy_std": statistics.stdev(finals) if len(finals) > 1 else None,
                "final_accuracies": finals,
                "val_samples": done[0]["val_samples"] if done else None,
                "throughput": math.exp(statistics.fmean(math.log(t) for t in throughputs)) if throughputs else None,
                "throughputs": throughputs,
                "lr": done[0]["lr"] if done else None,
                "dropped_fastest_slowest": len(times) >= MLPERF_MIN_RUNS,
                "verdict": "converged" if enough else "did not converge within the budget",
            }
        )
    _compare(rows)
    return rows


EQUIVALENCE_REFERENCE = {"torch": "ddp", "tf": "mirrored"}
"""At N > 1 a strategy's accuracy is compared with this strategy's at the same N (the same global batch and LR):
the single-device baseline runs at N=1 only, with a smaller global batch."""


def _equivalence_reference(r: dict, rows: list[dict], base: dict) -> dict | None:
    if r["world_size"] == 1:
        return base.get(r["framework"])
    same_n = [q for q in rows if q["framework"] == r["framework"] and q["world_size"] == r["world_size"]]
    preferred = [q for q in same_n if q["strategy"] == EQUIVALENCE_REFERENCE.get(r["framework"])]
    return (preferred or same_n or [None])[0]


def _compare(rows: list[dict]) -> None:
    """Speedups against each framework's baseline at N=1, and the equivalence flag (in place): at N=1 against
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
        r.update(_equivalence(r, eq_ref) if eq_ref else {"equivalent": None, "equivalence_note": None})
        if ref is None:
            r.update(throughput_speedup=None, time_speedup=None, time_speedup_ci=None, accuracy_diff_vs_baseline=None)
            continue
        fa, fb = r["final_accuracy"], ref["final_accuracy"]
        r["accuracy_diff_vs_baseline"] = fa - fb if fa is not None and fb is not None else None
        r["throughput_speedup"] = r["throughput"] / ref["throughput"] if r["throughput"] and ref["throughput"] else None
        both = r["time_to_target_s"] and ref["time_to_target_s"]
        ci = welch_log_ratio(ref["times_s"], r["times_s"]) if both else None
        # the CI's centre (ratio of geometric means) where there is a CI, else the ratio of the means
        r["time_speedup"] = ci["ratio"] if ci else ref["time_to_target_s"] / r["time_to_target_s"] if both else None
        r["time_speedup_ci"] = ci


def _equivalence(r: dict, ref: dict) -> dict:
    a, b = r["final_accuracies"], ref["final_accuracies"]
    if r is ref or not a or not b:
        return {"equivalent": None, "equivalence_note": None}
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return {"equivalent": None, "equivalence_note": "needs 2 or more seeds on both sides", "accuracy_diff": diff}
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    one = 1.0 / (r["val_samples"] or 1)
    tol = max(2 * se, one)
    ok = abs(diff) <= tol
    note = (
        f"final accuracy {diff:+.4f} vs {r['equivalence_reference']} (tolerance {tol:.4f}: 2 standard errors of the seed-to-seed "
        f"spread, at least one validation sample)"
    )
    return {"equivalent": ok, "equivalence_note": note, "accuracy_diff": diff}


def fmt(v, spec: str, dash: str = "-") -> str:
    return dash if v is None else format(v, spec)


def speed_and_time_cells(r: dict) -> tuple[str, str]:
    """A summary row's time-to-target speedup (with its CI) and time to target (with the seeds' range),
    as the terminal table and the report both show them."""
    ci = r.get("time_speedup_ci")
    speed = fmt(r.get("time_speedup"), ".2f")
    if ci:
        speed += f" [{ci['low']:.2f}, {ci['high']:.2f}]"
    time_text = fmt(r["time_to_target_s"], ".3g", "did not converge")
    if r["time_min_s"] is not None:
        time_text += f" ({r['time_min_s']:.3g}-{r['time_max_s']:.3g})"
    return speed, time_text

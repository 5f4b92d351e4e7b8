"""Predicted time and cost to train (`distbench predict --epochs-to-target CONVERGE_SWEEP`): the predicted
throughput of each (strategy, N) turned into time to the target with the epochs to target a converge sweep
measured at that global batch. It says which global batches were measured and which are extrapolated.

Epochs to target depend on the global batch and the LR rule, not on the strategy (strategies that are the same
training reach the target at the same step: docs/convergence.md), so they are pooled per global batch over the
converge sweep's strategies. A global batch larger than every measured one takes the largest measured batch's
epochs: an optimistic bound (a larger batch usually needs more epochs), marked as such; a smaller one takes the
nearest measured batch above it (pessimistic), marked too.
"""

from __future__ import annotations

import statistics

from distbench.converge.summary import summarize


def epochs_by_global_batch(records: list[dict]) -> dict[int, dict]:
    """{global batch: {"epochs": mean over the converged runs, "runs": n, "strategies": [...]}} of a converge
    sweep's records (only (strategy, N) points that converged)."""
    pooled: dict[int, dict] = {}
    for row in summarize(records):
        if row["epochs_to_target"] is None:
            continue
        entry = pooled.setdefault(row["global_batch"], {"epochs_list": [], "strategies": []})
        entry["epochs_list"] += row["epochs"]
        entry["strategies"].append(f"{row['strategy']} N={row['world_size']}")
    return {
        g: {"epochs": statistics.fmean(e["epochs_list"]), "runs": len(e["epochs_list"]), "strategies": e["strategies"]}
        for g, e in sorted(pooled.items())
    }


def _epochs_for(global_batch: int, measured: dict[int, dict]) -> tuple[float, str]:
    if global_batch in measured:
        return measured[global_batch]["epochs"], "measured"
    above = [g for g in measured if g > global_batch]
    if above:
        g = min(above)
        return measured[g]["epochs"], f"extrapolated from global batch {g} (pessimistic: a smaller batch needs fewer)"
    g = max(measured)
    return measured[g]["epochs"], f"extrapolated from global batch {g} (optimistic: a larger batch needs more)"


def time_to_train(doc: dict, records: list[dict], epoch_samples: int, gpu_hour_price: float | None) -> dict:
    """Rows (strategy, N, global batch, epochs and where they come from, time to train with the throughput's
    95% interval, cost) for every predicted row of a `distbench predict` document."""
    measured = epochs_by_global_batch(records)
    if not measured:
        return {"rows": [], "measured_global_batches": [], "note": "no (strategy, N) of the converge sweep converged"}
    rows = []
    for s in doc.get("series", []):
        for p in s.get("predicted", []):
            g = int(round(p["per_device_batch"] * p["n"]))  # per device at N under either scaling
            epochs, source = _epochs_for(g, measured)
            thr, lo, hi = p.get("throughput"), p.get("throughput_low"), p.get("throughput_high")
            if not thr:
                continue
            seconds = [epochs * epoch_samples / x if x else None for x in (thr, hi, lo)]
            row = {
                "strategy": s["strategy"],
                "n": p["n"],
                "global_batch": g,
                "epochs_to_target": epochs,
                "epochs_source": source,
                "time_to_train_s": seconds[0],
                "time_to_train_low_s": seconds[1],
                "time_to_train_high_s": seconds[2],
            }
            if gpu_hour_price is not None:
                row["cost"] = seconds[0] / 3600 * p["n"] * gpu_hour_price
            rows.append(row)
    return {
        "rows": rows,
        "measured_global_batches": list(measured),
        "epoch_samples": epoch_samples,
        "note": "time to train = epochs to target (measured per global batch by distbench converge, pooled over "
        "its strategies) x epoch samples / predicted throughput; the interval is the throughput's only (the "
        "epochs' seed-to-seed spread is not in it)",
    }

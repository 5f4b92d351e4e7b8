"""Whether two compared sweeps may have drifted apart: run far apart in time, or under another load. The
gate's run-to-run noise comes from repeats run back to back inside each sweep, so such a drift is not in it;
compare's verdict says so and points to an A/A rerun (--noise-floor)."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from distbench.analysis import Sweep, num

DRIFT_GAP_S = 600.0
"""Sweeps that started further apart than this are said to have run far apart (repeats run back to back)."""
DRIFT_LOAD = 0.10
"""A relative change of the CPU GEMM probe (the records' cpu_gemm_peak, measured at every point) beyond this is
said to be a change of the machine's load."""


def _started(sweep: Sweep) -> float | None:
    try:
        return datetime.fromisoformat(str(sweep.info.get("started"))).timestamp()
    except (TypeError, ValueError):
        return None


def _gemm_probe(index: dict[tuple, dict], keys: list) -> float | None:
    """Median CPU GEMM probe (flop/s) over the successful points `keys` of one side, or None."""
    vals = [num((index[k].get("cpu_gemm_peak") or {}).get("flops_per_s")) for k in keys]
    vals = [v for v in vals if v]
    return float(np.median(vals)) if vals else None


def drift_note(sweep_a: Sweep, sweep_b: Sweep, index_a: dict, index_b: dict) -> str | None:
    """The verdict's caveat when A and B ran far apart in time (DRIFT_GAP_S) or under another load (the CPU
    GEMM probe moved by more than DRIFT_LOAD): the repeats' noise, measured back to back inside each sweep,
    does not include a drift between the sweeps; an A/A rerun (--noise-floor) measures it."""
    why = []
    ta, tb = _started(sweep_a), _started(sweep_b)
    if ta is not None and tb is not None and abs(tb - ta) > DRIFT_GAP_S:
        why.append(f"they started {abs(tb - ta) / 60:.0f} min apart")
    keys = [k for k in index_a if k in index_b and index_a[k].get("status") == index_b[k].get("status") == "ok"]
    ga, gb = _gemm_probe(index_a, keys), _gemm_probe(index_b, keys)
    if ga and gb and abs(gb / ga - 1) > DRIFT_LOAD:
        why.append(
            f"the machine's load differed (CPU GEMM probe {ga / 1e9:.1f} GFLOP/s in A, {gb / 1e9:.1f} in B, "
            f"{gb / ga - 1:+.0%})"
        )
    if not why:
        return None
    return (
        f"A and B may have drifted apart: {' and '.join(why)}; the run-to-run noise comes from repeats run back "
        "to back inside each sweep and does not include drift between sweeps: judge against an A/A rerun of A "
        "with --noise-floor"
    )

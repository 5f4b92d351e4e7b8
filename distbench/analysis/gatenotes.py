"""What `distbench compare` says beside its verdict when a comparison breaks an assumption of the gate's
statistics (distbench.results.gatestats): here, B's run-to-run noise unlike A's on every point, which the pooled
t does not allow for.
"""

from __future__ import annotations

import math

from distbench.results import gatestats

UNSHARED_NOISE_FALSE_ALARM = {"noisier": ((1.5, 3.0), (0.021, 0.084)), "quieter": ((0.5, 0.5), (0.011, 0.052))}
"""Where B's run-to-run sd is (lowest, highest) times A's on every point: the lowest and the highest simulated
family false alarm of the gate over the cells of docs/benchmarks.md, "The regression gate beyond its table",
its table of B's noise (benchmarks/gate_probes.py; tests/test_gate_noise.py holds these to that table)."""
UNSHARED_NOISE_NOTE = (
    "B's run-to-run noise is about {ratio}x A's (sd) across the {points} points with as many repeats in A as in B "
    "and some spread on both (95% CI {low}-{high}x; Wilcoxon signed-rank on their log variance ratios, "
    "p = {p:.2g}): the gate pools A's and B's variances, which assumes they share each point's, and with B's sd "
    "{sim}x A's on every point its simulated family false alarm was {fa_low:.1%}-{fa_high:.1%} against the "
    "design's 5% (docs/benchmarks.md)"
)
"""Said when B's noise differs from A's (gatestats.noise_ratio), with the figures of UNSHARED_NOISE_FALSE_ALARM."""


def _times(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.2f}" if v < 1 else f"{v:.1f}"


def unshared_noise(logs_a: dict, logs_b: dict) -> tuple[dict | None, str | None]:
    """Whether B's run-to-run noise differs from A's over the points with repeats on both sides (log throughputs
    per point): (gatestats.noise_ratio as JSON, None where no point has repeats on both sides; the note where it
    differs, else None)."""
    keys, *sides = gatestats.both_sides(logs_a, logs_b)
    if not keys:
        return None, None
    got = gatestats.noise_ratio(*sides)
    summary = {
        "sd_ratio": got["ratio"] if got["points"] else None,
        "ci_low": got["low"] if got["low"] > 0 else None,
        "ci_high": got["high"] if math.isfinite(got["high"]) else None,
        "p_value": got["p"],
        "points": got["points"],
        "differs": got["differs"],
    }
    if not got["differs"]:
        return summary, None
    sims, (fa_low, fa_high) = UNSHARED_NOISE_FALSE_ALARM["noisier" if got["ratio"] > 1 else "quieter"]
    ratio, low, high = (_times(got[k]) for k in ("ratio", "low", "high"))
    note = UNSHARED_NOISE_NOTE.format(
        ratio=ratio,
        points=got["points"],
        low=low,
        high=high,
        p=got["p"],
        sim="-".join(dict.fromkeys(f"{v:g}" for v in sims)),
        fa_low=fa_low,
        fa_high=fa_high,
    )
    return summary, note

"""The regression gate of `distbench compare` on simulated sweeps: family-wise false alarm (A/A) and power (a 10%
slowdown of one point) per cell of noise law x heterogeneity x repeats x points, with Monte Carlo standard errors.
Every comparison is judged by the project's own functions (tests/cisim.gate_sweeps calls
distbench.results.gatestats as `compare` does). Prints a markdown section; --out writes it into docs/benchmarks.md.

    .venv/bin/python benchmarks/gate_power.py --trials 4000 --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/cisim.py: the simulations the tests also run
from mdsection import write_section  # noqa: E402

from distbench.results import gatestats  # noqa: E402
from tests import cisim  # noqa: E402

PATTERNS = {
    "equal variances": {},
    "variances spread 10x": {"hetero": math.sqrt(10)},
    "one point's variance 10x": {"noisy": math.sqrt(10)},
}
"""Heterogeneity of the points' run-to-run noise: equal; variances spread geometrically 10x from the quietest point
to the noisiest (sd 3.16x); the last point's variance 10x the others' (sd 3.16x)."""
LAWS = {"Gaussian": "normal", "t(4)": "t4", "lognormal": "lognormal"}


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


def rows(trials: int, sd: float, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    cells = [(law, pattern, r, points) for law in LAWS for pattern in PATTERNS for r in (3, 5) for points in (10, 20)]
    for law, pattern, r, points in cells:
        kw = dict(points=points, r=r, run_sd=sd, law=LAWS[law], trials=trials, **PATTERNS[pattern])
        fa = cisim.gate_sweeps(rng, **kw)["family_false_alarm"]
        pw = cisim.gate_sweeps(rng, effect=0.9, **kw)["power"]
        out.append(
            f"| {law} | {pattern} | {r} | {points} | {fa:.1%} ± {_se(fa, trials):.1%} | {pw:.1%} ± {_se(pw, trials):.1%} |"
        )
        print(out[-1], file=sys.stderr, flush=True)
    kw = dict(points=20, r=3, run_sd=sd, law="normal", noisy=3.0, noisy_points=5, one_df_points=1, trials=trials)
    fa = cisim.gate_sweeps(rng, **kw)["family_false_alarm"]
    pw = cisim.gate_sweeps(rng, effect=0.9, **kw)["power"]
    out.append(
        f"| Gaussian | 5 of 20 points 3x noisier (sd), one point with 1 df in B | 3 (2 there) | 20 | "
        f"{fa:.1%} ± {_se(fa, trials):.1%} | {pw:.1%} ± {_se(pw, trials):.1%} |"
    )
    print(out[-1], file=sys.stderr, flush=True)
    return out


def holm_sidak(p):
    """Holm's step-down with Sidak's thresholds, 1 - (1 - p)^k for the k points left (valid for independent
    points): an alternative `alternatives` measures, not what compare uses."""
    p = np.asarray(p, dtype=float)
    filled = np.where(np.isnan(p), np.inf, p)
    m = np.isfinite(filled).sum(axis=-1, keepdims=True)
    order = np.argsort(filled, axis=-1)
    ranked = np.minimum(np.take_along_axis(filled, order, axis=-1), 1.0)
    adj = np.maximum.accumulate(1 - (1 - ranked) ** np.maximum(m - np.arange(p.shape[-1]), 1), axis=-1)
    out = np.empty_like(adj)
    np.put_along_axis(out, order, adj, axis=-1)
    return np.where(np.isnan(p), np.nan, out)


ALTERNATIVES = {
    "as built": {},
    f"prior df cap 32 (built: {gatestats.D0_MAX:g})": {"D0_MAX": 32.0},
    f"d0 at a 0.25-sd bound (built: {gatestats.SPREAD_MARGIN:g})": {"SPREAD_MARGIN": 0.25},
    "Holm-Sidak instead of Holm": {"holm_adjusted": holm_sidak},
}
"""Changes to gatestats that could buy power at R = 3 and 20 points, each judged on the same simulated sweeps."""


def alternatives(trials: int, sd: float, seed: int) -> list[str]:
    """R = 3 cells (and the 1-df cell) under each of ALTERNATIVES, every alternative on the same random sweeps
    (one seed per cell), so their differences are paired: 'false alarm / power' per cell and alternative."""
    cells = [(law, pattern, points) for law in LAWS for pattern in PATTERNS for points in (10, 20)]
    cells.append(("Gaussian", "5 of 20 points 3x noisier (sd), one point with 1 df in B", 20))
    out = []
    for i, (law, pattern, points) in enumerate(cells):
        extra = PATTERNS.get(pattern, {"noisy": 3.0, "noisy_points": 5, "one_df_points": 1})
        kw = dict(points=points, r=3, run_sd=sd, law=LAWS[law], trials=trials, **extra)
        cols = []
        for changes in ALTERNATIVES.values():
            saved = {name: getattr(gatestats, name) for name in changes}
            try:
                for name, value in changes.items():
                    setattr(gatestats, name, value)
                rng = np.random.default_rng([seed, i])
                fa = cisim.gate_sweeps(rng, **kw)["family_false_alarm"]
                pw = cisim.gate_sweeps(rng, effect=0.9, **kw)["power"]
            finally:
                for name, value in saved.items():
                    setattr(gatestats, name, value)
            cols.append(f"{fa:.1%} / {pw:.1%}")
        out.append(f"| {law} | {pattern} | {points} | " + " | ".join(cols) + " |")
        print(out[-1], file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=4000, help="simulated sweep pairs per cell (each of A/A and power)"
    )
    parser.add_argument("--sd", type=float, default=0.03, help="run-to-run sd of log throughput (median point)")
    parser.add_argument("--out", help="markdown file to write the section into")
    parser.add_argument(
        "--alternatives",
        action="store_true",
        help="instead: the R = 3 cells under each of ALTERNATIVES (its own section)",
    )
    args = parser.parse_args()
    start = time.time()
    if args.alternatives:
        body = alternatives(args.trials, args.sd, 2042)
        text = "\n".join(
            [
                "## The regression gate: alternatives for power at 20 points (`benchmarks/gate_power.py --alternatives`)",
                "",
                f"{args.trials} simulated pairs of sweeps per cell and column, R = 3 per side, run-to-run sd of the "
                f"median point {args.sd:.0%}, set up as in the section above, each alternative judged on the same "
                "simulated sweeps as the gate as built (paired). Each cell: family false alarm / power to call a 10% "
                f"slowdown of one point, ± about {_se(0.04, args.trials):.1%} and {_se(0.8, args.trials):.1%} (one "
                "Monte Carlo standard error).",
                "",
                "| noise | pattern | points | " + " | ".join(ALTERNATIVES) + " |",
                "|---|---|---|" + "---|" * len(ALTERNATIVES),
                *body,
                "",
                f"Run {time.strftime('%Y-%m-%d', time.gmtime())}, `benchmarks/gate_power.py --alternatives --trials "
                f"{args.trials}`, {time.time() - start:.0f} s on a shared 2-core machine.",
                "",
            ]
        )
        print(text)
        if args.out:
            write_section(args.out, text)
        return
    body = rows(args.trials, args.sd, 2042)
    text = "\n".join(
        [
            "## The regression gate's false alarm and power (`benchmarks/gate_power.py`)",
            "",
            f"{args.trials} simulated pairs of sweeps A and B per cell and per column (A/A for the false alarm; B's "
            "median-noise point 10% slower for the power), judged by the project's own functions exactly as "
            "`compare` judges them (tests/cisim.gate_sweeps, distbench/results/gatestats.py): each point's "
            "run-to-run variance of log throughput pooled over A's and B's repeats, moderated across the points "
            f"(the prior's df at the lower {gatestats.SPREAD_MARGIN:g}-sd confidence bound of its moment estimate, "
            f"robust to outlying points, capped at {gatestats.D0_MAX:g} for points with 2 df or more), t on the "
            "difference of mean log throughputs, regressions tested one-sided with Holm across the points at a "
            "family-wise 5%, threshold 5%. Run-to-run sd of the median point "
            f"{args.sd:.0%}. Noise laws at unit variance (cisim.run_noise): Gaussian, t(4), lognormal (shape 0.5, "
            "skewed towards slow runs). False alarm: share of A/A pairs with any point called a regression. Power: "
            "share of pairs calling the slowed point a regression. ± is one Monte Carlo standard error, "
            f"sqrt(p(1 - p)/{args.trials}).",
            "",
            "| noise | pattern | repeats per side | points | family false alarm | power, 10% slowdown |",
            "|---|---|---|---|---|---|",
            *body,
            "",
            f"Run {time.strftime('%Y-%m-%d', time.gmtime())}, "
            f"`benchmarks/gate_power.py --trials {args.trials}`, {time.time() - start:.0f} s on a shared 2-core machine.",
            "",
        ]
    )
    print(text)
    if args.out:
        write_section(args.out, text)


if __name__ == "__main__":
    main()

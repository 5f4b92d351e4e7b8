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
from tests import cisim  # noqa: E402
from distbench.results import gatestats  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=4000, help="simulated sweep pairs per cell (each of A/A and power)"
    )
    parser.add_argument("--sd", type=float, default=0.03, help="run-to-run sd of log throughput (median point)")
    parser.add_argument("--out", help="markdown file to write the section into")
    args = parser.parse_args()
    start = time.time()
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

"""The regression gate of `distbench compare` in cases its table (benchmarks/gate_power.py) does not cover, which
users hit: several points slowed at once, slowdowns smaller than 10%, a change that also adds noise, a point with
1 df under heavy-tailed noise, R = 2 under heavy-tailed noise, and B's noise changed on every point (a busier
machine). Same simulation and functions as gate_power.py (tests/cisim.gate_sweeps, gatestats as `compare` calls
them). Prints a markdown section; --out writes it into docs/benchmarks.md.

    .venv/bin/python benchmarks/gate_probes.py --trials 16000 --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gate_power import LAWS, _se, _upper  # noqa: E402
from mdsection import write_section  # noqa: E402

from tests import cisim  # noqa: E402

S10 = math.sqrt(10)
PROBES = [
    ("3 of 20 slowed 10%, equal variances", "Gaussian", 3, 20, {"slowed_points": 3}),
    ("3 of 20 slowed 10%, equal variances", "lognormal", 3, 20, {"slowed_points": 3}),
    ("3 of 20 slowed 10%, variances spread 10x", "Gaussian", 3, 20, {"slowed_points": 3, "hetero": S10}),
    ("3 of 10 slowed 10%, variances spread 10x", "Gaussian", 3, 10, {"slowed_points": 3, "hetero": S10}),
    ("3 of 10 slowed 10%, one point's variance 10x", "Gaussian", 3, 10, {"slowed_points": 3, "noisy": S10}),
    ("one point slowed 7%", "Gaussian", 3, 20, {"effect": 0.93}),
    ("one point slowed 7%", "lognormal", 3, 20, {"effect": 0.93}),
    ("one point slowed 5% (the threshold)", "Gaussian", 3, 20, {"effect": 0.95}),
    ("one point slowed 5% (the threshold)", "Gaussian", 5, 20, {"effect": 0.95}),
    ("one point slowed 10% and 3x noisier in B", "Gaussian", 3, 20, {"slowed_noise": 3.0}),
    ("one point slowed 10% and 3x noisier in B", "lognormal", 3, 20, {"slowed_noise": 3.0}),
    (
        "5 of 20 points 3x noisier (sd), one with 1 df in B",
        "t(4)",
        3,
        20,
        {"noisy": 3.0, "noisy_points": 5, "one_df_points": 1},
    ),
    (
        "5 of 20 points 3x noisier (sd), one with 1 df in B",
        "lognormal",
        3,
        20,
        {"noisy": 3.0, "noisy_points": 5, "one_df_points": 1},
    ),
    ("variances spread 10x, 3 points with 1 df in B", "t(4)", 3, 20, {"hetero": S10, "one_df_points": 3}),
    ("equal variances", "t(4)", 2, 20, {}),
    ("equal variances", "lognormal", 2, 20, {}),
    ("variances spread 10x", "lognormal", 2, 20, {"hetero": S10}),
    ("one point 5x noisier (sd)", "t(4)", 2, 20, {"noisy": 5.0}),
    ("one point 5x noisier (sd)", "lognormal", 2, 20, {"noisy": 5.0}),
    ("B's sd 1.5x A's on every point, variances spread 10x", "Gaussian", 3, 20, {"b_noise": 1.5, "hetero": S10}),
    ("B's sd 2x A's on every point, variances spread 10x", "Gaussian", 3, 20, {"b_noise": 2.0, "hetero": S10}),
    ("B's sd 2x A's on every point, equal variances", "lognormal", 3, 20, {"b_noise": 2.0}),
]
"""(case, noise law, repeats per side, points, cisim.gate_sweeps arguments); effect 0.9 (10% slower) unless given."""


def rows(trials: int, sd: float, seed: int) -> list[dict]:
    out = []
    for i, (case, law, r, points, kw) in enumerate(PROBES):
        kw = dict(kw)
        effect = kw.pop("effect", 0.9)
        common = dict(points=points, r=r, run_sd=sd, law=LAWS[law], trials=trials, **kw)
        fa = cisim.gate_sweeps(np.random.default_rng([seed, i, 0]), **common)["family_false_alarm"]
        hit = cisim.gate_sweeps(np.random.default_rng([seed, i, 1]), effect=effect, **common)
        several = kw.get("slowed_points", 1) > 1
        beside = hit["family_false_alarm"]  # the unchanged points, with the slowdown in the same comparison
        cell = {"case": case, "law": law, "r": r, "points": points, "fa": fa, "beside": beside, "power": hit["power"]}
        cell["line"] = (
            f"| {case} | {law} | {r} | {points} | {fa:.1%} ± {_se(fa, trials):.1%} (<= {_upper(fa, trials):.1%}) | "
            f"{beside:.1%} ± {_se(beside, trials):.1%} (<= {_upper(beside, trials):.1%}) | "
            f"{hit['power']:.1%} ± {_se(hit['power'], trials):.1%} | "
            + (f"{hit['all_caught']:.1%} |" if several else "- |")
        )
        print(cell["line"], file=sys.stderr, flush=True)
        out.append(cell)
    return out


SPREAD_CELLS = {
    "variances spread 10x": {"hetero": S10},
    "one point's variance 10x": {"noisy": S10},
}
"""A/A cells of the table (Gaussian, R = 3) whose false alarms are split by point: which points draw them."""


def by_point(trials: int, sd: float, seed: int) -> list[dict]:
    """Per A/A cell of SPREAD_CELLS at 10 and 20 points: the share of all false regressions called on the noisiest
    point and on the noisiest quarter of the points, beside the family false alarm."""
    out = []
    for i, (pattern, kw) in enumerate(SPREAD_CELLS.items()):
        for points in (10, 20):
            res = cisim.gate_sweeps(
                np.random.default_rng([seed, 100 + i, points]),
                points=points,
                r=3,
                run_sd=sd,
                law="normal",
                trials=trials,
                **kw,
            )
            rate = np.asarray(res["per_point"])  # by point, quietest first (cisim orders the noise so)
            quarter = max(1, points // 4)
            out.append(
                {
                    "pattern": pattern,
                    "points": points,
                    "fa": res["family_false_alarm"],
                    "noisiest": float(rate[-1] / rate.sum()),
                    "quarter": float(rate[-quarter:].sum() / rate.sum()),
                    "quarter_n": quarter,
                    "ratio": float(rate[-1] / (0.05 / points)),
                }
            )
    return out


def reading(cells: list[dict], split: list[dict], trials: int) -> list[str]:
    """The section's reading, its figures taken from this run's cells."""
    above = [(c, key) for c in cells for key in ("fa", "beside") if c[key] - 2 * _se(c[key], trials) > 0.05]
    listed = "; ".join(
        f"{c['case']}, {c['law']}, R = {c['r']}, {c['points']} points, {'A/A' if key == 'fa' else 'beside the change'}: "
        f"{c[key]:.1%}"
        for c, key in above
    )
    parts = "; ".join(
        f"{s['pattern']}, {s['points']} points: {s['fa']:.1%} in all, the noisiest point {s['noisiest']:.0%} of the "
        f"false regressions ({s['ratio']:.1f}x its Bonferroni share of 5%), the noisiest {s['quarter_n']} "
        f"{s['quarter']:.0%}"
        for s in split
    )
    return [
        f"What this says. A family false alarm is over 5% by more than 2 standard errors in {len(above)} of the "
        f"{2 * len(cells)} columns" + (f": {listed}." if above else ".") + " The A/A table's family false alarm is a "
        "total over a sweep's points, not a bound on each: where the points' noise differs the moderation shrinks "
        "the noisiest points' variances towards the others', so those points draw most false regressions and "
        f"the quiet ones few (Gaussian noise, R = 3, A/A, {trials} pairs: {parts}). Holm's family-wise bound is "
        "meant to hold whichever points truly changed; here, when quiet points truly regress, Holm tests the "
        "rest at a looser level and the noisier points left can take the family false alarm above 5% (the "
        "cases above). When B's noise differs from A's on every point (a busier machine), A and B no longer "
        "share a point's variance, as the pooled t assumes. A change at the threshold (5%) is called a "
        "regression only when its estimate lands beyond it, so at most about half the time however many "
        "repeats; a change that also makes the point noisier is caught less often than a plain 10% slowdown.",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=16000, help="simulated sweep pairs per case (each of A/A and power)"
    )
    parser.add_argument("--sd", type=float, default=0.03, help="run-to-run sd of log throughput (median point)")
    parser.add_argument("--out", help="markdown file to write the section into")
    args = parser.parse_args()
    start = time.time()
    cells = rows(args.trials, args.sd, 2043)
    split = by_point(args.trials, args.sd, 2043)
    text = "\n".join(
        [
            "## The regression gate beyond its table (`benchmarks/gate_probes.py`)",
            "",
            f"{args.trials} simulated pairs of sweeps per case and column, set up and judged as in the section "
            f"above (run-to-run sd of the median point {args.sd:.0%}, threshold 5%), in cases its table does not "
            "cover. Slowed points are the median-noise point and the next quieter ones. False alarm: share of "
            "pairs calling any unchanged point a regression, in A/A pairs (the case's noise, nothing slowed) and "
            "beside the change (the same pairs as the power: what Holm's family-wise bound is meant to hold "
            "whichever points truly changed). Power: share of slowed points called one (averaged over them); all "
            "caught: share of pairs calling every slowed point one. Where a case also changes a point's noise, the "
            "A/A column keeps that change without the slowdown. ± is one Monte Carlo standard "
            f"error, sqrt(p(1 - p)/{args.trials}); the bracket the upper end of a 95% Wilson interval.",
            "",
            "| case | noise | repeats per side | points | family false alarm, A/A (95% upper end) | "
            "family false alarm beside the change | power | all caught |",
            "|---|---|---|---|---|---|---|---|",
            *(c["line"] for c in cells),
            "",
            f"Run {time.strftime('%Y-%m-%d', time.gmtime())}, `benchmarks/gate_probes.py --trials {args.trials}`, "
            f"{time.time() - start:.0f} s on a shared 2-core machine.",
            "",
            *reading(cells, split, args.trials),
        ]
    )
    print(text)
    if args.out:
        write_section(args.out, text)


if __name__ == "__main__":
    main()

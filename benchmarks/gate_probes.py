"""The regression gate of `distbench compare` in cases its table (benchmarks/gate_power.py) does not cover, which
users hit: several points slowed at once, slowdowns smaller than 10%, a change that also adds noise, a point with
1 df under heavy-tailed noise, R = 2 under heavy-tailed noise, and B's noise changed on every point (a busier
machine); and how often compare's note on B's noise (distbench/analysis/gatenotes.py) fires with nothing changed
and where B's sd is 0.5-3x A's, beside the gate's false alarm there (the figures the note quotes). Same
simulation and functions as gate_power.py (tests/cisim.gate_sweeps, gatestats as `compare` calls them). Prints a
markdown section; --out writes it into docs/benchmarks.md.

    .venv/bin/python benchmarks/gate_probes.py --trials 16000 --out docs/benchmarks.md
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gate_power import LAWS, _se, _upper, gate_parser  # noqa: E402
from mdsection import emit, run_line  # noqa: E402

from distbench.analysis import gatenotes  # noqa: E402
from distbench.results import gatestats  # noqa: E402
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


NOTE_PATTERNS = {
    "equal variances": {},
    "variances spread 10x": {"hetero": S10},
    "one point's variance 10x": {"noisy": S10},
}
"""The A/A patterns of gate_power.py's table, for how often compare's note on B's noise fires with nothing changed."""
NOTE_SIZES = ((3, 10), (3, 20), (5, 10), (5, 20))
B_RATIOS = (0.5, 1.5, 2.0, 3.0)
"""B's run-to-run sd over A's on every point (cisim.gate_sweeps b_noise), variances spread 10x, nothing slowed."""
B_SIZES = ((3, 10), (3, 20), (5, 20))


def note_rows(trials: int, sd: float, seed: int) -> tuple[list[str], list[str], dict]:
    """compare's note on B's noise (gatestats.noise_ratio_p; cisim.gate_sweeps' noise_note): its firing rate in
    A/A pairs per noise law, R, points and pattern; and with B's sd B_RATIOS times A's on every point, its firing
    rate beside the gate's family false alarm. Returns the two tables' rows and the gate's false alarm range
    (lowest, highest) where B is noisier and where B is quieter (and where B is noisier, per noise law)."""
    aa, unshared, fas = [], [], {"noisier": [], "quieter": []}
    by_law: dict[str, list[float]] = {}
    for i, law in enumerate(LAWS):
        for r, points in NOTE_SIZES:
            got = []
            for j, kw in enumerate(NOTE_PATTERNS.values()):
                rng = np.random.default_rng([seed, 200 + i, j, r, points])
                common = dict(points=points, r=r, run_sd=sd, law=LAWS[law], trials=trials)
                f = cisim.gate_sweeps(rng, **common, **kw)["noise_note"]
                got.append(f"{f:.1%} ± {_se(f, trials):.1%} (<= {_upper(f, trials):.1%})")
                fas.setdefault("a/a", []).append(f)
            aa.append(f"| {law} | {r} | {points} | " + " | ".join(got) + " |")
            print(aa[-1], file=sys.stderr, flush=True)
        for r, points in B_SIZES:
            fires, alarms = [], []
            for j, ratio in enumerate(B_RATIOS):
                rng = np.random.default_rng([seed, 300 + i, j, r, points])
                res = cisim.gate_sweeps(
                    rng, points=points, r=r, run_sd=sd, law=LAWS[law], trials=trials, hetero=S10, b_noise=ratio
                )
                fires.append(f"{res['noise_note']:.1%} ± {_se(res['noise_note'], trials):.1%}")
                fa = res["family_false_alarm"]
                alarms.append(f"{fa:.1%} ± {_se(fa, trials):.1%}")
                fas["noisier" if ratio > 1 else "quieter"].append(fa)
                if ratio > 1:
                    by_law.setdefault(law, []).append(fa)
            unshared.append(f"| {law} | {r} | {points} | " + " | ".join(fires + alarms) + " |")
            print(unshared[-1], file=sys.stderr, flush=True)
    ranges: dict = {k: (min(v), max(v)) for k, v in fas.items()}
    ranges["a/a"] = (float(np.mean(fas["a/a"])), len(fas["a/a"]))
    ranges["noisier by law"] = {law: (min(v), max(v)) for law, v in by_law.items()}
    ranges["no threshold"] = {
        ratio: cisim.gate_sweeps(
            np.random.default_rng([seed, 400, j]),
            points=20,
            r=3,
            run_sd=sd,
            law="normal",
            trials=trials,
            hetero=S10,
            b_noise=ratio,
            threshold=0.0,
        )["family_false_alarm"]
        for j, ratio in enumerate((0.5, 2.0))
    }
    return aa, unshared, ranges


def note_section(aa: list[str], unshared: list[str], ranges: dict, trials: int, sd: float) -> list[str]:
    """The second table of the section: compare's note on B's noise (gatenotes.unshared_noise)."""
    size = {
        m: 2 * float(gatestats.signed_rank_cdf(m)[np.searchsorted(gatestats.signed_rank_cdf(m), 0.025, "right") - 1])
        for m in (10, 20)
    }

    above = ", ".join(law for law, (_, high) in ranges["noisier by law"].items() if high - 2 * _se(high, trials) > 0.05)
    free = ranges["no threshold"]
    pooled, cells = ranges["a/a"]

    def span(values) -> str:
        return "-".join(dict.fromkeys(f"{v:g}" for v in (min(values), max(values))))

    quoted = "; ".join(
        f"B's sd {span([v for v in B_RATIOS if (v > 1) == (side == 'noisier')])}x A's on every point: "
        f"{ranges[side][0]:.1%}-{ranges[side][1]:.1%}"
        for side in ("noisier", "quieter")
    )
    by_law = "; ".join(f"{law} {low:.1%}-{high:.1%}" for law, (low, high) in ranges["noisier by law"].items())
    ratio_heads = " | ".join(f"note fires, B's sd {v:g}x" for v in B_RATIOS)
    alarm_heads = " | ".join(f"gate's family false alarm, {v:g}x" for v in B_RATIOS)
    return [
        "### compare's note on B's noise",
        "",
        "The pooled t assumes A and B share each point's run-to-run variance. `compare` tests that over the points "
        "with repeats on both sides (equal df): Wilcoxon's signed-rank test of the points' log variance ratios "
        "log(var_B / var_A) at a two-sided 5% (gatestats.noise_ratio_p), and where it rejects, it says by how much "
        "B's sd differs (the Hodges-Lehmann estimate and its exact 95% interval) and what the gate's false alarm "
        "was in the simulations below. With A and B sharing a point's variance the log ratio is symmetric about 0 "
        "whatever the noise law and whatever the point's own noise (A's and B's runs can be swapped), so the "
        f"test's level is exact: at most {size[10]:.2%} at 10 points and {size[20]:.2%} at 20 (its discrete law); "
        f"it cannot reject with fewer than {gatestats.NOISE_RATIO_MIN_POINTS} points. The pattern of the points' noise cannot change it (the log "
        "ratio is free of each point's scale); each pattern below is an independent simulation of the same rate. "
        f"{trials} simulated pairs per cell, set up as above (sd of the median point {sd:.0%}). Over the "
        f"{cells} A/A cells it fires in {pooled:.2%} of pairs (± {_se(pooled, trials * cells):.2%}).",
        "",
        "Fires in A/A pairs (nothing changed; ± one Monte Carlo standard error, the bracket the 95% Wilson upper end):",
        "",
        "| noise | repeats per side | points | " + " | ".join(NOTE_PATTERNS) + " |",
        "|---|---|---|---|---|---|",
        *aa,
        "",
        "With B's sd the given multiple of A's on every point, variances spread 10x, nothing slowed: how often the "
        "note fires (its power), and the gate's family false alarm (any point called a regression):",
        "",
        f"| noise | repeats per side | points | {ratio_heads} | {alarm_heads} |",
        "|" + "---|" * (3 + 2 * len(B_RATIOS)),
        *unshared,
        "",
        f"The note quotes the range of the gate's family false alarm over these cells (gatenotes."
        f"UNSHARED_NOISE_FALSE_ALARM): {quoted}. Where B is noisier, by noise law: {by_law}; over 5% by more than "
        f"2 standard errors: {above or 'none'}. Where B is quieter the threshold binds more often (B's noise is "
        "smaller against the same 5%): without it (threshold 0, Gaussian, R = 3, 20 points, variances spread 10x) "
        f"the false alarm is {free[0.5]:.1%} at B's sd 0.5x and {free[2.0]:.1%} at 2x (± "
        f"{_se(free[2.0], trials):.1%}; the gate is the same with A and B swapped but for the "
        "threshold's scale).",
        "",
    ]


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
        "share a point's variance, as the pooled t assumes (compare's note on it: below). A change at the threshold (5%) is called a "
        "regression only when its estimate lands beyond it, so at most about half the time however many "
        "repeats; a change that also makes the point noisier is caught less often than a plain 10% slowdown.",
        "",
    ]


def main() -> None:
    args = gate_parser(__doc__, 16000, "case").parse_args()
    start = time.time()
    cells = rows(args.trials, args.sd, 2043)
    split = by_point(args.trials, args.sd, 2043)
    aa, unshared, ranges = note_rows(args.trials, args.sd, 2043)
    for side in ("noisier", "quieter"):
        low, high = ranges[side]
        _, quoted = gatenotes.UNSHARED_NOISE_FALSE_ALARM[side]
        if (round(low, 3), round(high, 3)) != tuple(quoted):
            print(
                f"gatenotes.UNSHARED_NOISE_FALSE_ALARM[{side!r}] quotes {quoted}: this run {low:.3f}-{high:.3f}",
                file=sys.stderr,
            )
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
            run_line(f"benchmarks/gate_probes.py --trials {args.trials}", start),
            "",
            *reading(cells, split, args.trials),
            *note_section(aa, unshared, ranges, args.trials, args.sd),
        ]
    )
    emit(text, args.out)


if __name__ == "__main__":
    main()

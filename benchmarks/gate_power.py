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
from mdsection import emit, run_line  # noqa: E402

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


def _upper(p: float, n: int) -> float:
    """The upper end of a 95% Wilson interval of a share p over n trials."""
    z = 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    return centre + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)


def _cell(rng, trials: int, law: str, pattern: str, label, points: int, **kw) -> dict:
    """One cell's false alarm and power; `label`: its repeats per side as the table shows them."""
    kw = dict(points=points, run_sd=kw.pop("sd"), law=LAWS[law], trials=trials, **kw)
    fa = cisim.gate_sweeps(rng, **kw)["family_false_alarm"]
    pw = cisim.gate_sweeps(rng, effect=0.9, **kw)["power"]
    out = {"law": law, "pattern": pattern, "r": label, "points": points, "fa": fa, "power": pw}
    out["line"] = (
        f"| {law} | {pattern} | {label} | {points} | {fa:.1%} ± {_se(fa, trials):.1%} (<= {_upper(fa, trials):.1%}) | "
        f"{pw:.1%} ± {_se(pw, trials):.1%} |"
    )
    print(out["line"], file=sys.stderr, flush=True)
    return out


BELOW_R3 = {
    "equal variances": {},
    "variances spread 10x": {"hetero": math.sqrt(10)},
    "one point's variance 10x": {"noisy": math.sqrt(10)},
    "one point 5x noisier (sd)": {"noisy": 5.0},
}
"""The cells below R = 3 (R = 2, and one run per side on a noise floor), at 20 points."""


def rows(trials: int, sd: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(the R = 3 and R = 5 cells with the 1-df cell, the cells below R = 3), each a dict with its table line."""
    rng = np.random.default_rng(seed)
    cells = [(law, pattern, r, points) for law in LAWS for pattern in PATTERNS for r in (3, 5) for points in (10, 20)]
    main = [_cell(rng, trials, law, pat, r, pts, r=r, sd=sd, **PATTERNS[pat]) for law, pat, r, pts in cells]
    main.append(
        _cell(
            rng,
            trials,
            "Gaussian",
            "5 of 20 points 3x noisier (sd), one point with 1 df in B",
            "3 (2 there)",
            20,
            r=3,
            sd=sd,
            noisy=3.0,
            noisy_points=5,
            one_df_points=1,
        )
    )
    below = [_cell(rng, trials, "Gaussian", pat, 2, 20, r=2, sd=sd, **kw) for pat, kw in BELOW_R3.items()]
    below += [
        _cell(rng, trials, law, pat, "1 and a noise floor", 20, floor=True, sd=sd, **kw)
        for law in LAWS
        for pat, kw in BELOW_R3.items()
    ]
    return main, below


def _span(cells: list[dict], key: str) -> str:
    values = [c[key] for c in cells]
    return f"{min(values):.1%}-{max(values):.1%}"


def reading(main: list[dict], below: list[dict], trials: int) -> list[str]:
    """The section's reading, its figures taken from this run's cells."""
    worst = max(main, key=lambda c: c["fa"])
    r3 = [c for c in main if c["r"] == 3]
    r5 = [c for c in main if c["r"] == 5]
    equal = {law: [c for c in r3 if c["law"] == law and c["pattern"] == "equal variances"] for law in LAWS}
    differ = [c for c in r3 if c["pattern"] in ("variances spread 10x", "one point's variance 10x")]
    one_df = main[-1]
    r2 = [c for c in below if c["r"] == 2]
    floor = [c for c in below if c["r"] != 2]
    worst_floor = max(floor, key=lambda c: c["fa"])
    short = [
        f"{law} {_span(cells, 'power')} ({next(c for c in cells if c['points'] == 20)['power']:.1%} at 20 points)"
        for law, cells in equal.items()
    ]
    return [
        f"What this says. The family false alarm is {_span(main, 'fa')} over the {len(main)} cells, <= 5% in "
        f"{sum(c['fa'] <= 0.05 for c in main)} of them; the highest is {worst['law']} noise, "
        f"{worst['pattern']}, R = {worst['r']}, {worst['points']} points: {worst['fa']:.1%} (the upper end of "
        f"its 95% interval, {_upper(worst['fa'], trials):.1%}, is the figure to hold against 5%). At a run-to-run "
        f"sd of 3% and R = 3 a 10% slowdown of one point is caught with equal noise in: {'; '.join(short)}; "
        f"where the points' noise differs, {_span(differ, 'power')}, as the moderation rightly pools little "
        f"there and the 4 df of a point's own cannot give it; at R = 5, {_span(r5, 'power')}. With one point "
        f"that lost a repeat in B (1 df on that side) the other points keep the cap: {one_df['fa']:.1%} false "
        "alarm.",
        "",
        f"Below R = 3 ({trials} comparisons a cell, 20 points, sd 3%): at R = 2 (2 df per point, pooled) the false "
        f"alarm is {_span(r2, 'fa')} and a 10% slowdown is caught in {_span(r2, 'power')}; on a noise floor (one "
        f"run per side, 1 df per point) the false alarm is {_span(floor, 'fa')} (the highest: {worst_floor['law']} "
        f"noise, {worst_floor['pattern']}) and the power {_span(floor, 'power')}. `compare` says both beside its verdict "
        "(compare.MODERATION_CAVEAT): a floor makes single runs judgeable, not sensitive. Repeats run back to back "
        "inside one sweep, so a shift between sweeps (another time of day, a busier machine) is not in their "
        "spread: `compare` says when the sweeps started more than 10 minutes apart or their CPU GEMM probe moved "
        "by more than 10%, and points to `--noise-floor`. A point the gate could not judge (fewer than 2 "
        "successful repeats on a side and no floor, skipped or interrupted, unmatched) makes `compare` exit 3, "
        "not 0 (docs/report.md). tests/test_ci_coverage.py asserts the binding false-alarm cells, the power at "
        "equal Gaussian and lognormal noise and the 1-df cell on fewer trials.",
        "",
    ]


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


def pooled_to_the_cap(var, df, excess=1.0):
    """Every point's variance pooled with a prior of D0_MAX df, whatever the spread of the points' variances (no
    robustness either): how the t test fares where the variance is as well known as the cap allows. A check
    `alternatives` measures, not a rule: where the points' noise differs it pools what should stay apart."""
    var = np.maximum(np.asarray(var, dtype=float), 1e-12)
    df = np.broadcast_to(np.asarray(df, dtype=float), var.shape)
    d0 = gatestats.D0_MAX
    e = np.log(var) - gatestats.digamma(df / 2) + np.log(df / 2)
    s0 = np.exp(e.mean(axis=-1, keepdims=True) + gatestats.digamma(d0 / 2) - np.log(d0 / 2))
    return (d0 * s0 + df * var) / (d0 + df), d0 + df, s0, np.full(s0.shape, d0)


ALTERNATIVES = {
    "as built": {},
    "the normal law's sampling spread (no A/B excess)": {"EXCESS_MARGIN": None},
    "the A/B excess at a 0.5-SE lower bound": {"EXCESS_MARGIN": 0.5},
    "the A/B excess not floored at 1": {"EXCESS_FLOOR": None},
    f"prior df cap 32 (built: {gatestats.D0_MAX:g})": {"D0_MAX": 32.0},
    f"d0 at a 0.25-sd bound (built: {gatestats.SPREAD_MARGIN:g})": {"SPREAD_MARGIN": 0.25},
    "Holm-Sidak instead of Holm": {"holm_adjusted": holm_sidak},
    f"every point pooled with {gatestats.D0_MAX:g} prior df (a check)": {"moderate": pooled_to_the_cap},
}
"""Changes to gatestats that could buy power at R = 3 and 20 points, each judged on the same simulated sweeps."""


def alternatives(trials: int, sd: float, seed: int) -> list[str]:
    """R = 3 cells (and the 1-df cell) under each of ALTERNATIVES, every alternative on the same random sweeps
    (one seed per cell), so their differences are paired: 'false alarm / power' per cell and alternative."""
    cells = [(law, pattern, points) for law in LAWS for pattern in PATTERNS for points in (10, 20)]
    cells.append(("Gaussian", "5 of 20 points 3x noisier (sd), one point with 1 df in B", 20))
    out, found = [], {}
    for i, (law, pattern, points) in enumerate(cells):
        extra = PATTERNS.get(pattern, {"noisy": 3.0, "noisy_points": 5, "one_df_points": 1})
        kw = dict(points=points, r=3, run_sd=sd, law=LAWS[law], trials=trials, **extra)
        cols = []
        for label, changes in ALTERNATIVES.items():
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
            found.setdefault(label, []).append(
                {"law": law, "pattern": pattern, "points": points, "fa": fa, "power": pw}
            )
        out.append(f"| {law} | {pattern} | {points} | " + " | ".join(cols) + " |")
        print(out[-1], file=sys.stderr, flush=True)
    return out, found


def alternatives_reading(found: dict, trials: int) -> list[str]:
    """The alternatives section's reading, its figures taken from this run's cells."""

    def power(name: str, law: str) -> float:
        return next(
            c["power"]
            for c in found[name]
            if c["law"] == law and c["pattern"] == "equal variances" and c["points"] == 20
        )

    parts = []
    for name, cells in found.items():
        worst = max(cells, key=lambda c: c["fa"])
        parts.append(
            f"{name}: false alarm at most {worst['fa']:.1%} (upper end {_upper(worst['fa'], trials):.1%}; "
            f"{sum(c['fa'] > 0.05 for c in cells)} cells above 5%), power with equal noise at 20 points "
            f"{power(name, 'Gaussian'):.1%} Gaussian, {power(name, 't(4)'):.1%} t(4), "
            f"{power(name, 'lognormal'):.1%} lognormal"
        )
    check = list(found)[-1]
    lognormal = [c for c in found[check] if c["law"] == "lognormal" and c["pattern"] == "equal variances"]
    return [
        "What this says, column by column (R = 3; the 1-df cell included): " + "; ".join(parts) + ".",
        "",
        "The gate as built estimates how much wider than chi-square sampling the spread of the points' sample "
        "variances is from each point's A/B split, where the points' differences cannot enter "
        "(gatestats.sampling_excess), and leaves that part out of the prior's spread; without it heavy-tailed and "
        "skewed noise read as differences between the points, and the moderation pooled less. Pooling every point "
        "to the cap regardless (the last column) is no rule: it pools noisier points with quieter ones; with "
        f"equal lognormal noise its false alarm is {_span(lognormal, 'fa')} (10 and 20 points): with each variance "
        "known to 20 df, the one-sided t on 3 runs a side is not conservative under skewed noise. The other "
        "columns are the ones tried before: a higher cap, a looser bound "
        "on d0, Holm-Sidak.",
        "",
    ]


def gate_parser(doc: str, trials: int, per: str) -> argparse.ArgumentParser:
    """The gate benchmarks' common flags: --trials (sweep pairs per `per`), --sd, --out."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=trials, help=f"simulated sweep pairs per {per} (each of A/A and power)"
    )
    parser.add_argument("--sd", type=float, default=0.03, help="run-to-run sd of log throughput (median point)")
    parser.add_argument("--out", help="markdown file to write the section into")
    return parser


def main() -> None:
    parser = gate_parser(__doc__, 4000, "cell")
    parser.add_argument(
        "--alternatives",
        action="store_true",
        help="instead: the R = 3 cells under each of ALTERNATIVES (its own section)",
    )
    args = parser.parse_args()
    start = time.time()
    if args.alternatives:
        body, found = alternatives(args.trials, args.sd, 2042)
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
                run_line(f"benchmarks/gate_power.py --alternatives --trials {args.trials}", start),
                "",
                *alternatives_reading(found, args.trials),
            ]
        )
        emit(text, args.out)
        return
    main_cells, below = rows(args.trials, args.sd, 2042)
    text = "\n".join(
        [
            "## The regression gate's false alarm and power (`benchmarks/gate_power.py`)",
            "",
            f"{args.trials} simulated pairs of sweeps A and B per cell and per column (A/A for the false alarm; B's "
            "median-noise point 10% slower for the power), judged by the project's own functions exactly as "
            "`compare` judges them (tests/cisim.gate_sweeps, distbench/results/gatestats.py): each point's "
            "run-to-run variance of log throughput pooled over A's and B's repeats, moderated across the points "
            f"(the prior's df at the lower {gatestats.SPREAD_MARGIN:g}-sd confidence bound of its moment estimate, "
            "the sampling spread of log variances the normal law's or, where wider, its moment estimate from each "
            "point's A/B split (gatestats.sampling_excess), "
            f"robust to outlying points, capped at {gatestats.D0_MAX:g} for points with 2 df or more), t on the "
            "difference of mean log throughputs, regressions tested one-sided with Holm across the points at a "
            "family-wise 5%, threshold 5%. Run-to-run sd of the median point "
            f"{args.sd:.0%}. Noise laws at unit variance (cisim.run_noise): Gaussian, t(4), lognormal (shape 0.5, "
            "skewed towards slow runs). False alarm: share of A/A pairs with any point called a regression. Power: "
            "share of pairs calling the slowed point a regression. ± is one Monte Carlo standard error, "
            f"sqrt(p(1 - p)/{args.trials}).",
            "",
            "| noise | pattern | repeats per side | points | family false alarm (95% upper end) | power, 10% slowdown |",
            "|---|---|---|---|---|---|",
            *(c["line"] for c in main_cells),
            "",
            "Below R = 3:",
            "",
            "| noise | pattern | repeats per side | points | family false alarm (95% upper end) | power, 10% slowdown |",
            "|---|---|---|---|---|---|",
            *(c["line"] for c in below),
            "",
            run_line(f"benchmarks/gate_power.py --trials {args.trials}", start),
            "",
            *reading(main_cells, below, args.trials),
        ]
    )
    emit(text, args.out)


if __name__ == "__main__":
    main()

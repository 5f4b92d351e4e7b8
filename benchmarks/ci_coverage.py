"""Coverage and bias of distbench's 95% CIs on simulated step series (tests/cisim.py), next to
the rule distbench used before (normal CI over steps as if independent, stop the first time it is
within target). Prints a markdown table; --out appends/replaces its section in docs/benchmarks.md.

    .venv/bin/python benchmarks/ci_coverage.py --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/cisim.py: the simulations the tests also run
from mdsection import emit  # noqa: E402

from tests import cisim  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4000, help="simulated runs per row")
    parser.add_argument("--target", type=float, default=0.02, help="adaptive stopping target (relative half width)")
    parser.add_argument("--out", help="markdown file to write the section into")
    parser.add_argument("--only-new", action="store_true", help="print only the autocorrelation table (no --out)")
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    if args.only_new:
        print("\n".join(autocorrelation_table(rng, args.runs)))
        return
    fmt = lambda r: f"{r['coverage']:.1%} | {r['bias']:+.2%} | {r['median_steps']:.0f}"  # noqa: E731
    lines = [
        "## CI coverage (simulation)",
        "",
        f"`benchmarks/ci_coverage.py`, {args.runs} simulated runs per row, nominal 95%. Step series: "
        "1 + cv x AR(1) noise (Student-t(4) innovations) + slow-step outliers (Exp-distributed, mean "
        "size in step-time sd). Coverage = share of runs whose CI contains the true mean; bias = of the "
        "throughput estimate; steps = median steps at the stop. Required: coverage >= 90%, |bias| <= 0.5%. "
        "The batch means' lag-1 autocorrelation is tested (stats.batch_means_ci: longer batches, a widened CI, or "
        "none); coverage counts the runs given a CI (all of them here but a few at phi 0.95-0.98, table below). "
        "Adaptive stopping may stop only on a CI over all 20 batches (600 steps and more: stats.MIN_STOP_STEPS); "
        "stopping on the 5-batch CI at 150 steps gave 88% for noisy runs (review, 8,000 runs).",
        "",
        f"Within one run (adaptive target {args.target:.0%}, at most 4800 steps):",
        "",
        "| model | batch means, 150 steps: coverage | bias | steps | batch means + adaptive stopping: coverage "
        "| bias | steps | old rule (iid normal CI, stop when first within target): coverage | bias | steps |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    models = [
        cisim.SeriesModel(phi=p, cv=cv, outlier_p=o, outlier_scale=10.0 if o else 0.0)
        for p in (0.0, 0.5, 0.8)
        for cv in (0.01, 0.05, 0.10, 0.15)
        for o in (0.0, 0.01)
    ]
    for m in models:
        lines.append(
            f"| {m.label()} | {fmt(cisim.fixed_steps(rng, m, 150, runs=args.runs))} | "
            f"{fmt(cisim.adaptive(rng, m, args.target, runs=args.runs))} | "
            f"{fmt(cisim.naive_adaptive(rng, m, args.target, runs=args.runs))} |"
        )
    lines += [
        "",
        "Run to run (phi 0.8, cv 5%, 50 steps per run, run-to-run speed sd 2%, heavy-tailed), and exposed "
        "communication (paired t over sync/no-sync pairs, 0.05 s exposed, pair drift sd 3%, and a steady "
        "trend of 1% per run; distbench alternates the pairs' order, A B, B A, ...):",
        "",
        "| repeats / pairs | t on log throughput: coverage | bias | steps | paired exposed comm, alternating: "
        "coverage | bias | always sync first: coverage | bias |",
        "|---|---|---|---|---|---|---|---|",
    ]
    m = cisim.SeriesModel(phi=0.8)
    for r in (2, 3, 4, 5):
        rep = cisim.repeats(rng, m, r, trials=args.runs)
        alt = cisim.paired_exposed(rng, m, r, trend=0.01, trials=args.runs)
        same = cisim.paired_exposed(rng, m, r, trend=0.01, alternate=False, trials=args.runs)
        lines.append(
            f"| {r} | {fmt(rep)} | {alt['coverage']:.1%} | {alt['bias']:+.1%} | "
            f"{same['coverage']:.1%} | {same['bias']:+.1%} |"
        )
    new = np.random.default_rng(2026)  # its own stream: --only-new prints the same numbers
    lines += autocorrelation_table(new, args.runs)
    text = "\n".join(lines) + "\n"
    emit(text, args.out)


def autocorrelation_table(rng: np.random.Generator, runs: int) -> list[str]:
    """Coverage per phi of the within-run CI: the fixed geometry (no lag-1 test) vs the lag-1 test that merges
    batches, widens the CI or refuses it (stats.batch_means_ci)."""
    lines = [
        "",
        "Strongly autocorrelated steps (AR(1) phi up to 0.98, cv 5%; slow drift of clocks or temperature): "
        "coverage of the batch-means CI with the fixed geometry (stats.batch_count batches, no test) and with "
        "the lag-1 test of the batch means (merge to longer batches, widen by the AR(1) factor, refuse at the "
        "last count); 'given' = share of runs given a CI, coverage counted over those:",
        "",
        "| model | 150 steps: fixed | lag-1 test (given) | 600: fixed | lag-1 test (given) | 2400: fixed "
        "| lag-1 test (given) | adaptive, target 2%: coverage (given) | steps |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for phi in (0.0, 0.5, 0.8, 0.9, 0.95, 0.98):
        for o in (0.0, 0.01):
            m = cisim.SeriesModel(phi=phi, cv=0.05, outlier_p=o, outlier_scale=10.0 if o else 0.0)
            row = [m.label()]
            for n in (150, 600, 2400):
                old, new = cisim.fixed_batches(rng, m, n, runs=runs), cisim.fixed_steps(rng, m, n, runs=runs)
                row += [f"{old['coverage']:.1%}", f"{new['coverage']:.1%} ({new['given']:.0%})"]
            a = cisim.adaptive(rng, m, 0.02, runs=runs)
            row += [f"{a['coverage']:.1%} ({a['given']:.0%})", f"{a['median_steps']:.0f}"]
            lines.append("| " + " | ".join(row) + " |")
    return lines


if __name__ == "__main__":
    main()

"""Coverage and bias of `distbench converge`'s time-to-target speedup interval when the time to target is read off
the evaluation grid, interpolated linearly in the accuracy, or interpolated as the loop does (linearly in
log(1 - accuracy)); the interval distbench reports when the baseline crosses the target in the first evaluations
(a sweep of its epochs to target); and the equivalence test's (TOST) verdict rates at 3 and 5 seeds. The
simulations are tests/convergesim.py's, the ones tests/test_converge.py runs with fewer trials. Prints Markdown tables (docs/convergence.md quotes them).

    .venv/bin/python benchmarks/converge_ci.py --trials 1000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import convergesim  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000, help="simulated sweeps per row")
    args = parser.parse_args(argv)
    print(
        "| curve | seeds spread (sd of log epochs) | evaluation noise | grid: coverage, bias | linear: coverage, bias "
        "| interpolated (log error): coverage, bias |"
    )
    print("|---|---|---|---|---|---|")
    for family in convergesim.FAMILIES:
        for sd_epochs, sd_acc in ((0.02, 0.0), (0.05, 0.003)):
            res = convergesim.speedup_coverage(family, args.trials, sd_epochs=sd_epochs, sd_acc=sd_acc)
            cells = [f"{res[k]['coverage']:.3f}, {res[k]['bias']:+.3f}" for k in convergesim.READINGS]
            print(f"| {family} | {sd_epochs} | {sd_acc} | " + " | ".join(cells) + " |")
    print()
    print(
        "| curve | baseline epochs to target | interpolated: coverage, bias | reported interval: coverage, share given |"
    )
    print("|---|---|---|---|")
    for family in convergesim.FAMILIES:
        for epochs_a in (0.1, 0.2, 0.3, 0.45, 1.2):
            res = convergesim.speedup_coverage(family, args.trials, epochs_a=epochs_a)
            i, s = res["interpolated"], res["summary"]
            cov = "-" if s["coverage"] is None else f"{s['coverage']:.3f}"
            print(f"| {family} | {epochs_a} | {i['coverage']:.3f}, {i['bias']:+.3f} | {cov}, {s['given']:.3f} |")
    print()
    print("| seeds | true difference | pairing | equivalent | different | inconclusive |")
    print("|---|---|---|---|---|---|")
    for seeds in (3, 5):
        for diff in (0.0, 0.005, -0.03):
            for paired_sd, label in ((0.0, "unpaired, seed sd 0.004"), (0.002, "paired, strategy sd 0.002")):
                r = convergesim.equivalence_rates(diff, args.trials, seeds=seeds, paired_sd=paired_sd)
                print(
                    f"| {seeds} | {diff:+.3f} | {label} | {r['equivalent']:.3f} | {r['different']:.3f} "
                    f"| {r['inconclusive']:.3f} |"
                )


if __name__ == "__main__":
    main()

"""What `--profile` costs a point's throughput figures: the same point with and without it,
interleaved, several rounds, beside an A/A control.

The profiled steps run after the timed window, so the figures should not move; what could move them is
anything profiling changes before or during the window (imports, memory, the request in the config). Every
run is a fresh `distbench run` process tree measuring a fixed number of steps into its own store. Each round runs
three arms, plain, profiled and plain again (the A/A control), the order rotating so each arm comes first,
second and third equally often. Reported per strategy: every run's step-time median, and per round the ratio
profiled / plain beside plain again / plain: a profiling cost shows as the first ratio sitting above the
second's spread, and as a small Mann-Whitney p-value for the profiled runs against both plain arms (the
A/A arms' own p-value beside it). The machine's load average before and after.

    .venv/bin/python benchmarks/profile_overhead.py --strategies torch,tf --rounds 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from scipy.stats import mannwhitneyu  # scipy comes with the project's environment (a dependency of its dependencies)


def run_point(strategy: str, profile: bool, args, folder: str, i) -> tuple[float, float]:
    db = os.path.join(folder, f"{strategy}-{i}-{'p' if profile else 'n'}.db")
    cmd = [sys.executable, "-m", "distbench.cli", "run", "--strategy", strategy, "--model", args.model]
    cmd += ["--image-size", str(args.image_size)] if args.image_size else []
    cmd += ["--batch-size", str(args.batch_size), "--steps", str(args.steps)]
    cmd += ["--target-ci", "0", "--no-comm", "--telemetry-interval", "0", "--results", db, "--format", "json"]
    cmd += ["--profile"] if profile else []
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr[-1500:]}")
    [record] = json.loads(proc.stdout)
    return record["throughput"], record["step_time_median_s"]


ARMS = ("plain", "profile", "plain again")
"""Three arms per round: 'plain again' is an A/A control (the same unprofiled point a second time), so the
profiled arm's ratio is read against the spread two identical runs show on this machine."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strategies", default="torch,tf")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--image-size", type=int, default=32, help="0: the model's CPU default")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    out = {}
    with tempfile.TemporaryDirectory(prefix="distbench-profile-overhead-") as folder:
        for strategy in args.strategies.split(","):
            runs: dict[str, list] = {a: [] for a in ARMS}
            for r in range(args.rounds):
                order = ARMS[r % 3 :] + ARMS[: r % 3]  # each arm first, second and third equally often
                for arm in order:
                    runs[arm].append(run_point(strategy, arm == "profile", args, folder, f"{r}-{ARMS.index(arm)}"))
                    thr, med = runs[arm][-1]
                    print(f"{strategy} round {r + 1} {arm:<11}: {thr:.3f} samples/s, step median {med * 1e3:.2f} ms")
            summary = {}
            for arm in ("profile", "plain again"):
                ratios = sorted(p[1] / n[1] for p, n in zip(runs[arm], runs["plain"]))
                summary[arm] = {"step_median_ratios": ratios, "median_ratio": statistics.median(ratios)}
                print(
                    f"{strategy} {arm} / plain, step-time median: median ratio {statistics.median(ratios):.3f}, "
                    f"range {ratios[0]:.3f}..{ratios[-1]:.3f}, slower in {sum(x > 1 for x in ratios)}/{len(ratios)}"
                )
            prof = [x[1] for x in runs["profile"]]
            plain = [x[1] for x in runs["plain"]]
            again = [x[1] for x in runs["plain again"]]
            summary["mann_whitney_p"] = {
                "profile vs both plain arms": mannwhitneyu(prof, plain + again).pvalue,
                "plain again vs plain (A/A)": mannwhitneyu(again, plain).pvalue,
            }
            print(
                f"{strategy} Mann-Whitney U, two-sided p: "
                + "; ".join(f"{k} {v:.2f}" for k, v in summary["mann_whitney_p"].items())
            )
            for arm in ARMS:
                print(f"{strategy} {arm}: step medians (ms) {', '.join(f'{x[1] * 1e3:.1f}' for x in runs[arm])}")
            out[strategy] = {"runs": runs, **summary}
    print(f"load average after: {os.getloadavg()}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

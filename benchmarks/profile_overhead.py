"""What `--profile` costs a point's throughput figures (issue 32): the same point with and without it,
interleaved, several rounds.

The profiled steps run after the timed window, so the figures should not move; what could move them is
anything profiling changes before or during the window (imports, memory, the request in the config). Each
round runs `distbench run` once with and once without `--profile` (the order alternating: A B, B A, ...),
each a fresh process tree measuring a fixed number of steps, every run into its own store. Reported per
strategy: every run's throughput (the window's: a few slow steps move it) and step-time median, their medians,
the ratio profiled / unprofiled, and each round's ratio (their range; with a handful of rounds no CI is
claimed). The machine's load average before and after.

    .venv/bin/python benchmarks/profile_overhead.py --strategies torch,tf --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run_point(strategy: str, profile: bool, args, folder: str, i: int) -> tuple[float, float]:
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strategies", default="torch,tf")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--image-size", type=int, default=32, help="0: the model's CPU default")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    out = {}
    with tempfile.TemporaryDirectory(prefix="distbench-profile-overhead-") as folder:
        for strategy in args.strategies.split(","):
            runs = {False: [], True: []}
            for r in range(args.rounds):
                for profile in (False, True) if r % 2 == 0 else (True, False):
                    runs[profile].append(run_point(strategy, profile, args, folder, r))
                    thr, med = runs[profile][-1]
                    print(
                        f"{strategy} round {r + 1} {'--profile' if profile else 'plain    '}: {thr:.3f} samples/s, "
                        f"step median {med * 1e3:.1f} ms"
                    )
            summary = {}
            for i, what in ((0, "throughput"), (1, "step_median_s")):
                plain = statistics.median(x[i] for x in runs[False])
                prof = statistics.median(x[i] for x in runs[True])
                ratios = [p[i] / n[i] for p, n in zip(runs[True], runs[False])]
                summary[what] = {"ratio_of_medians": prof / plain, "round_ratios": ratios}
                print(
                    f"{strategy} {what}: median {plain:.4g} plain, {prof:.4g} with --profile: ratio "
                    f"{prof / plain:.3f}; per-round ratios {min(ratios):.3f}..{max(ratios):.3f}"
                )
            out[strategy] = {"plain": runs[False], "profile": runs[True], **summary}
    print(f"load average after: {os.getloadavg()}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

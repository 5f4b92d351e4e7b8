"""Telemetry cost: does distbench's telemetry sampler (the parent process reading psutil/NVML every
`--telemetry-interval` seconds while the workers train) slow a point down? An A/A comparison of the
same distbench point with the sampler on (A) and off (B), interleaved A B, B A, ... in fresh process
trees, as harness_overhead.py plans and measures it. Prints the ratio of medians (on / off), the
per-round ratios and the distribution-free CI of their median.

    python benchmarks/telemetry_cost.py --point horovod-torch --rounds 8 --steps 200
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness_overhead import POINTS, distbench_run, metered, plan, point_arguments, summarize, wait_quiet  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--point", default="horovod-torch", choices=[p[0] for p in POINTS])
    ap.add_argument("--rounds", type=int, default=8)
    point_arguments(ap, steps=200)  # --telemetry-interval: side A's sampling (B: off)
    a = ap.parse_args()
    n = next(n for s, n, _ in POINTS if s == a.point)
    point = plan(a.point, n, a)
    on, off = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            sides = [(on, a.telemetry_interval), (off, 0.0)]
            wait_quiet(0.25, 30.0)
            for out, interval in sides if r % 2 == 0 else sides[::-1]:
                thr, wall, load, _ = metered(lambda: distbench_run(point, Path(tmp) / f"{r}-{interval}", interval))
                out.append(thr)
                print(
                    f"round {r + 1} telemetry {interval:g} s: {thr:.2f} samples/s ({wall:.0f} s, other jobs {load:.2f} cores)"
                )
    s = summarize(on, off)
    low, high, coverage = s["ci"]
    print(
        f"{a.point} N={n}: telemetry on / off, ratio of medians {s['ratio']:.3f}; per-round ratios "
        f"{', '.join(f'{x:.3f}' for x in s['ratios'])}; CI of the median ratio {low:.3f}..{high:.3f} "
        f"({coverage:.1%})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

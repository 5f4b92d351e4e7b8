"""Where a point's launch goes on this machine, per worker process: a fresh interpreter,
distbench's worker module imports without a framework, torch, and the torch worker's imports together;
each a whole `python -c` process, the variants interleaved round by round, medians over --rounds.

Run: .venv/bin/python benchmarks/launch_phases.py --rounds 7"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "interpreter": "pass",
    "distbench worker common (no framework)": "import distbench.workers.common",
    "the rank guard": "import distbench.core.rankguard",
    "torch": "import torch",
    "torch worker (torch_single + torch_common)": "import distbench.workers.torch_single, distbench.workers.torch_common",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    for _ in range(a.rounds):
        for name, code in VARIANTS.items():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["interpreter"])
    print(f"| process | median s ({a.rounds} rounds, interleaved) | over a bare interpreter s |")
    print("|---|---|---|")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"| {name} | {m:.3f} | {m - base:+.3f} |")


if __name__ == "__main__":
    main()

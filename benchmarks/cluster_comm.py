"""`distbench comm` across two nodes of the one-machine cluster against the shaped rate's bound.

For each rate: bring the cluster up at that rate (scripts/cluster-local.sh: a token-bucket egress per node),
run `distbench comm --gpus 2 --nodes 2` over the sizes, --repeats times, and report per size the median busbw
(min..max over the repeats) as a share of the bound. A 2-rank all-reduce sends each message once each way
over each node's link, so its busbw (= algbw for 2 ranks) is bounded by the link rate: bound = rate / 8 bytes/s.
Target: within 15% of the bound from 16 MiB up. Every record is checked to have run on node1 and node2 over eth0.

    sudo .venv/bin/python benchmarks/cluster_comm.py --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mdsection import emit  # noqa: E402

from distbench.cluster import netns, spec  # noqa: E402
from distbench.results.store import Store  # noqa: E402

TARGET = 0.85


def run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} failed: {done.stderr.strip()[-2000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="1gbit,200mbit")
    ap.add_argument("--sizes", default="16M,32M,64M")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    if why := netns.unavailable():
        raise SystemExit(why)
    work = Path(tempfile.mkdtemp(prefix="cluster-comm-"))
    os.environ.setdefault(spec.STATE_DIR_VAR, str(work / "cluster"))
    db = work / "r.db"
    py = sys.executable
    started, loads = datetime.datetime.now(datetime.timezone.utc), [os.getloadavg()[0]]
    results: dict[str, dict[int, list[float]]] = {}
    for rate in args.rates.split(","):
        run([py, "-m", "distbench.cluster", "up", "--nodes", "2", "--rate", rate, "--delay", "0us"])
        try:
            for _ in range(args.repeats):
                cmd = [py, "-m", "distbench.cli", "comm", "--gpus", "2", "--nodes", "2", "--sizes", args.sizes]
                run([*cmd, "--iters", str(args.iters), "--results", str(db)])
                with Store(db) as store:
                    (rec,) = store.points(store.sweeps(1)[0]["id"])
                placed = rec["launch"]["placement"]
                assert rec["status"] == "ok" and all(rec["correct"]), rec.get("reason")
                assert placed["hosts"] == ["node1", "node2"] and set(placed["interface"].values()) == {"eth0"}
                for size, busbw in zip(rec["sizes_bytes"], rec["busbw_gbps"]):
                    results.setdefault(rate, {}).setdefault(size, []).append(busbw)
                loads.append(os.getloadavg()[0])
        finally:
            run([py, "-m", "distbench.cluster", "down"])
    lines = [
        "## comm across two nodes of the one-machine cluster vs the shaped rate",
        "",
        f"Measured {started:%Y-%m-%d %H:%M} UTC by `benchmarks/cluster_comm.py`: {os.cpu_count()} cores, kernel "
        f"{os.uname().release}, 1-minute load average {min(loads):.1f}..{max(loads):.1f} (a shared machine). "
        "Two nodes of `scripts/cluster-local.sh` (network namespaces, veth + bridge, a token-bucket egress at the "
        f"rate, MTU 1500), gloo, one rank per node, {args.iters} timed iterations per size after 3 warmup, "
        f"{args.repeats} runs per rate. Bound = the rate in bytes/s (a 2-rank all-reduce sends the message once "
        "each way over each link); TCP/IP headers alone take about 3% of a 1500-byte frame. Target: busbw >= "
        f"{TARGET:.0%} of the bound from 16 MiB up.",
        "",
        "| rate | size | busbw median (GB/s) | min..max | bound (GB/s) | share of bound | target met |",
        "|---|---|---|---|---|---|---|",
    ]
    for rate, by_size in results.items():
        bound = spec.parse_rate(rate) / 8 / 1e9
        for size, xs in sorted(by_size.items()):
            med = statistics.median(xs)
            lines.append(
                f"| {rate} | {size >> 20} MiB | {med:.4f} | {min(xs):.4f}..{max(xs):.4f} | {bound:.4f} | "
                f"{med / bound:.1%} | {'yes' if med >= TARGET * bound else 'NO'} |"
            )
    text = "\n".join(lines) + "\n"
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

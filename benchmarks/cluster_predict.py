"""Cross-node prediction against ground truth on the one-machine cluster (scripts/cluster-local.sh).

For each regime: measure DDP on ONE node (N=1 and N=2, a sweep of its own, plus a loopback `distbench comm`
for the intra-node tier), predict N=2 over 2 nodes (one rank per node) with `distbench predict --gpus-per-node 1
--link-bw inter=RATE --link-latency inter=DELAY --algorithm ring` (the rate and delay the cluster's links were
given; gloo's all-reduce is a ring), then set the link and measure that point across the nodes, --repeats times.

The nodes share this machine's cores. The one-node N=2 point runs 2 single-thread ranks on the 2 cores, and so
does the 2-node point (a rank's threads are its share of the machine's cores): the compute term the prediction
anchors on was measured with the same sharing, so what changes between the two is the link alone.

    sudo .venv/bin/python benchmarks/cluster_predict.py --out docs/prediction.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mdsection import write_section  # noqa: E402
from distbench.cluster import netns, spec  # noqa: E402
from distbench.results.store import Store  # noqa: E402

CLI = [sys.executable, "-m", "distbench.cli"]
CLUSTER = [sys.executable, "-m", "distbench.cluster"]
POINT = ["--target-ci", "0", "--no-comm", "--telemetry-interval", "0", "--scaling", "weak", "--timeout", "600"]
WORKLOADS = {
    "resnet18": ["--model", "resnet18", "--image-size", "32", "--batch-size", "4", "--steps", "8", "--warmup", "2"],
    "unet": ["--model", "unet", "--image-size", "96", "--batch-size", "2", "--steps", "8", "--warmup", "2"],
}
REGIMES = [
    ("gradient-heavy, slow link", "resnet18", "100mbit"),
    ("compute-heavy, fast link", "unet", "1gbit"),
    ("what-if: the gradient-heavy fit at another rate", "resnet18", "400mbit"),
]


def run(argv: list[str], timeout: float = 1800) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def latest_sweep(db: Path) -> str:
    with Store(db) as store:
        return store.sweeps(1)[0]["id"]


def measured(db: Path, sweep: str) -> dict:
    with Store(db) as store:
        (rec,) = [r for r in store.points(sweep) if r["strategy"] == "ddp" and r["nodes"] == 2]
    if rec["status"] != "ok":
        raise SystemExit(f"the 2-node point failed: {rec.get('reason')}")
    placed = rec["launch"]["placement"]
    assert placed["hosts"] == ["node1", "node2"] and set(placed["interface"].values()) == {"eth0"}, placed
    return rec


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2, help="measurements of each 2-node point")
    ap.add_argument("--out", help="markdown file whose section this writes")
    args = ap.parse_args()
    if why := netns.unavailable():
        raise SystemExit(why)
    work = Path(tempfile.mkdtemp(prefix="cluster-predict-"))
    db = work / "r.db"
    os.environ.setdefault(spec.STATE_DIR_VAR, str(work / "cluster"))
    run([*CLUSTER, "up", "--nodes", "2", "--rate", "1gbit", "--delay", "0us"])
    rows, started, loads = [], datetime.datetime.now(datetime.timezone.utc), [load()]
    try:
        run([*CLI, "comm", "--gpus", "2", "--sizes", "64K:64M", "--factor", "4", "--iters", "5", "--results", str(db)])
        comm = latest_sweep(db)
        fits = {}
        for regime, workload, rate in REGIMES:
            if workload not in fits:
                run(
                    [
                        *CLI,
                        "scale",
                        "--strategy",
                        "ddp",
                        "--gpus",
                        "1,2",
                        *WORKLOADS[workload],
                        *POINT,
                        "--results",
                        str(db),
                    ]
                )
                fits[workload] = latest_sweep(db)
            state = spec.read_state()
            delay_us = state.nodes[0]["delay_s"] * 1e6
            gbps = spec.parse_rate(rate) / 8 / 1e9
            predict = [*CLI, "predict", fits[workload], "--comm", comm, "--gpus", "2", "--gpus-per-node", "1"]
            predict += [
                "--strategy",
                "ddp",
                "--link-bw",
                f"inter={gbps:g}",
                "--link-latency",
                f"inter={max(delay_us, 1):g}",
            ]
            predict += ["--algorithm", "ring", "--no-store", "--format", "json", "--results", str(db)]
            doc = json.loads(run(predict))
            (p,) = doc["series"][0]["predicted"]
            run([*CLUSTER, "link", "--rate", rate, "--delay", "0us"])
            truths = []
            for _ in range(args.repeats):
                run(
                    [
                        *CLI,
                        "scale",
                        "--strategy",
                        "ddp",
                        "--gpus",
                        "2",
                        "--nodes",
                        "2",
                        *WORKLOADS[workload],
                        *POINT,
                        "--results",
                        str(db),
                    ]
                )
                truths.append(measured(db, latest_sweep(db))["throughput"])
                loads.append(load())
            rows.append({"regime": regime, "workload": workload, "rate": rate, "predicted": p, "measured": truths})
            print(json.dumps(rows[-1], default=str), flush=True)
    finally:
        run([*CLUSTER, "down"])
    text = render(rows, started, loads, args.repeats)
    print(text)
    if args.out:
        write_section(args.out, text)
    return 0


def render(rows: list[dict], started, loads: list[str], repeats: int) -> str:
    lines = [
        "## Cross-node prediction against measured points on the one-machine cluster",
        "",
        f"Measured {started:%Y-%m-%d %H:%M} UTC by `benchmarks/cluster_predict.py` on this machine "
        f"({os.cpu_count()} cores, kernel {os.uname().release}; the load average (1/5/15 min) during the runs went "
        f"{loads[0]} .. {loads[-1]}: the machine was shared). Two nodes of `scripts/cluster-local.sh` (network "
        "namespaces, veth + bridge, a token-bucket egress at the rate; this kernel has no netem, so no added "
        "delay). DDP (gloo), one rank per node. Fit: DDP at N=1 and N=2 on ONE node and a loopback `distbench "
        "comm` (the intra tier); predicted: N=2 over 2 nodes with `--gpus-per-node 1 --link-bw inter=RATE "
        "--link-latency inter=1 --algorithm ring`; then measured across the nodes "
        f"{repeats} times. Error = predicted / measured - 1; naive = the per-device throughput of the largest "
        "one-node N (what a user would guess without a network model); covered = the measured value lies in "
        "the 95% prediction interval.",
        "",
        "The nodes share the 2 cores: the one-node N=2 point and the 2-node point both run 2 single-thread ranks "
        "on them, so the compute term the model anchors on carries over unchanged; only the link differs.",
        "",
        "| regime | model | link | predicted (samples/s) | 95% interval | measured | error | naive | naive error | covered |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for r in rows:
        p = r["predicted"]
        for m in r["measured"]:
            err, naive = p["throughput"] / m - 1, p["naive_throughput"] / m - 1
            cov = p["throughput_low"] <= m <= p["throughput_high"]
            summary.setdefault(r["regime"], []).append((abs(err), abs(naive), cov))
            lines.append(
                f"| {r['regime']} | {r['workload']} | {r['rate']} | {p['throughput']:.2f} | "
                f"{p['throughput_low']:.2f}..{p['throughput_high']:.2f} | {m:.2f} | {err:+.1%} | "
                f"{p['naive_throughput']:.2f} | {naive:+.1%} | {'yes' if cov else 'no'} |"
            )
    lines += [
        "",
        "Spread = the slowest repeat of the measured point against its fastest (max / min - 1), the same point on "
        "the same link: on a shared machine an error within the spread cannot be told from the load.",
        "",
        "| regime | points | median abs. error | max abs. error | coverage | naive median abs. error | spread |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        xs = summary[r["regime"]]
        spread = max(r["measured"]) / min(r["measured"]) - 1
        lines.append(
            f"| {r['regime']} | {len(xs)} | {statistics.median(x[0] for x in xs):.1%} | {max(x[0] for x in xs):.1%} | "
            f"{sum(x[2] for x in xs) / len(xs):.0%} | {statistics.median(x[1] for x in xs):.1%} | {spread:.1%} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

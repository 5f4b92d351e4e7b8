"""Cross-node prediction against ground truth on the one-machine cluster (scripts/cluster-local.sh).

For each regime, --repeats times, as one pair measured back to back: measure DDP on ONE node (N=1 and N=2, a
sweep of its own), predict N=2 over 2 nodes (one rank per node) from that sweep and a loopback `distbench comm`
(the intra-node tier, measured once) with `distbench predict --gpus-per-node 1 --link-bw inter=RATE
--link-framing inter=tbf --link-latency inter=DELAY --algorithm ring` (the rate and delay the cluster's links
were given; the rate is a token bucket's, which counts each frame from its Ethernet header; gloo's all-reduce is
a ring), then set the link and measure that point across the nodes. Each prediction is scored
against the measurement of its own pair: the machine's load drifts over minutes, and a pair measured minutes
apart sees nearly the same load in its fit and in its truth.

The nodes share this machine's cores. With --pin (the default) every rank runs on a core of its own
(DISTBENCH_PIN_CORES=1, distbench.core.rankguard.pinned_cores): the one-node N=2 point's ranks on cores 0
and 1, the 2-node point's rank on node1 on core 0 and its rank on node2 on core 1, each with one thread (a
rank's threads are its share of the machine's cores). The compute term the prediction anchors on is then
measured on the same cores, with the same assignment, as the point it predicts: only the link differs. What
pinning cannot remove is other processes on those cores (the machine's load): it slows fit and truth alike
only when it stays the same across the pair, which is why the load is recorded beside each pair.

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
from mdsection import emit  # noqa: E402

from distbench.cluster import netns, spec  # noqa: E402
from distbench.core import rankguard  # noqa: E402
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


def measured(db: Path, sweep: str, pinned: bool) -> dict:
    with Store(db) as store:
        (rec,) = [r for r in store.points(sweep) if r["strategy"] == "ddp" and r["nodes"] == 2]
    if rec["status"] != "ok":
        raise SystemExit(f"the 2-node point failed: {rec.get('reason')}")
    placed = rec["launch"]["placement"]
    assert placed["hosts"] == ["node1", "node2"] and set(placed["interface"].values()) == {"eth0"}, placed
    if pinned:  # each rank on cores of its own, the cores the one-node N=2 point's ranks had
        cores = rec["launch"].get("pinned_cores") or {}
        assert len(cores) == 2 and not set(cores["0"]) & set(cores["1"]), cores
    return rec


def core_reference(db: Path, sweep: str) -> float:
    """The sweep's per-core reference: torch at N=1 on one thread (its own core when pinned), the speed of one
    core at the time of the sweep."""
    with Store(db) as store:
        (rec,) = [
            r
            for r in store.points(sweep)
            if r["strategy"] == "torch" and (r.get("config") or {}).get("baseline_threads") == 1
        ]
    return rec["throughput"]


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def fit_and_predict(db: Path, workload: str, comm: str, rate: str) -> tuple[dict, float, float]:
    """The one-node sweep (N=1, N=2) and the prediction of N=2 over 2 nodes at `rate` from it; also the
    one-node N=2 throughput (the compute the prediction anchors on) and the sweep's per-core reference."""
    run([*CLI, "scale", "--strategy", "ddp", "--gpus", "1,2", *WORKLOADS[workload], *POINT, "--results", str(db)])
    fit = latest_sweep(db)
    with Store(db) as store:
        (one_node,) = [r for r in store.points(fit) if r["strategy"] == "ddp" and r["world_size"] == 2]
    state = spec.read_state()
    delay_us = state.nodes[0]["delay_s"] * 1e6
    mbit = spec.parse_rate(rate) / 1e6
    # the rate is a qdisc's (tbf, or netem's rate): it charges each packet from its Ethernet header on
    predict = [*CLI, "predict", fit, "--comm", comm, "--gpus", "2", "--gpus-per-node", "1", "--strategy", "ddp"]
    predict += ["--link-bw", f"inter={mbit:g}mbit", "--link-framing", "inter=tbf"]
    predict += ["--link-latency", f"inter={max(delay_us, 1):g}"]
    predict += ["--algorithm", "ring", "--no-store", "--format", "json", "--results", str(db)]
    (p,) = json.loads(run(predict))["series"][0]["predicted"]
    return p, one_node["throughput"], core_reference(db, fit)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2, help="fit-and-measure pairs per regime")
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True, help="each rank on a core of its own")
    ap.add_argument("--only", choices=sorted(WORKLOADS), help="only the regimes of this model (a quick check)")
    ap.add_argument("--out", help="markdown file whose section this writes")
    args = ap.parse_args()
    if args.repeats < 1:
        raise SystemExit(f"--repeats {args.repeats}: at least 1")
    if why := netns.unavailable():
        raise SystemExit(why)
    if args.pin:
        os.environ[rankguard.PIN_VAR] = "1"
    work = Path(tempfile.mkdtemp(prefix="cluster-predict-"))
    db = work / "r.db"
    os.environ.setdefault(spec.STATE_DIR_VAR, str(work / "cluster"))
    run([*CLUSTER, "up", "--nodes", "2", "--rate", "1gbit", "--delay", "0us"])
    rows, started, loads = [], datetime.datetime.now(datetime.timezone.utc), [load()]
    try:
        run([*CLI, "comm", "--gpus", "2", "--sizes", "64K:64M", "--factor", "4", "--iters", "5", "--results", str(db)])
        comm = latest_sweep(db)
        for regime, workload, rate in REGIMES:
            if args.only and workload != args.only:
                continue
            for _ in range(args.repeats):
                p, one_node, fit_core = fit_and_predict(db, workload, comm, rate)
                run([*CLUSTER, "link", "--rate", rate, "--delay", "0us"])
                argv = [*CLI, "scale", "--strategy", "ddp", "--gpus", "2", "--nodes", "2", *WORKLOADS[workload]]
                run([*argv, *POINT, "--results", str(db)])
                truth = latest_sweep(db)
                rec = measured(db, truth, args.pin)
                loads.append(load())
                row = {"regime": regime, "workload": workload, "rate": rate, "predicted": p, "one_node": one_node}
                drift = core_reference(db, truth) / fit_core - 1  # how much faster a core ran at the truth
                rows.append(dict(row, measured=rec["throughput"], core_drift=drift, load=loads[-1]))
                print(json.dumps(rows[-1], default=str), flush=True)
    finally:
        run([*CLUSTER, "down"])
    text = render(rows, started, loads, args.repeats, args.pin)
    emit(text, args.out)
    return 0


def render(rows: list[dict], started, loads: list[str], repeats: int, pinned: bool) -> str:
    cores = (
        "Each rank was pinned to a core of its own (`DISTBENCH_PIN_CORES=1`): the one-node N=2 point's ranks on "
        "cores 0 and 1, the 2-node point's rank on node1 on core 0 and its rank on node2 on core 1, one thread "
        "each; so the compute term the model anchors on was measured on the same cores, in the same assignment, "
        "as the point it predicts, and only the link differs. Pinning does not keep other processes off those "
        "cores: the machine's load slows a pair's fit and its truth alike only while it stays the same, so each "
        "pair is measured back to back and its load is shown beside it."
        if pinned
        else "The ranks were not pinned (`--no-pin`): the kernel placed them, on one node and on two."
    )
    lines = [
        "## Cross-node prediction against measured points on the one-machine cluster",
        "",
        f"Measured {started:%Y-%m-%d %H:%M} UTC by `benchmarks/cluster_predict.py` on this machine "
        f"({os.cpu_count()} cores, kernel {os.uname().release}; the load average (1/5/15 min) during the runs went "
        f"{loads[0]} .. {loads[-1]}: the machine was shared). Two nodes of `scripts/cluster-local.sh` (network "
        "namespaces, veth + bridge, a token-bucket egress at the rate; this kernel has no netem, so no added "
        "delay). DDP (gloo), one rank per node. Each regime is measured as "
        f"{repeats} pair(s), each pair back to back: a fit (DDP at N=1 and N=2 on ONE node; with a loopback "
        "`distbench comm`, measured once, as the intra tier), its prediction of N=2 over 2 nodes (`--gpus-per-node "
        "1 --link-bw inter=RATE --link-framing inter=tbf --link-latency inter=1 --algorithm ring`: the model's "
        "inter-node bandwidth is the payload share of the rate, 1448 of every 1514 bytes the token bucket counts "
        "at MTU 1500, 95.6%), and that point measured across the nodes. Error = predicted / measured - 1 within a pair; naive = the per-device throughput of the largest "
        "one-node N (what a user would guess without a network model); covered = the measured value lies in the "
        "95% prediction interval; one-node N=2 = the fit's own N=2 throughput (the compute reference); core "
        "drift = how much faster one core ran the single-thread torch baseline in the truth's sweep than in the "
        "fit's (both sweeps measure it, on core 0, just before their DDP points): the machine's load moving "
        "between fit and truth, which no model of the link can predict.",
        "",
        cores,
        "",
        "| regime | model | link | predicted (samples/s) | 95% interval | measured | error | naive | naive error "
        "| covered | one-node N=2 | core drift | load (1/5/15 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary: dict[str, list] = {}
    for r in rows:
        p, m = r["predicted"], r["measured"]
        err, naive = p["throughput"] / m - 1, p["naive_throughput"] / m - 1
        cov = p["throughput_low"] <= m <= p["throughput_high"]
        summary.setdefault(r["regime"], []).append((abs(err), abs(naive), cov, m, r["one_node"]))
        lines.append(
            f"| {r['regime']} | {r['workload']} | {r['rate']} | {p['throughput']:.2f} | "
            f"{p['throughput_low']:.2f}..{p['throughput_high']:.2f} | {m:.2f} | {err:+.1%} | "
            f"{p['naive_throughput']:.2f} | {naive:+.1%} | {'yes' if cov else 'no'} | {r['one_node']:.2f} | "
            f"{r['core_drift']:+.1%} | {r['load']} |"
        )
    lines += [
        "",
        "Spread = the slowest repeat against its fastest (max / min - 1), of the measured 2-node point and of the "
        "fit's one-node N=2 point, the same point on the same link: an error within the spread cannot be told "
        "from the load.",
        "",
        "| regime | pairs | median abs. error | max abs. error | coverage | naive median abs. error | spread "
        "(2 nodes) | spread (one node) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for regime, xs in summary.items():
        spread = max(x[3] for x in xs) / min(x[3] for x in xs) - 1
        spread_one = max(x[4] for x in xs) / min(x[4] for x in xs) - 1
        lines.append(
            f"| {regime} | {len(xs)} | {statistics.median(x[0] for x in xs):.1%} | {max(x[0] for x in xs):.1%} | "
            f"{sum(x[2] for x in xs) / len(xs):.0%} | {statistics.median(x[1] for x in xs):.1%} | {spread:.1%} | "
            f"{spread_one:.1%} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

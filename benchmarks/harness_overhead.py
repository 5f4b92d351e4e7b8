"""Harness overhead: distbench's torch (N=1), ddp (N=2) and horovod-torch (N=2) points against
hand-written loops doing the same work (benchmarks/handwritten/train.py), interleaved.

Each round runs, per point, distbench's point and the hand-written loop back to back, in the order
A B in rounds 1, 3, 5 ... and B A in rounds 2, 4 ... (A = distbench), so a steady trend of the machine hits both
sides alike. distbench's side is planned and measured the way `distbench run --strategy S --gpus N
--target-ci 0 --no-comm` does it (plan.make_plan, measure.measure_point, telemetry sampled every
0.5 s): a fixed step count, no adaptive stopping. The hand-written side: plain python for N=1,
torchrun + DistributedDataParallel, horovodrun + hvd.DistributedOptimizer; same model definition,
batch, image size, threads per worker, SGD momentum 0.9, fp32, per-step device sync, and the same
timed window (a barrier, the steps, the slowest rank's clock).

Reported per point: the median throughput of each side over the rounds, the ratio of medians
(distbench / hand-written; target >= 0.98), the per-round ratios' min..max and IQR, and a
distribution-free CI of the median per-round ratio (order statistics, sign test). On a shared machine
each pair waits (at most --max-wait) for other jobs' load to fall below --quiet-below cores, and the
load other jobs put on the machine during every run is measured and reported beside the results;
no run is dropped for it. A run that fails (either side) is listed with its reason; its round has no
ratio, and the other rounds and points go on.

    .venv/bin/python benchmarks/harness_overhead.py --rounds 6 --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mdsection import write_section  # noqa: E402

from distbench.core import envinfo
from distbench.core.config import PointConfig
from distbench.core.strategies import STRATEGIES
from distbench.kinds.measure import measure_point
from distbench.run.commandline import build_env
from distbench.run.devices import cpu_cores
from distbench.run.plan import PlannedPoint, SweepOptions, make_plan

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "handwritten" / "train.py"
TARGET = 0.98
POINTS = (("torch", 1, "none"), ("ddp", 2, "ddp"), ("horovod-torch", 2, "horovod"))


def plan(strategy: str, n: int, a) -> PlannedPoint:
    """distbench's own plan of the point, as `distbench run --target-ci 0 --no-comm` makes it."""
    opts = SweepOptions(
        model=a.model,
        gpus=[n],
        strategies=[STRATEGIES[strategy]],
        device=a.device,
        batch_size=a.batch_size,
        image_size=a.image_size,
        steps=a.steps,
        warmup=a.warmup,
        add_baselines=False,
        comm=False,
        target_ci=0.0,
    )
    [point] = make_plan(opts).points
    return point


def cpu_seconds() -> tuple[float, float, float]:
    """CPU seconds so far: busy on the whole machine (steal included), used by this process (for
    distbench's side: its telemetry sampler and the wait for the workers), by it and its reaped
    descendants. Over a run, busy minus the last is what other jobs took from the machine."""
    t = psutil.cpu_times()
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = sum(t) - t.idle - getattr(t, "iowait", 0) - getattr(t, "guest", 0) - getattr(t, "guest_nice", 0)
    mine = me.ru_utime + me.ru_stime
    return busy, mine, mine + kids.ru_utime + kids.ru_stime


def metered(fn) -> tuple[float, float, float, float]:
    """(fn()'s throughput, wall seconds, cores' worth of CPU other jobs used meanwhile, and this
    process itself)."""
    before, started = cpu_seconds(), time.perf_counter()
    thr = fn()
    wall = time.perf_counter() - started
    busy, mine, own = (b - a for a, b in zip(before, cpu_seconds()))
    return thr, wall, max(0.0, busy - own) / wall, mine / wall


def wait_quiet(threshold: float, max_wait_s: float) -> float:
    """Wait until other jobs use less than `threshold` cores (2 s samples), at most max_wait_s; the
    seconds waited. Chooses when a pair starts, never which results count."""
    waited = 0.0
    while waited < max_wait_s:
        foreign = metered(lambda: time.sleep(2.0))[2]
        waited += 2.0
        if foreign < threshold:
            break
    return waited


class RunFailed(Exception):
    """One side's run failed: its round is kept as a failure (reason shown), not as a ratio."""


def distbench_run(point: PlannedPoint, workdir: Path, telemetry_s: float) -> float:
    record = measure_point(point, workdir, timeout_s=900, telemetry_interval_s=telemetry_s)
    if record["status"] != "ok":
        raise RunFailed(f"distbench {point.strategy.name} failed: {record['reason']}")
    if record["measured_steps"] != point.config.steps:
        raise RunFailed(
            f"distbench {point.strategy.name} ran {record['measured_steps']} steps, not {point.config.steps}"
        )
    return record["throughput"]


def handwritten_argv(cfg: PointConfig, dist: str) -> list[str]:
    args = [
        str(TRAIN),
        "--dist",
        dist,
        "--model",
        cfg.model,
        "--image-size",
        str(cfg.image_size),
        "--batch-size",
        str(cfg.per_device_batch),
        "--steps",
        str(cfg.steps),
        "--warmup",
        str(cfg.warmup),
        "--threads",
        str(cfg.threads_per_worker),
        "--device",
        cfg.device,
    ]
    n, bin_dir = cfg.world_size, Path(sys.executable).parent
    if dist == "ddp":
        return [str(bin_dir / "torchrun"), "--standalone", "--nnodes=1", f"--nproc_per_node={n}", *args]
    if dist == "horovod":
        return [
            str(bin_dir / "horovodrun"),
            "-np",
            str(n),
            "-H",
            f"localhost:{n}",
            "--gloo",
            "--network-interface",
            "lo",
            "--start-timeout",
            "120",
            sys.executable,
            *args,
        ]
    return [sys.executable, *args]


def handwritten_run(cfg: PointConfig, dist: str) -> float:
    """The hand-written loop's throughput; its environment is the point's (OMP/MKL threads, no GPU
    visible on CPU workers: launchers.build_env)."""
    out = subprocess.run(handwritten_argv(cfg, dist), env=build_env(cfg), capture_output=True, text=True, timeout=900)
    lines = [line[line.index("{") :] for line in out.stdout.splitlines() if '{"throughput"' in line]
    if out.returncode or not lines:  # horovodrun prefixes each line with [rank]<stdout>:
        said = [line.strip() for line in out.stderr.splitlines() if any(c.isalnum() for c in line)]  # no banners
        causes = (
            line for key in ("terminate called", "Error:") for line in said if key in line and "ChildFailed" not in line
        )
        why = next(causes, said[-1] if said else "")
        raise RunFailed(f"hand-written {dist} loop failed (exit {out.returncode}): {why[-300:] or 'no output'}")
    return json.loads(lines[-1])["throughput"]


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(low, high, coverage): the narrowest order-statistic interval [x(k), x(n+1-k)] whose coverage of
    the median, 1 - 2 P(Binomial(n, 1/2) < k), is >= level; with too few values for that, min..max and
    its (lower) coverage. Assumes only independent values from one continuous distribution."""
    xs, n = sorted(values), len(values)
    coverage = lambda k: 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n  # noqa: E731
    k = max((k for k in range(1, n // 2 + 1) if coverage(k) >= level), default=1)
    return xs[k - 1], xs[n - k], coverage(k)


def summarize(ours: list[float], ref: list[float]) -> dict:
    ratios = [d / h for d, h in zip(ours, ref)]
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return {
        "ratio": statistics.median(ours) / statistics.median(ref),
        "ratios": ratios,
        "iqr": (q1, q3),
        "ci": median_ci(ratios),
    }


def point_arguments(ap: argparse.ArgumentParser, steps: int) -> None:
    """The workload of the points compared (plan() reads them), shared with telemetry_cost.py."""
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--telemetry-interval", type=float, default=0.5, help="distbench's default sampling")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6, help="interleaved rounds (>= 5)")
    point_arguments(ap, steps=30)
    ap.add_argument(
        "--quiet-below",
        type=float,
        default=0.25,
        help="other jobs' load (cores) under which a pair may start, and a round counts as quiet",
    )
    ap.add_argument("--max-wait", type=float, default=30.0, help="seconds a pair waits for that at most")
    ap.add_argument("--points", default=",".join(p[0] for p in POINTS))
    ap.add_argument("--out", default=None, help="write the results section into this markdown file")
    a = ap.parse_args()
    if a.rounds < 5:
        raise SystemExit("--rounds must be at least 5")
    chosen = [p for p in POINTS if p[0] in a.points.split(",")]
    planned = {s: plan(s, n, a) for s, n, _ in chosen}
    skipped = {s: p.skip_reason for s, p in planned.items() if p.skip_reason}
    live = [p for p in chosen if p[0] not in skipped]
    # per point, per round: {"distbench": (throughput, wall s, other jobs' cores), "hand": (...)}
    rounds: dict[str, list[dict]] = {s: [] for s, _, _ in live}
    failed: dict[str, list[str]] = {s: [] for s, _, _ in live}  # per point: "round r: reason", in run order
    waited = 0.0
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for strategy, n, dist in live:
                point = planned[strategy]
                sides = [
                    ("distbench", lambda: distbench_run(point, Path(tmp) / f"{strategy}-{r}", a.telemetry_interval)),
                    ("hand", lambda: handwritten_run(point.config, dist)),
                ]
                waited += wait_quiet(a.quiet_below, a.max_wait)
                try:
                    got = {side: metered(fn) for side, fn in (sides if r % 2 == 0 else sides[::-1])}
                except RunFailed as exc:  # the pair has no ratio; the other points and rounds go on
                    failed[strategy].append(f"round {r + 1}: {exc}")
                    print(f"round {r + 1} {strategy} N={n}: {exc}", flush=True)
                    continue
                rounds[strategy].append(got)
                print(
                    f"round {r + 1} {strategy} N={n} ({'AB' if r % 2 == 0 else 'BA'}): "
                    + "  ".join(
                        f"{side} {thr:.2f} samples/s ({wall:.0f} s, other jobs {load:.2f} cores)"
                        for side, (thr, wall, load, _) in got.items()
                    ),
                    flush=True,
                )
    minutes = (time.time() - started) / 60
    env = envinfo.capture_environment()
    cfg0 = next(iter(planned.values())).config
    fmt = lambda xs: f"{statistics.median(xs):.2f} ({min(xs):.2f}..{max(xs):.2f})"  # noqa: E731
    col = lambda strategy, side, i: [g[side][i] for g in rounds[strategy]]  # noqa: E731
    loads = [g[side][2] for rs in rounds.values() for g in rs for side in g]
    lines = [
        "## Harness overhead (`benchmarks/harness_overhead.py`)",
        "",
        f"Run {datetime.date.today().isoformat()} on {env['cpu_model']} ({cpu_cores()} cores), {a.device} workers, "
        f"torch {env['packages']['torch']}, {minutes:.0f} min in all ({waited / 60:.0f} min of it waiting for a "
        f"quieter machine). {cfg0.model}, {cfg0.image_size}px, batch {cfg0.per_device_batch}/worker, fp32, SGD "
        f"momentum 0.9, {cfg0.steps} measured steps after {cfg0.warmup} warmup, threads per worker = cores / N. "
        f"{a.rounds} rounds; in each, every point runs distbench (A) and the hand-written loop (B) back to back, "
        "A B in odd rounds, B A in even ones.",
        "",
        f"**The machine was shared and loaded**: other jobs used {statistics.median(loads):.2f} cores "
        f"(median over the runs; {min(loads):.2f}..{max(loads):.2f}) of the {cpu_cores()} while a run was going "
        f"(machine busy CPU minus this benchmark's own). Each pair waited up to {a.max_wait:g} s for that to fall "
        f"below {a.quiet_below:g} cores before starting; the load was measured during every run, not used to drop any.",
        "",
        "distbench side: planned and measured as `distbench run --strategy S --gpus N --device cpu --target-ci 0 "
        "--no-comm` does (fixed step count, telemetry every 0.5 s as by default), throughput over its measured "
        "window (a barrier to the slowest rank's last synchronized step). Hand-written side "
        "(`benchmarks/handwritten/train.py`): plain python (N=1), torchrun + DistributedDataParallel, "
        "horovodrun + hvd.DistributedOptimizer; the same window (a barrier, the steps each ending with a device "
        "sync, the slowest rank's clock).",
        "",
        "Throughput in samples/s: median (min..max) over the rounds. Ratio = distbench / hand-written. Per-round "
        "ratio: a round's two runs, back to back. CI: distribution-free (order statistics) interval of the median "
        "per-round ratio with its exact coverage; it assumes only that the rounds are independent (fresh process "
        "trees) and alike, which a machine whose load changes from minute to minute only approximates.",
        "",
        "| point | distbench | hand-written | ratio of medians | per-round ratios min..max (IQR) "
        "| CI of the median ratio | target >= 0.98 |",
        "|---|---|---|---|---|---|---|",
    ]
    results = {s: summarize(col(s, "distbench", 0), col(s, "hand", 0)) for s in rounds if len(rounds[s]) >= 2}
    for strategy, n, _ in live:
        if strategy not in results:
            lines.append(
                f"| {strategy} N={n} | {len(rounds[strategy])} of {a.rounds} rounds complete: too few | | | | | no |"
            )
            continue
        s = results[strategy]
        lo, hi, cov = s["ci"]
        lines.append(
            f"| {strategy} N={n} | {fmt(col(strategy, 'distbench', 0))} | {fmt(col(strategy, 'hand', 0))} "
            f"| {s['ratio']:.3f} | {min(s['ratios']):.3f}..{max(s['ratios']):.3f} "
            f"({s['iqr'][0]:.3f}..{s['iqr'][1]:.3f}) | {lo:.3f}..{hi:.3f} ({cov:.1%}) "
            f"| {'yes' if s['ratio'] >= TARGET else 'no'} |"
        )
    for strategy, reason in skipped.items():
        lines.append(f"| {strategy} | skipped: {reason} | | | | | |")
    lines += [
        "",
        f"Noise per point: other jobs' load during the runs (cores, median), the ratio of medians over the quiet "
        f"rounds only (both runs under {a.quiet_below:g} cores: a sensitivity check, not the result), and the wall "
        "seconds per run, launch to exit (median); distbench's parent process (its telemetry sampler and "
        "the wait for the workers) used the cores shown in the last column, beside the workers.",
        "",
        "| point | other jobs' load, distbench / hand | quiet rounds | ratio of medians, quiet rounds "
        "| wall s, distbench / hand | distbench parent's CPU, cores |",
        "|---|---|---|---|---|---|",
    ]
    for strategy, n, _ in live:
        if strategy not in results:
            continue
        quiet = [g for g in rounds[strategy] if max(g["distbench"][2], g["hand"][2]) < a.quiet_below]
        q_ratio = (
            f"{statistics.median(g['distbench'][0] for g in quiet) / statistics.median(g['hand'][0] for g in quiet):.3f}"
            if quiet
            else "none"
        )
        med = lambda side, i: statistics.median(col(strategy, side, i))  # noqa: E731
        lines.append(
            f"| {strategy} N={n} | {med('distbench', 2):.2f} / {med('hand', 2):.2f} | {len(quiet)} of "
            f"{len(rounds[strategy])} | {q_ratio} | {med('distbench', 1):.1f} / {med('hand', 1):.1f} "
            f"| {med('distbench', 3):.3f} |"
        )
    lines += [
        "",
        "Per-round ratios, in run order: "
        + "; ".join(f"{s} " + ", ".join(f"{q:.3f}" for q in results[s]["ratios"]) for s in results)
        + ".",
    ]
    failures = [f"{s}, {why}" for s, whys in failed.items() for why in whys]
    if failures:
        lines += [
            "",
            f"Failed runs ({len(failures)}; their rounds have no ratio, the other rounds count): "
            + "; ".join(failures)
            + ".",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        write_section(a.out, text)
    complete = len(results) == len(live) and not skipped
    return 0 if complete and all(s["ratio"] >= TARGET for s in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

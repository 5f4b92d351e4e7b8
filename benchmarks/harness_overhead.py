"""Harness overhead: distbench's measured throughput vs a minimal hand-written loop, same run.

For the torch baseline (1 worker) and ddp (2 workers, torchrun), runs distbench's point and the
minimal loop (benchmarks/minimal_loop.py) alternately, R times each, on the same workload, and
reports the median throughput of each, the spread (min..max) and the ratio of medians.
Target: distbench / minimal >= 0.98 (distbench adds no measurable cost to what it measures).

    .venv/bin/python benchmarks/harness_overhead.py --repeats 3 --out docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from distbench import envinfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mdsection import write_section  # noqa: E402
from distbench.config import PointConfig
from distbench.launch import build_env, run_point
from distbench.plan import cpu_cores
from distbench.record import add_step_metrics
from distbench.strategies import STRATEGIES

HERE = Path(__file__).resolve().parent
TARGET = 0.98


def minimal(cfg: PointConfig) -> float:
    args = ["--model", cfg.model, "--image-size", str(cfg.image_size), "--batch-size", str(cfg.per_device_batch),
            "--steps", str(cfg.steps), "--warmup", str(cfg.warmup), "--threads", str(cfg.threads_per_worker)]
    script = str(HERE / "minimal_loop.py")
    if cfg.world_size == 1:
        argv = [sys.executable, script, *args]
    else:
        torchrun = str(Path(sys.executable).parent / "torchrun")
        argv = [torchrun, "--standalone", f"--nproc_per_node={cfg.world_size}", script, "--ddp", *args]
    out = subprocess.run(argv, env=build_env(cfg), capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])["throughput"]


def distbench_point(cfg: PointConfig, workdir: Path) -> float:
    record = add_step_metrics(run_point(STRATEGIES[cfg.strategy], cfg, workdir, timeout_s=900))
    if record["status"] != "ok":
        raise SystemExit(f"distbench point {cfg.strategy} failed: {record['reason']}")
    return record["throughput"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default=None, help="write the results section into this markdown file")
    a = ap.parse_args()
    cores = cpu_cores()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for strategy, n in (("torch", 1), ("ddp", 2)):
            cfg = PointConfig(strategy=strategy, model="resnet50", world_size=n, device="cpu",
                              per_device_batch=a.batch_size, image_size=a.image_size, steps=a.steps,
                              warmup=a.warmup, threads_per_worker=max(1, cores // n))
            ours, ref = [], []
            for r in range(a.repeats):  # alternate, so drift on a shared machine hits both alike
                ours.append(distbench_point(cfg, Path(tmp) / f"{strategy}-{r}"))
                ref.append(minimal(cfg))
                print(f"{strategy} N={n} repeat {r + 1}: distbench {ours[-1]:.2f}  minimal {ref[-1]:.2f} samples/s",
                      flush=True)
            ratio = statistics.median(ours) / statistics.median(ref)
            rows.append((strategy, n, ours, ref, ratio))
    env = envinfo.capture_environment()
    lines = [
        "## Harness overhead (`benchmarks/harness_overhead.py`)",
        "",
        f"Run {datetime.date.today().isoformat()} on {env['cpu_model']} ({cores} cores), CPU workers, "
        f"torch {env['packages']['torch']}. ResNet-50, {a.image_size}px, batch {a.batch_size}/worker, "
        f"{a.steps} measured steps after {a.warmup} warmup, {a.repeats} alternating repeats per side.",
        "Throughput in samples/s: median (min..max). Target: ratio >= 0.98.",
        "",
        "| point | distbench | minimal hand-written loop | ratio (medians) | target met |",
        "|---|---|---|---|---|",
    ]
    for strategy, n, ours, ref, ratio in rows:
        fmt = lambda xs: f"{statistics.median(xs):.2f} ({min(xs):.2f}..{max(xs):.2f})"  # noqa: E731
        lines.append(f"| {strategy} N={n} | {fmt(ours)} | {fmt(ref)} | {ratio:.3f} | {'yes' if ratio >= TARGET else 'no'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        write_section(a.out, text)
    return 0 if all(r[4] >= TARGET for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

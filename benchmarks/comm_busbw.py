"""`distbench comm` bus bandwidth vs a minimal hand-written torch.distributed all_reduce loop.

Same backend (gloo), same ranks, same sizes, alternating runs in one session; reports per size the
median busbw of each side over the repeats (min..max) and the ratio of medians. Target: >= 0.95
(distbench's barrier, correctness check and refill sit outside the timed region).

    .venv/bin/python benchmarks/comm_busbw.py --repeats 3 --out docs/benchmarks.md
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

from distbench.core import envinfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mdsection import write_section  # noqa: E402

from distbench.core.config import PointConfig
from distbench.kinds.commbench import BACKENDS
from distbench.run.commandline import build_env
from distbench.run.devices import cpu_cores
from distbench.run.launch import run_point

HERE = Path(__file__).resolve().parent
TARGET = 0.95


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", default="1048576,4194304,16777216,67108864")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    threads = max(1, cpu_cores() // a.ranks)
    cfg = PointConfig(
        strategy="comm-gloo",
        model="none",
        world_size=a.ranks,
        device="cpu",
        per_device_batch=1,
        steps=1,
        warmup=0,
        threads_per_worker=threads,
        extra={"backend": "gloo", "sizes": sizes, "iters": a.iters, "warmup": 3, "max_time_per_size": 1e9},
    )
    ours = {s: [] for s in sizes}
    ref = {s: [] for s in sizes}
    torchrun = str(Path(sys.executable).parent / "torchrun")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            rec = run_point(BACKENDS["gloo"], cfg, Path(tmp) / f"r{r}", timeout_s=900)
            if rec["status"] != "ok":
                raise SystemExit(f"distbench comm failed: {rec['reason']}")
            for s, b in zip(rec["sizes_bytes"], rec["busbw_gbps"]):
                ours[s].append(b)
            out = subprocess.run(
                [
                    torchrun,
                    "--standalone",
                    f"--nproc_per_node={a.ranks}",
                    str(HERE / "minimal_allreduce.py"),
                    "--sizes",
                    a.sizes,
                    "--iters",
                    str(a.iters),
                    "--threads",
                    str(threads),
                ],
                env=build_env(cfg),
                capture_output=True,
                text=True,
                check=True,
                timeout=900,
            )
            for s, b in json.loads(out.stdout.strip().splitlines()[-1]).items():
                ref[int(s)].append(b)
            print(
                f"repeat {r + 1}: " + ", ".join(f"{s >> 20}MiB {ours[s][-1]:.3f}/{ref[s][-1]:.3f}" for s in sizes),
                flush=True,
            )
    env = envinfo.capture_environment()
    lines = [
        "## All-reduce bus bandwidth (`benchmarks/comm_busbw.py`)",
        "",
        f"Run {datetime.date.today().isoformat()} on {env['cpu_model']} ({cpu_cores()} cores): gloo, "
        f"{a.ranks} CPU-worker ranks on one host, {a.iters} timed iterations per size, {a.repeats} alternating "
        "repeats per side. busbw in GB/s (1e9 B/s): median (min..max). Target: ratio >= 0.95.",
        "",
        "| size | distbench comm | minimal all_reduce loop | ratio (medians) | target met |",
        "|---|---|---|---|---|",
    ]
    ok = True
    for s in sizes:
        ratio = statistics.median(ours[s]) / statistics.median(ref[s])
        ok &= ratio >= TARGET
        fmt = lambda xs: f"{statistics.median(xs):.3f} ({min(xs):.3f}..{max(xs):.3f})"  # noqa: E731
        lines.append(
            f"| {s >> 20} MiB | {fmt(ours[s])} | {fmt(ref[s])} | {ratio:.3f} | {'yes' if ratio >= TARGET else 'no'} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        write_section(a.out, text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

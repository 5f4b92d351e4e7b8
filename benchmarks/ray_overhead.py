"""Ray Train's cost against torchrun: `ray-ddp` against `ddp` at the same N, the same workload and
thread count, interleaved in fresh process trees (ddp then ray-ddp in odd rounds, ray-ddp then ddp in
even ones), each point planned and measured as `distbench run --strategy S --gpus N --target-ci 0
--no-comm` does it (harness_overhead.plan): a fixed step count.

Reported per N: the median throughput of each side, the ratio of medians (ray-ddp / ddp), the per-round
ratios and the distribution-free CI of their median (run to run: fresh processes each round); and the
point's wall time on each side, whose difference is Ray's fixed cost per point. As `distbench run` does, the
ray-ddp points share one local Ray head for the whole run (distbench.run.raycluster.SweepHead: started once,
stopped at the end); its start and stop are reported once, and each point's fixed cost split as its record
holds it: connect (ray.init), fit start (fit() until rank 0 trains: Train's controller and worker group),
teardown (rank 0 done until fit() returns) and shutdown (ray.shutdown). Each pair waits (at most
--max-wait s) for other jobs' load to fall below --quiet-below cores; the load other jobs put on the
machine during every run is measured and printed beside it; no run is dropped for it.

    .venv/bin/python benchmarks/ray_overhead.py --rounds 4 --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness_overhead import RunFailed, metered, plan, point_arguments, summarize, wait_quiet  # noqa: E402
from mdsection import write_section  # noqa: E402

from distbench.kinds.measure import measure_point  # noqa: E402
from distbench.run.raycluster import SweepHead  # noqa: E402

SPLIT = ("connect_s", "fit_start_s", "teardown_s", "shutdown_s")


def run_point(point, workdir: Path, engines: list) -> float:
    """harness_overhead.distbench_run, keeping a ray-ddp record's engine (its fixed cost, split)."""
    record = measure_point(point, workdir, timeout_s=900, telemetry_interval_s=0.0)
    if record["status"] != "ok":
        raise RunFailed(f"distbench {point.strategy.name} failed: {record['reason']}")
    if record["measured_steps"] != point.config.steps:
        raise RunFailed(f"distbench {point.strategy.name} ran {record['measured_steps']} steps")
    if "engine" in record:
        engines.append(record["engine"])
    return record["throughput"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--gpus", default="1,2", help="device counts compared")
    ap.add_argument("--quiet-below", type=float, default=0.25, help="cores of other jobs' load to wait for")
    ap.add_argument("--max-wait", type=float, default=30.0)
    ap.add_argument("--out", help="markdown file whose '## Ray Train against torchrun' section is rewritten")
    point_arguments(ap, steps=30)
    a = ap.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = []
    counts = [int(x) for x in a.gpus.split(",")]
    head = SweepHead(num_cpus=max(counts) + 1, num_gpus=0)
    with tempfile.TemporaryDirectory() as tmp, head:
        print(f"one Ray head for the run: started in {head.start_s:.2f} s at {head.address}")
        for n in counts:
            sides = {s: plan(s, n, a) for s in ("ddp", "ray-ddp")}
            thr = {s: [] for s in sides}
            wall = {s: [] for s in sides}
            loads, failures, engines = [], [], []
            for r in range(a.rounds):
                wait_quiet(a.quiet_below, a.max_wait)
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                got = {}
                for s in order:
                    try:
                        t, w, load, _ = metered(lambda: run_point(sides[s], Path(tmp) / f"{n}-{r}-{s}", engines))
                    except RunFailed as exc:
                        failures.append(f"round {r + 1} {s}: {exc}")
                        break
                    got[s] = (t, w)
                    loads.append(load)
                    print(
                        f"N={n} round {r + 1} {s}: {t:.2f} samples/s, point wall {w:.1f} s, other jobs {load:.2f} cores"
                    )
                if len(got) == 2:
                    for s, (t, w) in got.items():
                        thr[s].append(t)
                        wall[s].append(w)
            if not thr["ddp"]:
                lines.append(f"| {n} | no complete round | | | | | | {'; '.join(failures)} |")
                continue
            s = summarize(thr["ray-ddp"], thr["ddp"])
            low, high, cov = s["ci"]
            fixed = statistics.median(wall["ray-ddp"]) - statistics.median(wall["ddp"])
            lines.append(
                f"| {n} | {statistics.median(thr['ddp']):.2f} | {statistics.median(thr['ray-ddp']):.2f} | "
                f"{s['ratio']:.3f} | {', '.join(f'{x:.3f}' for x in s['ratios'])} ({low:.3f}..{high:.3f}, "
                f"{cov:.0%}) | {statistics.median(wall['ddp']):.0f} / {statistics.median(wall['ray-ddp']):.0f} "
                f"(+{fixed:.1f}) | "
                + " / ".join(f"{statistics.median(e[k] for e in engines):.2f}" for k in SPLIT)
                + f" | {min(loads):.2f}..{max(loads):.2f} |"
                + (f" {'; '.join(failures)}" if failures else "")
            )
            print(lines[-1])
    text = "\n".join(
        [
            "## Ray Train against torchrun (`benchmarks/ray_overhead.py`)",
            "",
            f"Run {started}: `{' '.join(sys.argv[1:])}`; {a.model} at {a.image_size} px, batch {a.batch_size} per "
            f"device, {a.steps} steps after {a.warmup} warmup, CPU workers (gloo), the same threads per worker on "
            "both sides; ray-ddp on one local Ray head for the whole run (as `distbench run` starts one per sweep): "
            f"it started in {head.start_s:.2f} s and stopped in {head.stop_s:.2f} s, once. Interleaved rounds in "
            "fresh process trees; the CI is of the median per-round ratio (order statistics), run to run. "
            "The machine: 2 cores shared with other jobs (eight agents developing distbench at the same time); "
            "their load during the runs is in the last column.",
            "",
            "| N | ddp samples/s (median) | ray-ddp samples/s | ray-ddp / ddp | per-round ratios (CI of the median, "
            "coverage) | point wall s, ddp / ray-ddp (Ray's fixed cost per point) | ray-ddp fixed cost split, "
            "median s: connect / fit start / teardown / shutdown | other jobs' load, cores |",
            "|---|---|---|---|---|---|---|---|",
            *lines,
        ]
    )
    print(text)
    if a.out:
        write_section(a.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

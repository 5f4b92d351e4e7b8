"""Where the wall time of a default CPU sweep goes: the share spent measuring, and the biggest other cost.

Runs `distbench scale --gpus 1,2 --device cpu --model resnet50` (CPU defaults otherwise: 64 px, batch 8,
adaptive stopping, communication variant at N=2) in this process, times the whole command, and splits
every point's wall time with distbench.analysis.wall_split (launch to first step, warmup, measuring,
no-sync variant, all-reduce benchmark, teardown). Target: measured windows (the synchronized runs' and
the no-sync variants', both timed steps of the point) >= 75% of the command's wall time.

    .venv/bin/python benchmarks/wall_split.py --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mdsection import write_section  # noqa: E402

from distbench import analysis as an  # noqa: E402
from distbench.cli import main as distbench_main  # noqa: E402
from distbench.core import envinfo  # noqa: E402
from distbench.kinds import measure

TARGET = 0.75
HEADING = "## Where the wall time goes (`benchmarks/wall_split.py`)"


def stamp_launch_start(run_point):
    """record['launch']['started'] (the launch's wall-clock start) for records whose launch code does not
    write it yet: the clock just before run_point, kept only where the record has none."""

    def wrapped(*args, **kwargs):
        started = time.time()
        record = run_point(*args, **kwargs)
        record.setdefault("launch", {}).setdefault("started", started)
        return record

    return wrapped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="1,2")
    ap.add_argument("--strategy", default=None, help="strategies (default: all)")
    ap.add_argument("--out", default=None, help="write the results section into this markdown file")
    a = ap.parse_args()
    measure.run_point = stamp_launch_start(measure.run_point)
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "r.db")
        argv = ["scale", "--gpus", a.gpus, "--device", "cpu", "--model", "resnet50"]
        argv += ["--strategy", a.strategy] if a.strategy else []
        t0 = time.time()
        code = distbench_main([*argv, "--results", db])
        wall = time.time() - t0
        load = os.getloadavg()[1]  # other work on the machine stretches every phase
        if code not in (0, None):
            raise SystemExit(f"distbench scale exited {code}")
        with an.open_store(db) as store:
            sweep = an.load_sweep(store, "latest")
    points = [r for r in sweep.points if an.wall_split(r)]
    split = an.wall_split_total(points)
    outside = max(0.0, wall - split["total"])  # the parent between points: plan, environment, store, telemetry
    share = split["measuring"] / wall
    # A no-sync variant that is a whole run of its own: split it the same way (its record summaries carry
    # their launch and stopping stamps). One measured in its synchronized run's processes: its window.
    independent = [v for r in points for v in (r.get("independent") or [])]
    in_process = [v for v in independent if (v.get("stopping") or {}).get("segment_start")]
    variants = [an.wall_split(v) for v in independent if v not in in_process]
    variant = {k: sum((v or {}).get(k) or 0.0 for v in variants) for k, _ in an.WALL_PARTS}
    in_process_window = sum(an.span(v["stopping"].get("window")) or 0.0 for v in in_process)
    variant_window = variant["measuring"] + in_process_window
    with_variant = (split["measuring"] + variant_window) / wall
    parts = {label: split[k] for k, label in an.WALL_PARTS if k not in ("measuring", "no_sync")}
    parts["no-sync variant, apart from its measured windows"] = split["no_sync"] - variant_window
    parts["distbench between points"] = outside
    biggest = max(parts, key=parts.get)
    env = envinfo.capture_environment()
    lines = [
        HEADING,
        "",
        f"Run {datetime.date.today().isoformat()} on {env.get('cpu_model')} ({env.get('cpu_count')} cores): "
        f"`distbench {' '.join(argv)}` ({len(points)} launched points), {wall:.0f} s in all; load average "
        f"{load:.1f} (5 min) at the end. "
        f"Target: measuring >= {TARGET:.0%} of the wall time.",
        "",
        "| phase | seconds | share of the wall time |",
        "|---|---|---|",
    ]
    measured = [("measuring", split["measuring"]), ("no-sync variant, measured windows", variant_window)]
    for label, seconds in [*measured, *parts.items()]:
        lines.append(f"| {label} | {seconds:.1f} | {seconds / wall:.1%} |")
    lines += [
        "",
        "| point | " + " | ".join(label for _, label in an.WALL_PARTS) + " | total |",
        "|---" * (len(an.WALL_PARTS) + 2) + "|",
    ]
    for r in points:
        s = an.wall_split(r)
        lines.append(
            f"| {an.point_name(r)} | "
            + " | ".join("-" if s[k] is None else f"{s[k]:.1f}" for k, _ in an.WALL_PARTS)
            + f" | {s['total']:.1f} |"
        )
    lines += [
        "",
        f"No-sync variants measured in their synchronized runs' processes: {len(in_process)} runs, "
        f"{in_process_window:.1f} s of measured windows. "
        f"Those run as process trees of their own ({len(variants)}), split the same way (seconds): "
        + ", ".join(f"{label} {variant[k]:.1f}" for k, label in an.WALL_PARTS if k != "no_sync")
        + ".",
        "",
        f"Measuring (every measured window: the synchronized runs' and their no-sync variants'): "
        f"{with_variant:.1%} of the wall time ({'meets' if with_variant >= TARGET else 'below'} the "
        f"{TARGET:.0%} target); the synchronized runs' windows alone: {share:.1%}. "
        f"Biggest cost besides measuring: {biggest} ({parts[biggest]:.0f} s, {parts[biggest] / wall:.0%}).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        write_section(a.out, text)
    return 0 if with_variant >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

"""Submitting a sweep: one `sbatch --array` per resource shape (the tasks of an array share one request)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from typing import TYPE_CHECKING

from distbench.core.errors import DistbenchError

if TYPE_CHECKING:
    from distbench.slurm.plan import SlurmPlan, SlurmPoint, SlurmSettings


def sbatch_value(value: str) -> str:
    """A value for an `#SBATCH` line, which sbatch parses itself (double quotes, backslashes, '#')."""
    if re.fullmatch(r"[A-Za-z0-9_.&|,:*()\[\]!%@=+/-]+", value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sbatch_argv(points: list[SlurmPoint], settings: SlurmSettings) -> list[str]:
    nodes, gpus, tasks = points[0].shape
    assert all(p.shape == (nodes, gpus, tasks) for p in points)
    argv = [
        "sbatch",
        "--parsable",
        f"--array={','.join(str(p.index) for p in points)}",
        f"--nodes={nodes}",
        f"--ntasks-per-node={tasks}",
    ]
    if gpus:
        argv.append(f"--gres=gpu:{gpus}")
    argv += [
        f"--job-name={settings.job_name}-n{nodes}" + (f"g{gpus}" if gpus else ""),
        f"--output={settings.records_dir / 'logs' / 'slurm-%A_%a.out'}",
        str(settings.script),
    ]
    return argv


def submit_sweep(plan: SlurmPlan, settings: SlurmSettings) -> list[tuple[str, list[SlurmPoint]]]:
    """Submit every job array with sbatch; returns (job id, its points) per array."""
    if shutil.which("sbatch") is None:
        raise DistbenchError(
            f"sbatch not found: run on a Slurm login node, or submit later with "
            f"bash {shlex.quote(str(settings.submit_script))}"
        )
    out = []
    for pts in plan.shapes().values():
        argv = sbatch_argv(pts, settings)
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        if proc.returncode != 0:
            msg = (proc.stderr or proc.stdout or "").strip().splitlines()
            raise DistbenchError(
                f"sbatch failed (exit {proc.returncode}): {msg[-1] if msg else 'no output'}"
                + (f" ({len(out)} array(s) were submitted: {', '.join(j for j, _ in out)})" if out else "")
            )
        out.append((proc.stdout.strip().split(";")[0], pts))
    return out

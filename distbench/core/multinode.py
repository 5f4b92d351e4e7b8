"""Slurm cluster facts for multi-node points: host lists, the allocation, the TF workers of a step
(distbench.run.launchers builds the commands; this module only says where they run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list, in order: 'r[1-2]-n[01-02],login1' -> ['r1-n01', 'r1-n02', 'r2-n01',
    'r2-n02', 'login1'], by `scontrol show hostnames` where Slurm is installed, python-hostlist elsewhere."""
    if shutil.which("scontrol"):
        done = subprocess.run(["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.split()
    import hostlist as python_hostlist  # only where Slurm is not installed

    try:
        return python_hostlist.expand_hostlist(hostlist)
    except python_hostlist.BadHostlist as e:
        raise ValueError(f"not a Slurm host list: {hostlist!r} ({e})") from None


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM_STEP_TASKS_PER_NODE: '2(x3),1' -> [2, 2, 2, 1]."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise ValueError(f"not a Slurm tasks-per-node list: {text!r}")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def slurm_tf_workers(environ: dict, port_base: int = 8888) -> tuple[list[str], int]:
    """The TF cluster of this process's Slurm step: ('host:port' of every task in rank order, this task's
    index); a task listens on port_base + its SLURM_LOCALID."""
    hosts = expand_hostlist(environ["SLURM_STEP_NODELIST"])
    tasks = expand_tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"])
    if len(tasks) != len(hosts):
        raise ValueError(f"{len(hosts)} hosts but tasks per node for {len(tasks)}")
    workers = [f"{h}:{port_base + local}" for h, t in zip(hosts, tasks) for local in range(t)]
    node, local, rank = (int(environ[k]) for k in ("SLURM_NODEID", "SLURM_LOCALID", "SLURM_PROCID"))
    index = sum(tasks[:node]) + local
    if index != rank:
        raise ValueError(
            f"task {rank} is local task {local} of node {node}: the TF workers need srun's block "
            "distribution (srun --distribution=block)"
        )
    return workers, index


def allocation_hosts(environ: dict | None = None) -> list[str]:
    """The nodes of the Slurm allocation this process runs in (empty outside one)."""
    env = os.environ if environ is None else environ
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    return expand_hostlist(nodelist) if nodelist else []

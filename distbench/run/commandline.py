"""The pieces every launcher's command is built from: shell words a job script computes at run time (`Shell`),
the ranks' environment (`build_env`: threads, device order), tool paths, devices per node and the srun prefix
of a step in a Slurm allocation."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Literal, Protocol, Sequence

from distbench.core.config import PointConfig
from distbench.core.errors import BadInput

DEFAULT_START_TIMEOUT_S = 120

PodJob = Literal["torch", "mpi"]
"""The Kubernetes job a launcher's pods run in: 'torch' (PyTorchJob, Trainer's torch policy: one pod per node,
each running the launch command, the operator's rendezvous variables set) or 'mpi' (MPIJob, Trainer's MPI
policy: the command runs once, on the launcher pod, and reaches the node pods over SSH)."""


class Pods(Protocol):
    """What a Kubernetes job tells its pods' launch command (distbench.k8s builds it). Values may be `$(VAR)`
    references to the container's environment that Kubernetes fills in; each is read only when asked for."""

    rendezvous_timeout_s: int
    ssh_identity: str
    """The private key file for the launcher pod's ssh to the node pods ('mpi' jobs)."""

    def node_rank(self) -> str: ...

    def master(self) -> tuple[str, str]:
        """(address, port) of node rank 0, from the operator's variables."""
        ...

    def hosts(self) -> list[str]:
        """The DNS names of the job's pods, rank 0's first ('mpi' jobs)."""
        ...

    def network_interface(self) -> str | None: ...


class Shell(str):
    """Shell text the job script evaluates at run time, written verbatim by `shell_join`. Only
    distbench's own template text is ever a Shell, never user input."""

    __slots__ = ()


def shell_join(argv: Sequence[str]) -> str:
    return " ".join(a if isinstance(a, Shell) else shlex.quote(str(a)) for a in argv)


# Defined by distbench.slurm's template at run time.
JOB_PYTHON = Shell('"$PY"')
JOB_CONFIG = Shell('"$config"')
JOB_RESULT = Shell('"$result"')


def build_env(cfg: PointConfig, base: dict | None = None) -> dict:
    """The workers' environment: thread counts, quiet TF, only the devices the point may use."""
    env = dict(os.environ if base is None else base)
    threads = str(cfg.threads_per_worker)
    env.update(
        {
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "PYTHONUNBUFFERED": "1",
            "TF_CPP_MIN_LOG_LEVEL": env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
            "KERAS_BACKEND": "tensorflow",
        }
    )
    if cfg.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:  # CUDA numbers GPUs fastest-first by default, NVML by PCI bus: the telemetry's GPU i is device i
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def tool_path(name: str, python: str = sys.executable) -> str:
    """A console script (torchrun, horovodrun) from the same environment as `python`."""
    if isinstance(python, Shell):
        raise ValueError("pass the tool's path explicitly when python is a Shell value")
    local = Path(python).parent / name
    if local.exists() or python != sys.executable:
        return str(local)
    return shutil.which(name) or name


def devices_per_node(cfg: PointConfig) -> int:
    if cfg.nodes < 1 or cfg.world_size % cfg.nodes:
        raise BadInput(f"{cfg.world_size} devices cannot be split evenly over {cfg.nodes} nodes")
    return cfg.world_size // cfg.nodes


def srun_prefix(
    nodes: int, tasks_per_node: int, cpus_per_task: str | None = None, hosts: Sequence[str] = ()
) -> list[str]:
    """`srun` of `tasks_per_node` tasks on each of `nodes` nodes; --ntasks too, since alone
    --ntasks-per-node yields to the job's own task count."""
    argv = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes * tasks_per_node}",
        f"--ntasks-per-node={tasks_per_node}",
        "--kill-on-bad-exit=1",
    ]
    if hosts:
        argv.insert(1, f"--nodelist={','.join(hosts)}")
    if cpus_per_task is not None:
        argv += ["--cpus-per-task", cpus_per_task]
    return argv


# The Ray cluster a sweep starts on the one-machine cluster's nodes (distbench.run.raycluster.nodes_ray)
NODES_HEAD_ENV = "DISTBENCH_RAY_NODES_HEAD"
"""The GCS address of the Ray cluster the sweep started on the nodes (node1's address and the head's port)."""
NODES_START_ENV = "DISTBENCH_RAY_NODES_START_S"
"""Seconds its head and raylets took to start and register: paid once per sweep."""

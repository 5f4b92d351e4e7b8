"""The base of every launcher (distbench.run.launchers has them): one way of starting a point's ranks, with
the commands it builds for one node, a Slurm allocation, an sbatch step, the one-machine cluster and the pods
of a Kubernetes job; a launcher that does not override one refuses it in one line (BadInput) or, for
Kubernetes, has no job (`k8s_job` None)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Protocol, Sequence

from distbench.core.config import PointConfig
from distbench.core.errors import BadInput
from distbench.run.commandline import JOB_CONFIG, JOB_PYTHON, JOB_RESULT, PodJob, Pods, Shell


class Strategy(Protocol):
    """What a launcher needs of a strategy (distbench.core.strategies.Strategy has it): its worker module."""

    module: str


@dataclass(frozen=True)
class Launcher:
    """One way of starting a point's ranks; `name` is the records' launch.launcher."""

    name: str
    spans_nodes: bool = False
    module: str | None = None
    """Run instead of the strategy's own worker module."""

    def worker(self, strategy: Strategy, config: str, out: str, python: str = sys.executable) -> list[str]:
        return [
            python,
            "-m",
            "distbench.core.rankguard",
            python,
            "-m",
            "distbench.workers",  # the one worker entry point (distbench/workers/__main__.py)
            self.module or strategy.module,
            "--config",
            config,
            "--out",
            out,
        ]

    def tasks_per_node(self, cfg: PointConfig) -> int:
        """Slurm tasks per node; 1 where one process starts the rest."""
        return 1

    def local(self, strategy, cfg, config, out, *, python=sys.executable, tool=None, base_env=None):
        """(argv, env) on one node: every launcher has it."""
        raise NotImplementedError

    def allocation(
        self,
        strategy: Strategy,
        cfg: PointConfig,
        config: str,
        out: str,
        *,
        hosts: Sequence[str],
        base_env: dict | None = None,
    ) -> tuple[list[str], dict]:
        raise BadInput(f"{self.name} cannot span nodes")

    def on_cluster(self, strategy, cfg, config, out, *, hosts, nic: str, base_env=None, python=sys.executable):
        """(argv, env) across the nodes of the one-machine cluster (distbench.cluster): `hosts` its node names."""
        raise BadInput(
            f"{self.name} does not run across the one-machine cluster's nodes (torchrun, tf-multiworker, horovodrun and ray-train do)"
        )

    def nsrun(self, cfg, python=sys.executable) -> list[str]:
        """The cluster's srun: the command that follows runs once on each of the point's nodes."""
        return [python, "-m", "distbench.cluster.nsrun", "--nodes", str(cfg.nodes), "--"]

    def one_node(self, cfg: PointConfig) -> None:
        if cfg.nodes != 1:
            raise BadInput(f"{self.name} cannot span nodes")

    def sbatch_step(self, strategy: Strategy, cfg: PointConfig) -> list[str]:
        self.one_node(cfg)
        argv, _ = self.local(
            strategy, cfg, JOB_CONFIG, JOB_RESULT, python=JOB_PYTHON, tool=Shell(f'"${self.name.upper()}"'), base_env={}
        )
        return argv

    def k8s_job(self, nodes: int) -> PodJob | None:
        """The Kubernetes job its pods run in on `nodes` nodes; None (the default): distbench k8s refuses the point."""
        return None

    def pod_command(self, strategy: Strategy, cfg: PointConfig, config: str, out: str, *, pods: Pods, python: str):
        """The argv of the pods of its Kubernetes job (`k8s_job`); on one node, the local command."""
        self.one_node(cfg)
        return self.local(strategy, cfg, config, out, python=python, base_env={})[0]

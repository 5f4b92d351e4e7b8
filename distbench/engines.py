"""How a strategy's ranks are started: one Launcher object per engine users launch with.

Each launcher builds its command three ways, as pure functions that only say what would run (the tests
check them without running anything, and run them over loopback):

  local(...)        one node, as `distbench scale` runs a point;
  allocation(...)   several nodes inside the current Slurm allocation (`distbench scale --nodes K`);
  sbatch_step(...)  a step of a generated sbatch script, with `Shell` values the job computes at run time.

A strategy names its launcher for one node and, if it can span nodes, the one for several
(distbench.strategies); nothing else dispatches on launcher names. Every rank runs under
distbench.rankguard, which reports how the rank ended and stops the worker when distbench is gone.

  process         one process (plain loops, DataParallel, MirroredStrategy)
  torchrun        torchrun --standalone on one node; on several, one agent per node meeting at a c10d
                  rendezvous on the first node (srun starts the agents)
  horovodrun      one horovodrun over every node's slots, Gloo controller (it starts remote ranks over ssh)
  tf-multiworker  tf.distribute.MultiWorkerMirroredStrategy: one worker per node (per CPU worker on CPU),
                  the cluster from TF_CONFIG or from the Slurm step (srun)
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from distbench.config import PointConfig
from distbench.errors import BadInput

if TYPE_CHECKING:
    from distbench.strategies import Strategy

DEFAULT_START_TIMEOUT_S = 120


class Shell(str):
    """Shell text the job script evaluates at run time, e.g. Shell('"$head_node:$MASTER_PORT"').

    `shell_join` writes it verbatim; every other value is shlex-quoted. Only distbench's own
    template text is ever a Shell, never user input.
    """

    __slots__ = ()


def shell_join(argv: Sequence[str]) -> str:
    """argv as one shell command line: Shell values verbatim, everything else shlex-quoted."""
    return " ".join(a if isinstance(a, Shell) else shlex.quote(str(a)) for a in argv)


# What an sbatch step computes at run time (distbench.slurm's template defines these variables).
JOB_PYTHON = Shell('"$PY"')
JOB_CONFIG = Shell('"$config"')
JOB_RESULT = Shell('"$result"')


def build_env(cfg: PointConfig, base: dict | None = None) -> dict:
    """The workers' environment: thread counts, quiet TF, and only the devices the point may use."""
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
        # CPU workers: hide any GPU so no framework picks one up behind our back.
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        # CUDA numbers GPUs fastest-first by default, NVML by PCI bus: make them agree, so the
        # telemetry of "GPU i" is the GPU the workers use as device i.
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def worker_module(module: str) -> str:
    """distbench.launchers.<module>, or a full dotted path (e.g. a test's deliberately broken worker)."""
    return module if "." in module else f"distbench.launchers.{module}"


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
    """`srun` starting `tasks_per_node` tasks on each of `nodes` nodes (the first `nodes` of `hosts`
    when given); a task's failure ends the step. --ntasks is given too: alone, --ntasks-per-node
    yields to the job's own task count."""
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Launcher:
    """One way of starting a point's ranks. `name` is what records store as launch.launcher."""

    name: str
    spans_nodes: bool = False
    module: str | None = None
    """The worker module this launcher runs instead of the strategy's own (tf-multiworker)."""

    def worker(self, strategy: Strategy, config: str, out: str, python: str = sys.executable) -> list[str]:
        """One rank's command: the strategy's worker under the rank guard."""
        return [
            python,
            "-m",
            "distbench.rankguard",
            python,
            "-m",
            worker_module(self.module or strategy.module),
            "--config",
            config,
            "--out",
            out,
        ]

    def tasks_per_node(self, cfg: PointConfig) -> int:
        """Slurm tasks per node (torchrun agents, TF workers); 1 where one process starts the rest."""
        return 1

    def local(
        self,
        strategy: Strategy,
        cfg: PointConfig,
        config: str,
        out: str,
        *,
        python: str = sys.executable,
        tool: str | None = None,
        base_env: dict | None = None,
    ) -> tuple[list[str], dict]:
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

    def sbatch_step(self, strategy: Strategy, cfg: PointConfig) -> list[str]:
        """The step's command in a job script (Shell values: the job's python, tool, paths, hosts)."""
        if cfg.nodes != 1:
            raise BadInput(f"{self.name} cannot span nodes")
        argv, _ = self.local(
            strategy, cfg, JOB_CONFIG, JOB_RESULT, python=JOB_PYTHON, tool=Shell(f'"${self.name.upper()}"'), base_env={}
        )
        return argv


class Process(Launcher):
    def local(self, strategy, cfg, config, out, *, python=sys.executable, tool=None, base_env=None):
        return self.worker(strategy, config, out, python), build_env(cfg, base_env)


class Torchrun(Launcher):
    def tool(self, python: str, tool: str | None) -> str:
        return tool or tool_path("torchrun", python)

    def local(self, strategy, cfg, config, out, *, python=sys.executable, tool=None, base_env=None):
        # torchrun runs the rank command with its own interpreter: the rank is `-m rankguard PY -m worker`.
        argv = [
            self.tool(python, tool),
            "--standalone",
            "--nnodes=1",
            f"--nproc_per_node={cfg.world_size}",
            *self.worker(strategy, config, out, python)[1:],
        ]
        return argv, build_env(cfg, base_env)

    def rendezvous(
        self,
        strategy,
        cfg,
        config,
        out,
        *,
        endpoint: str,
        rdzv_id: str,
        python: str = sys.executable,
        tool: str | None = None,
        base_env: dict | None = None,
    ) -> tuple[list[str], dict]:
        """What each node runs: one torchrun agent per node, all meeting at one c10d rendezvous (the TCP
        store at `endpoint`, HOST:PORT of the first node); ranks are assigned there."""
        argv = [
            self.tool(python, tool),
            f"--nnodes={cfg.nodes}",
            f"--nproc_per_node={devices_per_node(cfg)}",
            "--rdzv_backend=c10d",
            "--rdzv_endpoint",
            endpoint,
            "--rdzv_id",
            rdzv_id,
            "--max_restarts=0",
            *self.worker(strategy, config, out, python)[1:],
        ]
        return argv, build_env(cfg, base_env)

    def allocation(self, strategy, cfg, config, out, *, hosts, base_env=None):
        argv, env = self.rendezvous(
            strategy,
            cfg,
            config,
            out,
            endpoint=f"{hosts[0]}:{free_port()}",
            rdzv_id=secrets.token_hex(4),
            base_env=base_env,
        )
        return [*srun_prefix(cfg.nodes, 1, hosts=hosts[: cfg.nodes]), *argv], env

    def sbatch_step(self, strategy, cfg):
        if cfg.nodes == 1:
            return super().sbatch_step(strategy, cfg)
        argv, _ = self.rendezvous(
            strategy,
            cfg,
            JOB_CONFIG,
            JOB_RESULT,
            endpoint=Shell('"$head_node:$MASTER_PORT"'),
            rdzv_id=Shell('"$job_tag"'),
            python=JOB_PYTHON,
            tool=Shell('"$TORCHRUN"'),
            base_env={},
        )
        return [*srun_prefix(cfg.nodes, 1, Shell('"$SLURM_CPUS_ON_NODE"')), *argv]


def horovod_hosts(hosts: Sequence[str], slots: int) -> str:
    """-H value: 'host1:4,host2:4'."""
    if not hosts:
        raise BadInput("horovodrun needs at least one host")
    return ",".join(f"{h}:{slots}" for h in hosts)


class Horovodrun(Launcher):
    def over_hosts(
        self,
        strategy,
        cfg,
        config,
        out,
        *,
        hosts: str,
        network_interface: str | None = None,
        launcher_args: Sequence[str] = (),
        python: str = sys.executable,
        tool: str | None = None,
        start_timeout_s: int = DEFAULT_START_TIMEOUT_S,
        base_env: dict | None = None,
    ) -> tuple[list[str], dict]:
        """One horovodrun over every node's slots (`hosts` as from `horovod_hosts`), Gloo controller;
        `launcher_args` go to horovodrun before the worker command."""
        argv = [tool or tool_path("horovodrun", python), "-np", str(cfg.world_size), "-H", hosts, "--gloo"]
        if network_interface:
            argv += ["--network-interface", network_interface]
        argv += ["--start-timeout", str(start_timeout_s), *launcher_args, *self.worker(strategy, config, out, python)]
        return argv, build_env(cfg, base_env)

    def local(self, strategy, cfg, config, out, *, python=sys.executable, tool=None, base_env=None):
        return self.over_hosts(
            strategy,
            cfg,
            config,
            out,
            hosts=f"localhost:{cfg.world_size}",
            network_interface="lo",
            python=python,
            tool=tool,
            base_env=base_env,
        )

    def allocation(self, strategy, cfg, config, out, *, hosts, base_env=None):
        return self.over_hosts(
            strategy,
            cfg,
            config,
            out,
            hosts=horovod_hosts(hosts[: cfg.nodes], devices_per_node(cfg)),
            base_env=base_env,
        )

    def sbatch_step(self, strategy, cfg):
        if cfg.nodes == 1:
            return super().sbatch_step(strategy, cfg)
        interface = Shell('${HOROVOD_NETWORK_INTERFACE:+--network-interface "$HOROVOD_NETWORK_INTERFACE"}')
        argv, _ = self.over_hosts(
            strategy,
            cfg,
            JOB_CONFIG,
            JOB_RESULT,
            hosts=Shell('"$(horovod_hosts %d)"' % devices_per_node(cfg)),
            launcher_args=[interface],
            python=JOB_PYTHON,
            tool=Shell('"$HOROVODRUN"'),
            base_env={},
        )
        return argv


def tf_config(workers: Sequence[str], index: int) -> str:
    """TF_CONFIG of worker `index` in a cluster of `workers` ('host:port' each); worker 0 is the chief."""
    if not 0 <= index < len(workers):
        raise ValueError(f"worker index {index} is outside the cluster of {len(workers)} workers")
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}})


class TFMultiWorker(Launcher):
    def tasks_per_node(self, cfg):
        """MultiWorkerMirroredStrategy replicates over a worker's GPUs but uses one CPU device per
        worker, so CPU points run one worker per CPU "device" and GPU points one worker per node."""
        return devices_per_node(cfg) if cfg.device == "cpu" else 1

    def cluster_worker(
        self,
        strategy,
        cfg,
        config,
        out,
        *,
        workers: Sequence[str],
        index: int,
        python: str = sys.executable,
        base_env: dict | None = None,
    ) -> tuple[list[str], dict]:
        """What worker `index` runs (one process per worker): the TF worker with its TF_CONFIG."""
        if len(workers) != cfg.nodes * self.tasks_per_node(cfg):
            raise ValueError(
                f"{len(workers)} TF workers for {cfg.nodes} node(s) x {self.tasks_per_node(cfg)} worker(s) per node"
            )
        env = build_env(cfg, base_env)
        env["TF_CONFIG"] = tf_config(workers, index)
        return self.worker(strategy, config, out, python), env

    def srun(
        self,
        strategy,
        cfg,
        config,
        out,
        *,
        cpus_per_task: str | None = None,
        hosts: Sequence[str] = (),
        python: str = sys.executable,
        base_env: dict | None = None,
    ) -> tuple[list[str], dict]:
        """Inside a Slurm allocation: srun starts the TF workers, which build their cluster with
        tf.distribute.cluster_resolver.SlurmClusterResolver (ports from DISTBENCH_TF_PORT, default 8888)."""
        argv = [
            *srun_prefix(cfg.nodes, self.tasks_per_node(cfg), cpus_per_task, hosts),
            *self.worker(strategy, config, out, python),
        ]
        return argv, build_env(cfg, base_env)

    def allocation(self, strategy, cfg, config, out, *, hosts, base_env=None):
        return self.srun(strategy, cfg, config, out, hosts=hosts[: cfg.nodes], base_env=base_env)

    def sbatch_step(self, strategy, cfg):
        cpus = Shell('"$(( SLURM_CPUS_ON_NODE / %d ))"' % self.tasks_per_node(cfg))
        argv, _ = self.srun(strategy, cfg, JOB_CONFIG, JOB_RESULT, python=JOB_PYTHON, base_env={}, cpus_per_task=cpus)
        return argv


PROCESS = Process("process")
TORCHRUN = Torchrun("torchrun", spans_nodes=True)
HOROVODRUN = Horovodrun("horovodrun", spans_nodes=True)
TF_MULTIWORKER = TFMultiWorker("tf-multiworker", spans_nodes=True, module="tf_multiworker")


ACCELERATE_PRECISION = {"fp32": "no", "bf16": "bf16", "amp": "fp16"}


class AccelerateLaunch(Launcher):
    """`accelerate launch`, one node: at N=1 it runs the rank itself (`--cpu` on CPU workers); at N > 1
    `--multi_gpu` hands the ranks to torch's elastic launcher (also on CPU workers: the Accelerator then
    picks gloo). Precision and threads per process are its flags, as its users pass them."""

    def command(self, cfg: PointConfig, *, tool: str, port: str) -> list[str]:
        """`accelerate launch` and its flags, up to the rank's command."""
        argv = [
            tool,
            "launch",
            f"--num_processes={cfg.world_size}",
            "--num_machines=1",
            f"--mixed_precision={ACCELERATE_PRECISION[cfg.precision]}",
            "--dynamo_backend=no",
            f"--num_cpu_threads_per_process={cfg.threads_per_worker}",
        ]
        if cfg.world_size > 1:
            argv += ["--multi_gpu", "--main_process_port", port]
        elif cfg.device == "cpu":
            argv.append("--cpu")
        return argv

    def local(self, strategy, cfg, config, out, *, python=sys.executable, tool=None, base_env=None):
        argv = self.command(cfg, tool=tool or tool_path("accelerate", python), port=str(free_port()))
        return [*argv, *self.worker(strategy, config, out, python)[1:]], build_env(cfg, base_env)

    def sbatch_step(self, strategy, cfg):
        if cfg.nodes != 1:
            raise BadInput(f"{self.name} cannot span nodes")
        argv = self.command(cfg, tool=Shell('"$(dirname "$PY")/accelerate"'), port=Shell('"$MASTER_PORT"'))
        return [*argv, *self.worker(strategy, JOB_CONFIG, JOB_RESULT, JOB_PYTHON)[1:]]


ACCELERATE = AccelerateLaunch("accelerate-launch")

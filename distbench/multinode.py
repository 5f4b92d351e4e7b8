"""Multi-node launch commands: pure builders of (argv, env) for one point spread over several nodes.

The engines users already run on clusters, nothing home-made:

  ddp                       torchrun on every node, one c10d rendezvous:
                            torchrun --nnodes=K --nproc_per_node=G --rdzv_backend=c10d --rdzv_endpoint HEAD:PORT
  horovod-torch/horovod-tf  one horovodrun on the first node, -H host1:G,host2:G --gloo
                            (it starts the other nodes' ranks over ssh)
  mirrored                  tf.distribute.MultiWorkerMirroredStrategy (launchers/tf_multiworker.py):
                            one worker per node (per CPU worker on CPU), the cluster from TF_CONFIG or Slurm

Like distbench.launch.build_command, each builder only says what would run. The Slurm job scripts
(distbench.slurm) render the same builders with `Shell` values the job computes at run time
(the head node, the host list); the tests run them over loopback, two "nodes" on 127.0.0.1:

    argv, env = torchrun_command(STRATEGIES["ddp"], cfg, "cfg.json", "rec.json",
                                 rdzv_endpoint="127.0.0.1:29500", rdzv_id="demo")
    # run argv with env once per node (here: twice on this machine)
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from distbench.config import PointConfig
from distbench.errors import BadInput
from distbench.launch import build_env, worker_module
from distbench.strategies import Strategy

TF_MULTIWORKER_MODULE = "distbench.launchers.tf_multiworker"
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


def launcher_for(strategy: Strategy, nodes: int) -> str:
    """How a point of `strategy` is launched on `nodes` nodes.

    One node: the strategy's own launcher ('process', 'torchrun', 'horovodrun'), as in
    `distbench scale`. Several nodes: 'torchrun', 'horovodrun' or 'tf-multiworker'.
    """
    if nodes < 1:
        raise BadInput(f"the node count must be >= 1, got {nodes}")
    if nodes == 1:
        return strategy.launcher
    if strategy.launcher in ("torchrun", "horovodrun"):
        return strategy.launcher
    if strategy.name == "mirrored":
        return "tf-multiworker"
    raise BadInput(f"strategy {strategy.name!r} runs in one process and cannot span {nodes} nodes; "
                   "multi-node strategies: ddp, horovod-torch, horovod-tf, mirrored")


def can_span_nodes(strategy: Strategy) -> bool:
    try:
        launcher_for(strategy, 2)
    except BadInput:
        return False
    return True


def devices_per_node(cfg: PointConfig) -> int:
    if cfg.nodes < 1 or cfg.world_size % cfg.nodes:
        raise BadInput(f"{cfg.world_size} devices cannot be split evenly over {cfg.nodes} nodes")
    return cfg.world_size // cfg.nodes


def tf_workers_per_node(cfg: PointConfig) -> int:
    """MultiWorkerMirroredStrategy replicates over a worker's GPUs but uses one CPU device per
    worker, so CPU points run one worker per CPU "device" and GPU points one worker per node."""
    return devices_per_node(cfg) if cfg.device == "cpu" else 1


def tool_path(name: str, python: str = sys.executable) -> str:
    """A console script (torchrun, horovodrun) next to `python`, i.e. from the same environment."""
    if isinstance(python, Shell):
        raise ValueError("pass the tool's path explicitly when python is a Shell value")
    return str(Path(python).parent / name)


def worker_args(module: str, config_path: str, out_path: str) -> list[str]:
    return ["-m", module, "--config", config_path, "--out", out_path]


def worker_argv(module: str, config_path: str, out_path: str, python: str = sys.executable) -> list[str]:
    return [python, *worker_args(module, config_path, out_path)]


def torchrun_command(strategy: Strategy, cfg: PointConfig, config_path: str, out_path: str, *,
                     rdzv_endpoint: str, rdzv_id: str, python: str = sys.executable,
                     torchrun: str | None = None, base_env: dict | None = None) -> tuple[list[str], dict]:
    """What each node runs: one torchrun agent per node, all meeting at one c10d rendezvous
    (the TCP store at `rdzv_endpoint`, HOST:PORT of the first node); ranks are assigned there.
    The workers run under torchrun's own Python (`-m`), the environment of `torchrun`."""
    argv = [torchrun or tool_path("torchrun", python), f"--nnodes={cfg.nodes}",
            f"--nproc_per_node={devices_per_node(cfg)}", "--rdzv_backend=c10d",
            "--rdzv_endpoint", rdzv_endpoint, "--rdzv_id", rdzv_id, "--max_restarts=0",
            *worker_args(worker_module(strategy), config_path, out_path)]
    return argv, build_env(cfg, base_env)


def horovod_hosts(hosts: Sequence[str], slots: int) -> str:
    """-H value: 'host1:4,host2:4'."""
    if not hosts:
        raise BadInput("horovodrun needs at least one host")
    return ",".join(f"{h}:{slots}" for h in hosts)


def horovodrun_command(strategy: Strategy, cfg: PointConfig, config_path: str, out_path: str, *,
                       hosts: str, network_interface: str | None = None, launcher_args: Sequence[str] = (),
                       python: str = sys.executable, horovodrun: str | None = None,
                       start_timeout_s: int = DEFAULT_START_TIMEOUT_S,
                       base_env: dict | None = None) -> tuple[list[str], dict]:
    """What the first node runs: one horovodrun over every node's slots (`hosts` as from
    `horovod_hosts`), Gloo controller; `launcher_args` go to horovodrun before the worker command."""
    argv = [horovodrun or tool_path("horovodrun", python), "-np", str(cfg.world_size), "-H", hosts, "--gloo"]
    if network_interface:
        argv += ["--network-interface", network_interface]
    argv += ["--start-timeout", str(start_timeout_s), *launcher_args,
             *worker_argv(worker_module(strategy), config_path, out_path, python)]
    return argv, build_env(cfg, base_env)


def tf_config(workers: Sequence[str], index: int) -> str:
    """TF_CONFIG of worker `index` in a cluster of `workers` ('host:port' each); worker 0 is the chief."""
    if not 0 <= index < len(workers):
        raise ValueError(f"worker index {index} is outside the cluster of {len(workers)} workers")
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}})


def tf_multiworker_command(cfg: PointConfig, config_path: str, out_path: str, *, workers: Sequence[str],
                           index: int, python: str = sys.executable,
                           base_env: dict | None = None) -> tuple[list[str], dict]:
    """What worker `index` runs (one process per worker): the TF worker with its TF_CONFIG."""
    if len(workers) != cfg.nodes * tf_workers_per_node(cfg):
        raise ValueError(f"{len(workers)} TF workers for {cfg.nodes} node(s) x {tf_workers_per_node(cfg)} "
                         "worker(s) per node")
    env = build_env(cfg, base_env)
    env["TF_CONFIG"] = tf_config(workers, index)
    return worker_argv(TF_MULTIWORKER_MODULE, config_path, out_path, python), env


def srun_prefix(nodes: int, tasks_per_node: int, cpus_per_task: str | None = None) -> list[str]:
    """`srun` starting `tasks_per_node` tasks on each of `nodes` nodes; a task's failure ends the step.
    --ntasks is given too: alone, --ntasks-per-node yields to the job's own task count."""
    argv = ["srun", f"--nodes={nodes}", f"--ntasks={nodes * tasks_per_node}", f"--ntasks-per-node={tasks_per_node}",
            "--kill-on-bad-exit=1"]
    if cpus_per_task is not None:
        argv += ["--cpus-per-task", cpus_per_task]
    return argv


def tf_multiworker_srun_command(cfg: PointConfig, config_path: str, out_path: str, *,
                                cpus_per_task: str | None = None, python: str = sys.executable,
                                base_env: dict | None = None) -> tuple[list[str], dict]:
    """Inside a Slurm allocation: srun starts the TF workers, which build their cluster with
    tf.distribute.cluster_resolver.SlurmClusterResolver (ports from DISTBENCH_TF_PORT, default 8888)."""
    argv = [*srun_prefix(cfg.nodes, tf_workers_per_node(cfg), cpus_per_task),
            *worker_argv(TF_MULTIWORKER_MODULE, config_path, out_path, python)]
    return argv, build_env(cfg, base_env)


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list, in order: 'r[1-2]-n[01-02],login1' -> ['r1-n01', 'r1-n02', 'r2-n01',
    'r2-n02', 'login1']. Slurm's own `scontrol show hostnames` expands it where Slurm is installed,
    python-hostlist (the same syntax, kept by NSC) elsewhere."""
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
    """The TF cluster of the Slurm step this process is a task of: ('host:port' of every task in
    rank order, this task's index). Task r runs on node SLURM_NODEID as local task SLURM_LOCALID,
    and listens on port_base + its local id."""
    hosts = expand_hostlist(environ["SLURM_STEP_NODELIST"])
    tasks = expand_tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"])
    if len(tasks) != len(hosts):
        raise ValueError(f"{len(hosts)} hosts but tasks per node for {len(tasks)}")
    workers = [f"{h}:{port_base + local}" for h, t in zip(hosts, tasks) for local in range(t)]
    node, local, rank = (int(environ[k]) for k in ("SLURM_NODEID", "SLURM_LOCALID", "SLURM_PROCID"))
    index = sum(tasks[:node]) + local
    if index != rank:
        raise ValueError(f"task {rank} is local task {local} of node {node}: the TF workers need srun's block "
                         "distribution (srun --distribution=block)")
    return workers, index


def allocation_hosts(environ: dict | None = None) -> list[str]:
    """The nodes of the Slurm allocation this process runs in (empty outside one)."""
    import os

    env = os.environ if environ is None else environ
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    return expand_hostlist(nodelist) if nodelist else []


def check_allocation(max_nodes: int, environ: dict | None = None) -> list[str]:
    """`distbench scale --nodes K` runs inside an existing allocation of at least K nodes."""
    hosts = allocation_hosts(environ)
    if not hosts:
        raise BadInput(f"--nodes {max_nodes} runs multi-node points inside a Slurm allocation, and this shell is "
                       "not in one (use salloc/sbatch, or `distbench slurm` to submit the sweep as jobs)")
    if len(hosts) < max_nodes:
        raise BadInput(f"--nodes asks for {max_nodes} nodes but the Slurm allocation has {len(hosts)}")
    return hosts


def allocation_command(strategy: Strategy, cfg: PointConfig, config_path: str, out_path: str, *,
                       environ: dict | None = None, base_env: dict | None = None) -> tuple[list[str], dict]:
    """A multi-node point inside the current allocation, on its first cfg.nodes nodes, with the
    engines users run there: srun + torchrun (c10d rendezvous on the first node), horovodrun over
    the nodes, or srun starting MultiWorkerMirroredStrategy workers."""
    import secrets
    import socket

    hosts = check_allocation(cfg.nodes, environ)[:cfg.nodes]
    how = launcher_for(strategy, cfg.nodes)
    nodes_opt = [f"--nodelist={','.join(hosts)}"]
    if how == "torchrun":
        with socket.socket() as s:  # a free port on this (the first) node for the rendezvous
            s.bind(("", 0))
            port = s.getsockname()[1]
        argv, env = torchrun_command(strategy, cfg, config_path, out_path, rdzv_endpoint=f"{hosts[0]}:{port}",
                                     rdzv_id=secrets.token_hex(4), base_env=base_env)
        srun = srun_prefix(cfg.nodes, 1)
        return [*srun[:1], *nodes_opt, *srun[1:], *argv], env
    if how == "horovodrun":
        return horovodrun_command(strategy, cfg, config_path, out_path,
                                  hosts=horovod_hosts(hosts, devices_per_node(cfg)), base_env=base_env)
    argv, env = tf_multiworker_srun_command(cfg, config_path, out_path, base_env=base_env)
    return [*argv[:1], *nodes_opt, *argv[1:]], env

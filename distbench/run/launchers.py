"""How a strategy's ranks are started: one Launcher (distbench.run.launcher) per engine. Each builds its
command, as pure functions, for one node (`local`), several nodes in the current Slurm allocation
(`allocation`), a step of a generated sbatch script (`sbatch_step`, with `Shell` values the job computes at
run time) and the pods of a Kubernetes job (`k8s_job`: which job, None for none; `pod_command`: its argv).
Every rank runs under distbench.core.rankguard.

  process         one process (plain loops, DataParallel, MirroredStrategy)
  torchrun        --standalone on one node; on several, one agent per node at a c10d rendezvous (srun)
  horovodrun      one horovodrun over every node's slots, Gloo controller (remote ranks over ssh)
  tf-multiworker  MultiWorkerMirroredStrategy: one worker per node (per CPU worker on CPU), the cluster
                  from TF_CONFIG or the Slurm step
"""

from __future__ import annotations

import re
import secrets
import sys
from typing import Sequence

from distbench.core.config import PointConfig
from distbench.core.errors import BadInput
from distbench.core.strategies import STRATEGIES
from distbench.run.commandline import (
    DEFAULT_START_TIMEOUT_S,
    JOB_CONFIG,
    JOB_PYTHON,
    JOB_RESULT,
    NODES_HEAD_ENV,
    NODES_START_ENV,
    Shell,
    build_env,
    devices_per_node,
    srun_prefix,
    tool_path,
)
from distbench.run.launcher import Launcher
from distbench.workers.runtime import ACCELERATE_PRECISION, free_port, tf_config


class Process(Launcher):
    def local(self, strategy, cfg, config, out, *, python=sys.executable, tool=None, base_env=None):
        return self.worker(strategy, config, out, python), build_env(cfg, base_env)

    def k8s_job(self, nodes):
        return "torch" if nodes == 1 else None


class Torchrun(Launcher):
    def tool(self, python: str, tool: str | None) -> str:
        return tool or tool_path("torchrun", python)

    def local(self, strategy, cfg, config, out, *, python=sys.executable, tool=None, base_env=None):
        # torchrun runs the rank with its own interpreter: `-m rankguard PY -m worker`
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
        """One torchrun agent per node, all meeting at the c10d rendezvous at `endpoint` (HOST:PORT)."""
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

    def static(
        self,
        strategy,
        cfg,
        config,
        out,
        *,
        node_rank: str,
        master_addr: str,
        master_port: str,
        python: str = sys.executable,
        tool: str | None = None,
        base_env: dict | None = None,
    ) -> tuple[list[str], dict]:
        """One torchrun agent per node at the static rendezvous (torchrun's default backend): node rank
        `node_rank`, the store hosted by node rank 0 at master_addr:master_port, so global rank 0 runs on
        node rank 0 and no agent has to recognise a host name as its own (Kubernetes: the operator's variables)."""
        argv = [
            self.tool(python, tool),
            f"--nnodes={cfg.nodes}",
            f"--nproc_per_node={devices_per_node(cfg)}",
            "--node_rank",
            node_rank,
            "--master_addr",
            master_addr,
            "--master_port",
            master_port,
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

    def on_cluster(self, strategy, cfg, config, out, *, hosts, nic, base_env=None, python=sys.executable):
        """One agent per node started by the cluster's srun (distbench.cluster.nsrun), meeting at node 1."""
        endpoint = f"{hosts[0]}:{free_port()}"
        argv, env = self.rendezvous(
            strategy, cfg, config, out, endpoint=endpoint, rdzv_id=secrets.token_hex(4), base_env=base_env
        )
        env.setdefault("GLOO_SOCKET_IFNAME", nic)
        return [*self.nsrun(cfg, python), *argv], env

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

    def k8s_job(self, nodes):
        return "torch"

    def pod_command(self, strategy, cfg, config, out, *, pods, python):
        """Several nodes: one agent per pod at the static rendezvous, global rank 0 on node rank 0."""
        if cfg.nodes == 1:
            return super().pod_command(strategy, cfg, config, out, pods=pods, python=python)
        addr, port = pods.master()
        kw = dict(node_rank=pods.node_rank(), master_addr=addr, master_port=port, python=python, base_env={})
        argv, _ = self.static(strategy, cfg, config, out, **kw)
        return [argv[0], f"--rdzv-conf=timeout={pods.rendezvous_timeout_s}", *argv[1:]]  # static's default: 600 s


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
        """One horovodrun over every node's slots (`hosts`: horovod_hosts), Gloo controller."""
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

    def on_cluster(self, strategy, cfg, config, out, *, hosts, nic, base_env=None, python=sys.executable):
        """horovodrun on node 1 (the cluster's srun on one node puts the cluster's ssh first on PATH), its
        ranks on the other nodes started over ssh, traffic on the nodes' NIC."""
        from distbench.cluster.spec import read_state

        state = read_state()
        if state is None or not state.ssh:
            raise BadInput(
                "horovodrun across the one-machine cluster needs sshd on its nodes: scripts/cluster-local.sh up --ssh"
            )
        argv, env = self.over_hosts(
            strategy,
            cfg,
            config,
            out,
            hosts=horovod_hosts(hosts[: cfg.nodes], devices_per_node(cfg)),
            network_interface=nic,
            python=python,
            base_env=base_env,
        )
        env.setdefault("GLOO_SOCKET_IFNAME", nic)
        return [python, "-m", "distbench.cluster.nsrun", "--nodes", "1", "--", *argv], env

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

    def k8s_job(self, nodes):
        return "torch" if nodes == 1 else "mpi"

    def pod_command(self, strategy, cfg, config, out, *, pods, python):
        """Several nodes: horovodrun on the launcher pod over every pod's slots, ranks started over ssh."""
        if cfg.nodes == 1:
            return super().pod_command(strategy, cfg, config, out, pods=pods, python=python)
        kw = dict(
            hosts=horovod_hosts(pods.hosts(), devices_per_node(cfg)),
            network_interface=pods.network_interface(),
            start_timeout_s=pods.rendezvous_timeout_s,
            launcher_args=["--ssh-identity-file", pods.ssh_identity],
        )
        return self.over_hosts(strategy, cfg, config, out, python=python, base_env={}, **kw)[0]


class TFMultiWorker(Launcher):
    def tasks_per_node(self, cfg):
        """MultiWorkerMirroredStrategy uses one CPU device per worker: one worker per CPU worker, else per node."""
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
        """srun starts the TF workers; they find their cluster with SlurmClusterResolver (port DISTBENCH_TF_PORT)."""
        argv = [
            *srun_prefix(cfg.nodes, self.tasks_per_node(cfg), cpus_per_task, hosts),
            *self.worker(strategy, config, out, python),
        ]
        return argv, build_env(cfg, base_env)

    def allocation(self, strategy, cfg, config, out, *, hosts, base_env=None):
        return self.srun(strategy, cfg, config, out, hosts=hosts[: cfg.nodes], base_env=base_env)

    def on_cluster(self, strategy, cfg, config, out, *, hosts, nic, base_env=None, python=sys.executable):
        """One TF worker per node, each finding the cluster in DISTBENCH_TF_WORKERS and its index in the
        DISTBENCH_NODE_RANK the cluster's srun sets (workers/tf_multiworker.resolve_cluster)."""
        if self.tasks_per_node(cfg) != 1:
            raise BadInput(
                f"{self.name} on the one-machine cluster runs one worker per node; {cfg.world_size} CPU workers "
                f"over {cfg.nodes} nodes would need {self.tasks_per_node(cfg)} per node"
            )
        env = build_env(cfg, base_env)
        env["DISTBENCH_TF_WORKERS"] = ",".join(f"{h}:{free_port()}" for h in hosts[: cfg.nodes])
        env.pop("TF_CONFIG", None)
        return [*self.nsrun(cfg, python), *self.worker(strategy, config, out, python)], env

    def sbatch_step(self, strategy, cfg):
        cpus = Shell('"$(( SLURM_CPUS_ON_NODE / %d ))"' % self.tasks_per_node(cfg))
        argv, _ = self.srun(strategy, cfg, JOB_CONFIG, JOB_RESULT, python=JOB_PYTHON, base_env={}, cpus_per_task=cpus)
        return argv


PROCESS = Process("process")
TORCHRUN = Torchrun("torchrun", spans_nodes=True)
HOROVODRUN = Horovodrun("horovodrun", spans_nodes=True)
TF_MULTIWORKER = TFMultiWorker("tf-multiworker", spans_nodes=True, module="tf_multiworker")


class AccelerateLaunch(Launcher):
    """`accelerate launch`, one node: at N=1 it runs the rank itself (`--cpu` on CPU workers); at N > 1
    `--multi_gpu` hands the ranks to torch's elastic launcher (on CPU workers too: gloo)."""

    def command(self, cfg: PointConfig, *, tool: str, port: str) -> list[str]:
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
        self.one_node(cfg)
        argv = self.command(cfg, tool=Shell('"$(dirname "$PY")/accelerate"'), port=Shell('"$MASTER_PORT"'))
        return [*argv, *self.worker(strategy, JOB_CONFIG, JOB_RESULT, JOB_PYTHON)[1:]]


ACCELERATE = AccelerateLaunch("accelerate-launch")


RAY_ADDRESS = re.compile(r"^(?:ray://)?(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]+\]):(\d{1,5})$")


def check_ray_address(value: str) -> str:
    """--ray-address: 'auto' (the cluster `ray start` runs on this machine), ray://HOST:PORT (Ray Client) or
    HOST:PORT (the head's GCS); anything else is refused in one line naming the flag."""
    text = value.strip()
    m = RAY_ADDRESS.match(text)
    if text == "auto" or (m and 0 < int(m.group(1)) < 65536):
        return text
    raise BadInput(f"--ray-address must be 'auto', ray://HOST:PORT or HOST:PORT, got {value!r}")


class RayTrain(Launcher):
    """Ray Train: one driver process (the worker module run as a script) that joins the Ray cluster at
    --ray-address, else the sweep's local head (distbench.run.raycluster: DISTBENCH_RAY_HEAD, inherited
    through this environment), else starts a local Ray head for the point and stops it afterwards; Ray Train's
    TorchTrainer then starts the N training workers as Ray actors. The ranks are not separate launches, so
    the driver, not a rank guard per rank, reports how they ended; Ray's processes are descendants of the
    driver (a local head) and die with it."""

    def local(self, strategy, cfg, config, out, *, python=sys.executable, tool=None, base_env=None):
        env = build_env(cfg, base_env)
        env.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing reaches the network at run time
        return self.worker(strategy, config, out, python), env

    def on_cluster(self, strategy, cfg, config, out, *, hosts, nic, base_env=None, python=sys.executable):
        """The driver on node 1 (the cluster's srun on one node), joining the Ray cluster the sweep started on
        the nodes (distbench.run.raycluster.nodes_ray: DISTBENCH_RAY_NODES_HEAD); Ray Train places the workers."""
        argv, env = self.local(strategy, cfg, config, out, python=python, base_env=base_env)
        if not env.get(NODES_HEAD_ENV):
            raise BadInput(f"{strategy.name} runs across the nodes on the Ray cluster a sweep starts on them")
        env.update(DISTBENCH_RAY_HEAD=env[NODES_HEAD_ENV], DISTBENCH_RAY_HEAD_START_S=env.get(NODES_START_ENV, "nan"))
        env.setdefault("GLOO_SOCKET_IFNAME", nic)
        return [python, "-m", "distbench.cluster.nsrun", "--nodes", "1", "--", *argv], env


RAY_TRAIN = RayTrain("ray-train")


LAUNCHERS: dict[str, Launcher] = {
    launcher.name: launcher for launcher in (PROCESS, TORCHRUN, HOROVODRUN, TF_MULTIWORKER, ACCELERATE, RAY_TRAIN)
}
"""Every Launcher by its name, the key a registry entry names (Strategy.launcher, Strategy.multi_node)."""


def cluster_launcher(strategy) -> Launcher | None:
    """The Launcher that starts `strategy`'s ranks on several nodes (None: it cannot span nodes)."""
    if strategy.multi_node:
        return LAUNCHERS[strategy.multi_node]
    launcher = LAUNCHERS[strategy.launcher]
    return launcher if launcher.spans_nodes else None


def nodes_launcher(strategy) -> Launcher:
    """The Launcher across the one-machine cluster's nodes: multi-node's, or Ray Train's driver (Ray places)."""
    return cluster_launcher(strategy) or LAUNCHERS[strategy.launcher]


def launcher_for(strategy, nodes: int) -> Launcher:
    """The Launcher that starts `strategy`'s ranks on `nodes` nodes."""
    if nodes < 1:
        raise BadInput(f"the node count must be >= 1, got {nodes}")
    if nodes == 1:
        return LAUNCHERS[strategy.launcher]
    if cluster_launcher(strategy) is None:
        spanning = ", ".join(s.name for s in STRATEGIES.values() if cluster_launcher(s))
        raise BadInput(
            f"strategy {strategy.name!r} runs in one process and cannot span {nodes} nodes; "
            f"multi-node strategies: {spanning}"
        )
    return cluster_launcher(strategy)

"""Ray for a sweep: the cluster its Ray points are planned on, and the one local head a sweep shares.

--ray-address: the points are planned from what each node of the cluster has (`ray.nodes()`, asked once,
in a child process so that this process never becomes a Ray driver), not from the machine that drives the
sweep, as the other launchers plan theirs: a point of N devices runs within one node (STRICT_PACK) when a
node holds N, else over K nodes of D devices each when D divides N (one worker per node: STRICT_SPREAD;
D per node: PACK, each worker sized to 1/D of its node's CPUs, so no node takes more than D). A node's
devices are its GPUs, or its CPUs for CPU workers. A point that cannot be placed so is skipped with the
reason, in one line (Ray Train would otherwise wait for it until --timeout); threads per worker come from
its node's CPUs.

No --ray-address: one local head for the whole sweep (`SweepHead`), started before its first Ray point and
stopped when the sweep ends, however it ends (done, failed, Ctrl-C): `ray start --head --block` in a
process group of its own, stopped with the group; Linux's parent-death signal stops it should the sweep's
process die without cleaning up. The points' drivers join it (DISTBENCH_RAY_HEAD); a driver run without
it (a Slurm or Kubernetes job, `distbench run` of a lone point outside a sweep) starts its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from distbench.core.errors import BadInput, DistbenchError
from distbench.core.sections import RaySection
from distbench.run.commandline import NODES_HEAD_ENV, NODES_START_ENV

HEAD_ENV = "DISTBENCH_RAY_HEAD"
"""The sweep head's GCS address, for the points' drivers (inherited through the launch's environment)."""
HEAD_START_ENV = "DISTBENCH_RAY_HEAD_START_S"
"""Seconds the sweep's head took to start: paid once per sweep, copied into each Ray point's record."""
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 15.0
PROBE_TIMEOUT_S = 120.0
_PR_SET_PDEATHSIG = 1


# -- planning on a cluster ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def cluster_nodes(
    address: str, timeout_s: float = PROBE_TIMEOUT_S, python: str = sys.executable, prefix: tuple[str, ...] = ()
) -> tuple:
    """The cluster's live nodes as ({"node_id", "address", "CPU", "GPU"}, ...), from `ray.nodes()` asked
    from a child process (once per address; `prefix`: the argv that runs it where the address is reachable)."""
    code = (
        "import json, sys, ray; ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR'); "
        "nodes = [{'node_id': n['NodeID'], 'address': n['NodeManagerAddress'], 'CPU': n['Resources'].get('CPU', 0),"
        " 'GPU': n['Resources'].get('GPU', 0)} for n in ray.nodes() if n['Alive']]; "
        "print('distbench-nodes:' + json.dumps(nodes)); ray.shutdown()"
    )
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    try:
        proc = subprocess.run(
            [*prefix, python, "-c", code, address], capture_output=True, text=True, timeout=timeout_s, env=env
        )
    except subprocess.TimeoutExpired:
        raise BadInput(f"--ray-address {address}: no answer from the Ray cluster in {timeout_s:.0f}s") from None
    for line in proc.stdout.splitlines():
        if line.startswith("distbench-nodes:"):
            return tuple(json.loads(line.split(":", 1)[1]))
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
    raise BadInput(f"--ray-address {address}: cannot read the Ray cluster's nodes: {last}")


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a Ray point's N workers go: `nodes` nodes of `per_node` workers, Ray's placement strategy for
    the workers' bundles, and each worker's CPUs (its threads) and GPUs."""

    nodes: int
    per_node: int
    strategy: str
    cpus: float
    """CPUs per worker: a whole share of its node's CPUs, or, on a node with fewer CPUs than workers, a
    fraction (Ray's fractional resources) so that per_node of them fit the node (one thread each)."""
    gpus: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


RAY_RESOURCE_STEP = 10_000
"""Ray rounds a fractional resource to 1/10000."""


def worker_cpus(node_cpus: float, per_node: int) -> float | None:
    """Each of per_node workers' CPUs so that together they fit a node of node_cpus: a whole share, else a
    fraction below one (None: the node has too few CPUs for even the smallest fraction Ray grants)."""
    if node_cpus >= per_node:
        return int(node_cpus) // per_node
    share = math.floor(node_cpus / per_node * RAY_RESOURCE_STEP) / RAY_RESOURCE_STEP
    return share if share > 0 else None


def place(world_size: int, device: str, nodes, address: str) -> tuple[str | None, Placement | None]:
    """(why the point cannot be placed, None) or (None, its Placement), planned per node (module doc)."""
    unit = "GPU" if device == "cuda" else "CPU"

    def devices(node) -> int:
        return int(float(node.get(unit, 0)))

    gpus = 1 if device == "cuda" else 0

    def no_cpus(node_cpus: float, per_node: int) -> str:
        return (
            f"cannot be placed on the Ray cluster at {address}: N={world_size} needs {per_node} worker(s) on a node "
            f"with {node_cpus:g} CPU(s), too few to give each a CPU share"
        )

    within = [n for n in nodes if devices(n) >= world_size]
    if within:
        node = min(within, key=devices)  # the smallest node that holds the point
        cpus = worker_cpus(float(node["CPU"]), world_size)
        if cpus is None:
            return no_cpus(float(node["CPU"]), world_size), None
        return None, Placement(1, world_size, "STRICT_PACK", cpus, gpus)
    sizes = sorted({devices(n) for n in nodes if devices(n) > 0}, reverse=True)
    for size in sizes:
        shaped = [n for n in nodes if devices(n) == size]
        if world_size % size == 0 and len(shaped) >= world_size // size:
            fewest = min(float(n["CPU"]) for n in shaped)
            cpus = worker_cpus(fewest, size)
            if cpus is None:
                return no_cpus(fewest, size), None
            return None, Placement(world_size // size, size, "STRICT_SPREAD" if size == 1 else "PACK", cpus, gpus)
    shape = ", ".join(f"{sum(devices(n) == d for n in nodes)} x {d}" for d in sizes) or "none"
    return (
        f"cannot be placed on the Ray cluster at {address}: N={world_size} {unit}s is neither within one node "
        f"nor a multiple of one node's {unit}s over that many nodes (its nodes' {unit}s: {shape})",
        None,
    )


def plan_on_cluster(points: list, address: str, notes: list[str], nodes=None) -> list:
    """The plan's Ray points re-planned on the cluster at `address`, per node (other points unchanged): skip
    reasons from its nodes' GPUs (this machine's GPU count does not apply), the placement (extra
    "ray_placement") and threads per worker from its nodes' CPUs."""
    from distbench.run.launchers import RAY_TRAIN

    ray_points = [p for p in points if p.strategy.launcher == RAY_TRAIN.name]
    if not ray_points or any(p.skip_reason and "not installed" in p.skip_reason for p in ray_points):
        return points
    nodes = cluster_nodes(address) if nodes is None else nodes
    shape = ", ".join(f"{float(n['GPU']):g} GPU(s) and {float(n['CPU']):g} CPU(s)" for n in nodes)
    notes.append(
        f"Ray points planned per node on the cluster at {address}: {len(nodes)} node(s), {shape} (ray.nodes())"
    )
    out = []
    for p in points:
        if p.strategy.launcher == RAY_TRAIN.name:
            why, placement = place(p.config.world_size, p.config.device, nodes, address)
            ray = dataclasses.replace(
                p.config.ray or RaySection(), placement=placement.to_dict() if placement else None
            )
            # the point's `nodes` stays 1 (one driver process; Ray places the workers): the planned node count
            # is the placement's, and the record's `nodes` is the count the workers ran on
            cfg = dataclasses.replace(
                p.config, threads_per_worker=max(1, int(placement.cpus)) if placement else 1, ray=ray
            )
            p = dataclasses.replace(p, config=cfg, skip_reason=p.skip_reason or why)
        out.append(p)
    return out


def visible_gpus_of(nodes) -> int:
    return int(sum(float(n.get("GPU", 0)) for n in nodes))


def visible_gpus(address: str, strategies) -> int | None:
    """A Ray-only sweep's GPUs: the cluster's, which its device choice counts as visible (a CPU-only
    laptop can drive a GPU cluster); None when some strategy runs on this machine."""
    from distbench.run.launchers import RAY_TRAIN

    if not strategies or any(s.launcher != RAY_TRAIN.name for s in strategies):
        return None
    return visible_gpus_of(cluster_nodes(address))


# -- one local head per sweep ------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # in the child, before exec: its own group, SIGTERM when we die
    os.setsid()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclasses.dataclass
class SweepHead:
    """A local Ray head for one sweep. `with SweepHead(num_cpus=N) as head:` starts it and exports
    DISTBENCH_RAY_HEAD for the points' drivers; leaving the block (normally, on an error, on Ctrl-C) stops
    the head's whole process group and removes its folder."""

    num_cpus: int
    num_gpus: int | None = None
    python: str = sys.executable
    prefix: tuple[str, ...] = ()
    """argv that runs `ray start` elsewhere (a node of the one-machine cluster: nodes_ray below)."""
    node_ip: str | None = None
    """The node's address (--node-ip-address); None: loopback."""
    join: str | None = None
    """A head's GCS address: start a worker node (a raylet) that joins it instead of a head."""
    extra_args: tuple[str, ...] = ()
    address: str | None = None
    start_s: float | None = None
    stop_s: float | None = None
    proc: subprocess.Popen | None = None
    temp: str | None = None

    def start(self) -> str:
        ray = str(Path(self.python).parent / "ray")
        ray = ray if os.path.exists(ray) else shutil.which("ray") or "ray"
        port = _free_port()
        root = tempfile.gettempdir() if len(tempfile.gettempdir()) <= 24 else "/tmp"
        self.temp = tempfile.mkdtemp(prefix="dbrayhead-", dir=root)  # Ray's socket paths must stay short
        role = [f"--address={self.join}"] if self.join else ["--head", f"--port={port}", "--include-dashboard=false"]
        argv = [
            *self.prefix, ray, "start", *role, "--block", f"--num-cpus={self.num_cpus}",
            "--disable-usage-stats", f"--temp-dir={self.temp}", *self.extra_args,
        ]  # fmt: skip
        if self.node_ip:
            argv.append(f"--node-ip-address={self.node_ip}")
        if self.num_gpus is not None:
            argv.append(f"--num-gpus={self.num_gpus}")
        started = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.temp, "ray-start.log"), "wb"),
            preexec_fn=_die_with_parent,
            env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"),
        )
        raylet = Path(self.temp) / "session_latest" / "sockets" / "raylet"
        # a node's raylet starts after its head's GCS: its socket is there once both are (a head elsewhere
        # listens on an address this namespace may not reach: only a local head's port is tried)
        while not (raylet.exists() and (self.node_ip or _accepts(port))):
            if self.proc.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                log = Path(self.temp, "ray-start.log").read_text(errors="replace").strip().splitlines()
                self.stop()
                what = f"Ray node joining {self.join}" if self.join else "Ray head"
                raise RuntimeError(f"the sweep's {what} did not start: {(log or ['no output'])[-1][:300]}")
            time.sleep(0.1)
        self.start_s = time.monotonic() - started
        self.address = self.join or f"{self.node_ip or '127.0.0.1'}:{port}"
        return self.address

    def stop(self) -> None:
        """Stop the head's process group (SIGTERM, then SIGKILL after a grace) and remove its folder."""
        started = time.monotonic()
        if self.proc is not None and self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.proc is not None:  # what `ray start` left in its group (raylet's workers, GCS)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            _wait_group_gone(self.proc.pid, timeout_s=5.0)
        if self.temp:
            shutil.rmtree(self.temp, ignore_errors=True)
        self.stop_s = time.monotonic() - started

    def __enter__(self) -> SweepHead:
        self.start()
        self._saved = {k: os.environ.get(k) for k in (HEAD_ENV, HEAD_START_ENV)}
        os.environ[HEAD_ENV] = self.address
        os.environ[HEAD_START_ENV] = f"{self.start_s:.3f}"
        return self

    def __exit__(self, *exc) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self.stop()


def _session_alive(sid: int) -> list[int]:
    """The live (not zombie) processes of session `sid`: the head (setsid in _die_with_parent) and everything it
    started, Ray's workers included, which put themselves in process groups of their own."""
    alive = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.pid != os.getpid() and os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return alive


def _wait_group_gone(sid: int, timeout_s: float) -> None:
    """Kill what is left of the head's session and return once all of it has exited (a SIGKILL lands
    asynchronously), or after `timeout_s`: the sweep ends only when nothing it started is still running."""
    deadline = time.monotonic() + timeout_s
    while (left := _session_alive(sid)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def sweep_head(points, progress=None, python: str = sys.executable):
    """One local head for the Ray points of a sweep that names no --ray-address (none: nothing started)."""
    from distbench.run.launchers import RAY_TRAIN

    ray_points = [
        p
        for p in points
        if p.strategy.launcher == RAY_TRAIN.name and not p.skip_reason and not (p.config.ray and p.config.ray.address)
    ]
    on_nodes = [p for p in ray_points if p.config.nodes > 1]  # across the one-machine cluster's nodes
    ray_points = [p for p in ray_points if p.config.nodes == 1]
    if on_nodes:
        with nodes_ray(max(p.config.nodes for p in on_nodes), progress, python):
            with sweep_head(ray_points, progress, python) as head:
                yield head
        return
    if not ray_points or os.environ.get(HEAD_ENV):
        yield None
        return
    cuda = any(p.config.device == "cuda" for p in ray_points)
    # one CPU per training worker and one for Ray Train's controller: Ray prestarts a worker process per CPU
    cpus = max(p.config.world_size for p in ray_points) + 1
    head = SweepHead(num_cpus=cpus, num_gpus=None if cuda else 0, python=python)
    with head:
        if progress:
            progress(f"Ray head for the sweep started in {head.start_s:.1f}s at {head.address}")
        yield head
    if progress:
        progress(f"Ray head stopped in {head.stop_s:.1f}s")


# Ray across the one-machine cluster's nodes.
# Ray across the one-machine cluster's nodes (distbench.cluster) for one sweep: a head on node1 and a worker
# node (a raylet) on each other node, each `ray start --block` inside its node's namespaces at the node's
# address (10.199.39.K), joined over the nodes' links. A sweep with `ray-ddp` points at K > 1 nodes on the
# cluster starts them before its first Ray point and stops them when it ends, however it ends: each `ray
# start` is in a session of its own with a parent-death signal, and stopping one SIGTERMs its group, then
# SIGKILLs every process left in its session (by pid; distbench.run.raycluster.SweepHead), so no head, raylet,
# GCS or Ray worker outlives the sweep. The points' drivers run on node1 and join it (DISTBENCH_RAY_NODES_HEAD,
# distbench.run.launchers.RayTrain.on_cluster); Ray Train places one worker per node (STRICT_SPREAD).
#
# Each node offers Ray its share of this machine's cores (the cores divided by the node count, as the
# nodes' slurmd offer them): the nodes share the machine's cores.

OBJECT_STORE_BYTES = 256 * 2**20
"""Each node's object store: a point's driver and workers pass only small objects (the record)."""


def node_cpus(state) -> int:
    """A node's share of this machine's cores, as Ray's CPU resource."""
    return max(1, (os.cpu_count() or 1) // len(state.nodes))


@contextlib.contextmanager
def nodes_ray(k: int, progress=None, python: str = sys.executable):
    """Ray on the cluster's first k nodes for the length of the block (module doc); exports
    DISTBENCH_RAY_NODES_HEAD for the drivers."""
    from distbench.cluster import netns
    from distbench.run.hosts import local_cluster

    state = local_cluster()
    if state is None or len(state.nodes) < k:
        raise DistbenchError(f"Ray across {k} nodes needs the one-machine cluster up with {k} nodes")
    started = time.monotonic()
    common = dict(
        num_cpus=node_cpus(state),
        num_gpus=0,
        python=python,
        extra_args=(f"--object-store-memory={OBJECT_STORE_BYTES}",),
    )
    nodes: list[SweepHead] = []
    saved = {v: os.environ.get(v) for v in (NODES_HEAD_ENV, NODES_START_ENV)}
    try:
        head = SweepHead(prefix=tuple(netns.node_prefix(state, 0)), node_ip=state.node(0)["address"], **common)
        nodes.append(head)
        head.start()
        for i in range(1, k):
            node = SweepHead(
                prefix=tuple(netns.node_prefix(state, i)), node_ip=state.node(i)["address"], join=head.address, **common
            )
            nodes.append(node)
            node.start()
        alive = wait_for_nodes(head.address, k, tuple(netns.node_prefix(state, 0)), python)
        os.environ[NODES_HEAD_ENV] = head.address
        os.environ[NODES_START_ENV] = f"{time.monotonic() - started:.3f}"
        if progress:
            where = ", ".join(f"{n['address']}" for n in alive)
            progress(
                f"Ray on the nodes started in {time.monotonic() - started:.1f}s: head {head.address}, nodes {where}"
            )
        yield head
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stopping = time.monotonic()
        for node in reversed(nodes):  # the raylets, then the head
            node.stop()
        if progress and nodes:
            progress(f"Ray on the nodes stopped in {time.monotonic() - stopping:.1f}s")


def wait_for_nodes(address: str, k: int, prefix: tuple[str, ...], python: str) -> tuple:
    """Ray's live nodes once all k have registered with the head (asked from node1, where it is reachable)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    alive: tuple = ()
    while time.monotonic() < deadline:
        alive = cluster_nodes.__wrapped__(address, START_TIMEOUT_S, python, prefix)
        if len(alive) >= k:
            return alive
        time.sleep(1.0)
    raise DistbenchError(
        f"Ray on the nodes: {len(alive)} of {k} nodes registered with {address} in {START_TIMEOUT_S:g}s"
    )

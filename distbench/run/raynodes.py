"""Ray across the one-machine cluster's nodes (distbench.cluster) for one sweep: a head on node1 and a worker
node (a raylet) on each other node, each `ray start --block` inside its node's namespaces at the node's
address (10.199.39.K), joined over the nodes' links. A sweep with `ray-ddp` points at K > 1 nodes on the
cluster starts them before its first Ray point and stops them when it ends, however it ends: each `ray
start` is in a session of its own with a parent-death signal, and stopping one SIGTERMs its group, then
SIGKILLs every process left in its session (by pid; distbench.run.raycluster.SweepHead), so no head, raylet,
GCS or Ray worker outlives the sweep. The points' drivers run on node1 and join it (DISTBENCH_RAY_NODES_HEAD,
distbench.run.launchers.RayTrain.on_cluster); Ray Train places one worker per node (STRICT_SPREAD).

Each node offers Ray its share of this machine's cores (the cores divided by the node count, as the
nodes' slurmd offer them): the nodes share the machine's cores.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

from distbench.core.errors import DistbenchError
from distbench.run.raycluster import START_TIMEOUT_S, SweepHead, cluster_nodes

NODES_HEAD_ENV = "DISTBENCH_RAY_NODES_HEAD"
"""The GCS address of the Ray cluster the sweep started on the nodes (node1's address and the head's port)."""
NODES_START_ENV = "DISTBENCH_RAY_NODES_START_S"
"""Seconds its head and raylets took to start and register: paid once per sweep."""
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

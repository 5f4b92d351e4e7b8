"""Where a multi-node point runs: the Slurm allocation this process is in, or the one-machine cluster
(distbench.cluster) when one is up; and where its ranks ran (launch.placement)."""

from __future__ import annotations

from distbench.core.errors import BadInput
from distbench.core.multinode import allocation_hosts


def local_cluster(environ: dict | None = None):
    """The one-machine cluster's state (distbench.cluster) when one is up and this process is not in a Slurm
    allocation (the allocation wins), else None."""
    if allocation_hosts(environ):
        return None
    from distbench.cluster.spec import read_state

    return read_state()


def cluster_links(hosts: list[str]) -> dict | None:
    """The one-machine cluster's link settings when every one of `hosts` is one of its nodes (a Slurm job on
    the nodes' slurmds: the allocation's hosts are the cluster's), else None."""
    from distbench.cluster.spec import read_state

    state = read_state()
    if state is None or not hosts or not set(hosts) <= set(state.hosts()):
        return None
    return state.link_settings()


def check_allocation(max_nodes: int, environ: dict | None = None) -> list[str]:
    """`distbench scale --nodes K` runs inside an existing allocation of at least K nodes, or across the
    one-machine cluster (scripts/cluster-local.sh up) when one is up."""
    hosts = allocation_hosts(environ)
    where = "the Slurm allocation"
    if not hosts and (state := local_cluster(environ)) is not None:
        hosts, where = state.hosts(), "the one-machine cluster"
    if not hosts:
        raise BadInput(
            f"--nodes {max_nodes} runs multi-node points inside a Slurm allocation, and this shell is "
            "not in one (use salloc/sbatch, `distbench slurm` to submit the sweep as jobs, or "
            "scripts/cluster-local.sh up for nodes on this machine)"
        )
    if len(hosts) < max_nodes:
        raise BadInput(f"--nodes asks for {max_nodes} nodes but {where} has {len(hosts)}")
    return hosts


def placement(ranks: list[dict], links: dict | None = None) -> dict:
    """A multi-node record's launch.placement, from the rank guards' reports: each rank's host, the distinct
    hosts, and per host the interface that carried the most bytes while its ranks ran (with every interface's
    bytes: what the node's network namespace counted, so ranks sharing a node report the same link), plus
    the link settings of the one-machine cluster the point ran on (None elsewhere)."""
    hosts = {str(r["rank"]): r.get("host") for r in sorted(ranks, key=lambda r: r["rank"])}
    per_host: dict[str, dict] = {}
    for r in ranks:
        net = r.get("net") or {}
        seen = per_host.setdefault(r.get("host") or "?", {})
        for name, moved in net.items():
            if sum(moved.values()) > sum(seen.get(name, {}).values()):
                seen[name] = moved
    interfaces = {
        host: (max(net, key=lambda n: sum(net[n].values())) if net else None) for host, net in per_host.items()
    }
    out = {
        "rank_hosts": hosts,
        "hosts": sorted({h for h in hosts.values() if h}),
        "interface": interfaces,
        "interface_bytes": per_host,
    }
    if links is not None:
        out["links"] = links
    return out

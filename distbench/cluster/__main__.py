"""`python -m distbench.cluster up|down|status|link` (scripts/cluster-local.sh wraps it). Bad input: one line
naming the flag, exit 2; a machine that cannot host the cluster: one line saying why, exit 1."""

from __future__ import annotations

import sys

import click

from distbench.cluster import netns, spec
from distbench.core.errors import DistbenchError


@click.group()
def cluster():
    """Several nodes on one machine: network namespaces joined by shaped links."""


def _link(rate: str, delay: str, loss: str) -> spec.Link:
    return spec.Link(spec.parse_rate(rate), spec.parse_delay(delay), spec.parse_loss(loss))


@cluster.command()
@click.option("--nodes", "k", type=int, default=2, show_default=True, help="Node count (2 to 4).")
@click.option("--rate", default="1gbit", show_default=True, help="Each node's egress rate (tc units).")
@click.option("--delay", default="0us", show_default=True, help="One-way delay added on each node's egress (netem).")
@click.option(
    "--loss",
    default="0",
    show_default=True,
    help="Percent of packets each node's egress drops (netem, else the node's own iptables rules).",
)
@click.option("--ssh", is_flag=True, help="Start an sshd on each node (root logs in with the cluster's key).")
@click.option("--slurm", is_flag=True, help="Start slurmctld on node1 and a slurmd on each node.")
def up(k, rate, delay, loss, ssh, slurm):
    """Create the nodes (hostnames node1..nodeK, addresses 10.199.39.K on eth0)."""
    spec.check_nodes(k)
    link = _link(rate, delay, loss)
    state = netns.up(k, link, ssh=ssh, slurm=slurm)
    for n in state.nodes:
        sshd = f"  sshd pid {state.ssh['pids'][n['hostname']]}" if state.ssh else ""
        click.echo(f"{n['hostname']}  {n['address']}  namespace {n['namespace']}  {link.describe()}{sshd}")
    click.echo(f"state: {spec.state_path()}")


@cluster.command()
def down():
    """Remove every namespace, link, mount and process of the cluster."""
    removed = netns.down()
    left = netns.leftovers()
    click.echo(f"removed {len(removed)} item(s)" + (f": {', '.join(removed)}" if removed else ""))
    if left:
        raise DistbenchError(f"still present after down: {', '.join(left)}")


@cluster.command()
def status():
    """Exit 0 when the cluster is up and every node's link is shaped."""
    state, problems = netns.status()
    if state is None:
        click.echo("no one-machine cluster is up" + (f" ({'; '.join(problems)})" if problems else ""))
        raise SystemExit(1)
    for n in state.nodes:
        link = spec.Link(n["rate_bps"], n["delay_s"], n["loss_pct"])
        click.echo(f"{n['hostname']}  {n['address']}  namespace {n['namespace']}  {link.describe()}")
    for p in problems:
        click.echo(f"problem: {p}")
    raise SystemExit(1 if problems else 0)


@cluster.command()
@click.option("--rate", default="1gbit", show_default=True, help="Egress rate (tc units).")
@click.option("--delay", default="0us", show_default=True, help="One-way delay (netem).")
@click.option(
    "--loss", default="0", show_default=True, help="Percent of packets dropped (netem, else iptables; 100: all)."
)
@click.option("--node", type=int, default=None, help="Only this node (1-based); default every node.")
def link(rate, delay, loss, node):
    """Reshape the nodes' links of a running cluster (recorded in the state file)."""
    state = netns.set_link(_link(rate, delay, loss), node)
    for n in state.nodes:
        click.echo(f"{n['hostname']}  {spec.Link(n['rate_bps'], n['delay_s'], n['loss_pct']).describe()}")


@cluster.command(name="cut")
@click.option("--node", type=int, required=True, help="The node (1-based) whose link is cut.")
@click.option("--restore", is_flag=True, help="Bring the link back up instead.")
def cut_link(node, restore):
    """Cut a node's link (its NIC down, as a pulled cable), or restore it."""
    netns.cut(node, restore)
    click.echo(f"node{node}: link {'restored' if restore else 'cut'}")


def main(argv: list[str] | None = None) -> int:
    try:
        rv = cluster.main(args=argv, prog_name="cluster-local.sh", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)
        return exc.exit_code
    except DistbenchError as exc:
        click.echo(f"Error: {exc}", err=True)
        return exc.exit_code
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())

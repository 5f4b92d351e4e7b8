"""Bring the one-machine cluster up and down: K network + UTS namespaces (hostname nodeK, address
10.199.39.K on eth0), each joined by a veth pair to a bridge in a namespace of its own, each node's egress
shaped by a tc netem qdisc (delay, rate, loss). Every address lives only on these links; the root namespace
gains no interface, address or route, and `down` removes every namespace, link, mount and process made here.

How a command runs on node K: `nsenter --uts=UTS ip netns exec dbc-nodeK CMD`: the UTS namespace is kept
by a bind mount under the state directory, and `ip netns exec` mounts /etc/netns/dbc-nodeK/hosts over
/etc/hosts, which names every node.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from distbench.cluster import slurmd, spec, sshd
from distbench.core.errors import BadInput, DistbenchError

NETNS_ETC = Path("/etc/netns")
TOOLS = ("ip", "tc", "unshare", "nsenter", "mount", "umount")


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise DistbenchError(f"`{' '.join(argv)}` failed: {(done.stderr or done.stdout).strip()}")
    return done


def unavailable() -> str | None:
    """Why this machine cannot host the cluster (None: it can): root, the tools, namespace support."""
    if os.geteuid() != 0:
        return "the one-machine cluster needs root (network namespaces, veth links, tc)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"the one-machine cluster needs {', '.join(missing)} (iproute2, util-linux)"
    if not Path("/proc/self/ns/net").exists() or not Path("/proc/self/ns/uts").exists():
        return "this kernel has no network or UTS namespaces"
    return None


def ours() -> list[str]:
    """Every namespace with the cluster's prefix, whatever state file says."""
    done = _run("ip", "netns", "list", check=False)
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(spec.PREFIX))


def node_prefix(state: spec.ClusterState, i: int) -> list[str]:
    """argv prefix that runs a command on node i (0-based) as a process of that node."""
    node = state.node(i)
    uts = Path(state.state_dir) / "uts" / node["hostname"]
    return ["nsenter", f"--uts={uts}", "ip", "netns", "exec", node["namespace"]]


def shape(namespace: str, link: spec.Link, nic: str = spec.NIC) -> str:
    """Replace the egress qdisc of `nic` in `namespace`: netem (delay, rate, loss) where the kernel has it,
    else a token bucket (rate only) with the loss, if any, dropped by the node's packet filter (drop_egress);
    returns the qdisc's name. A delay on a kernel without netem is refused with tc's own message: this cannot
    be emulated faithfully another way here."""
    tc = ["ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev", nic, "root"]
    done = _run(*tc, *link.netem_args(), check=False)
    if done.returncode == 0:
        return "netem"
    if link.delay_s:
        raise DistbenchError(
            f"--delay needs the netem qdisc, which this kernel ({os.uname().release}) lacks "
            f"(tc: {done.stderr.strip()}); give --delay 0us for a rate-limited link (tbf)"
        )
    if link.loss_pct and (why := filter_unavailable()):
        raise DistbenchError(
            f"--loss needs the netem qdisc, which this kernel ({os.uname().release}) lacks "
            f"(tc: {done.stderr.strip()}), or {why}; give --loss 0 for a rate-limited link (tbf)"
        )
    _run(*tc, *link.tbf_args())
    if link.loss_pct or filter_unavailable() is None:
        drop_egress(namespace, link.loss_pct, nic)
    return "tbf"


LOSS_CHAIN = "DBC-LOSS"
"""The packet filter chain (in the node's namespace only) that drops a share of the node's egress."""


def filter_unavailable(install: bool = False) -> str | None:
    """Why the nodes' packet filter cannot drop packets (None: iptables is there; with `install`, after
    trying to install Debian's iptables with apt-get where it is missing)."""
    if shutil.which("iptables") is None and install and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "iptables"]
        subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    return None if shutil.which("iptables") else "iptables (Debian's iptables package) to drop packets"


def drop_egress(namespace: str, loss_pct: float, nic: str = spec.NIC) -> None:
    """The node's egress on `nic` loses loss_pct percent of its packets, chosen at random (iptables'
    statistic match in the node's own namespace; 100: every packet, as a link that passes nothing). The
    rules live in the namespace and go with it."""
    ipt = ["ip", "netns", "exec", namespace, "iptables", "-w"]
    if _run(*ipt, "-L", LOSS_CHAIN, "-n", check=False).returncode != 0:
        if not loss_pct:
            return  # nothing to drop, nothing set before
        _run(*ipt, "-N", LOSS_CHAIN)
        _run(*ipt, "-A", "OUTPUT", "-o", nic, "-j", LOSS_CHAIN)
    _run(*ipt, "-F", LOSS_CHAIN)
    if loss_pct >= 100:
        _run(*ipt, "-A", LOSS_CHAIN, "-j", "DROP")
    elif loss_pct > 0:
        share = f"{loss_pct / 100:.6f}"
        _run(*ipt, "-A", LOSS_CHAIN, "-m", "statistic", "--mode", "random", "--probability", share, "-j", "DROP")


def up(k: int, link: spec.Link, ssh: bool = False, slurm: bool = False) -> spec.ClusterState:
    """Make the nodes; with `ssh`, start an sshd on each (distbench.cluster.sshd); with `slurm`, slurmctld
    on node1 and a slurmd on each (distbench.cluster.slurmd)."""
    spec.check_nodes(k)
    why = unavailable() or (sshd.unavailable() if ssh else None) or (slurmd.unavailable() if slurm else None)
    if why:
        raise DistbenchError(why)
    if spec.read_state() is not None or ours():
        raise DistbenchError(
            "a one-machine cluster is already up (or left over): run `scripts/cluster-local.sh down` first"
        )
    sdir = spec.state_dir()
    state = spec.ClusterState(state_dir=str(sdir))
    try:
        _up(k, link, state, sdir)
        if ssh:
            state.ssh = sshd.start(state.nodes, lambda i: node_prefix(state, i), sdir)
            spec.state_path().write_text(state.to_json())
        if slurm:
            state.slurm = slurmd.start(state.nodes, lambda i: node_prefix(state, i), sdir)
            spec.state_path().write_text(state.to_json())
    except BaseException:
        down()
        raise
    return state


def _up(k: int, link: spec.Link, state: spec.ClusterState, sdir: Path) -> None:
    uts_dir = sdir / "uts"
    uts_dir.mkdir(parents=True, exist_ok=True)
    # The UTS namespaces are kept by bind mounts, which need a private mount to live on.
    _run("mount", "--bind", str(uts_dir), str(uts_dir))
    _run("mount", "--make-private", str(uts_dir))
    _run("ip", "netns", "add", spec.SWITCH_NS)
    sw = ["ip", "netns", "exec", spec.SWITCH_NS]
    _run(*sw, "ip", "link", "add", spec.BRIDGE, "type", "bridge")
    _run(*sw, "ip", "link", "set", spec.BRIDGE, "up")
    nodes = [spec.Node(i, link) for i in range(1, k + 1)]
    hosts = "127.0.0.1 localhost\n" + "".join(f"{n.address} {n.hostname}\n" for n in nodes)
    for n in nodes:
        ns, peer = n.namespace, f"v{n.hostname}"
        (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
        (NETNS_ETC / ns / "hosts").write_text(hosts)
        (NETNS_ETC / ns / "hostname").write_text(f"{n.hostname}\n")
        _run("ip", "netns", "add", ns)
        # Both ends are created inside the switch namespace, so no link ever appears in the root namespace.
        _run(*sw, "ip", "link", "add", peer, "type", "veth", "peer", "name", spec.NIC, "netns", ns)
        _run(*sw, "ip", "link", "set", peer, "master", spec.BRIDGE, "up")
        inside = ["ip", "netns", "exec", ns]
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "addr", "add", f"{n.address}/24", "dev", spec.NIC)
        _run(*inside, "ip", "link", "set", spec.NIC, "up")
        qdisc = shape(ns, link)
        uts = uts_dir / n.hostname
        uts.touch()
        _run("unshare", f"--uts={uts}", "hostname", n.hostname)
        state.nodes.append(dict(spec.node_entry(n), qdisc=qdisc))
    spec.state_path().write_text(state.to_json())


def set_link(link: spec.Link, node: int | None = None) -> spec.ClusterState:
    """Reshape every node's egress (or node `node`'s, 1-based) and record it in the state file."""
    state = require_state()
    if node is not None and not 1 <= node <= len(state.nodes):
        raise BadInput(f"--node {node}: the cluster has nodes 1 to {len(state.nodes)}")
    for entry in state.nodes:
        if node is None or entry["index"] == node:
            qdisc = shape(entry["namespace"], link, state.nic)
            entry.update(rate_bps=link.rate_bps, delay_s=link.delay_s, loss_pct=link.loss_pct, qdisc=qdisc)
    spec.state_path().write_text(state.to_json())
    return state


def require_state() -> spec.ClusterState:
    state = spec.read_state()
    if state is None:
        raise DistbenchError("no one-machine cluster is up (scripts/cluster-local.sh up)")
    return state


def pids_in(namespace: str) -> list[int]:
    done = _run("ip", "netns", "pids", namespace, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def down(grace_s: float = 3.0) -> list[str]:
    """Remove everything `up` made: processes in the namespaces (TERM, then KILL), the namespaces (and with
    them the veth pairs and the bridge), the hosts files, the UTS mounts, the state file. Returns what it removed."""
    removed: list[str] = []
    state = spec.read_state()
    sdir = spec.state_dir()
    removed += slurmd.stop(state.slurm if state else None, sdir)
    removed += sshd.stop(state.ssh if state else None, sdir)
    names = ours()
    pids = sorted({p for ns in names for p in pids_in(ns)})
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if Path(f"/proc/{p}").exists()]
            time.sleep(0.1)
        if not pids:
            break
    for ns in names:
        _run("ip", "netns", "del", ns, check=False)
        removed.append(f"namespace {ns}")
        shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
    if NETNS_ETC.exists() and not any(NETNS_ETC.iterdir()):
        NETNS_ETC.rmdir()
    uts_dir = sdir / "uts"
    if uts_dir.exists():
        for f in sorted(uts_dir.iterdir()):
            _run("umount", str(f), check=False)
            f.unlink(missing_ok=True)
            removed.append(f"UTS namespace {f.name}")
        _run("umount", str(uts_dir), check=False)
        uts_dir.rmdir()
    spec.state_path().unlink(missing_ok=True)
    if sdir.exists() and not any(sdir.iterdir()):
        sdir.rmdir()
    return removed


def leftovers() -> list[str]:
    """Anything of the cluster still on this machine (empty after a clean `down`)."""
    left = [f"namespace {n}" for n in ours()]
    left += [f"hosts file {p}" for p in NETNS_ETC.glob(f"{spec.PREFIX}*")] if NETNS_ETC.exists() else []
    sdir = spec.state_dir()
    left += [f"sshd pid {p}" for p in sshd.running(sdir)]
    left += [f"Slurm daemon pid {p}" for p in slurmd.running(sdir)]
    if sdir.exists():
        left.append(f"state directory {sdir}")
    return left


def status() -> tuple[spec.ClusterState | None, list[str]]:
    """(the state, problems): a node namespace missing or its link unshaped is a problem."""
    state = spec.read_state()
    if state is None:
        return None, [f"left over: {x}" for x in leftovers()]
    problems = []
    present = set(ours())
    for entry in state.nodes:
        if entry["namespace"] not in present:
            problems.append(f"{entry['hostname']}: namespace {entry['namespace']} is gone")
            continue
        qdisc = _run("ip", "netns", "exec", entry["namespace"], "tc", "qdisc", "show", "dev", state.nic, check=False)
        if entry.get("qdisc", "netem") not in qdisc.stdout:
            problems.append(f"{entry['hostname']}: {state.nic} has no {entry.get('qdisc')} qdisc")
    return state, problems


def link_faults(state: spec.ClusterState) -> list[str]:
    """What is wrong with the nodes' links now, one phrase per node: a namespace gone, the NIC down, or a
    link set to drop every packet (a cut). Empty when every link is up and passes packets."""
    faults = []
    present = set(ours())
    for entry in state.nodes:
        host, ns = entry["hostname"], entry["namespace"]
        if ns not in present:
            faults.append(f"{host} is gone (namespace {ns} deleted)")
            continue
        link = _run("ip", "netns", "exec", ns, "ip", "-o", "link", "show", "dev", state.nic, check=False)
        flags = link.stdout.split("<", 1)[-1].split(">", 1)[0].split(",") if link.returncode == 0 else []
        if link.returncode != 0:
            faults.append(f"{host} has no {state.nic}")
        elif "UP" not in flags or "LOWER_UP" not in flags:
            faults.append(f"{host}'s link {state.nic} is down")
        elif entry.get("loss_pct", 0) >= 100:
            faults.append(f"{host}'s link {state.nic} drops every packet (100% loss)")
    return faults


def cut(node: int, restore: bool = False) -> spec.ClusterState:
    """Cut node `node`'s link (its NIC down, as a pulled cable) or restore it."""
    state = require_state()
    if not 1 <= node <= len(state.nodes):
        raise BadInput(f"--node {node}: the cluster has nodes 1 to {len(state.nodes)}")
    entry = state.nodes[node - 1]
    _run("ip", "netns", "exec", entry["namespace"], "ip", "link", "set", state.nic, "up" if restore else "down")
    return state

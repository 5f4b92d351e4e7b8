"""The one-machine cluster's settings, checked: node count, link rate, delay and loss, and the state file
that records them for the sweeps that run on it. Pure: nothing here touches the system."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from distbench.core.errors import BadInput

MAX_NODES = 4
"""At most 4 nodes: every node's ranks share this machine's cores, so each node beyond the core count only
time-slices them further (on 2 cores, 2 nodes of one single-thread rank each is the fair comparison)."""
STATE_DIR_VAR = "DISTBENCH_CLUSTER_DIR"
DEFAULT_STATE_DIR = "/run/distbench-cluster"
PREFIX = "dbc-"
"""Every namespace the cluster creates is named with this prefix: `down` removes exactly those."""
SWITCH_NS = f"{PREFIX}switch"
BRIDGE = "br0"
NIC = "eth0"
"""The node's interface inside its namespace: the same name on every node, as on a uniform cluster."""
SUBNET = "10.199.39"

_RATE_UNITS = {
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "bps": 8,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
}
_DELAY_UNITS = {"us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1.0, "sec": 1.0}


def parse_rate(text: str, flag: str = "--rate") -> float:
    """'1gbit' -> 1e9 bits per second (tc's units: bit, kbit, mbit, gbit; bps, kbps, ... are bytes)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _RATE_UNITS:
        raise BadInput(f"{flag} {text!r}: give a rate such as 1gbit, 100mbit or 500kbit (tc units)")
    bits = float(m.group(1)) * _RATE_UNITS[unit]
    if bits <= 0:
        raise BadInput(f"{flag} {text!r}: the rate must be above 0")
    if bits < 8e3:
        raise BadInput(f"{flag} {text!r}: below 8kbit a 1500-byte frame takes seconds; give at least 8kbit")
    return bits


def parse_delay(text: str, flag: str = "--delay") -> float:
    """'100us' -> 1e-4 seconds of one-way delay added on each node's egress (0 allowed)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _DELAY_UNITS:
        raise BadInput(f"{flag} {text!r}: give a delay such as 100us, 2ms or 0us (units us, ms, s)")
    seconds = float(m.group(1)) * _DELAY_UNITS[unit]
    if seconds > 10:
        raise BadInput(f"{flag} {text!r}: at most 10s")
    return seconds


def parse_loss(text: str, flag: str = "--loss") -> float:
    """'1%' or '1' -> 1.0 percent of packets dropped on each node's egress."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%?\s*", str(text))
    if not m or not 0 <= float(m.group(1)) <= 100:
        raise BadInput(f"{flag} {text!r}: give a percentage from 0 to 100, such as 0.1%")
    return float(m.group(1))


def check_nodes(k: int, flag: str = "--nodes") -> int:
    if not isinstance(k, int) or k < 2 or k > MAX_NODES:
        raise BadInput(f"{flag} {k}: the one-machine cluster has 2 to {MAX_NODES} nodes")
    return k


@dataclass(frozen=True)
class Link:
    """One node's egress: rate in bits/s, one-way delay in seconds, loss in percent."""

    rate_bps: float
    delay_s: float
    loss_pct: float = 0.0

    def netem_args(self) -> list[str]:
        """netem's arguments: delay, rate (serialisation of each packet at the rate) and loss."""
        args = ["netem", "delay", f"{self.delay_s * 1e6:.0f}us", "rate", f"{self.rate_bps:.0f}bit"]
        if self.loss_pct:
            args += ["loss", f"{self.loss_pct:g}%"]
        # a queue deep enough that a rate-limited link delays packets rather than dropping them
        return args + ["limit", "100000"]

    def tbf_args(self) -> list[str]:
        """A token bucket at the rate (the kernels without netem): a bucket of 1 ms at the rate (at least
        two full frames), and a queue of 100 ms at the rate before it drops."""
        burst = max(int(self.rate_bps / 8 * 1e-3), 3028)
        return ["tbf", "rate", f"{self.rate_bps:.0f}bit", "burst", str(burst), "latency", "100ms"]

    def describe(self) -> str:
        text = f"{_human_rate(self.rate_bps)}, {self.delay_s * 1e6:g} us one way"
        return text + (f", {self.loss_pct:g}% loss" if self.loss_pct else "")


def _human_rate(bps: float) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {unit}"
    return f"{bps:g} bit/s"


@dataclass(frozen=True)
class Node:
    index: int  # 1-based: node1 is the head
    links: Link

    @property
    def hostname(self) -> str:
        return f"node{self.index}"

    @property
    def namespace(self) -> str:
        return f"{PREFIX}{self.hostname}"

    @property
    def address(self) -> str:
        return f"{SUBNET}.{self.index}"


@dataclass
class ClusterState:
    """What `up` made, as written to the state file: sweeps read it to start ranks on the nodes and to
    record the link settings beside their measurements."""

    nodes: list[dict] = field(default_factory=list)
    nic: str = NIC
    subnet: str = f"{SUBNET}.0/24"
    switch_namespace: str = SWITCH_NS
    state_dir: str = DEFAULT_STATE_DIR
    ssh: dict | None = None
    """sshd on the nodes (distbench.cluster.sshd): the client's bin directory, its config and each sshd's pid."""
    slurm: dict | None = None
    """Slurm on the nodes (distbench.cluster.slurmd): its slurm.conf and each daemon's pid."""

    def node(self, i: int) -> dict:
        return self.nodes[i]

    def hosts(self) -> list[str]:
        return [n["hostname"] for n in self.nodes]

    def link_settings(self) -> dict:
        """The record's view: every node's link (rate, delay, loss) and the interface the ranks use."""
        return {
            "kind": "one-machine cluster (network namespaces, veth + bridge, tc egress shaping)",
            "interface": self.nic,
            "nodes": {
                n["hostname"]: {k: n.get(k) for k in ("address", "rate_bps", "delay_s", "loss_pct", "qdisc")}
                for n in self.nodes
            },
        }

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_VAR) or DEFAULT_STATE_DIR)


def state_path() -> Path:
    return state_dir() / "state.json"


def read_state(path: Path | None = None) -> ClusterState | None:
    """The running cluster's state, or None when no cluster is up."""
    path = state_path() if path is None else path
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return ClusterState(**data)


def node_entry(node: Node) -> dict:
    return {
        "index": node.index,
        "hostname": node.hostname,
        "namespace": node.namespace,
        "address": node.address,
        **asdict(node.links),
    }


def stop_pids(pids: Iterable[int], alive: Callable[[int], bool], grace_s: float) -> None:
    """TERM, then KILL, the daemons `pids` (only those: the caller checked each is its own), waiting up to
    `grace_s` after each signal for every one that `alive` still sees."""
    pids = list(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)

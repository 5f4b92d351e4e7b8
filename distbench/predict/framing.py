"""What a link's rate counts: the bytes of each frame that are not the collective's payload.

A rate in bits per second (a NIC's "10 Gb/s", a token bucket's `100mbit`) counts whole frames, while a
collective over TCP moves only each segment's payload. The payload share of a full-sized frame is a stated
quantity, computed from the framing and the MTU, never fitted:

    payload share = (MTU - IPv4 header - TCP header - TCP timestamps) / (MTU + per-frame overhead)

* IPv4 header 20 bytes (RFC 791), TCP header 20 bytes (RFC 9293) and the timestamps option 12 bytes (10, padded
  to 12; RFC 7323; on by default in Linux, `net.ipv4.tcp_timestamps = 1`): 52 bytes of each MTU are headers, so
  a 1500-byte MTU carries 1448 bytes of payload (TCP's MSS with timestamps).
* `ethernet`, a wire (IEEE 802.3): each frame also costs the Ethernet header (destination and source addresses and
  the type, 14 bytes), the frame check sequence (4), the preamble and start-of-frame delimiter (8) and the
  minimum inter-packet gap (96 bit times, 12): 38 bytes beyond the MTU; 1448 / 1538 = 94.1% at MTU 1500. The
  line rate of IEEE 802.3 (10, 25, 100, 400 Gb/s) is the rate these bytes go at (the physical layer's
  64b/66b coding runs faster than it and costs nothing of it).
* `tbf`, a Linux token-bucket shaper (`tc qdisc ... tbf rate R`, e.g. scripts/cluster-local.sh): the qdisc charges
  each packet its length as the kernel holds it, from the Ethernet header on (no preamble, FCS or gap; a
  segmentation-offload packet is charged every segment's headers): 14 bytes beyond the MTU; 1448 / 1514 = 95.6%
  at MTU 1500.
* `none`: the figure already is the payload rate (a rate in GB/s, a measured link).

Not counted: TCP's acknowledgements for the traffic coming the other way (they share a node's egress with its
own data in a ring), retransmissions, and the pauses of the collective's own protocol. They lower what the
collective achieves below the payload rate, which the achieved-bandwidth range below the figure covers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from distbench.core.errors import BadInput

IPV4_HEADER = 20
TCP_HEADER = 20
TCP_TIMESTAMPS = 12
HEADERS = IPV4_HEADER + TCP_HEADER + TCP_TIMESTAMPS
"""Bytes of each IP packet (MTU) that are not TCP payload: 52."""
ETHERNET_HEADER = 14
ETHERNET_FCS = 4
PREAMBLE_SFD = 8
INTER_PACKET_GAP = 12
OVERHEAD = {
    "ethernet": ETHERNET_HEADER + ETHERNET_FCS + PREAMBLE_SFD + INTER_PACKET_GAP,
    "tbf": ETHERNET_HEADER,
    "none": 0,
}
"""Bytes each frame costs beyond its MTU-sized IP packet, per framing."""
WHAT = {
    "ethernet": "Ethernet on the wire: header, FCS, preamble and inter-packet gap",
    "tbf": "a Linux token bucket: the Ethernet header",
    "none": "the figure is the payload rate",
}
DEFAULT_MTU = 1500
MTU_RANGE = (576, 65535)
"""576: the smallest datagram every IPv4 host accepts (RFC 791); 65535: the largest MTU Linux gives a link."""


@dataclass(frozen=True)
class Framing:
    kind: str
    """ethernet | tbf | none"""
    mtu: int = DEFAULT_MTU

    @property
    def payload_bytes(self) -> int:
        return self.mtu - HEADERS if self.kind != "none" else self.mtu

    @property
    def frame_bytes(self) -> int:
        return self.mtu + OVERHEAD[self.kind]

    @property
    def share(self) -> float:
        """Payload bytes per byte the rate counts (1 for `none`)."""
        return 1.0 if self.kind == "none" else self.payload_bytes / self.frame_bytes

    def describe(self) -> str:
        if self.kind == "none":
            return "no framing: the figure is the payload rate"
        return (
            f"{self.kind} framing, MTU {self.mtu}: {self.payload_bytes} payload bytes of every {self.frame_bytes} "
            f"the rate counts ({WHAT[self.kind]})"
        )


NONE = Framing("none")
ETHERNET = Framing("ethernet")

_SPEC = re.compile(r"^\s*([a-z]+)\s*(?::\s*(\S+))?\s*$", re.I)


def parse_framing(text: str, shown: str | None = None, flag: str = "--link-framing") -> Framing:
    """KIND[:MTU], e.g. `ethernet`, `tbf:9000`, `none`; `shown`: the value as the user wrote it (TIER=...)."""
    m = _SPEC.match(text)
    kind = m.group(1).lower() if m else ""
    shown = text if shown is None else shown
    if kind not in OVERHEAD:
        raise BadInput(f"{flag}: {shown!r} is not a framing; known: {', '.join(OVERHEAD)} (optionally :MTU)")
    if m.group(2) is None:
        return Framing(kind)
    try:
        mtu = int(m.group(2))
    except ValueError:
        mtu = 0
    lo, hi = MTU_RANGE
    if kind == "none" or not lo <= mtu <= hi:
        why = "none takes no MTU" if kind == "none" else f"the MTU must be a whole number of bytes in {lo}..{hi}"
        raise BadInput(f"{flag}: {shown!r}: {why}")
    return Framing(kind, mtu)


_RATE = re.compile(r"^\s*([0-9.eE+-]+)\s*(kbit|mbit|gbit|tbit)\s*$", re.I)
BIT_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
"""tc's units for a rate in bits per second (decimal); tc's `mbps` means megaBYTES and is not accepted here."""


def line_rate(text: str) -> float | None:
    """Bytes/s of a rate written with a bit unit (`100mbit`, `10gbit`), None for any other text."""
    m = _RATE.match(text)
    if not m:
        return None
    try:
        value = float(m.group(1))
    except ValueError:
        return None
    return value * BIT_UNITS[m.group(2).lower()] / 8

"""Named interconnect profiles for `distbench predict`: a bandwidth and a latency per link.

Bandwidth is the nominal one-direction data rate, in GB/s (1e9 bytes/s), that ONE rank can push over
the link: for an intra-node link (NVLink, PCIe) per GPU, for an inter-node link (InfiniBand,
Ethernet) per network port, i.e. per node with one NIC (`--nics-per-node` multiplies it; the
inter-node part of a hierarchical all-reduce is limited by what a whole node can inject).

Sources of the bandwidths (vendor / standard figures, not measurements):
  NVLink: NVIDIA's NVLink page (https://www.nvidia.com/en-us/data-center/nvlink/) gives the total
    bidirectional NVLink bandwidth per GPU: V100 (NVLink 2) 300 GB/s, A100 (NVLink 3) 600 GB/s,
    H100 (NVLink 4) 900 GB/s, B200 (NVLink 5) 1.8 TB/s; one direction is half of it.
  PCIe x16: PCI-SIG base specifications, 8 / 16 / 32 GT/s per lane for PCIe 3.0 / 4.0 / 5.0 with
    128b/130b encoding: 15.75 / 31.5 / 63 GB/s per direction for 16 lanes.
  InfiniBand 4x ports: InfiniBand Trade Association roadmap
    (https://www.infinibandta.org/infiniband-roadmap/): EDR 100 Gb/s, HDR 200 Gb/s, NDR 400 Gb/s.
  Ethernet: IEEE 802.3 line rates 10 / 25 / 100 / 400 Gb/s. A line rate counts whole frames: TCP's payload is
    1448 of every 1538 bytes on the wire at MTU 1500 (94.1%; framing.py), the bandwidth the model uses.
  Framing of the others: the NVLink and PCIe figures above are data rates (PCIe's after its 128b/130b
    coding; its transaction-layer headers are not taken off); InfiniBand's 100 / 200 / 400 Gb/s are data rates
    after the 64b/66b coding, and each packet adds 26 bytes of headers (local route 8, base transport 12,
    invariant CRC 4, variant CRC 2) to up to 4096 bytes of payload: 0.6%, not taken off (the interval
    constants were calibrated on InfiniBand tables with these figures as they are).
Latencies are ASSUMED typical one-hop software-to-software figures, not specifications: about 1 us
for NVLink and PCIe peer copies, about 1 us for InfiniBand RDMA (ConnectX adapters are specified
below 1 us port to port; NCCL adds its own protocol cost), 10-25 us for TCP over Ethernet (kernel
network stack). `distbench predict` treats a profile as nominal: the collective may run from the
full rate down to a quarter of it (a bounded correction, printed with the effective bandwidth it
implies, warned about when the measured points ask for more); a stored `distbench comm` sweep or
`--link-bw/--link-latency` replaces these figures with your own numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from distbench.core.errors import BadInput


@dataclass(frozen=True)
class LinkProfile:
    name: str
    tier: str
    """'intra' (inside a node) or 'inter' (between nodes): the tier a bare `--link NAME` sets."""
    bandwidth_gbps: float
    latency_us: float
    description: str
    framing: str = "none"
    """What the bandwidth counts beyond the payload (distbench/predict/framing.py): `ethernet` for the Ethernet
    profiles (a line rate counts whole frames), `none` for the others."""


_GBIT = 1 / 8  # Gb/s -> GB/s

PROFILES: dict[str, LinkProfile] = {
    p[0]: LinkProfile(*p)
    for p in (
        ("nvlink2", "intra", 150.0, 1.0, "NVLink 2 (V100): 300 GB/s bidirectional per GPU"),
        ("nvlink3", "intra", 300.0, 1.0, "NVLink 3 (A100): 600 GB/s bidirectional per GPU"),
        ("nvlink4", "intra", 450.0, 1.0, "NVLink 4 (H100): 900 GB/s bidirectional per GPU"),
        ("nvlink5", "intra", 900.0, 1.0, "NVLink 5 (B200): 1.8 TB/s bidirectional per GPU"),
        ("pcie3", "intra", 15.75, 1.0, "PCIe 3.0 x16: 8 GT/s per lane, 128b/130b"),
        ("pcie4", "intra", 31.5, 1.0, "PCIe 4.0 x16: 16 GT/s per lane, 128b/130b"),
        ("pcie5", "intra", 63.0, 1.0, "PCIe 5.0 x16: 32 GT/s per lane, 128b/130b"),
        ("ib-edr", "inter", 100 * _GBIT, 1.0, "InfiniBand EDR 4x port, 100 Gb/s"),
        ("ib-hdr", "inter", 200 * _GBIT, 1.0, "InfiniBand HDR 4x port, 200 Gb/s"),
        ("ib-ndr", "inter", 400 * _GBIT, 1.0, "InfiniBand NDR 4x port, 400 Gb/s"),
        ("10gbe", "inter", 10 * _GBIT, 25.0, "10 Gigabit Ethernet, TCP", "ethernet"),
        ("25gbe", "inter", 25 * _GBIT, 15.0, "25 Gigabit Ethernet, TCP", "ethernet"),
        ("100gbe", "inter", 100 * _GBIT, 10.0, "100 Gigabit Ethernet, TCP", "ethernet"),
        ("400gbe", "inter", 400 * _GBIT, 10.0, "400 Gigabit Ethernet, TCP", "ethernet"),
    )
}


def get_profile(name: str) -> LinkProfile:
    try:
        return PROFILES[name.strip().lower()]
    except KeyError:
        raise BadInput(f"--link: unknown link profile {name!r}; known: {', '.join(PROFILES)}") from None

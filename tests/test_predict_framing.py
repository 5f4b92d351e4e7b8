"""What a link's rate counts (distbench/predict/framing.py): the payload share of Ethernet and token-bucket
frames, how `--link-bw` and `--link-framing` say it, what predict prints, and bad input."""

from __future__ import annotations

import json

import pytest

from distbench import predict as pr
from distbench.cli import main
from distbench.predict import framing as fr
from tests.test_predict import one_line_error, write_csv


def test_payload_share_is_the_frame_arithmetic():
    # TCP/IPv4 with timestamps: 52 bytes of headers in every MTU; MSS 1448 at MTU 1500
    assert fr.ETHERNET.payload_bytes == 1448 and fr.ETHERNET.frame_bytes == 1500 + 14 + 4 + 8 + 12
    assert fr.ETHERNET.share == pytest.approx(1448 / 1538)
    assert fr.Framing("tbf").share == pytest.approx(1448 / 1514)
    assert fr.Framing("ethernet", 9000).share == pytest.approx(8948 / 9038)
    assert fr.NONE.share == 1.0
    assert fr.parse_framing("TBF:9000") == fr.Framing("tbf", 9000)


def test_link_bw_units_and_framing_set_the_payload_rate():
    line = 100e6 / 8
    (link,) = pr.explicit_links([], ["inter=100mbit"], ["inter=1"], 1).values()
    assert link.line_rate == pytest.approx(line) and link.bandwidth == pytest.approx(line * 1448 / 1538)
    (link,) = pr.explicit_links([], ["inter=100mbit"], ["inter=1"], 1, ["inter=tbf"]).values()
    assert link.bandwidth == pytest.approx(line * 1448 / 1514)
    assert "0.012 GB/s payload = 95.6% of 100 Mbit/s (tbf framing, MTU 1500" in link.describe()
    (link,) = pr.explicit_links([], ["inter=0.0125"], ["inter=1"], 1).values()  # GB/s: the payload rate itself
    assert link.bandwidth == pytest.approx(line) and link.framing == fr.NONE
    # an Ethernet profile is a line rate (x NICs); --link-framing replaces its framing
    (link,) = pr.explicit_links(["inter=25gbe"], [], [], 2).values()
    assert link.bandwidth == pytest.approx(2 * 25e9 / 8 * 1448 / 1538)
    (link,) = pr.explicit_links(["inter=25gbe"], [], [], 1, ["inter=ethernet:9000"]).values()
    assert link.bandwidth == pytest.approx(25e9 / 8 * 8948 / 9038)
    (link,) = pr.explicit_links(["inter=25gbe"], [], [], 1, ["inter=none"]).values()
    assert link.bandwidth == pytest.approx(25e9 / 8)
    # NVLink, PCIe and InfiniBand figures are taken as they are
    links = pr.explicit_links(["nvlink3", "inter=ib-hdr"], [], [], 1)
    assert links["intra"].bandwidth == 300e9 and links["inter"].bandwidth == 25e9


def test_predict_prints_the_payload_rate_and_uses_it(tmp_path, capsys):
    # a gradient-heavy workload: 400 MB of gradients over a 100 Mbit/s inter-node link
    csv = write_csv(tmp_path / "p.csv", ["ddp,1,32,100,4e8", "ddp,2,32,190,4e8"])
    base = ["predict", "--csv", csv, "--link", "pcie4", "--gpus", "4", "--gpus-per-node", "2", "--no-store"]
    base += ["--link-latency", "inter=10"]
    docs = {}
    for name, extra in (
        ("tbf", ["--link-bw", "inter=100mbit", "--link-framing", "inter=tbf"]),
        ("payload", ["--link-bw", "inter=0.0125"]),
    ):
        assert main([*base, *extra, "--format", "json"]) == 0
        docs[name] = json.loads(capsys.readouterr().out)["series"][0]
    tier = docs["tbf"]["parameters"]["tiers"]["inter"]
    assert tier["payload_share"] == pytest.approx(1448 / 1514) and tier["line_rate_gbps"] == pytest.approx(0.0125)
    assert tier["nominal_gbps"] == pytest.approx(0.0125 * 1448 / 1514) == tier["range_gbps"][1]
    assert "tbf framing, MTU 1500" in tier["framing"]
    assert docs["payload"]["parameters"]["tiers"]["inter"]["payload_share"] == 1.0
    # the link-bound point: its inter-node time grows by the frame's overhead, 1514 / 1448
    (slow,), (fast,) = (docs[k]["predicted"] for k in ("tbf", "payload"))
    assert slow["exposed_comm_s"] > fast["exposed_comm_s"] and slow["throughput"] < fast["throughput"]
    assert slow["step_time_s"] / fast["step_time_s"] == pytest.approx(1514 / 1448, rel=0.01)
    assert main([*base, "--link-bw", "inter=100mbit", "--link-framing", "inter=tbf"]) == 0
    assert "inter link 0.012 GB/s payload = 95.6% of 100 Mbit/s (tbf framing" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--link-framing", "inter=wifi"], "--link-framing: 'inter=wifi' is not a framing; known: ethernet, tbf, none"),
        (["--link-framing", "tbf"], "--link-framing: 'tbf' names no tier: write TIER=KIND[:MTU], e.g. inter=ethernet"),
        (["--link-framing", "inter=tbf:100"], "--link-framing: 'inter=tbf:100': the MTU must be a whole number"),
        (["--link-framing", "inter=tbf:1.5k"], "--link-framing: 'inter=tbf:1.5k': the MTU must be a whole number"),
        (["--link-framing", "inter=none:1500"], "--link-framing: 'inter=none:1500': none takes no MTU"),
        (["--link-framing", "intra=tbf", "--link-bw", "inter=1gbit"], "--link-framing intra=tbf: no intra-node rate"),
        (["--link-bw", "inter=100mbps"], "--link-bw: '100mbps' is not a positive number of GB/s (payload) or a line"),
        (["--link-bw", "inter=0gbit"], "--link-bw: '0gbit' is not a positive number of GB/s"),
    ],
)
def test_bad_framing_and_rates(tmp_path, capsys, extra, expected):
    csv = write_csv(tmp_path / "p.csv", ["ddp,1,32,100,1e8", "ddp,2,32,190,1e8"])
    args = ["predict", "--csv", csv, "--gpus", "4", "--gpus-per-node", "2", "--no-store", "--link-latency", "inter=5"]
    if "--link-bw" not in extra:
        args += ["--link-bw", "inter=1gbit"]
    if "intra=tbf" not in extra:  # a framing for a tier with no rate given: refused before anything else
        args += ["--link", "pcie4"]
    assert expected in one_line_error(capsys, [*args, *extra])

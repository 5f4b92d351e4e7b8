"""The one-machine cluster for real (root, network namespaces): two nodes joined by a shaped link, `distbench
comm` and a DDP point across them (each record naming two hosts, eth0 and the link), a link cut mid-point
(a timeout record naming the node and the network), and `down` leaving nothing behind. Skipped, with the
reason, where this machine cannot host the cluster."""

import os
import subprocess
import sys
import time

import pytest

from distbench.cluster import netns, spec
from distbench.results.store import Store
from tests.conftest import ROOT, quick, require, run_cli

pytestmark = pytest.mark.slow
RATE = "1gbit"


def cluster_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "distbench.cluster", *args], capture_output=True, text=True, cwd=ROOT)


def root_links() -> str:
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = netns.unavailable()
    if why:
        pytest.skip(why)
    if netns.ours():
        pytest.skip(f"a one-machine cluster is already up here ({', '.join(netns.ours())}): not ours to take down")
    old = os.environ.get(spec.STATE_DIR_VAR)
    os.environ[spec.STATE_DIR_VAR] = str(tmp_path_factory.mktemp("cluster"))
    before = root_links()
    done = cluster_cli("up", "--nodes", "2", "--rate", RATE, "--delay", "0us")
    try:
        assert done.returncode == 0, done.stderr
        yield {"root_links": before}
    finally:
        cluster_cli("down")
        if old is None:
            os.environ.pop(spec.STATE_DIR_VAR, None)
        else:
            os.environ[spec.STATE_DIR_VAR] = old


def in_node(node: int, *argv: str) -> str:
    state = spec.read_state()
    return subprocess.run([*netns.node_prefix(state, node - 1), *argv], capture_output=True, text=True).stdout


def last_points(db) -> list[dict]:
    with Store(db) as store:
        return store.points(store.sweeps(1)[0]["id"])


def test_nodes_have_their_own_hostname_address_and_shaped_link(cluster):
    assert cluster_cli("status").returncode == 0
    assert [in_node(i, "hostname").strip() for i in (1, 2)] == ["node1", "node2"]
    assert "10.199.39.2/24" in in_node(2, "ip", "-o", "addr", "show", "dev", "eth0")
    assert "rate 1Gbit" in in_node(1, "tc", "qdisc", "show", "dev", "eth0")
    assert "10.199.39.2 node2" in in_node(1, "cat", "/etc/hosts")
    assert root_links() == cluster["root_links"]  # no link or address appeared in the root namespace
    assert "10.199.39" not in subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout


@require("torch")
def test_comm_across_two_nodes_goes_over_the_shaped_link(cluster, tmp_path):
    db = tmp_path / "r.db"
    done = run_cli(["comm", "--gpus", "2", "--nodes", "2", "--sizes", "1K,16M", "--iters", "5", "--results", str(db)])
    assert done.returncode == 0, done.stderr
    (rec,) = last_points(db)
    assert rec["status"] == "ok" and all(rec["correct"]) and rec["nodes"] == 2
    placed = rec["launch"]["placement"]
    assert placed["rank_hosts"] == {"0": "node1", "1": "node2"}
    assert placed["interface"] == {"node1": "eth0", "node2": "eth0"}
    # a 2-rank all-reduce of 16 MiB sends 16 MiB each way per iteration: at least the timed ones crossed eth0
    assert placed["interface_bytes"]["node2"]["eth0"]["tx_bytes"] > 5 * 16 * 2**20
    assert placed["links"]["nodes"]["node1"]["rate_bps"] == 1e9
    # the shaping holds: no all-reduce beats the link (busbw of a 2-rank ring is bounded by the rate)
    bound = 1e9 / 8 / 1e9
    assert rec["busbw_gbps"][1] <= 1.1 * bound


@require("torch")
def test_reshaping_the_link_slows_the_all_reduce_to_the_new_rate(cluster, tmp_path):
    assert cluster_cli("link", "--rate", "100mbit", "--delay", "0us").returncode == 0
    try:
        db = tmp_path / "r.db"
        done = run_cli(["comm", "--gpus", "2", "--nodes", "2", "--sizes", "4M", "--iters", "3", "--results", str(db)])
        assert done.returncode == 0, done.stderr
        (rec,) = last_points(db)
        assert rec["launch"]["placement"]["links"]["nodes"]["node2"]["rate_bps"] == 1e8
        assert rec["busbw_gbps"][0] <= 1.1 * 1e8 / 8 / 1e9
    finally:
        assert cluster_cli("link", "--rate", RATE, "--delay", "0us").returncode == 0


@require("torch")
def test_ddp_across_two_nodes_records_both_hosts_and_the_link(cluster, tmp_path):
    db = tmp_path / "r.db"
    args = ["scale", "--strategy", "ddp", "--gpus", "2", "--nodes", "2", *quick(batch=4, timeout=240)]
    done = run_cli([*args, "--results", str(db)])
    assert done.returncode == 0, done.stderr
    (rec,) = [r for r in last_points(db) if r["nodes"] == 2]
    assert rec["status"] == "ok", rec.get("reason")
    placed = rec["launch"]["placement"]
    assert placed["hosts"] == ["node1", "node2"]
    assert set(placed["interface"].values()) == {"eth0"}
    assert placed["links"]["interface"] == "eth0"
    assert rec["launch"]["argv"][1:4] == ["-m", "distbench.cluster.nsrun", "--nodes"]


@require("tensorflow")
def test_mirrored_across_two_nodes_is_multi_worker_over_the_link(cluster, tmp_path):
    db = tmp_path / "r.db"
    args = ["scale", "--strategy", "mirrored", "--gpus", "2", "--nodes", "2", *quick(batch=4, timeout=300)]
    done = run_cli([*args, "--results", str(db)])
    assert done.returncode == 0, done.stderr
    (rec,) = [r for r in last_points(db) if r["nodes"] == 2]
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["tf_strategy"] == "MultiWorkerMirroredStrategy"
    placed = rec["launch"]["placement"]
    assert placed["rank_hosts"] == {"0": "node1", "1": "node2"}
    assert set(placed["interface"].values()) == {"eth0"}


@require("torch")
def test_a_link_cut_mid_point_ends_it_with_a_network_record_and_nothing_left(cluster, tmp_path):
    db = tmp_path / "r.db"
    argv = [sys.executable, "-m", "distbench.cli", "comm", "--gpus", "2", "--nodes", "2", "--sizes", "64M"]
    argv += ["--iters", "1000", "--max-time-per-size", "600", "--timeout", "20", "--results", str(db)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(8)
        assert cluster_cli("cut", "--node", "2").returncode == 0
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster_cli("cut", "--node", "2", "--restore")
    assert proc.returncode == 1, err
    (rec,) = last_points(db)
    assert rec["status"] == "timeout"
    assert rec["reason"].startswith("network: node2's link eth0 is down (timed out after 20s (--timeout)")
    assert rec["launch"]["placement"]["link_faults"] == ["node2's link eth0 is down"]
    assert [netns.pids_in(f"dbc-node{i}") for i in (1, 2)] == [[], []]


def test_down_leaves_nothing(cluster):
    done = cluster_cli("down")
    assert done.returncode == 0, done.stderr
    assert netns.leftovers() == []
    assert netns.ours() == []
    assert root_links() == cluster["root_links"]
    assert cluster_cli("status").returncode == 1

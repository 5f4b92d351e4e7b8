"""The one-machine cluster for real (root, network namespaces): two nodes joined by a shaped link, each with
its sshd, `distbench comm` and DDP, mirrored and horovod-torch (horovodrun over ssh) points across them (each
record naming two hosts, eth0 and the link), a node's sshd killed mid-point and a link cut mid-point (records
naming the node and the cause), and `down` leaving nothing behind. Skipped, with the reason, where this
machine cannot host the cluster (or, for the ssh tests, cannot run sshd)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distbench.cluster import netns, slurmd, spec, sshd
from distbench.results.store import Store
from tests.conftest import DISTBENCH, ROOT, have, quick, require, run_cli

pytestmark = pytest.mark.slow
RATE = "1gbit"


def tiny(timeout: int = 240) -> list[str]:
    """quick() with the smallest model (mlp): the launch path across the nodes is what these points check."""
    return ["--model", "mlp", *quick(batch=4, timeout=timeout)[4:]]


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
    ssh_why = sshd.unavailable()  # installs Debian's openssh-server where it is missing
    slurm_why = slurmd.unavailable()  # and slurm-wlm
    loss_why = netns.filter_unavailable(install=True)  # and iptables (a kernel without netem drops with it)
    daemons = ([] if ssh_why else ["--ssh"]) + ([] if slurm_why else ["--slurm"])
    done = cluster_cli("up", "--nodes", "2", "--rate", RATE, "--delay", "0us", *daemons)
    try:
        assert done.returncode == 0, done.stderr
        yield {
            "root_links": before,
            "ssh_why": ssh_why,
            "slurm_why": slurm_why,
            "loss_why": loss_why,
            "state_dir": os.environ[spec.STATE_DIR_VAR],
        }
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
    args = ["scale", "--strategy", "ddp", "--gpus", "2", "--nodes", "2", *tiny(timeout=240)]
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
    args = ["scale", "--strategy", "mirrored", "--gpus", "2", "--nodes", "2", *tiny(timeout=300)]
    done = run_cli([*args, "--results", str(db)])
    assert done.returncode == 0, done.stderr
    (rec,) = [r for r in last_points(db) if r["nodes"] == 2]
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["tf_strategy"] == "MultiWorkerMirroredStrategy"
    placed = rec["launch"]["placement"]
    assert placed["rank_hosts"] == {"0": "node1", "1": "node2"}
    assert set(placed["interface"].values()) == {"eth0"}


@require("torch", "horovod.torch")
def test_horovod_torch_across_two_nodes_runs_its_remote_rank_over_ssh(cluster, tmp_path):
    if cluster["ssh_why"]:
        pytest.skip(cluster["ssh_why"])
    db = tmp_path / "r.db"
    args = ["scale", "--strategy", "horovod-torch", "--gpus", "2", "--nodes", "2", *tiny(timeout=240)]
    done = run_cli([*args, "--results", str(db)])
    assert done.returncode == 0, done.stderr
    (rec,) = [r for r in last_points(db) if r["nodes"] == 2]
    assert rec["status"] == "ok", rec.get("reason")
    placed = rec["launch"]["placement"]
    assert placed["rank_hosts"] == {"0": "node1", "1": "node2"}
    assert placed["interface"] == {"node1": "eth0", "node2": "eth0"}
    assert rec["launch"]["launcher"] == "horovodrun"
    argv = rec["launch"]["argv"]
    assert argv[1:6] == ["-m", "distbench.cluster.nsrun", "--nodes", "1", "--"]
    assert argv[argv.index("-H") + 1] == "node1:1,node2:1" and argv[argv.index("--network-interface") + 1] == "eth0"
    # the rank on node2 came over ssh and left with the point: only the nodes' sshd are left
    for i in (1, 2):
        assert settled(i, daemons(i))


FAMILIES = {  # strategy: (what it needs installed, whether it needs sshd on the nodes)
    "ddp": (("torch",), False),
    "fsdp": (("torch",), False),
    "horovod-torch": (("torch", "horovod.torch"), True),
    "horovod-tf": (("tensorflow", "horovod.tensorflow"), True),
    "mirrored": (("tensorflow",), False),
}


def family_why(strategy: str, cluster: dict) -> str | None:
    needs, ssh = FAMILIES[strategy]
    missing = [m for m in needs if not have(m)]
    if missing:
        return f"{', '.join(missing)} not installed (run make install)"
    return cluster["ssh_why"] if ssh else None


@pytest.fixture(scope="module")
def slurm_sweep(cluster, tmp_path_factory):
    """One `distbench slurm` sweep of every strategy family that can run here, 2 nodes of 1 CPU worker each,
    submitted through sbatch on node1 to the nodes' slurmctld: one job per point (and per baseline)."""
    if cluster["slurm_why"]:
        pytest.skip(cluster["slurm_why"])
    families = [s for s in FAMILIES if family_why(s, cluster) is None]
    if not families:
        pytest.skip("no strategy family's framework is installed")
    work = tmp_path_factory.mktemp("slurm-sweep")
    argv = [sys.executable, "-m", "distbench.cluster.nsrun", "--nodes", "1", "--", *DISTBENCH, "slurm"]
    argv += ["--device", "cpu", "--gpus", "2", "--nodes", "2", "--gpus-per-node", "1", "--strategy", ",".join(families)]
    argv += ["--model", "mlp", "--steps", "2", "--warmup", "1", "--target-ci", "0", "--no-comm", "--batch-size", "4"]
    argv += ["--timeout", "240", "--time", "00:15:00", "--partition", slurmd.PARTITION]
    argv += ["--out", str(work / "sweep.sbatch"), "--submit"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=work, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "submitted job" in done.stdout, done.stdout
    return {"records": work / "sweep-records", "stdout": done.stdout, "deadline": time.monotonic() + 480}


@pytest.mark.parametrize("strategy", list(FAMILIES))
def test_a_distbench_slurm_job_of_each_family_runs_across_the_two_nodes_slurmds(cluster, slurm_sweep, strategy):
    """The multi-node sbatch template of every family (torchrun: ddp, fsdp; horovodrun over ssh: horovod-torch,
    horovod-tf; srun's MultiWorkerMirroredStrategy workers: mirrored) on the nodes' slurmds: each record
    names both nodes, eth0 and the nodes' link settings."""
    if why := family_why(strategy, cluster):
        pytest.skip(why)
    key = f"{strategy}-g2-n2"
    assert key in slurm_sweep["stdout"], slurm_sweep["stdout"]
    while not (found := list(slurm_sweep["records"].glob(f"{key}-*.json"))):
        assert time.monotonic() < slurm_sweep["deadline"], f"the {strategy} job left no record"
        time.sleep(2)
    rec = json.loads(found[0].read_text())
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["strategy"] == strategy and rec["nodes"] == 2
    assert rec["slurm"]["job_nodelist"] == "node[1-2]" and rec["slurm"]["job_num_nodes"] == "2"
    placed = rec["launch"]["placement"]
    assert placed["rank_hosts"] == {"0": "node1", "1": "node2"}
    assert placed["interface"] == {"node1": "eth0", "node2": "eth0"}
    assert placed["interface_bytes"]["node2"]["eth0"]["tx_bytes"] > 0
    assert placed["links"]["interface"] == "eth0"
    assert {h: n["rate_bps"] for h, n in placed["links"]["nodes"].items()} == {"node1": 1e9, "node2": 1e9}
    launcher = {"ddp": "torchrun", "fsdp": "torchrun", "mirrored": "tf-multiworker"}.get(strategy, "horovodrun")
    assert rec["launch"]["launcher"] == launcher
    # torchrun and the TF workers start through the real srun on both slurmds; horovodrun starts node2's
    # rank over ssh (the cluster's client, on PATH through the job's environment)
    argv0 = rec["launch"]["argv"][0]
    assert argv0.endswith("/horovodrun") if launcher == "horovodrun" else argv0 == "srun", argv0


def ray_processes() -> list[int]:
    """Every process on this machine that is a Ray node started at one of the cluster's addresses."""
    out = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"--node-ip-address=10.199.39." in (proc / "cmdline").read_bytes():
                out.append(int(proc.name))
        except OSError:
            pass
    return out


@require("torch", "ray")
def test_ray_ddp_runs_one_worker_per_node_on_a_ray_cluster_the_sweep_starts_on_the_nodes(cluster, tmp_path):
    """A Ray head on node1 and a raylet on node2 at their addresses, joined over the link, for the sweep;
    the driver on node1; Ray Train places one worker per node (STRICT_SPREAD). The record names both
    nodes, their addresses and eth0; after the sweep no Ray process is left, on the nodes or anywhere."""
    db = tmp_path / "r.db"
    args = ["scale", "--strategy", "ray-ddp", "--gpus", "2", "--nodes", "2", "--model", "mlp", "--batch-size", "4"]
    args += ["--steps", "2", "--warmup", "1", "--target-ci", "0", "--no-comm", "--telemetry-interval", "0"]
    done = run_cli([*args, "--timeout", "240", "--results", str(db)])
    assert done.returncode == 0, done.stderr
    (rec,) = [r for r in last_points(db) if r["strategy"] == "ray-ddp"]
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["nodes"] == 2 and rec["launch"]["launcher"] == "ray-train"
    engine = rec["engine"]
    assert engine["placement"]["strategy"] == "STRICT_SPREAD" and len(engine["node_ids"]) == 2
    assert engine["address"].startswith("the sweep's head on the nodes at 10.199.39.1:")
    assert {(w["host"], w["address"]) for w in engine["workers"]} == {
        ("node1", "10.199.39.1"),
        ("node2", "10.199.39.2"),
    }
    placed = rec["launch"]["placement"]
    assert placed["hosts"] == ["node1", "node2"]
    assert placed["interface"] == {"node1": "eth0", "node2": "eth0"}
    assert placed["links"]["nodes"]["node2"]["address"] == "10.199.39.2"
    assert rec["launch"]["argv"][1:6] == ["-m", "distbench.cluster.nsrun", "--nodes", "1", "--"]
    assert ray_processes() == []
    assert settled(1, daemons(1)) and settled(2, daemons(2))


def daemons(node: int, without: tuple[str, ...] = ()) -> set[int]:
    """The pids of the daemons `up` started on the node (its sshd, its slurmd, node1's slurmctld and its
    slurmscriptd)."""
    state = spec.read_state()
    pids = set()
    for kind, entry in (("sshd", state.ssh), ("slurm", state.slurm)):
        for name, pid in ((entry or {}).get("pids") or {}).items():
            if kind not in without and (name == f"node{node}" or (name == "slurmctld" and node == 1)):
                pids.add(pid)
    ctld = ((state.slurm or {}).get("pids") or {}).get("slurmctld")
    for pid in netns.pids_in(f"dbc-node{node}"):  # slurmctld's own helper (slurmscriptd)
        try:
            if ctld and int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]) == ctld:
                pids.add(pid)
        except OSError:
            pass
    return pids


def settled(node: int, expected: set[int], wait_s: float = 20) -> bool:
    """The node's processes come down to `expected` (an ssh session's sshd may take a moment to exit)."""
    deadline = time.monotonic() + wait_s
    while set(netns.pids_in(f"dbc-node{node}")) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return set(netns.pids_in(f"dbc-node{node}")) == expected


def _node_processes(node: int) -> list[tuple[int, str]]:
    out = []
    for pid in netns.pids_in(f"dbc-node{node}"):
        try:
            out.append((pid, open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()))
        except OSError:
            pass
    return out


@require("torch", "horovod.torch")
def test_a_nodes_sshd_killed_mid_point_ends_it_with_a_record_naming_the_node(cluster, tmp_path):
    if cluster["ssh_why"]:
        pytest.skip(cluster["ssh_why"])
    db = tmp_path / "r.db"
    argv = [sys.executable, "-m", "distbench.cli", "scale", "--strategy", "horovod-torch", "--gpus", "2"]
    argv += ["--nodes", "2", "--model", "mlp", "--batch-size", "4", "--steps", "5", "--warmup", "1"]
    argv += ["--target-ci", "0.001%", "--max-time", "10", "--no-comm", "--telemetry-interval", "0"]
    argv += ["--timeout", "120", "--results", str(db)]
    listener = spec.read_state().ssh["pids"]["node2"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240  # the two baselines run first
        while not any("horovod_torch" in cmd for _, cmd in _node_processes(2)):
            assert time.monotonic() < deadline and proc.poll() is None, "no rank ever started on node2"
            time.sleep(0.5)
        for pid, cmd in _node_processes(2):  # node2's sshd: the listener and the point's ssh session
            if cmd.startswith("sshd") and pid not in daemons(2, without=("sshd",)):
                os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
    (rec,) = [r for r in last_points(db) if r["nodes"] == 2]
    assert rec["status"] in ("failed", "timeout"), (rec["status"], err[-2000:])
    fault = f"node2's sshd (pid {listener}) is not running"
    assert rec["reason"].startswith(f"node: {fault} ("), rec["reason"]
    assert rec["launch"]["placement"]["daemon_faults"] == [fault]
    # nothing of the point is left on either node: node1 keeps its sshd, node2 has nothing
    assert settled(2, daemons(2, without=("sshd",))) and settled(1, daemons(1))


def test_a_remote_command_dies_with_its_ssh_session(tmp_path):
    """sshd's ForceCommand (sshwatch.py): when the process that started it (the session's sshd) dies, the
    command's whole process group is stopped. Needs no root: the parent here stands in for sshd."""
    pgid_file = tmp_path / "pgid"
    command = f"echo $$ > {pgid_file}; sleep 300 & sleep 300"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; subprocess.Popen([sys.executable, {str(sshd.WATCH)!r}]); time.sleep(300)",
        ],
        env=dict(os.environ, SSH_ORIGINAL_COMMAND=command),
    )
    try:
        deadline = time.monotonic() + 30
        while not pgid_file.exists() or not pgid_file.read_text().strip():
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.1)
        pgid = int(pgid_file.read_text())
        os.killpg(pgid, 0)  # the command's group runs
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


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
    assert [set(netns.pids_in(f"dbc-node{i}")) - daemons(i) for i in (1, 2)] == [set(), set()]


@require("torch")
def test_a_total_loss_on_one_node_mid_point_ends_it_with_a_network_record_and_nothing_left(cluster, tmp_path):
    """node2's egress loses every packet mid-point (netem, or iptables rules in node2's namespace where the
    kernel has no netem): the point ends at its timeout, its record names node2 and the loss, not a rank."""
    if cluster["loss_why"] and "netem" not in in_node(2, "tc", "qdisc", "show", "dev", "eth0"):
        pytest.skip(f"a loss without netem needs {cluster['loss_why']}")
    db = tmp_path / "r.db"
    argv = [sys.executable, "-m", "distbench.cli", "comm", "--gpus", "2", "--nodes", "2", "--sizes", "64M"]
    argv += ["--iters", "1000", "--max-time-per-size", "600", "--timeout", "20", "--results", str(db)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(8)
        lost = cluster_cli("link", "--node", "2", "--rate", RATE, "--loss", "100")
        assert lost.returncode == 0, lost.stderr
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster_cli("link", "--node", "2", "--rate", RATE, "--loss", "0")
    assert proc.returncode == 1, err
    (rec,) = last_points(db)
    assert rec["status"] in ("timeout", "failed"), rec["status"]
    fault = "node2's link eth0 drops every packet (100% loss)"
    assert rec["reason"].startswith(f"network: {fault} ("), rec["reason"]
    assert rec["launch"]["placement"]["link_faults"] == [fault]
    assert rec["launch"]["placement"]["links"]["nodes"]["node2"]["loss_pct"] == 100
    assert [set(netns.pids_in(f"dbc-node{i}")) - daemons(i) for i in (1, 2)] == [set(), set()]


def test_down_leaves_nothing(cluster):
    done = cluster_cli("down")
    assert done.returncode == 0, done.stderr
    assert netns.leftovers() == []
    assert sshd.running(cluster["state_dir"]) == [] and slurmd.running(cluster["state_dir"]) == []
    assert netns.ours() == []
    assert root_links() == cluster["root_links"]
    assert cluster_cli("status").returncode == 1

"""The one-machine cluster (distbench.cluster): its settings and bad input (one line naming the flag, exit 2),
the launch across its nodes as pure argv/env, the placement a multi-node record carries, and the rank guard's
interface counters. The real cluster is in tests/test_cluster_real.py (root and namespaces)."""

import os
import subprocess
import sys

import pytest

from distbench.cluster import netns, nsrun, slurmd, spec, sshd
from distbench.core import rankguard
from distbench.core.errors import BadInput, DistbenchError
from distbench.core.strategies import STRATEGIES
from distbench.run.hosts import check_allocation, local_cluster, placement
from distbench.run.launchers import HOROVODRUN, TF_MULTIWORKER, TORCHRUN
from tests.builders import tiny_config
from tests.conftest import ROOT


def cluster_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distbench.cluster", *args], capture_output=True, text=True, cwd=ROOT, env=env
    )


@pytest.mark.parametrize(
    "args, text",
    [
        (["up", "--nodes", "0"], "Error: --nodes 0: the one-machine cluster has 2 to 4 nodes"),
        (["up", "--nodes", "5"], "Error: --nodes 5: the one-machine cluster has 2 to 4 nodes"),
        (["up", "--rate", "0gbit"], "Error: --rate '0gbit': the rate must be above 0"),
        (["up", "--rate", "fast"], "Error: --rate 'fast': give a rate such as 1gbit, 100mbit or 500kbit (tc units)"),
        (["up", "--delay", "1x"], "Error: --delay '1x': give a delay such as 100us, 2ms or 0us (units us, ms, s)"),
        (["up", "--delay", "-1ms"], "Error: --delay '-1ms': give a delay such as 100us, 2ms or 0us (units us, ms, s)"),
        (["up", "--loss", "101"], "Error: --loss '101': give a percentage from 0 to 100, such as 0.1%"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag_exit_2(args, text):
    done = cluster_cli(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == text
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_the_script_wraps_the_module():
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "cluster-local.sh"), "up", "--nodes", "0"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "DISTBENCH_PYTHON": sys.executable},
    )
    assert (done.returncode, done.stderr.strip()) == (2, "Error: --nodes 0: the one-machine cluster has 2 to 4 nodes")


def test_units_parse_to_physical_values():
    assert spec.parse_rate("1gbit") == 1e9
    assert spec.parse_rate("100Mbit") == 1e8
    assert spec.parse_rate("10mbps") == 8e7  # tc: bps is bytes per second
    assert spec.parse_delay("100us") == pytest.approx(1e-4)
    assert spec.parse_delay("2ms") == pytest.approx(2e-3)
    assert spec.parse_delay("0us") == 0
    assert spec.parse_loss("0.5%") == 0.5
    with pytest.raises(BadInput, match="--rate"):
        spec.parse_rate("1kbit")  # a 1500-byte frame would take 12 s


def test_link_shaping_arguments():
    link = spec.Link(1e9, 1e-4, 1.0)
    assert link.netem_args() == ["netem", "delay", "100us", "rate", "1000000000bit", "loss", "1%", "limit", "100000"]
    # a token bucket of 1 ms at the rate: 125000 bytes at 1 Gbit/s; at least two frames at low rates
    assert spec.Link(1e9, 0).tbf_args() == ["tbf", "rate", "1000000000bit", "burst", "125000", "latency", "100ms"]
    assert spec.Link(1e6, 0).tbf_args()[4] == "3028"
    assert link.describe() == "1 Gbit/s, 100 us one way, 1% loss"


def test_nodes_are_named_and_addressed_by_index():
    node = spec.Node(2, spec.Link(1e9, 0))
    assert (node.hostname, node.namespace, node.address) == ("node2", "dbc-node2", "10.199.39.2")


def _state(tmp_path, k=2) -> spec.ClusterState:
    link = spec.Link(5e8, 0)
    state = spec.ClusterState(state_dir=str(tmp_path))
    state.nodes = [dict(spec.node_entry(spec.Node(i, link)), qdisc="tbf") for i in range(1, k + 1)]
    (tmp_path / "state.json").write_text(state.to_json())
    return state


def test_a_state_file_makes_the_cluster_the_allocation(tmp_path, monkeypatch):
    monkeypatch.setenv(spec.STATE_DIR_VAR, str(tmp_path))
    for var in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(BadInput, match="scripts/cluster-local.sh up"):
        check_allocation(2)
    _state(tmp_path)
    assert check_allocation(2) == ["node1", "node2"]
    with pytest.raises(BadInput, match="--nodes asks for 3 nodes but the one-machine cluster has 2"):
        check_allocation(3)
    assert local_cluster().link_settings()["nodes"]["node2"] == {
        "address": "10.199.39.2",
        "rate_bps": 5e8,
        "delay_s": 0,
        "loss_pct": 0.0,
        "qdisc": "tbf",
    }
    # inside a Slurm allocation the allocation wins
    assert local_cluster({"SLURM_JOB_NODELIST": "a1"}) is None


def test_torchrun_across_the_cluster_starts_one_agent_per_node(tmp_path):
    cfg = tiny_config("ddp", 4, model="resnet50", nodes=2, device="cpu")
    argv, env = TORCHRUN.on_cluster(
        STRATEGIES["ddp"], cfg, "c.json", "r.json", hosts=["node1", "node2"], nic="eth0", base_env={}, python="/py"
    )
    assert argv[:6] == ["/py", "-m", "distbench.cluster.nsrun", "--nodes", "2", "--"]
    assert "--nnodes=2" in argv and "--nproc_per_node=2" in argv and "--rdzv_backend=c10d" in argv
    assert argv[argv.index("--rdzv_endpoint") + 1].startswith("node1:")
    assert env["GLOO_SOCKET_IFNAME"] == "eth0"


def test_horovodrun_across_the_cluster_runs_on_node1_and_needs_its_sshd(tmp_path, monkeypatch):
    monkeypatch.setenv(spec.STATE_DIR_VAR, str(tmp_path))
    cfg = tiny_config("horovod-torch", 4, model="resnet50", nodes=2, device="cpu")
    hosts = ["node1", "node2"]
    state = _state(tmp_path)
    with pytest.raises(BadInput) as err:
        HOROVODRUN.on_cluster(STRATEGIES["horovod-torch"], cfg, "c", "r", hosts=hosts, nic="eth0")
    assert str(err.value) == (
        "horovodrun across the one-machine cluster needs sshd on its nodes: scripts/cluster-local.sh up --ssh"
    )
    state.ssh = {"bin": str(tmp_path / "ssh" / "bin"), "pids": {"node1": 1, "node2": 2}}
    (tmp_path / "state.json").write_text(state.to_json())
    argv, env = HOROVODRUN.on_cluster(
        STRATEGIES["horovod-torch"], cfg, "c.json", "r.json", hosts=hosts, nic="eth0", base_env={}, python="/py"
    )
    # one horovodrun, on node 1 (the cluster's srun on one node); the ranks of node2 over ssh
    assert argv[:6] == ["/py", "-m", "distbench.cluster.nsrun", "--nodes", "1", "--"]
    assert argv[6:13] == ["/horovodrun", "-np", "4", "-H", "node1:2,node2:2", "--gloo", "--network-interface"]
    assert argv[13] == "eth0" and env["GLOO_SOCKET_IFNAME"] == "eth0"
    # nsrun puts the cluster's ssh client first on PATH
    (_, node_env), _ = nsrun.commands(state, 2, ["true"], {"PATH": "/bin"})
    assert node_env["PATH"] == f"{tmp_path}/ssh/bin:/bin"


def test_the_nodes_sshd_and_the_clusters_ssh_client_are_configured_for_key_login_only(tmp_path):
    node = spec.node_entry(spec.Node(2, spec.Link(1e9, 0)))
    conf = sshd.sshd_config(node, tmp_path).splitlines()
    assert "ListenAddress 10.199.39.2" in conf and f"HostKey {tmp_path}/host_node2" in conf
    assert "PasswordAuthentication no" in conf and "PermitRootLogin prohibit-password" in conf
    assert f"AuthorizedKeysFile {tmp_path}/authorized_keys" in conf
    assert f"ForceCommand {sys.executable} {sshd.WATCH}" in conf and sshd.WATCH.exists()
    client = sshd.ssh_config(tmp_path).splitlines()
    assert f"  UserKnownHostsFile {tmp_path}/known_hosts" in client and "  StrictHostKeyChecking yes" in client
    assert f"  IdentityFile {tmp_path}/id_ed25519" in client and "  BatchMode yes" in client


def test_a_nodes_dead_sshd_is_named(tmp_path):
    state = _state(tmp_path)
    assert sshd.faults(state) == []
    state.ssh = {"pids": {"node1": os.getpid(), "node2": 2**22 + 1}}
    # this process is not an sshd started with node1's config, and no process has node2's pid
    assert sshd.faults(state) == [
        f"node1's sshd (pid {os.getpid()}) is not running",
        f"node2's sshd (pid {2**22 + 1}) is not running",
    ]


def test_tf_multiworker_across_the_cluster_runs_one_worker_per_node():
    from distbench.workers import tf_multiworker

    cfg = tiny_config("mirrored", 2, model="resnet50", nodes=2, device="cpu")
    hosts = ["node1", "node2"]
    base = {"TF_CONFIG": "x"}
    argv, env = TF_MULTIWORKER.on_cluster(
        STRATEGIES["mirrored"], cfg, "c.json", "r.json", hosts=hosts, nic="eth0", base_env=base
    )
    assert argv[1:6] == ["-m", "distbench.cluster.nsrun", "--nodes", "2", "--"]
    assert argv[argv.index("distbench.workers") + 1] == "tf_multiworker"
    workers = env["DISTBENCH_TF_WORKERS"].split(",")
    assert [w.rsplit(":", 1)[0] for w in workers] == hosts and "TF_CONFIG" not in env
    # each worker's TF_CONFIG: the cluster in node order, its index the node's (set by nsrun)
    node_env = {"DISTBENCH_TF_WORKERS": env["DISTBENCH_TF_WORKERS"], "DISTBENCH_NODE_RANK": "1"}
    assert tf_multiworker.resolve_cluster(node_env) == {
        "cluster": {"worker": workers},
        "task": {"type": "worker", "index": 1},
    }
    assert rankguard.rank_of({"DISTBENCH_NODE_RANK": "1"}) == 1
    assert rankguard.rank_of({"RANK": "3", "DISTBENCH_NODE_RANK": "1"}) == 3
    four = tiny_config("mirrored", 4, model="resnet50", nodes=2, device="cpu")
    with pytest.raises(BadInput, match="runs one worker per node; 4 CPU workers over 2 nodes would need 2 per node"):
        TF_MULTIWORKER.on_cluster(STRATEGIES["mirrored"], four, "c", "r", hosts=hosts, nic="eth0")


def test_nsrun_runs_the_command_in_each_node(tmp_path):
    state = _state(tmp_path, 3)
    cmds = nsrun.commands(state, 2, ["echo", "hi"], {"PATH": "/bin"})
    assert [c[0] for c in cmds] == [
        ["nsenter", f"--uts={tmp_path}/uts/node{i}", "ip", "netns", "exec", f"dbc-node{i}", "echo", "hi"]
        for i in (1, 2)
    ]
    assert [(e["GLOO_SOCKET_IFNAME"], e["DISTBENCH_NODE_RANK"], e["DISTBENCH_NODE_HOST"]) for _, e in cmds] == [
        ("eth0", "0", "node1"),
        ("eth0", "1", "node2"),
    ]
    with pytest.raises(ValueError, match="4 nodes asked for, the cluster has 3"):
        nsrun.commands(state, 4, ["true"], {})


def test_placement_names_hosts_and_the_interface_that_moved_the_bytes():
    ranks = [
        {"rank": 1, "host": "node2", "net": {"eth0": {"tx_bytes": 900, "rx_bytes": 800}}},
        {
            "rank": 0,
            "host": "node1",
            "net": {"eth0": {"tx_bytes": 800, "rx_bytes": 900}, "lo": {"tx_bytes": 5, "rx_bytes": 5}},
        },
    ]
    out = placement(ranks, {"interface": "eth0"})
    assert out["rank_hosts"] == {"0": "node1", "1": "node2"}
    assert out["hosts"] == ["node1", "node2"]
    assert out["interface"] == {"node1": "eth0", "node2": "eth0"}
    assert out["links"] == {"interface": "eth0"}
    # over loopback (both "nodes" one host) the record says so: lo carried it
    lo = placement([{"rank": 0, "host": "h", "net": {"lo": {"tx_bytes": 10, "rx_bytes": 10}}}])
    assert lo["interface"] == {"h": "lo"} and "links" not in lo


def test_rank_guard_counts_each_interfaces_bytes(tmp_path):
    for name, tx, rx in (("eth0", 100, 50), ("lo", 7, 7)):
        (tmp_path / name / "statistics").mkdir(parents=True)
        (tmp_path / name / "statistics" / "tx_bytes").write_text(f"{tx}\n")
        (tmp_path / name / "statistics" / "rx_bytes").write_text(f"{rx}\n")
    before = rankguard.net_bytes(str(tmp_path))
    assert before == {"eth0": (100, 50), "lo": (7, 7)}
    after = dict(before, eth0=(400, 90))
    assert rankguard.net_delta(before, after) == {"eth0": {"tx_bytes": 300, "rx_bytes": 40}}


def test_without_root_the_cluster_says_why(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert netns.unavailable() == "the one-machine cluster needs root (network namespaces, veth links, tc)"


def test_comm_refuses_ranks_that_do_not_split_over_the_nodes(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "DISTBENCH_CLUSTER_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    _state(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "distbench.cli",
            "comm",
            "--gpus",
            "3",
            "--nodes",
            "2",
            "--results",
            str(tmp_path / "r.db"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (
        2,
        "Error: --gpus 3 cannot be split evenly over --nodes 2",
    )


def test_predicting_one_device_per_node_from_one_node_costs_the_measured_point_on_its_own_node(tmp_path, capsys):
    """Measured: N=1 and N=2 on one node (a fast intra link); asked: N=2 with one device per node over a slow
    link (12.5 MB/s, 100 Mbit/s). The measured N=2 point moved its gradients over the intra link, so the model
    anchors its compute there and puts the slow link only on the prediction: the 1e8-byte ring all-reduce of 2
    ranks (1e8 bytes each way) takes 8 s over it. Without the point's own node count the slow link left no
    compute time at the measured N=2 and the prediction was refused."""
    from distbench.cli import main

    csv = tmp_path / "p.csv"
    csv.write_text(
        "strategy,world_size,per_device_batch,throughput,grad_bytes,nodes\nddp,1,32,100,1e8,1\nddp,2,32,190,1e8,1\n"
    )
    args = ["predict", "--csv", str(csv), "--gpus", "2", "--gpus-per-node", "1", "--strategy", "ddp"]
    args += ["--link-bw", "intra=10", "--link-latency", "intra=10", "--link-bw", "inter=0.0125"]
    args += ["--link-latency", "inter=1", "--algorithm", "ring", "--no-store", "--format", "json"]
    assert main([*args, "--results", str(tmp_path / "r.db")]) == 0
    (p,) = __import__("json").loads(capsys.readouterr().out)["series"][0]["predicted"]
    assert p["nodes"] == 2 and p["crosses_nodes_unmeasured"]
    # 8 s of transfer, less what hides behind backward (DDP's 25 MiB buckets: at most the compute time)
    assert 8.0 - p["compute_s"] <= p["exposed_comm_s"] <= 8.0 + 1e-9
    # the compute term is the measured one-node step less its fast intra-node transfer (1e8 B at 10 GB/s)
    assert p["compute_s"] == pytest.approx(2 * 32 / 190 - 0.01, rel=0.05)


def test_on_the_cluster_a_rank_gets_its_share_of_the_machines_cores(tmp_path, monkeypatch):
    """The nodes share this machine's cores: N=2 over 2 nodes gets cores // 2 threads per rank, as N=2 on one
    node does, not a whole node's cores each (which would oversubscribe the machine twice over)."""
    from distbench.run.devices import cpu_cores
    from distbench.run.plan import SweepOptions, make_plan, parse_strategies

    monkeypatch.setenv(spec.STATE_DIR_VAR, str(tmp_path))
    for var in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(var, raising=False)
    _state(tmp_path)
    opts = SweepOptions(model="resnet50", gpus=[2], nodes=(1, 2), strategies=parse_strategies(("ddp",)), device="cpu")
    plan = make_plan(opts, visible_gpus=0)
    threads = {p.config.nodes: p.config.threads_per_worker for p in plan.points if p.strategy.name == "ddp"}
    assert threads == {1: max(1, cpu_cores() // 2), 2: max(1, cpu_cores() // 2)}
    assert any("across the one-machine cluster (its nodes share this machine's cores)" in n for n in plan.notes)


def test_a_cut_or_missing_node_is_named_as_a_network_fault(tmp_path, monkeypatch):
    state = _state(tmp_path, 3)
    state.nodes[2]["loss_pct"] = 100.0
    monkeypatch.setattr(netns, "ours", lambda: ["dbc-node1", "dbc-node2", "dbc-node3"])
    links = {
        "dbc-node1": "2: eth0@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500",
        "dbc-node2": "2: eth0@if5: <BROADCAST,MULTICAST> mtu 1500 state DOWN",
        "dbc-node3": "2: eth0@if6: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500",
    }
    monkeypatch.setattr(
        netns, "_run", lambda *argv, check=True: subprocess.CompletedProcess(argv, 0, links[argv[3]], "")
    )
    assert netns.link_faults(state) == [
        "node2's link eth0 is down",
        "node3's link eth0 drops every packet (100% loss)",
    ]
    monkeypatch.setattr(netns, "ours", lambda: ["dbc-node1", "dbc-node3"])
    assert netns.link_faults(state)[0] == "node2 is gone (namespace dbc-node2 deleted)"


def test_the_nodes_slurm_conf_is_the_clusters_own(tmp_path):
    nodes = [spec.node_entry(spec.Node(i, spec.Link(1e9, 0))) for i in (1, 2)]
    conf = slurmd.slurm_conf(nodes, tmp_path, 1).splitlines()
    assert "SlurmctldHost=node1(10.199.39.1)" in conf
    assert "NodeName=node[1-2] NodeAddr=10.199.39.[1-2] CPUs=1 State=UNKNOWN" in conf
    assert f"PartitionName={slurmd.PARTITION} Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP" in conf
    # every file of the daemons under the cluster's state directory, none under /etc/slurm
    paths = [line.split("=", 1)[1] for line in conf if line.split("=", 1)[0].endswith(("Location", "Dir", "File"))]
    assert len(paths) == 6 and all(p.startswith(str(tmp_path)) for p in paths)


def test_a_nodes_dead_slurmd_is_named(tmp_path):
    state = _state(tmp_path)
    state.slurm = {
        "conf": str(tmp_path / "slurm" / "slurm.conf"),
        "pids": {"slurmctld": os.getpid(), "node2": 2**22 + 1},
    }
    assert slurmd.faults(state) == [
        f"node1's slurmctld (pid {os.getpid()}) is not running",
        f"node2's slurmd (pid {2**22 + 1}) is not running",
    ]
    # nsrun gives the nodes' commands the cluster's slurm.conf
    (_, env), _ = nsrun.commands(state, 2, ["sinfo"], {})
    assert env["SLURM_CONF"] == str(tmp_path / "slurm" / "slurm.conf")


def test_ray_points_across_the_nodes_are_planned_one_worker_per_node(tmp_path, monkeypatch):
    """ray-ddp at N=2 over 2 nodes of the cluster: one worker on each node (STRICT_SPREAD), each with its
    node's share of the cores; the driver runs on node1 and joins the Ray cluster the sweep started there,
    and without that cluster (a lone point) it refuses in one line."""
    from distbench.run.commandline import NODES_HEAD_ENV
    from distbench.run.launch import point_launcher
    from distbench.run.launchers import RAY_TRAIN
    from distbench.run.plan import SweepOptions, make_plan, parse_strategies
    from distbench.run.raycluster import node_cpus

    monkeypatch.setenv(spec.STATE_DIR_VAR, str(tmp_path))
    for var in ("SLURM_JOB_NODELIST", "SLURM_NODELIST", NODES_HEAD_ENV):
        monkeypatch.delenv(var, raising=False)
    state = _state(tmp_path)
    opts = SweepOptions(model="mlp", gpus=[2], nodes=(2,), strategies=parse_strategies(("ray-ddp",)), device="cpu")
    plan = make_plan(opts, visible_gpus=0)
    (point,) = [p for p in plan.points if p.strategy.name == "ray-ddp"]
    assert point.config.nodes == 2 and point.skip_reason is None
    assert point.config.ray.placement == {
        "nodes": 2,
        "per_node": 1,
        "strategy": "STRICT_SPREAD",
        "cpus": node_cpus(state),
        "gpus": 0,
    }
    assert point.config.threads_per_worker == node_cpus(state)
    assert point_launcher(point.strategy, 2) is RAY_TRAIN
    with pytest.raises(BadInput, match="^ray-ddp runs across the nodes on the Ray cluster a sweep starts on them$"):
        RAY_TRAIN.on_cluster(point.strategy, point.config, "c", "r", hosts=["node1", "node2"], nic="eth0", base_env={})
    base = {NODES_HEAD_ENV: "10.199.39.1:6379"}
    argv, env = RAY_TRAIN.on_cluster(
        point.strategy, point.config, "c", "r", hosts=["node1", "node2"], nic="eth0", base_env=base, python="/py"
    )
    assert argv[:6] == ["/py", "-m", "distbench.cluster.nsrun", "--nodes", "1", "--"]
    assert env["DISTBENCH_RAY_HEAD"] == "10.199.39.1:6379" and env["GLOO_SOCKET_IFNAME"] == "eth0"


def test_a_slurm_job_on_the_nodes_records_their_links(tmp_path, monkeypatch):
    from distbench.run.hosts import cluster_links

    monkeypatch.setenv(spec.STATE_DIR_VAR, str(tmp_path))
    _state(tmp_path)
    assert cluster_links(["node1", "node2"])["nodes"]["node2"]["rate_bps"] == 5e8
    assert cluster_links(["gpu-a1", "gpu-a2"]) is None and cluster_links([]) is None


def test_a_loss_without_netem_is_dropped_by_the_nodes_own_packet_filter(monkeypatch):
    """A kernel without netem: the rate on tbf, the loss as iptables rules in the node's namespace (a random
    share, or every packet at 100%); a delay is still refused, naming the flag."""
    calls = []

    def run(*argv, check=True):
        calls.append(list(argv))
        failed = "netem" in argv or ("-L" in argv and not any("-N" in c for c in calls))
        return subprocess.CompletedProcess(argv, 1 if failed else 0, "", "Error: Specified qdisc kind is unknown.")

    monkeypatch.setattr(netns, "_run", run)
    monkeypatch.setattr(netns, "filter_unavailable", lambda install=False: None)
    assert netns.shape("dbc-node2", spec.Link(1e9, 0, 1.0)) == "tbf"
    ipt = ["ip", "netns", "exec", "dbc-node2", "iptables", "-w"]
    assert [*ipt, "-A", "OUTPUT", "-o", "eth0", "-j", netns.LOSS_CHAIN] in calls
    assert calls[-1] == [*ipt, "-A", netns.LOSS_CHAIN, "-m", "statistic", "--mode", "random", "--probability", "0.010000", "-j", "DROP"]  # fmt: skip
    netns.drop_egress("dbc-node2", 100)
    assert calls[-2:] == [[*ipt, "-F", netns.LOSS_CHAIN], [*ipt, "-A", netns.LOSS_CHAIN, "-j", "DROP"]]
    with pytest.raises(DistbenchError, match="^--delay needs the netem qdisc"):
        netns.shape("dbc-node2", spec.Link(1e9, 1e-4))


def test_pinned_ranks_get_the_same_cores_on_one_node_or_on_two():
    env = {rankguard.PIN_VAR: "1", "OMP_NUM_THREADS": "1"}
    assert [rankguard.pinned_cores(env, r, {0, 1}) for r in (0, 1, 2)] == [[0], [1], [0]]
    assert rankguard.pinned_cores(dict(env, OMP_NUM_THREADS="2"), 0, {0, 1}) == [0, 1]
    assert rankguard.pinned_cores(dict(env, OMP_NUM_THREADS="2"), 1, {2, 3, 4, 5}) == [4, 5]
    assert rankguard.pinned_cores({"OMP_NUM_THREADS": "1"}, 0, {0, 1}) is None

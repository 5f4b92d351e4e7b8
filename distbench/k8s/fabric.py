"""What carries a Kubernetes point's gradients: what the pods ask for (an RDMA device resource, the Multus
network that attaches the RDMA interface, the IPC_LOCK capability RDMA needs to pin memory), horovodrun's
interface from the same --nccl-env NCCL_SOCKET_IFNAME that NCCL gets, and the transport NCCL actually
used, read back from its log (NCCL_DEBUG=INFO names NET/IB, an IB network plugin such as NET/IBext_v8, or
NET/Socket). A record says RDMA only when every transport NCCL's log names is IB; a log that names both IB
and Socket is recorded as mixed, not RDMA."""

from __future__ import annotations

import re

from distbench.core.errors import BadInput
from distbench.k8s.settings import K8sSettings

MULTUS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
_USING = re.compile(
    r"NCCL INFO (?:Using network (IB\w*|Socket)\b|.*\bvia NET/(IB\w*|Socket)\b|NET/(IB\w*|Socket) : Using\b)"
)


def asked(settings: K8sSettings) -> str:
    """What the point asked the cluster for to carry the gradients (the wrapper's --network)."""
    parts = []
    if settings.rdma_resource:
        parts.append(f"{settings.rdma_resource[0]}: {settings.rdma_resource[1]} per pod")
    if settings.rdma_network:
        parts.append(f"Multus network {settings.rdma_network}")
    if settings.ipc_lock:
        parts.append("IPC_LOCK")
    if wants_rdma(settings):
        fabric = f"asked for RDMA ({', '.join(parts)})"
    else:
        fabric = "the pod network (TCP; no RDMA resource requested)" + (", IPC_LOCK" if settings.ipc_lock else "")
    nccl = ", ".join(f"{k}={v}" for k, v in settings.nccl_env)
    return fabric + (f"; {nccl}" if nccl else "")


def wants_rdma(settings: K8sSettings) -> bool:
    return bool(settings.rdma_resource or settings.rdma_network)


def pod_annotations(settings: K8sSettings) -> dict:
    """The pods' annotations: the Multus network(s) of --rdma-network (a NetworkAttachmentDefinition the
    cluster's RDMA setup provides)."""
    return {MULTUS_ANNOTATION: settings.rdma_network} if settings.rdma_network else {}


def security_context(settings: K8sSettings) -> dict | None:
    """--ipc-lock: the containers may lock (pin) memory, which RDMA's memory registration needs."""
    return {"capabilities": {"add": ["IPC_LOCK"]}} if settings.ipc_lock else None


def fabric_env(settings: K8sSettings) -> dict:
    """NCCL_DEBUG=INFO where RDMA is asked for (unless --nccl-env sets NCCL_DEBUG): its log names the transport."""
    if wants_rdma(settings) and "NCCL_DEBUG" not in dict(settings.nccl_env):
        return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    return {}


def horovod_interface(settings: K8sSettings) -> str | None:
    """horovodrun's --network-interface from --nccl-env NCCL_SOCKET_IFNAME (horovodrun otherwise adds the
    interfaces it discovers after the exported environment, overriding it)."""
    value = dict(settings.nccl_env).get("NCCL_SOCKET_IFNAME")
    if not value:
        return None
    if value.startswith("^"):
        raise BadInput(
            f"--nccl-env NCCL_SOCKET_IFNAME={value}: horovodrun's --network-interface takes interface names, "
            "not an exclusion list; name the interfaces to use"
        )
    return value.lstrip("=")


def transport(log_text: str) -> str | None:
    """The NCCL transport its own INFO lines name: NET/IB, or an IB network plugin by its name (NET/IBext_v8),
    NET/Socket, or "mixed (NET/IB…, NET/Socket)" when some lines name IB and others Socket (None: the log
    names no NCCL transport)."""
    seen = {next(g for g in m.groups() if g) for m in _USING.finditer(log_text)}
    if not seen:
        return None
    ib = sorted(n for n in seen if n != "Socket")
    named = [n for n in ib if n != "IB"] or ib  # a plugin's own name over the plain IB its lines also print
    ib_text = "NET/" + "+".join(named) if ib else None
    if ib and "Socket" in seen:
        return f"mixed ({ib_text}, NET/Socket)"
    return ib_text or "NET/Socket"


def is_rdma(used: str | None) -> bool:
    """Whether every transport NCCL's log names is InfiniBand / RoCE verbs (NET/IB or an IB plugin)."""
    return bool(used) and used.startswith("NET/IB")


def network_fields(asked_text: str, log_text: str) -> dict:
    """The record's network (what carried the gradients, as NCCL's log says), transport and what was asked."""
    used = transport(log_text)
    if is_rdma(used):
        network = f"RDMA (NCCL's log: {used})"
    elif used and used.startswith("mixed"):
        network = f"mixed: NCCL's log names RDMA and TCP sockets ({used[7:-1]}), so not all RDMA"
    elif used:
        network = f"TCP sockets (NCCL's log: {used})" + (", not RDMA" if "RDMA" in asked_text else "")
    elif asked_text.startswith("asked for RDMA"):
        network = "not known: NCCL's log names no transport (NCCL_DEBUG=INFO not set, or no NCCL), so not RDMA"
    else:
        network = asked_text
    return {"network": network, "transport": used, "network_asked": asked_text}

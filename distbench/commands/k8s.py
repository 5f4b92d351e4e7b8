"""`distbench k8s`: write a sweep as Kubeflow jobs, one per point (TrainJob, or PyTorchJob / MPIJob)."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from distbench.commands import options as opt
from distbench.core.errors import BadInput
from distbench.k8s.manifests import sweep_objects
from distbench.k8s.render import write_manifests
from distbench.k8s.settings import (
    APIS,
    DEFAULT_IMAGE,
    DEFAULT_PYTHON,
    K8sSettings,
    new_run_id,
    parse_pair,
    parse_toleration,
)
from distbench.run.devices import parse_gpus
from distbench.run.plan import SweepOptions
from distbench.run.runner import command_line
from distbench.slurm.plan import DEVICE_WHY, GPUS_WHY, check_name, jobs_epilog, plan_sweep


@click.command(epilog=jobs_epilog())
@opt.option(
    "--gpus", "gpus_text", default="1,2,4,8", help=f"Comma list of total device counts (over all nodes). {GPUS_WHY}"
)
@opt.option("--nodes", "nodes_text", default="1", help="Comma list of node (pod) counts; K must divide N.")
@click.option(
    "--gpus-per-node", type=click.IntRange(1, 1024), help="Devices per node; points needing more are left out."
)
@opt.workload_options(slurm=True)
@opt.option(
    "--device",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    help=DEVICE_WHY.replace("the jobs ask for GPUs", "each pod asks for its GPUs (--gpu-resource)") + ".",
)
@opt.option(
    "--api",
    type=click.Choice(APIS),
    default="trainer",
    help="trainer: Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1); v1: PyTorchJob "
    "(kubeflow.org/v1) and, for Horovod over nodes, MPIJob (kubeflow.org/v2beta1, mpi-operator).",
)
@opt.option("--image", default=DEFAULT_IMAGE, help="The image every pod runs (build it from docker/Dockerfile).")
@opt.option("--name", default="distbench", help="The sweep's name: job names' prefix and its folder on the volume.")
@click.option("--namespace", help="Namespace of the objects (default: kubectl's current one).")
@opt.option("--pvc", default="distbench-results", help="PersistentVolumeClaim (ReadWriteMany) the records go to.")
@click.option("--pvc-size", help="Also write that claim, this size (e.g. 10Gi); without it the claim must exist.")
@click.option("--storage-class", help="Storage class of the claim written with --pvc-size (ReadWriteMany).")
@click.option("--cpus", type=click.IntRange(1, 4096), help="CPUs per pod (request = limit); sets threads per worker.")
@click.option("--memory", help="Memory per pod (request = limit), e.g. 64Gi.")
@opt.option("--gpu-resource", default="nvidia.com/gpu", help="Extended resource name of a GPU.")
@click.option("--queue", help="Kueue LocalQueue: label kueue.x-k8s.io/queue-name on every job.")
@click.option("--node-selector", multiple=True, metavar="KEY=VALUE", help="Pods' nodeSelector (repeatable).")
@click.option("--toleration", multiple=True, metavar="KEY[=VALUE][:EFFECT]", help="Pods' toleration (repeatable).")
@click.option("--priority-class", help="Pods' priorityClassName.")
@click.option("--image-pull-secret", multiple=True, help="Secret for pulling --image (repeatable).")
@click.option(
    "--rdma-resource",
    metavar="NAME=COUNT",
    help="RDMA devices per pod, an extended resource (e.g. rdma/ib=1); recorded as the point's network.",
)
@click.option(
    "--rdma-network",
    metavar="[NS/]NAME[,...]",
    help="Multus network(s) attaching the pods' RDMA interface (pod annotation k8s.v1.cni.cncf.io/networks).",
)
@click.option("--ipc-lock", is_flag=True, help="Give the containers the IPC_LOCK capability (RDMA pins memory).")
@click.option(
    "--rendezvous-timeout",
    type=click.IntRange(1, 86400),
    default=600,
    show_default=True,
    help="Seconds a started node waits for the point's other nodes (torchrun's static rendezvous, horovodrun's "
    "--start-timeout); without --queue the pods are not gang-scheduled, so a partly scheduled point waits this long.",
)
@click.option(
    "--nccl-env",
    multiple=True,
    metavar="NAME=VALUE",
    help="Fabric setting for every container (NCCL_*, UCX_*, GLOO_*, HOROVOD_*; repeatable), e.g. NCCL_IB_HCA=mlx5.",
)
@opt.option("--python", default=DEFAULT_PYTHON, help="Python in the image, of the environment holding distbench.")
@opt.option(
    "--out",
    type=click.Path(file_okay=False),
    default="distbench-k8s",
    help="Folder for the YAML files: one per point, plus 00-shared.yaml with --pvc-size.",
)
@click.option(
    "--apply",
    "apply_now",
    is_flag=True,
    help="Also run the sweep with kubectl (its current context): create each point, wait for it, save its "
    "pods' logs in OUT/logs (a point whose job Failed: its record, read from the volume by a reader pod) and "
    "collect the records into --results; stops when kubectl fails or a point left no record.",
)
@click.option("--apply-poll", type=click.FloatRange(0.1), default=10.0, hidden=True, help="--apply: poll seconds.")
@click.option(
    "--apply-slack",
    type=click.FloatRange(0),
    default=600.0,
    show_default=True,
    help="--apply: seconds past a point's deadline (--timeout + 1800 s) before a job that has not finished "
    "(suspended, queued) stops the sweep.",
)
@opt.results_option("--apply: SQLite results store the records are collected into.")
def k8s(
    gpus_text, nodes_text, gpus_per_node, device, out, apply_now, apply_slack, apply_poll, results, strategies=(), **kw
):
    """Write a sweep as Kubernetes jobs: one Kubeflow job per point, to apply one at a time.

    A point is (strategy, total GPUs N, nodes K) with K dividing N, plus each framework's single-device
    baseline, planned as `distbench slurm` plans it. torchrun points (and every one-node point) run as a
    TrainJob on the torch runtime (or a PyTorchJob with --api v1): one pod per node, torchrun agents at a
    c10d rendezvous at the address the operator sets. Horovod over several nodes runs as a TrainJob on an
    MPI TrainingRuntime written with it (or an MPIJob): horovodrun on the launcher, sshd on the nodes.
    Each point writes its record to the --pvc volume and prints it in its pod's log; read them back with
    `distbench collect`.

    Example: distbench k8s --gpus 8,16 --nodes 1,2 --gpus-per-node 8 --image nvcr.io/my-org/distbench:1 --pvc-size 10Gi
    """
    for part in ",".join(strategies).split(","):
        if part.strip():
            check_name("--strategy", part.strip())
    knobs = ("api", "image", "name", "namespace", "pvc", "pvc_size", "storage_class", "cpus", "memory")
    cluster = {k: kw.pop(k) for k in (*knobs, "gpu_resource", "python", "queue", "priority_class")}
    cluster["node_selector"] = tuple(parse_pair("--node-selector", v) for v in kw.pop("node_selector"))
    cluster["tolerations"] = tuple(parse_toleration(v) for v in kw.pop("toleration"))
    cluster["image_pull_secrets"] = tuple(kw.pop("image_pull_secret"))
    rdma = kw.pop("rdma_resource")
    cluster["rdma_resource"] = parse_pair("--rdma-resource", rdma) if rdma else None
    cluster["nccl_env"] = tuple(parse_pair("--nccl-env", v) for v in kw.pop("nccl_env"))
    cluster["rdma_network"], cluster["ipc_lock"] = kw.pop("rdma_network"), kw.pop("ipc_lock")
    cluster["rendezvous_timeout_s"] = kw.pop("rendezvous_timeout")
    check_name("--model", kw["model"])
    if kw["repeats"] > 1:
        raise BadInput(
            f"--repeats {kw['repeats']}: distbench k8s runs each point once (its pods would have to relaunch "
            "together at every repeat, which these jobs do not do); repeat with `distbench slurm` or `distbench scale`"
        )
    opts = SweepOptions(gpus=gpus_text, strategies=strategies, device=device, add_baselines=True, **kw)
    settings = K8sSettings(command=command_line(), point_timeout_s=opts.timeout, run_id=new_run_id(), **cluster)
    if opts.batch_size and len(opts.batch_size) > 1:
        raise BadInput("distbench k8s takes one --batch-size per sweep (write one sweep per batch size)")
    if opts.seq_len and len(opts.seq_len) > 1:
        raise BadInput("distbench k8s takes one --seq-len per sweep (write one sweep per sequence length)")
    plan = plan_sweep(opts, parse_gpus(nodes_text, "--nodes", "node"), gpus_per_node)
    shared, points, notes = sweep_objects(plan, settings)
    files = write_manifests(Path(out), shared, points, settings)
    if settings.image == DEFAULT_IMAGE:
        notes.append(
            f"no --image: the pods would pull the placeholder {DEFAULT_IMAGE}; build docker/Dockerfile, push it, pass --image"
        )
    if not settings.queue and any(po.point.nodes > 1 for po in points):
        notes.append(
            "no --queue: the pods of a multi-node point are not gang-scheduled (Kueue admits a job's pods together); "
            f"started nodes wait up to --rendezvous-timeout ({settings.rendezvous_timeout_s} s) for the others"
        )
    for note in [*plan.notes, *notes]:
        opt.echo_err(f"note: {note}")
    click.echo(f"wrote {len(files)} file(s) in {out}: {len(points)} points of {opts.model}, one job each")
    click.echo(f"  {'file':<44} {'kind':<11} {'launcher':<11} {'nodes':>5} {'per node':>8}")
    for path, po in zip(files[len(files) - len(points) :], points):
        click.echo(
            f"  {path.name:<44} {po.job['kind']:<11} {po.point.launcher.name:<11} {po.point.nodes:>5} {po.point.per_node:>8}"
        )
    if apply_now:
        run_on_cluster(Path(out), files, shared, points, settings, results, apply_slack, apply_poll)
        return
    ns = f" -n {settings.namespace}" if settings.namespace else ""
    click.echo("apply one point at a time (points must not share nodes), or pass --apply; e.g.:")
    if shared:
        click.echo(f"  kubectl apply{ns} -f {shlex.quote(str(files[0]))}")
    click.echo(f"  kubectl create{ns} -f {shlex.quote(str(files[-1]))}")
    click.echo(
        f"records: {settings.records}/<job>.json on PVC {settings.pvc}; copy that folder out and run "
        f"`distbench collect FOLDER`, or `kubectl logs{ns} -l distbench.io/sweep={settings.name} "
        "--tail=-1 --prefix > pods.log` and `distbench collect pods.log`"
    )


def run_on_cluster(
    out: Path, files, shared, points, settings: K8sSettings, results: str, slack_s: float, poll_s: float = 10.0
) -> None:
    """--apply: each point created, waited for and its logs saved (distbench.k8s.apply), then the records
    collected into the store; a sweep stopped by kubectl or by a point that left no record exits 1 after
    the records that ran are in."""
    from distbench.k8s.apply import ApplyFailed, Kubectl, apply_sweep
    from distbench.kinds.collect import collect_records
    from distbench.results.store import Store

    logs = out / "logs"
    pairs = list(zip(files[len(files) - len(points) :], points))
    failure = None
    try:
        apply_sweep(
            files[0] if shared else None, pairs, settings, logs, kubectl=Kubectl(namespace=settings.namespace),
            slack_s=slack_s, poll_s=poll_s, echo=click.echo,
        )  # fmt: skip
    except ApplyFailed as exc:
        failure = str(exc)
    if logs.is_dir() and any(logs.glob("*.log")):
        with Store(results) as store:
            report = collect_records(logs, store, command=settings.command or None)
        click.echo(
            f"collected {len(report.added)} record(s) ({len(report.present)} already present) from {logs} into {results}"
        )
        for name, record in report.failed:
            click.echo(
                f"  {record.get('strategy')} N={record.get('world_size')}: {record.get('status')}: {record.get('reason')}"
            )
    if failure:
        raise click.ClickException(f"--apply stopped: {failure}")

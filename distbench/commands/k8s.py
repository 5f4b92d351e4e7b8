"""`distbench k8s`: write a sweep as Kubeflow jobs, one per point (TrainJob, or PyTorchJob / MPIJob)."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from distbench.commands import options as opt
from distbench.errors import BadInput
from distbench.k8s.manifests import APIS, DEFAULT_IMAGE, DEFAULT_PYTHON, K8sSettings, sweep_objects
from distbench.k8s.render import write_manifests
from distbench.plan import SweepOptions, parse_gpus
from distbench.slurm.plan import check_name, plan_sweep
from distbench.sweep import command_line


@click.command()
@opt.option("--gpus", "gpus_text", default="1,2,4,8", help="Comma list of total device counts (over all nodes).")
@opt.option("--nodes", "nodes_text", default="1", help="Comma list of node (pod) counts; K must divide N.")
@click.option(
    "--gpus-per-node", type=click.IntRange(1, 1024), help="Devices per node; points needing more are left out."
)
@opt.workload_options(slurm=True)
@opt.option(
    "--device",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    help="cuda: each pod asks for its GPUs (--gpu-resource); cpu: each 'GPU' is a CPU worker process.",
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
@opt.option("--torch-runtime", default="torch-distributed", help="ClusterTrainingRuntime of torch and one-node points.")
@opt.option("--python", default=DEFAULT_PYTHON, help="Python in the image, of the environment holding distbench.")
@opt.option(
    "--out",
    type=click.Path(file_okay=False),
    default="distbench-k8s",
    help="Folder for the YAML files: one per point, plus 00-shared.yaml with --pvc-size.",
)
def k8s(gpus_text, nodes_text, gpus_per_node, device, out, strategies=(), **kw):
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
    cluster = {k: kw.pop(k) for k in (*knobs, "gpu_resource", "torch_runtime", "python")}
    check_name("--model", kw["model"])
    opts = SweepOptions(gpus=gpus_text, strategies=strategies, device=device, add_baselines=True, **kw)
    settings = K8sSettings(command=command_line(), point_timeout_s=opts.timeout, **cluster)
    if opts.batch_size and len(opts.batch_size) > 1:
        raise BadInput("distbench k8s takes one --batch-size per sweep (write one sweep per batch size)")
    plan = plan_sweep(opts, parse_gpus(nodes_text, "--nodes", "node"), gpus_per_node)
    shared, points, notes = sweep_objects(plan, settings)
    files = write_manifests(Path(out), shared, points, settings)
    if settings.image == DEFAULT_IMAGE:
        notes.append(
            f"no --image: the pods would pull the placeholder {DEFAULT_IMAGE}; build docker/Dockerfile, push it, pass --image"
        )
    for note in [*plan.notes, *notes]:
        click.echo(f"note: {note}", err=True)
    click.echo(f"wrote {len(files)} file(s) in {out}: {len(points)} points of {opts.model}, one job each")
    click.echo(f"  {'file':<44} {'kind':<11} {'launcher':<11} {'nodes':>5} {'per node':>8}")
    for path, po in zip(files[len(files) - len(points) :], points):
        click.echo(
            f"  {path.name:<44} {po.job['kind']:<11} {po.point.launcher.name:<11} {po.point.nodes:>5} {po.point.per_node:>8}"
        )
    ns = f" -n {settings.namespace}" if settings.namespace else ""
    click.echo("apply one point at a time (points must not share nodes), e.g.:")
    if shared:
        click.echo(f"  kubectl apply{ns} -f {shlex.quote(str(files[0]))}")
    click.echo(f"  kubectl create{ns} -f {shlex.quote(str(files[-1]))}")
    click.echo(
        f"records: {settings.records}/<job>.json on PVC {settings.pvc}; copy that folder out and run "
        f"`distbench collect FOLDER`, or `kubectl logs{ns} -l distbench.io/sweep={settings.name} "
        "--tail=-1 --prefix > pods.log` and `distbench collect pods.log`"
    )

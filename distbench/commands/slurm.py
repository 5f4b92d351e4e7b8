"""`distbench slurm` (write/submit a sweep as Slurm jobs) and `distbench collect` (merge their records)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from distbench.commands import options as opt
from distbench.core.errors import BadInput
from distbench.kinds.collect import collect_records, tail_lines
from distbench.results.store import Store
from distbench.run.devices import parse_gpus
from distbench.run.plan import SweepOptions
from distbench.run.runner import command_line
from distbench.slurm.plan import DEVICE_WHY, GPUS_WHY, SlurmSettings, check_name, jobs_epilog, plan_sweep, time_seconds
from distbench.slurm.render import SIGNAL_LEAD_S, write_sweep
from distbench.slurm.submit import sbatch_argv, submit_sweep


@click.command(epilog=jobs_epilog())
@opt.option(
    "--gpus",
    "gpus_text",
    default="1,2,4,8",
    help=f"Comma list of total device counts (over all nodes of a point). {GPUS_WHY}",
)
@opt.option(
    "--nodes",
    "nodes_text",
    default="1",
    help="Comma list of node counts; a point runs N devices over K nodes when K divides N.",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(1, 1024),
    help="Devices per node of your nodes; points needing more per node are left out.",
)
@opt.workload_options(slurm=True)  # the workload knobs of `distbench scale` that mean the same in a Slurm job
@opt.option(
    "--device",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    help=DEVICE_WHY.replace("ask for GPUs", "ask for GPUs (--gres=gpu:G)") + ".",
)
@click.option("--partition", help="Slurm partition (#SBATCH --partition).")
@click.option("--account", help="Slurm account to charge (#SBATCH --account).")
@click.option("--constraint", help="Node features (#SBATCH --constraint), e.g. a100.")
@opt.option(
    "--time",
    default="01:00:00",
    help="Time limit of each job (#SBATCH --time); a job stopped by it leaves a 'timeout' record.",
)
@opt.option(
    "--exclusive/--shared",
    default=True,
    help="Whole nodes per job, so no other job disturbs the measurement.",
)
@opt.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=29500,
    help="TCP port of the torchrun c10d rendezvous on the first node (TF workers: port base).",
)
@click.option(
    "--python",
    default=sys.executable,
    show_default="this Python",
    help="Python of the environment with distbench on the compute nodes (shared storage).",
)
@click.option(
    "--records-dir",
    type=click.Path(file_okay=False),
    help="Results folder on shared storage: one record per job, logs/ and work/. "
    "Default: OUT's name + '-records' next to it.",
)
@opt.option(
    "--out",
    type=click.Path(dir_okay=False),
    default="distbench-sweep.sbatch",
    help="The sbatch script to write (plus OUT's name + '.submit.sh').",
)
@click.option("--submit", is_flag=True, help="Submit the job arrays with sbatch now and print their job ids.")
def slurm(gpus_text, nodes_text, gpus_per_node, device, records_dir, out, submit, strategies=(), **kw):
    """Write a sweep as Slurm jobs: one sbatch script, one job per point, submitted as job arrays.

    A point is (strategy, total GPUs N, nodes K) with K dividing N, plus each framework's
    single-device baseline. Every point is its own job in its own allocation; the points are the
    tasks of job arrays, one array per resource shape (nodes x GPUs per node), because the tasks of
    an array share one resource request. On one node a point runs as `distbench scale` runs it; on
    several, srun + torchrun (c10d rendezvous) for ddp, horovodrun -H host1:G,host2:G for Horovod,
    and MultiWorkerMirroredStrategy workers for mirrored. Each job writes its result record (a
    failed one with the log tail if the point fails) into --records-dir; merge them with
    `distbench collect`.

    Example: distbench slurm --gpus 8,16 --nodes 1,2 --gpus-per-node 8 --partition gpu --out sweep.sbatch
    """
    for part in ",".join(strategies).split(","):
        if part.strip():
            check_name("--strategy", part.strip())
    job_fields = ("python", "partition", "account", "constraint", "time", "exclusive", "port")  # SlurmSettings'
    job = {k: kw.pop(k) for k in job_fields}
    check_name("--model", kw["model"])  # shell-safe before SweepOptions names an unknown one
    if not Path(job["python"]).is_absolute():
        raise BadInput(f"--python {job['python']!r} must be an absolute path (the jobs run elsewhere)")
    opts = SweepOptions(gpus=gpus_text, strategies=strategies, device=device, add_baselines=True, **kw)
    nodes = parse_gpus(nodes_text, "--nodes", "node")
    if opts.batch_size and len(opts.batch_size) > 1:
        raise BadInput("distbench slurm takes one --batch-size per sweep (write one script per batch size)")
    if opts.seq_len and len(opts.seq_len) > 1:
        raise BadInput("distbench slurm takes one --seq-len per sweep (write one script per sequence length)")
    plan = plan_sweep(opts, nodes, gpus_per_node)
    script = Path(out).expanduser().resolve()
    records = Path(records_dir).expanduser().resolve() if records_dir else script.with_name(script.stem + "-records")
    settings = SlurmSettings(
        script=script, records_dir=records, point_timeout_s=opts.timeout, command=command_line(), **job
    )
    if opts.timeout > time_seconds(job["time"]) - SIGNAL_LEAD_S:
        plan.notes.append(
            f"--timeout {opts.timeout:g}s is longer than --time {job['time']} allows: "
            "a point still running at the time limit is recorded as 'timeout'"
        )
    files = write_sweep(plan, settings)
    for note in plan.notes:
        opt.echo_err(f"note: {note}")
    shapes = plan.shapes()
    click.echo(
        f"wrote {files[0]}: {len(plan.points)} points of {opts.model} as {len(shapes)} job "
        f"array{'s' if len(shapes) != 1 else ''} (one per resource shape)"
    )
    click.echo(f"  {'point':<6} {'key':<24} {'launcher':<15} {'nodes':>5} {'per node':>8}")
    for p in plan.points:
        click.echo(f"  {p.index:<6} {p.key:<24} {p.launcher.name:<15} {p.nodes:>5} {p.per_node:>8}")
    click.echo(f"records: {records}")
    if submit:
        for job_id, pts in submit_sweep(plan, settings):
            click.echo(f"submitted job {job_id}: points {', '.join(p.key for p in pts)}")
    else:
        click.echo(f"submit:  bash {shlex.quote(str(settings.submit_script))}")
        for pts in shapes.values():
            click.echo(f"         {shlex.join(sbatch_argv(pts, settings))}")
    click.echo(f"collect: distbench collect {shlex.quote(str(records))}")


@click.command()
@click.argument("directory", type=click.Path())
@opt.results_option("SQLite results store to merge into.")
def collect(directory, results):
    """Merge the result records (*.json) in DIRECTORY into the results store, as one new sweep.

    Records in saved `kubectl logs` of a `distbench k8s` sweep are read too: DIRECTORY's *.log and
    *.txt files, or DIRECTORY itself when it is such a file.

    Collecting again adds only records that are not in the store yet (same record id; a record
    without one gets an id from its content). Lists the failed points with their log tails, and
    the points of `distbench slurm` sweeps that have no record yet.

    Example: distbench collect sweep-records --results distbench-results/distbench.db
    """
    if not Path(directory).is_dir() and not Path(directory).is_file():
        raise BadInput(f"DIRECTORY {directory} does not exist (give the records folder of a sweep, or a saved log)")
    with Store(results) as store:
        report = collect_records(directory, store)
    click.echo(
        f"{directory}: {len(report.added)} record(s) added, {len(report.present)} already present"
        + (f", {len(report.ignored)} file(s) ignored" if report.ignored else "")
        + (f" -> sweep {report.sweep_id} in {results}" if report.sweep_id else "")
    )
    for name, why in report.ignored:
        click.echo(f"  ignored {name}: {why}")
    if report.failed:
        click.echo(f"{len(report.failed)} failed point(s):")
        for name, r in report.failed:
            click.echo(
                f"  {r.get('strategy')} N={r.get('world_size')} nodes={r.get('nodes')}: {r.get('status')}: "
                f"{r.get('reason') or ''} ({name})"
            )
            for line in tail_lines(r.get("stderr_tail")):
                click.echo(f"    | {line}")
    if report.missing:
        click.echo(
            f"{len(report.missing)} point(s) without a record yet (queued, running, or the job died "
            "before writing one; see squeue/sacct and the logs/ folder):"
        )
        for p in report.missing:
            click.echo(f"  {p.get('key')}")

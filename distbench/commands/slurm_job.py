"""`distbench slurm-job` (hidden): the steps a generated Slurm job script calls inside its allocation
(the work is distbench.slurm.job's and the planner's; this module only parses the options)."""

from __future__ import annotations

import click

from distbench.commands.options import workload_options
from distbench.kinds.measure import NOISY_CV
from distbench.slurm.job import finish_point, prepare
from distbench.slurm.plan import plan_point
from distbench.slurm.render import render_point


@click.group("slurm-job", hidden=True)
def slurm_job():
    """Steps of a generated Slurm job script (called by the script, not by users)."""


@slurm_job.command()
@click.option("--nodes", type=click.IntRange(1), required=True)
@click.option("--gpus-per-node", type=click.IntRange(1), required=True, help="GPUs (or CPU workers) per node.")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda")
@workload_options(slurm=True)
def point(nodes, gpus_per_node, **workload):
    """Print the shell variables (key, resources, config, launch, environment) of one point."""
    click.echo(render_point(plan_point(gpus=nodes * gpus_per_node, nodes=nodes, **workload)), nl=False)


@slurm_job.command("prepare")
@click.option("--config-json", required=True)
@click.option("--local-workers", type=click.IntRange(1), required=True)
@click.option("--out", required=True)
def prepare_command(config_json, local_workers, out):
    """Write the point's config for this node; print the threads per worker."""
    click.echo(prepare(config_json, local_workers, out))


@slurm_job.command()
@click.option("--config-json", required=True)
@click.option("--result", required=True, help="Where rank 0 wrote its record.")
@click.option("--log", required=True)
@click.option("--record", required=True, help="The published record.")
@click.option("--launcher", required=True)
@click.option("--rc", type=int, required=True)
@click.option("--wall", type=float, default=0.0)
@click.option("--timeout", type=float, default=None)
@click.option("--status", type=click.Choice(["failed", "timeout", "oom", "interrupted"]), default=None)
@click.option("--reason", default=None)
@click.option("--repeats", type=click.IntRange(1), default=1, help="How many times the script launched the point.")
@click.option("--noisy-cv", type=click.FloatRange(0, min_open=True), default=NOISY_CV)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def finish(config_json, result, log, record, launcher, rc, wall, timeout, status, reason, repeats, noisy_cv, argv):
    """Publish the point's record (a failed one if the launch failed); ARGV is the launch command."""
    out = finish_point(
        config_json=config_json,
        result=result,
        log=log,
        record_path=record,
        returncode=rc,
        wall_s=wall,
        launcher=launcher,
        argv=list(argv),
        timeout_s=timeout,
        status=status,
        reason=reason,
        repeats=repeats,
        noisy_cv=noisy_cv,
    )
    click.echo(
        f"distbench: {out['strategy']} N={out['world_size']} nodes={out.get('nodes')}: {out['status']}"
        + (f" ({out['reason']})" if out.get("reason") else "")
    )

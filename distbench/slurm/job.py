"""Inside a Slurm job: the hidden `distbench slurm-job` command the generated scripts call."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import click

from distbench.commands.options import workload_options
from distbench.config import PointConfig
from distbench.launch import log_tail, outcome_record
from distbench.plan import cpu_cores
from distbench.record import write_record
from distbench.slurm.plan import plan_point
from distbench.slurm.render import render_point
from distbench.strategies import get_strategy

SLURM_KEYS = [
    "SLURM_" + k
    for k in "JOB_ID ARRAY_JOB_ID ARRAY_TASK_ID JOB_NODELIST JOB_NUM_NODES JOB_PARTITION JOB_ACCOUNT "
    "CLUSTER_NAME CPUS_ON_NODE JOB_GPUS".split()
]


def prepare(config_json: str, local_workers: int, out: str | os.PathLike) -> int:
    """Write the point's config with this node's CPUs divided among its workers; return the threads."""
    cfg = PointConfig.from_json(config_json)
    threads = max(1, cpu_cores() // max(1, local_workers))
    write_record(out, dataclasses.replace(cfg, threads_per_worker=threads).to_dict())  # atomic: other nodes read it
    return threads


def slurm_info(environ: dict | None = None) -> dict:
    env = os.environ if environ is None else environ
    return {k[6:].lower(): env[k] for k in SLURM_KEYS if k in env}


def finish_point(
    *,
    config_json: str,
    result: str,
    log: str,
    record_path: str,
    returncode: int,
    wall_s: float,
    launcher: str,
    argv: list[str],
    timeout_s: float | None = None,
    status: str | None = None,
    reason: str | None = None,
    environ: dict | None = None,
) -> dict:
    """Turn whatever the job's launch left behind into the point's record (as launch.run_point does) at `record_path`."""
    cfg = PointConfig.from_json(config_json)
    strategy = get_strategy(cfg.strategy)
    tail = log_tail(Path(log))
    timed_out = returncode in (124, 137) and timeout_s and wall_s >= timeout_s - 1
    if status is None and timed_out and not Path(result).exists():
        status, reason = "timeout", f"timed out after {timeout_s:g}s (--timeout)"
    record = outcome_record(cfg, strategy, result, returncode, tail, status=status, reason=reason)
    record["launch"] = {
        "argv": list(argv),
        "returncode": returncode,
        "wall_s": wall_s,
        "launcher": launcher,
        "workdir": str(Path(result).parent),
        "log": str(log),
    }
    record["slurm"] = slurm_info(environ)
    if "environment" not in record:
        try:
            from distbench import envinfo

            record["environment"] = envinfo.capture_environment()
        except Exception as exc:  # noqa: BLE001 - the record matters more than its environment
            record["environment"] = {"error": f"{type(exc).__name__}: {exc}"}
    write_record(record_path, record)
    return record


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
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def finish(config_json, result, log, record, launcher, rc, wall, timeout, status, reason, argv):
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
    )
    click.echo(
        f"distbench: {out['strategy']} N={out['world_size']} nodes={out.get('nodes')}: {out['status']}"
        + (f" ({out['reason']})" if out.get("reason") else "")
    )

"""`distbench k8s-job` (hidden): the step every generated Kubernetes job's containers run (the work is
distbench.k8s.job's; this module only parses the options)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from distbench.core.errors import BadInput
from distbench.k8s.job import run_point, run_sshd
from distbench.k8s.outcomes import RUN_ID_ENV, runs_on_volume, volume_record
from distbench.k8s.settings import RUN_ID
from distbench.kinds.measure import NOISY_CV
from distbench.results.kubelogs import record_line


@click.group("k8s-job", hidden=True)
def k8s_job():
    """Steps inside a generated Kubernetes job (called by its containers, not by users)."""


@k8s_job.command("run", context_settings={"ignore_unknown_options": True})
@click.option("--config-json", required=True)
@click.option("--key", required=True, help="The point's key (strategy-gN-nK).")
@click.option("--job", required=True, help="The job's name: its work folder, log and record file.")
@click.option("--records", required=True, help="The sweep's folder on the results volume.")
@click.option("--per-node", type=click.IntRange(1), required=True)
@click.option("--threads", type=click.IntRange(0), default=0, help="Threads per worker; 0: from the pod's CPUs.")
@click.option("--node-rank", required=True, help="This pod's node rank; rank 0 publishes the record.")
@click.option("--launcher", required=True)
@click.option("--timeout", type=float, required=True)
@click.option("--nodes", type=click.IntRange(1), default=1, help="The point's node (pod) count.")
@click.option("--noisy-cv", type=click.FloatRange(0, min_open=True), default=NOISY_CV, help="The sweep's --noisy-cv.")
@click.option("--network", help="What the point asked the cluster for to carry the gradients (for the record).")
@click.option("--ssh-key", help="The operator's private key, copied to --ssh-identity (0600) before the launch.")
@click.option("--ssh-identity", help="Where horovodrun's --ssh-identity-file expects the key.")
@click.option("--launcher-pod", is_flag=True, help="This pod runs the launcher only, no rank (mpi-operator's).")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    config_json,
    key,
    job,
    records,
    per_node,
    threads,
    node_rank,
    launcher,
    timeout,
    nodes,
    noisy_cv,
    network,
    ssh_key,
    ssh_identity,
    launcher_pod,
    argv,
):
    """Run the point's launch command (ARGV) and publish its record."""
    rc = run_point(
        config_json=config_json,
        key=key,
        job=job,
        records=records,
        per_node=per_node,
        threads=threads,
        node_rank=node_rank,
        launcher=launcher,
        timeout_s=timeout,
        argv=list(argv),
        nodes=nodes,
        noisy_cv=noisy_cv,
        network=network,
        ssh_key=ssh_key,
        ssh_identity=ssh_identity,
        launcher_pod=launcher_pod,
    )
    sys.exit(rc)


@k8s_job.command("sshd", context_settings={"ignore_unknown_options": True})
@click.option("--records", required=True, help="The sweep's folder on the results volume.")
@click.option("--job", required=True, help="The job's name: its work folder.")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def sshd(records, job, argv):
    """Note this pod's node for the point's record, then exec ARGV (sshd)."""
    run_sshd(records=records, job=job, argv=list(argv))


@k8s_job.command("collect")
@click.option("--records", required=True, help="The sweep's folder on the results volume.")
@click.option("--job", required=True, help="The point's job name.")
@click.option("--nodes", type=click.IntRange(1), default=1, help="The point's node (pod) count.")
@click.option("--wait", type=click.FloatRange(0), default=120.0, help="Seconds to wait for node rank 0's record.")
@click.option("--run-id", help="The run whose record to read (what another run left is ignored); default: any.")
def collect(records, job, nodes, wait, run_id):
    """Print a point's record from the volume (the reader pod of `distbench k8s --apply`): node rank 0's, or
    one built from the nodes' published outcomes; exit 1 when no node of the point ran."""
    if run_id is not None and not RUN_ID.fullmatch(run_id):
        raise BadInput(
            f"--run-id {run_id!r} is not 8 to 32 lower-case hex digits (the {RUN_ID_ENV} of the manifests "
            "`distbench k8s` wrote)"
        )
    record = volume_record(Path(records), job, nodes, wait, run_id=run_id)
    if record is None:
        run = f" of run {run_id}" if run_id else ""
        others = [r for r in runs_on_volume(Path(records), job) if r != run_id] if run_id else []
        held = f"; the volume holds only run(s) {', '.join(others)} of it" if others else ""
        click.echo(f"distbench: {job}: no record and no node outcome{run} on the volume (no node of it ran{held})")
        click.get_current_context().exit(1)
    click.echo(record_line(record))
    click.echo(f"distbench: {job}: {record['status']}" + (f" ({record['reason']})" if record.get("reason") else ""))

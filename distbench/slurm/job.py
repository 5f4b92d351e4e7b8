"""Inside a Slurm job: what the steps of a generated script do (the hidden `distbench slurm-job` command,
distbench/commands/slurm_job.py, parses their options): this node's config and threads, and the published record."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from distbench.core.config import PointConfig
from distbench.core.strategies import get_strategy
from distbench.kinds.measure import NOISY_CV, combine_repeats
from distbench.results.record import read_record, write_record
from distbench.run.devices import cpu_cores
from distbench.run.launch import log_tail, outcome_record

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
    repeats: int = 1,
    noisy_cv: float = NOISY_CV,
) -> dict:
    """Turn whatever the job's launches left behind into the point's record at `record_path`: the last launch's
    outcome as launch.run_point makes it, combined with the earlier repeats' records (repeat-R.json beside
    `result`, written by the script's --repeats loop) as `distbench scale` combines them (measure.combine_repeats:
    pooled steps, the run-to-run CI over R > 1 repeats, the noisy flag against `noisy_cv`; a failed repeat
    makes the point failed, naming which of the `repeats`)."""
    cfg = PointConfig.from_json(config_json)
    strategy = get_strategy(cfg.strategy)
    tail = log_tail(Path(log))
    timed_out = returncode in (124, 137) and timeout_s and wall_s >= timeout_s - 1
    if status is None and timed_out and not Path(result).exists():
        status, reason = "timeout", f"timed out after {timeout_s:g}s (--timeout)"
    record = outcome_record(cfg, strategy, result, returncode, tail, status=status, reason=reason)
    earlier = [
        read_record(path)
        for path in sorted(Path(result).parent.glob("repeat-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    ]
    record = combine_repeats([*earlier, record], noisy_cv)
    if len(earlier) + 1 < repeats and record["status"] == "ok":  # cannot happen from the script's loop
        record.update(status="failed", reason=f"only {len(earlier) + 1} of {repeats} repeats ran")
    record["launch"] = {
        "argv": list(argv),
        "returncode": returncode,
        "wall_s": wall_s,
        "launcher": launcher,
        "workdir": str(Path(result).parent),
        "log": str(log),
    }
    if cfg.nodes > 1:  # where the ranks ran and what carried their traffic, from the rank guards' reports
        from distbench.core.failures import rank_reports
        from distbench.core.multinode import allocation_hosts
        from distbench.run.hosts import cluster_links, placement

        # on the one-machine cluster's slurmds, the nodes' link settings too (the allocation is its nodes)
        links = cluster_links(allocation_hosts(environ))
        record["launch"]["placement"] = placement(rank_reports(Path(result).parent / "ranks"), links)
    record["slurm"] = slurm_info(environ)
    if "environment" not in record:
        try:
            from distbench.core import envinfo

            record["environment"] = envinfo.capture_environment()
        except Exception as exc:  # noqa: BLE001 - the record matters more than its environment
            record["environment"] = {"error": f"{type(exc).__name__}: {exc}"}
    write_record(record_path, record)
    return record

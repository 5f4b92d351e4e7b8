"""The one result-record schema (`Record`: every key, what it means), its headline fields, and the one place
a point's record is assembled (`build_record`).

A record is built in the stages of BUILD_STAGES, in that order: the worker's own record (rank 0), or
`base_record` for a point that wrote none; then each later stage returns its fields as a dict of declared keys
and `build_record` merges them into the record: the launch (distbench.run.launch), the measurement over repeats
and the no-sync variant (distbench.kinds.measure), MFU (distbench.core.mfu.mfu_fields), speedup and efficiency against
the sweep's baselines (distbench.kinds.sweep.derived_fields), and the sweep's bookkeeping (the runner). Everything
downstream (store, output, analysis, report) reads only these records. A key not declared in `Record` is a
bug: build_record refuses one, and the end-to-end tests check every stored record.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any, TypedDict

from distbench.results import stats

SCHEMA_VERSION = 1
STATUSES = ("ok", "skipped", "failed", "timeout", "oom", "interrupted")


class Record(TypedDict, total=False):
    """One point's result. Seconds are wall seconds; throughput is samples/s over the global batch."""

    # identity and workload (base_record)
    schema: int
    record_id: str
    strategy: str
    framework: str  # 'torch' or 'tf': whose baseline defines speedup 1.0
    model: str
    world_size: int  # N: devices (GPUs or CPU workers), all nodes
    nodes: int
    device: str  # 'cuda' or 'cpu' (CPU workers)
    scaling: str  # 'weak' (per-device batch fixed) or 'strong' (global batch fixed)
    per_device_batch: int
    global_batch: int
    status: str  # one of STATUSES
    reason: str | None  # why a point is not 'ok' (one line)
    config: dict  # the whole PointConfig, enough to rerun the point
    auto_added: bool  # a baseline distbench added for speedup
    after_oom: bool  # skipped: a smaller batch of the same strategy and N ran out of memory
    # measurement (distbench/workers/common.py)
    step_times_s: list[float]  # every measured step (slowest rank per step), no warmup
    per_rank_step_times_s: list[list[float]]
    measured_window_s: float  # barrier to the last rank's last step: throughput's denominator
    measured_steps: int
    stopping: dict  # which rule ended the run (steps, target CI, max time, two_stage), the window; two_stage:
    # the pilot that sized a split's first window (its slowest-rank step times, seconds, CI, the K it chose);
    # nosync_span: the wall-clock span of the no-sync run in the same processes (PointConfig.nosync_order)
    throughput: float | None
    throughput_ci_low: float | None
    throughput_ci_high: float | None
    ci_method: str  # batch means within a run, or a t-interval on log throughput over repeats
    ci_scope: str  # noise within one run, or run to run
    ci_note: str
    step_time_median_s: float | None
    step_time_mean_s: float | None
    step_time_p5_s: float | None
    step_time_p95_s: float | None
    step_time_cv: float | None
    noisy: bool  # step-time CV above the noisy threshold
    repeats: list[dict]  # each repeat's summary (--repeats)
    final_loss: float
    # what ran
    backend: str | None  # gloo / nccl / the TF collective implementation
    tf_strategy: str
    cluster: dict  # multi-worker TF: the cluster the workers formed
    params: int
    grad_bytes: int
    runtime: dict  # framework versions and device facts inside the worker
    gpu_name: str | None
    math_mode: dict  # TF32, cuDNN autotune, memory layout
    converge: dict  # distbench converge: target, time/steps/epochs to it, the validation curve, LR rule
    probe: dict  # evidence from inside the step (e.g. which autocast dtype ran)
    precision_note: str  # where --precision means something else than for ddp (deepspeed-zero* amp: fp16 mode)
    data_cache: dict | None  # --data disk: whether it was in the page cache before reading
    data_wait_fraction: float | None  # None: not measured (never 0 by default)
    data_wait_median_s: float | None
    data_wait_note: str
    peak_memory_bytes: int | None  # per device: peak allocated (CUDA) or peak RSS (CPU workers)
    peak_memory_per_rank_bytes: list[int | None]
    peak_memory_source: str
    peak_memory_scope: str  # torch: the peak is reset after the model is wrapped (sharded)
    checkpointed_blocks: int  # torch: decoder blocks recomputed in backward (--activation-checkpointing)
    memory_before_model_per_rank_bytes: list[int | None]  # torch, CPU workers: each rank's RSS before the model
    # FLOPs and MFU (distbench.core.mfu)
    model_flops_per_sample: float | None
    achieved_flops_per_device: float | None
    peak_flops_per_device: float | None
    cpu_gemm_peak: dict  # CPU workers: GEMM FLOP/s on the worker's own threads
    mfu: float | None  # None for an unknown GPU: never a fallback peak
    mfu_note: str
    # communication (distbench.kinds.measure): the synchronized run against its no-sync variant
    sync: bool  # False: the no-sync variant itself
    nosync_variant: str | None  # what the variant removes, per strategy
    nosync_hook_calls: int
    nosync_buffer_sync: Any
    independent: list[dict]  # the no-sync runs' summaries and step times, paired with the sync runs
    pair_order: list[str]  # per repeat: 'AB' / 'BA' (separate process trees), or the in-process order 'ATBTA'
    tiny: list[dict]  # the tiny-collective variant's runs (one float all-reduced per step), like `independent`
    comm_split: dict  # distbench.results.split: step = compute + straggler wait + communication, each with its 95% CI
    split_note: str  # why a point with communication figures has no three-term split
    stragglers: dict  # distbench.results.split.stragglers: per rank, share of steps slowest and the wait it caused
    ran_alone: bool  # a repeat: the real step run alone after its pair with the no-sync variant failed
    sync_after_variant_ratio: float  # A's throughput measured after its variants / measured first (no CI)
    comm_overhead: float | None
    exposed_comm_s: float | None  # raw (may be negative: noise); clipped only for display
    exposed_comm_ci_low: float | None
    exposed_comm_ci_high: float | None
    exposed_comm_ci_scope: str
    allreduce_s: float | None  # standalone all-reduce of the gradient bytes, the strategy's way
    allreduce_samples_s: list[float]
    overlap: float | None
    overlap_raw: float | None
    comm_note: str  # why communication was not measured
    # derived over the sweep (distbench.kinds.sweep)
    speedup: float | None
    speedup_note: str
    efficiency: float | None  # against the baseline on the whole machine
    efficiency_per_core: float | None  # CPU workers: against a baseline on the workers' threads
    efficiency_per_core_note: str
    per_core_baseline: str  # which baseline efficiency_per_core is against (and how many workers can run at once)
    wrapper_overhead: float | None
    # verify mode (distbench verify)
    verify_losses: list[float]
    update_checksums: list
    determinism: dict | None
    replica_max_rel_diff: float | None
    verdict: dict  # the verify run's judgement (pass/fail and why), stored with its record
    # telemetry (distbench.run.telemetry)
    telemetry: dict  # power, energy per sample (and scope), utilisation, memory over the window
    telemetry_samples: list
    energy_per_sample_j: float | None
    power_w_mean: float | None
    # profiling (distbench profile, --profile: distbench.profile), a few steps after the timed window
    profile: dict  # the per-category breakdown of the profiled steps (distbench.profile.breakdown)
    profile_trace: str  # the point's Chrome trace-event JSON file (beside the store)
    profile_note: str  # why a point asked to be profiled has no breakdown or no trace file
    # launch and faults (distbench.run.launch, distbench.core.failures)
    launch: dict  # argv, launcher, exit status, start, wall seconds, work folder
    engine: dict  # ray-ddp: Ray version, cluster address, workers (rank, pid, node), head start and fit seconds
    launch_note: str  # ranks hung (stopped) or failed in teardown after the record was written; the record is kept
    stopped_phase: str  # a timed-out or stopped point: the phase it was in (distbench.core.phases.PHASES)
    teardown_tail: str  # stderr tail of a teardown failure after the record was written
    ranks: list[dict]  # how each rank ended (rank guard reports)
    stderr_tail: str
    workdir: str  # kept for a point that did not succeed
    environment: dict
    sweep_id: str
    point_id: int
    collected_from: str  # distbench collect: the record's JSON file
    slurm: dict  # job id, array task, nodes of a Slurm point
    kubernetes: dict  # job, node rank, pods, nodes, network, transport; each node's outcome and the first failure
    # `distbench comm` records
    kind: str
    sizes_bytes: list[int]
    per_size_times_s: list[list[float]]
    algbw_gbps: list[float]
    busbw_gbps: list[float]
    correct: bool
    iterations: int
    # `distbench infer` records
    latency_median_s: float | None
    latency_p95_s: float | None
    time_median_s: float | None
    time_p95_s: float | None
    time_per_step_s: float | None


# -- headline fields, declared once: every list of them elsewhere is built from these groups
POINT_FIELDS = ("strategy", "framework", "model", "world_size", "nodes", "device")
"""What ran where."""
BATCH_FIELDS = ("scaling", "per_device_batch", "global_batch")
IDENTITY_FIELDS = (*POINT_FIELDS, *BATCH_FIELDS)
OUTCOME_FIELDS = ("status", "reason")
THROUGHPUT_CI_FIELDS = ("throughput_ci_low", "throughput_ci_high")
STEP_TIME_FIELDS = ("step_time_median_s", "step_time_p5_s", "step_time_p95_s", "step_time_cv")
SCALING_FIELDS = ("speedup", "efficiency", "wrapper_overhead")
HEADLINE_FIELDS = (
    *IDENTITY_FIELDS,
    *OUTCOME_FIELDS,
    "throughput",
    *THROUGHPUT_CI_FIELDS,
    *SCALING_FIELDS,
    *STEP_TIME_FIELDS,
    "measured_steps",
    "noisy",
)
"""A point's headline: what ran, how it ended, its throughput (with CI), speedup and step times."""
COLUMN_FIELDS = (*IDENTITY_FIELDS, *OUTCOME_FIELDS, "throughput", *STEP_TIME_FIELDS, *SCALING_FIELDS)
"""The headline fields the results store keeps as SQL columns besides the record (distbench.results.store)."""
STEP_STAT_FIELDS = (
    "throughput",
    *STEP_TIME_FIELDS[:3],
    "step_time_mean_s",
    STEP_TIME_FIELDS[3],
    "measured_steps",
)
"""What add_step_metrics fills from the step times (None where there are none)."""


def undeclared_keys(record: dict) -> set[str]:
    return set(record) - set(Record.__annotations__)


# -- building a point's record
BUILD_STAGES = {
    "launch": "distbench.run.launch.outcome_fields / launch_fields: how the process tree ended, telemetry, argv",
    "measurement": "distbench.kinds.measure: repeats pooled, their CI, the no-sync variant and communication",
    "mfu": "distbench.core.mfu.mfu_fields: model FLOPs and utilization (needs the measured throughput)",
    "derived": "distbench.kinds.sweep.derived_fields: speedup, efficiency, wrapper overhead against the baselines",
    "sweep": "the runner: sweep_id, auto_added (and point_id once stored)",
}
"""The stages after the worker's record (or base_record), in the order build_record merges them."""


def build_record(record: dict, **parts: dict | None) -> Record:
    """Merge each stage's fields (`parts`, named as in BUILD_STAGES) into `record`, in BUILD_STAGES order,
    and return it. The record is updated in place: the runner holds it from the worker's record to the store
    (a stage called later, e.g. derive after measure_point, merges its part into the same dict). A stage whose
    part is None or empty adds nothing. ValueError for an unknown stage or an undeclared key."""
    unknown = set(parts) - set(BUILD_STAGES)
    if unknown:
        raise ValueError(f"unknown record stage(s) {sorted(unknown)}; stages: {', '.join(BUILD_STAGES)}")
    for stage in BUILD_STAGES:
        part = parts.get(stage)
        if not part:
            continue
        bad = undeclared_keys(part)
        if bad:
            raise ValueError(f"{stage} fields not declared in distbench.results.record.Record: {sorted(bad)}")
        record.update(part)
    return record


def base_record(config: dict, *, strategy: str, framework: str, status: str, reason: str | None = None) -> Record:
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    return {
        "schema": SCHEMA_VERSION,
        "record_id": uuid.uuid4().hex,
        "strategy": strategy,
        "framework": framework,
        "model": config.get("model"),
        "world_size": config.get("world_size"),
        "nodes": config.get("nodes", 1),
        "device": config.get("device"),
        "scaling": config.get("scaling"),
        "per_device_batch": config.get("per_device_batch"),
        "global_batch": (config.get("per_device_batch") or 0) * (config.get("world_size") or 0),
        "status": status,
        "reason": reason,
        "config": config,
        "step_times_s": [],
    }


def write_record(path: str | os.PathLike, record: dict) -> None:
    """Write a record as JSON atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".rec-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(record, fh, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:  # e.g. a full disk: leave no half-written file behind
        os.unlink(tmp)
        raise


def read_record(path: str | os.PathLike) -> dict:
    with open(path) as fh:
        record = json.load(fh)
    if not isinstance(record, dict) or record.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"{path}: not a distbench result record (schema {SCHEMA_VERSION})")
    return record


def add_step_metrics(record: dict) -> dict:
    """Fill throughput and step-time statistics from the record's measured step times."""
    times = record.get("step_times_s") or []
    if record.get("status") == "ok" and times:
        record.update(stats.step_stats(times, record["global_batch"], record.get("measured_window_s")))
    else:
        for key in STEP_STAT_FIELDS:
            record.setdefault(key, None)
    return record

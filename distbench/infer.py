"""`distbench infer`: inference latency and throughput per batch size, per framework.

One worker process per framework runs every batch size (model built once); each batch size
becomes its own stored point (strategy 'infer-torch' / 'infer-tf', per_device_batch = the batch),
so results are stored and printed like training results. Latency = one forward pass, device
synchronized; throughput = batch / latency (from the total over the timed passes). Each batch size
also gets its peak memory (allocated per GPU, or the process's peak RSS on CPU) and, where NVML
reports it, the mean GPU power and energy per sample over its timed passes (None: unknown).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from distbench.config import PointConfig
from distbench.engines import PROCESS
from distbench.launch import run_point
from distbench.record import add_step_metrics, base_record
from distbench.strategies import Strategy
from distbench.telemetry import summarize

INFER = {
    "torch": Strategy(
        name="infer-torch",
        framework="torch",
        module="infer_torch",
        launcher=PROCESS,
        requires=("torch",),
        description="PyTorch inference",
    ),
    "tf": Strategy(
        name="infer-tf",
        framework="tf",
        module="infer_tf",
        launcher=PROCESS,
        requires=("tensorflow",),
        description="TensorFlow inference",
    ),
}


def expand(record: dict, cfg: PointConfig) -> list[dict]:
    """One point record per batch size from a worker's record (or its failure)."""
    out = []
    for bs in cfg.extra["batch_sizes"]:
        c = dataclasses.replace(cfg, per_device_batch=bs).to_dict()
        if record["status"] != "ok":
            r = base_record(
                c,
                strategy=record["strategy"],
                framework=record["framework"],
                status=record["status"],
                reason=record.get("reason"),
            )
            r["stderr_tail"] = record.get("stderr_tail")
        else:
            entry = next(e for e in record["per_batch"] if e["batch"] == bs)
            r = base_record(
                c,
                strategy=record["strategy"],
                framework=record["framework"],
                status=entry["status"],
                reason=entry.get("reason"),
            )
            r["step_times_s"] = entry.get("times", [])
            r["runtime"] = record.get("runtime")
            r["params"] = record.get("params")
            r["peak_memory_bytes"] = entry.get("peak_memory_bytes")
            if entry.get("window") and record.get("telemetry_samples") is not None:
                r["telemetry"] = summarize(
                    record["telemetry_samples"], tuple(entry["window"]), len(r["step_times_s"]) * bs
                )
        r["kind"] = "inference"
        add_step_metrics(r)
        r["latency_median_s"] = r.get("step_time_median_s")
        r["latency_p95_s"] = r.get("step_time_p95_s")
        power = (r.get("telemetry") or {}).get("power_w_mean")
        r["power_w_mean"] = sum(power.values()) if power else None
        r["energy_per_sample_j"] = (r.get("telemetry") or {}).get("energy_per_sample_j")
        for key in ("speedup", "efficiency", "wrapper_overhead", "peak_memory_bytes"):
            r.setdefault(key, None)
        out.append(r)
    return out


TELEMETRY_INTERVAL_S = 0.1
"""Short: the timed passes of one batch size may last well under a second."""


def run_framework(
    framework: str, cfg: PointConfig, workdir: Path, timeout_s: float, skip_reason: str | None = None
) -> list[dict]:
    strategy = INFER[framework]
    cfg = dataclasses.replace(cfg, strategy=strategy.name)
    if skip_reason:
        record = base_record(
            cfg.to_dict(), strategy=strategy.name, framework=framework, status="skipped", reason=skip_reason
        )
    else:
        record = run_point(strategy, cfg, workdir, timeout_s, TELEMETRY_INTERVAL_S)
    return expand(record, cfg)

"""`distbench infer`: one worker process per framework runs every batch size (model built once); each batch
size becomes its own point ('infer-torch' / 'infer-tf', per_device_batch = the batch), stored and printed
like training results. Latency = one forward pass, device synchronized; throughput = batch / latency (from
the total over the timed passes). Each batch size also gets its peak memory (allocated per GPU, or peak
RSS on CPU) and, where NVML reports it, mean GPU power and energy per sample over its timed passes.
"""

from __future__ import annotations

import dataclasses

from distbench.core.config import PointConfig
from distbench.core.strategies import Strategy
from distbench.results.kind import RecordKind
from distbench.results.record import add_step_metrics, base_record
from distbench.run.launchers import PROCESS
from distbench.run.telemetry import summarize

INFER = {
    fw: Strategy(
        name=f"infer-{fw}",
        framework=fw,
        module=f"infer_{fw}",
        launcher=PROCESS.name,
        requires=(module,),
        description=f"{label} inference",
    )
    for fw, module, label in (("torch", "torch", "PyTorch"), ("tf", "tensorflow", "TensorFlow"))
}


def expand(record: dict, cfg: PointConfig) -> list[dict]:
    """One point record per batch size from a worker's record (or its failure)."""
    out = []
    for bs in cfg.infer.batch_sizes:
        c = dataclasses.replace(cfg, per_device_batch=bs).to_dict()
        ok = record["status"] == "ok"
        entry = next(e for e in record["per_batch"] if e["batch"] == bs) if ok else record
        r = base_record(
            c,
            strategy=record["strategy"],
            framework=record["framework"],
            status=entry["status"],
            reason=entry.get("reason"),
        )
        if not ok:
            r["stderr_tail"] = record.get("stderr_tail")
        else:
            r.update(
                step_times_s=entry.get("times", []),
                runtime=record.get("runtime"),
                params=record.get("params"),
                peak_memory_bytes=entry.get("peak_memory_bytes"),
            )
            if entry.get("window") and record.get("telemetry_samples") is not None:
                r["telemetry"] = summarize(
                    record["telemetry_samples"], tuple(entry["window"]), len(r["step_times_s"]) * bs
                )
        r["kind"] = RecordKind.INFERENCE.value
        add_step_metrics(r)
        r["latency_median_s"] = r.get("step_time_median_s")
        r["latency_p95_s"] = r.get("step_time_p95_s")
        telemetry = r.get("telemetry") or {}
        r["power_w_mean"] = sum(telemetry["power_w_mean"].values()) if telemetry.get("power_w_mean") else None
        r["energy_per_sample_j"] = telemetry.get("energy_per_sample_j")
        for key in ("speedup", "efficiency", "wrapper_overhead", "peak_memory_bytes"):
            r.setdefault(key, None)
        out.append(r)
    return out


TELEMETRY_INTERVAL_S = 0.1
"""Short: the timed passes of one batch size may last well under a second."""

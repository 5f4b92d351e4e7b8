"""Worker side of `distbench infer`: per batch size, timed forward passes in inference mode."""

from __future__ import annotations

import time

from distbench.workers import common


def sweep_batches(cfg, run_batch, sync, is_oom) -> list[dict]:
    """run_batch(bs) -> callable doing one forward pass; returns per-batch entries (times or oom)."""
    entries = []
    for bs in cfg.infer.batch_sizes:
        try:
            common.reset_peak_memory(cfg.device)
            forward = run_batch(bs)
            for _ in range(cfg.warmup):
                sync(forward())
            times = []
            start = time.time()  # wall clock: the parent's telemetry picks this batch size's samples
            for _ in range(cfg.steps):
                t0 = time.perf_counter()
                sync(forward())
                times.append(time.perf_counter() - t0)
            entries.append(
                {
                    "batch": bs,
                    "status": "ok",
                    "times": times,
                    "window": [start, time.time()],
                    "peak_memory_bytes": common.peak_memory_bytes(cfg.device),
                }
            )
        except Exception as exc:  # noqa: BLE001 - an OOM at one batch size must not end the sweep
            if not is_oom(exc):
                raise
            entries.append({"batch": bs, "status": "oom", "reason": f"{type(exc).__name__}: {str(exc)[:300]}"})
    return entries


def sweep_and_emit(cfg, out_path: str, framework: str, run_batch, sync, is_oom, *, params, runtime) -> None:
    """Every batch size's timed passes (sweep_batches), then the worker's one record (its only rank)."""
    entries = sweep_batches(cfg, run_batch, sync, is_oom)
    common.emit(cfg, out_path, framework=framework, status="ok", per_batch=entries, params=params, runtime=runtime)


def is_oom_text(exc: BaseException) -> bool:
    return any(m in f"{type(exc).__name__}: {exc}" for m in common.OOM_MARKERS)

"""Inside the workers: profile a few steady-state steps AFTER the timed window (so the measured step times
and throughput are those of an unprofiled run), with the framework's own profiler, on every rank (the steps
meet in their collectives); rank 0 keeps the trace file and puts the breakdown in its record.

Called by distbench/workers/torch_common.run and tf_common.run when the point's config asks for it
(PointConfig.profiling, distbench.profile.request)."""

from __future__ import annotations

import glob
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from distbench.profile.breakdown import MARKER, TORCH_MARKER, breakdown
from distbench.profile.trace import write_trace, xspace_to_trace

STEPS = 3
"""Profiled steps per point by default (after the timed window): enough for a per-step mean, few enough that
a CPU-worker point's trace stays a few MB."""


def request(cfg) -> dict | None:
    """What the point asks (None: no profiling): {'steps': K, 'trace_dir': folder or None}."""
    asked = cfg.profiling
    if asked is None or cfg.verify or not cfg.sync:
        return None
    return {"steps": asked.steps, "trace_dir": asked.trace_dir}


def kept(fn):
    """A hook whose failure costs the point only its profile: the measured record is kept with the reason in
    profile_note (a profiler that cannot start, a trace that does not convert)."""

    def call(*args, **kwargs) -> dict:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the measurement is already done: keep it
            return {"profile_note": f"profiling failed: {type(exc).__name__}: {str(exc)[:300]}"}

    call.__doc__ = fn.__doc__
    return call


def _trace_path(cfg, asked: dict) -> tuple[Path | None, str | None]:
    folder = asked.get("trace_dir")
    if not folder:
        return None, "no trace folder was given: the breakdown is kept, the trace is not"
    name = f"{cfg.strategy}-n{cfg.world_size}-b{cfg.per_device_batch}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    return Path(folder) / f"{name}.trace.json", None


def _fields(cfg, doc: dict, clocks: list[float], timed: list[float], asked: dict) -> dict:
    """The record's profile fields from a trace (rank 0): the breakdown, the trace file's path or why none. A
    trace with no operation and no framework call inside its steps gives no breakdown (all of it 'idle' would
    say nothing true): profile_note says so."""
    result = breakdown(
        doc, device=cfg.device, clock_step_s=clocks, timed_step_median_s=statistics.median(timed) if timed else None
    )
    out: dict = {"profile": {**result, "profiler": asked.get("profiler")}}
    if not any(v.get("s") for c, v in result["categories"].items() if c != "idle"):
        out = {"profile_note": f"{asked.get('profiler')} recorded no operation inside the profiled steps"}
    path, why = _trace_path(cfg, asked)
    if path is not None:
        try:
            out["profile_trace"] = write_trace(doc, path)
        except OSError as exc:
            why = f"the trace could not be written to {path.parent}: {exc.strerror or exc}"
    if why:
        out["profile_note"] = why
    return out


@kept
def profile_torch(cfg, step, sync, device, rank: int, timed: list[float], other_thread: bool = False) -> dict:
    """torch.profiler over STEPS steps (CPU activities; CUDA too on GPUs), each inside a TORCH_MARKER
    record_function that ends after the device is synchronized; the Chrome trace export_chrome_trace writes.
    `other_thread`: the step runs in a thread of the wrapper's (Lightning's Trainer, Ignite's Engine), which
    torch.profiler records only with its profile_all_threads setting."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    asked = {**(request(cfg) or {}), "profiler": f"torch.profiler (torch {torch.__version__})"}
    steps = int(asked.get("steps") or STEPS)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    extra = {}
    if other_thread:  # the wrapper's loop runs the step in its own thread, started before profiling
        from torch._C._profiler import _ExperimentalConfig

        extra["experimental_config"] = _ExperimentalConfig(profile_all_threads=True)
    clocks: list[float] = []
    with profile(activities=activities, **extra) as prof:
        for k in range(steps):
            sync(None)
            t0 = time.perf_counter()
            with record_function(f"{TORCH_MARKER}{k}"):
                sync(step())
            clocks.append(time.perf_counter() - t0)
    if rank != 0:
        return {}
    tmp = tempfile.mkdtemp(prefix="distbench-profile-")
    try:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        import json

        with open(path) as fh:
            doc = json.load(fh)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _fields(cfg, doc, clocks, timed, asked)


@kept
def profile_tf(cfg, step, sync, rank: int, timed: list[float]) -> dict:
    """tf.profiler over STEPS steps, each inside a MARKER trace annotation that ends after the step's outputs
    are ready (the device synchronized); its XSpace converted to trace-event JSON."""
    import tensorflow as tf

    asked = {**(request(cfg) or {}), "profiler": f"tf.profiler (TensorFlow {tf.__version__})"}
    steps = int(asked.get("steps") or STEPS)
    logdir = tempfile.mkdtemp(prefix="distbench-tfprofile-")
    clocks: list[float] = []
    try:
        tf.profiler.experimental.start(logdir)
        try:
            for k in range(steps):
                t0 = time.perf_counter()
                with tf.profiler.experimental.Trace(MARKER, step_num=k, _r=1):
                    sync(step())
                clocks.append(time.perf_counter() - t0)
        finally:
            tf.profiler.experimental.stop()
        if rank != 0:
            return {}
        files = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
        if not files:
            return {"profile_note": f"tf.profiler wrote no .xplane.pb under {logdir}"}
        with open(files[-1], "rb") as fh:
            doc = xspace_to_trace(fh.read())
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    return _fields(cfg, doc, clocks, timed, asked)

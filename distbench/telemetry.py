"""Telemetry sampled beside each point, in the parent process (never inside the timed loop).

With NVIDIA GPUs: NVML (nvidia-ml-py) per GPU: utilization, memory used, power, the total-energy
counter (where the GPU has one), SM clock, temperature and throttle reasons. On CPU workers:
psutil per worker process (the launched process tree): CPU utilization and RSS. Derived figures
use only the samples inside the worker's measured window (wall-clock timestamps in its record).
"""
from __future__ import annotations

import statistics
import threading
import time

import psutil

# Throttle reasons that mean the clocks were pulled down (not idle / application-clock settings).
_THROTTLE_MASK_NAMES = ("nvmlClocksThrottleReasonSwPowerCap", "nvmlClocksThrottleReasonHwSlowdown",
                        "nvmlClocksThrottleReasonSwThermalSlowdown", "nvmlClocksThrottleReasonHwThermalSlowdown",
                        "nvmlClocksThrottleReasonHwPowerBrakeSlowdown")


class Sampler:
    """Samples every `interval_s` on a daemon thread until stop(); samples are (t, source, metric, value)."""

    def __init__(self, root_pid: int, *, interval_s: float = 0.5, gpus: bool = True,
                 gpu_indices: list[int] | None = None):
        self.root_pid = root_pid
        self.gpu_indices = gpu_indices
        self.interval_s = interval_s
        self.samples: list[tuple[float, str, str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="distbench-telemetry", daemon=True)
        self._procs: dict[int, psutil.Process] = {}
        self._nvml = None
        self._handles = []
        self.gpu_note = None
        if gpus:
            self._init_nvml()

    def _init_nvml(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # no driver / no library: CPU workers
            self.gpu_note = f"no GPU telemetry: {exc}"
            return
        self._nvml = pynvml
        count = pynvml.nvmlDeviceGetCount()
        indices = [i for i in (self.gpu_indices if self.gpu_indices is not None else range(count)) if i < count]
        self._handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
        mask = 0
        for name in _THROTTLE_MASK_NAMES:
            mask |= getattr(pynvml, name, 0)
        self._throttle_mask = mask

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, str, str, float]]:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
        return self.samples

    def _workers(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        for p in tree:  # keep Process objects so cpu_percent() measures since the previous sample
            self._procs.setdefault(p.pid, p)
        return [self._procs[p.pid] for p in tree]

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.time()
            for p in self._workers():
                try:
                    with p.oneshot():
                        if "python" not in p.name().lower():
                            continue
                        self.samples.append((t, f"pid{p.pid}", "cpu_percent", p.cpu_percent(None)))
                        self.samples.append((t, f"pid{p.pid}", "rss_bytes", float(p.memory_info().rss)))
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            if self._nvml is not None:
                self._sample_gpus(t)
            self._stop.wait(self.interval_s)

    def _sample_gpus(self, t: float) -> None:
        nv = self._nvml
        for i, h in self._handles:
            src = f"gpu{i}"
            for metric, fn in (
                ("util_percent", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),
                ("mem_used_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h).used),
                ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                ("energy_j", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0),
                ("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                ("temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                ("throttled", lambda: float(bool(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
                                                  & self._throttle_mask))),
            ):
                try:
                    self.samples.append((t, src, metric, float(fn())))
                except Exception:  # metric not supported on this GPU
                    continue


def _series(samples, source_prefix: str, metric: str, window) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    lo, hi = window if window else (float("-inf"), float("inf"))
    for t, src, m, v in samples:
        if m == metric and src.startswith(source_prefix) and lo <= t <= hi:
            out.setdefault(src, []).append((t, v))
    return out


def summarize(samples, window: tuple[float, float] | None, samples_processed: int | None) -> dict:
    """Per-point telemetry summary over the measured window (all samples when there is none)."""
    out: dict = {"samples": len(samples), "window": list(window) if window else None}
    cpu = _series(samples, "pid", "cpu_percent", window)
    rss = _series(samples, "pid", "rss_bytes", None)
    if cpu:
        out["cpu_util_mean"] = {s: statistics.fmean(v for _, v in vals) for s, vals in cpu.items()}
    if rss:
        out["rss_peak_bytes"] = {s: max(v for _, v in vals) for s, vals in rss.items()}
    util = _series(samples, "gpu", "util_percent", window)
    if util:
        out["gpu_util_mean"] = {s: statistics.fmean(v for _, v in vals) for s, vals in util.items()}
        mem = _series(samples, "gpu", "mem_used_bytes", None)
        peaks = {s: max(v for _, v in vals) for s, vals in mem.items()}
        out["gpu_mem_peak_bytes"] = peaks
        busy = [p for p in peaks.values() if p > 0]
        if len(busy) > 1:  # DataParallel's GPU 0 overload shows here
            out["mem_imbalance"] = max(busy) / statistics.fmean(busy)
        power = _series(samples, "gpu", "power_w", window)
        if power:
            out["power_w_mean"] = {s: statistics.fmean(v for _, v in vals) for s, vals in power.items()}
        energy = _series(samples, "gpu", "energy_j", window)
        if energy and all(len(v) >= 2 and v[-1][0] > v[0][0] for v in energy.values()):
            # The counter difference spans first..last sample inside the window: scale it to the
            # whole measured window so energy per sample is not biased low.
            span = (window[1] - window[0]) if window else None
            out["energy_j"] = sum((v[-1][1] - v[0][1]) * ((span / (v[-1][0] - v[0][0])) if span else 1.0)
                                  for v in energy.values())
            out["energy_source"] = "NVML total-energy counter, scaled to the measured window"
        elif power and window:
            out["energy_j"] = sum(statistics.fmean(v for _, v in vals) for vals in power.values()) * (window[1] - window[0])
            out["energy_source"] = "mean power x measured time"
        if out.get("energy_j") is not None and samples_processed:
            out["energy_per_sample_j"] = out["energy_j"] / samples_processed
        throttled = _series(samples, "gpu", "throttled", window)
        out["throttled"] = any(v for vals in throttled.values() for _, v in vals)
        clocks = _series(samples, "gpu", "sm_clock_mhz", window)
        if clocks:
            out["sm_clock_mhz_min"] = min(v for vals in clocks.values() for _, v in vals)
    return out

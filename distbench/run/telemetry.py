"""Telemetry sampled beside each point, in the parent process (never inside the timed loop).

GPUs: NVML per GPU (utilization, memory, power, the total-energy counter where there is one, SM clock,
temperature, throttle reasons), the point's GPUs found by the PCI bus ids the CUDA driver gives with
the workers' environment. CPU workers: psutil per worker process (CPU utilization, RSS). Derived
figures use only the samples inside the measured window (wall-clock timestamps in the record).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import statistics
import subprocess
import sys
import threading
import time

import psutil

# Clock-event reasons that mean the clocks were pulled down (not idle / application-clock settings).
_THROTTLE_REASONS = ("SwPowerCap", "HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown")

# Run in a child process with the workers' environment: the CUDA driver numbers the devices as the
# workers will (CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES) and this process never initializes CUDA.
_CUDA_BUS_IDS = """
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
n, dev, buf = ctypes.c_int(), ctypes.c_int(), ctypes.create_string_buffer(64)
assert cuda.cuDeviceGetCount(ctypes.byref(n)) == 0
for i in range(n.value):
    assert cuda.cuDeviceGet(ctypes.byref(dev), i) == 0 and cuda.cuDeviceGetPCIBusId(buf, 64, dev) == 0
    print(buf.value.decode())
"""


def cuda_pci_bus_ids(env: dict) -> list[str] | None:
    """PCI bus ids of the CUDA devices in a process with `env`'s order; None if the driver cannot be asked."""
    try:
        out = subprocess.run([sys.executable, "-c", _CUDA_BUS_IDS], env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.split() if out.returncode == 0 else None


def _bus_key(bus_id) -> tuple[int, ...]:
    """'0000:3B:00.0' (CUDA) and '00000000:3b:00.0' (NVML) name the same device."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    domain, bus, rest = text.strip().split(":")
    device, function = rest.split(".")
    return tuple(int(x, 16) for x in (domain, bus, device, function))


def select_gpus(
    nv, count: int | None, cuda_bus_ids: list[str] | None, env: dict, nvml_indices: list[int] | None = None
) -> tuple[list[tuple[int, object]], str | None]:
    """NVML (index, handle) of the workers' CUDA devices 0..count-1 (None: all), and a note on any not
    found. Without the driver's bus ids, NVML indices are trusted only under CUDA_DEVICE_ORDER=PCI_BUS_ID
    (NVML's order): no telemetry is better than another GPU's."""
    total = nv.nvmlDeviceGetCount()
    if cuda_bus_ids is not None:
        handles = [(i, nv.nvmlDeviceGetHandleByIndex(i)) for i in range(total)]
        by_bus = {_bus_key(nv.nvmlDeviceGetPciInfo(h).busId): (i, h) for i, h in handles}
        wanted = cuda_bus_ids if count is None else cuda_bus_ids[:count]
        found = [by_bus[_bus_key(b)] for b in wanted if _bus_key(b) in by_bus]
        missing = [b for b in wanted if _bus_key(b) not in by_bus]
        return found, (f"no NVML device at PCI bus id(s) {', '.join(missing)}" if missing else None)
    order = env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    if order != "PCI_BUS_ID":
        return [], (
            f"no GPU telemetry: CUDA_DEVICE_ORDER={order} and the CUDA driver could not be asked "
            "for the workers' PCI bus ids"
        )
    indices = [i for i in (nvml_indices if nvml_indices is not None else range(total)) if i < total]
    return [(i, nv.nvmlDeviceGetHandleByIndex(i)) for i in indices], None


def _answers(query, handle) -> bool:
    try:
        query(handle)
    except Exception:  # pynvml.NVMLError (e.g. NVML_ERROR_FUNCTION_NOT_FOUND) or a binding's own error
        return False
    return True


def clock_event_reasons(nv, handle=None):
    """The clock-event reasons query and the throttle mask, probed once on `handle`. The newer call
    (nvmlDeviceGetCurrentClocksEventReasons) exists in recent bindings but only drivers from R535 on answer
    it (older ones: NVML_ERROR_FUNCTION_NOT_FOUND on every call): where it fails and the deprecated
    nvmlDeviceGetCurrentClocksThrottleReasons answers, that one is used. Both failing: the newer one is kept,
    and each sample records 'throttle_unknown'."""
    newer = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    older = getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    query, prefix = newer, "nvmlClocksEventReason"
    if newer is None or (
        handle is not None and older is not None and not _answers(newer, handle) and _answers(older, handle)
    ):
        query, prefix = older, "nvmlClocksThrottleReason"
    names = [prefix + name for name in _THROTTLE_REASONS]
    if not any(hasattr(nv, n) for n in names):  # a binding with only the other spelling of the mask names
        names = [n.replace("Throttle", "Event") if "Throttle" in n else n.replace("Event", "Throttle") for n in names]
    return query, functools.reduce(operator.or_, (getattr(nv, n, 0) for n in names))


def _drives_ranks(argv: list[str]) -> bool:
    """The process runs a strategy's driver module (Strategy.driver_module), which starts the ranks."""
    from distbench.core.strategies import DRIVER_MODULES

    return any(a in DRIVER_MODULES for a in argv)


SAMPLER_NICE = 19


def lowest_priority() -> int | None:
    """Give the calling thread (the sampler's) the lowest priority of the normal class (nice 19; Linux sets
    it per thread): it then takes a core from a worker only when its turn comes, not each time it wakes.
    CPU workers at N=1 use every core (one rank, one thread a core), so a sampler at the workers' priority
    took a core from the rank's OpenMP team at each sample, and the team's other threads waited for it
    at the next barrier. Not SCHED_IDLE: on a machine other jobs keep busy, that class may not sample for
    seconds. Returns the thread's nice value (None where it cannot be set)."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), SAMPLER_NICE))
        return os.getpriority(os.PRIO_PROCESS, tid)
    except (AttributeError, OSError):
        return None


def descendants(root: int) -> list[int] | None:
    """The pids under `root`, from the kernel's own lists of each thread's children (/proc/PID/task/TID/children):
    a few reads per process of the point's tree, where psutil's children() reads the stat of every process on
    the machine (2.3 ms a sample with 138 processes, 95% of a sample's CPU time here). None where the
    kernel keeps no such lists (or `root` is gone)."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return None
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:  # ended meanwhile
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


class Sampler:
    """Samples every `interval_s` on a daemon thread until stop(); samples are (t, source, metric, value)."""

    def __init__(
        self,
        root_pid: int,
        *,
        interval_s: float = 0.5,
        gpus: bool = True,
        gpu_indices: list[int] | None = None,
        cuda_env: dict | None = None,
    ):
        """gpu_indices: the point's GPUs as CUDA_VISIBLE_DEVICES names them (None: all); cuda_env: the
        workers' environment, to find them by PCI bus id."""
        self.root_pid = root_pid
        self.gpu_indices = gpu_indices
        self.cuda_env = cuda_env
        self.interval_s = interval_s
        self.nice: int | None = None
        """The sampling thread's nice value once it runs (lowest_priority)."""
        self.samples: list[tuple[float, str, str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="distbench-telemetry", daemon=True)
        self._procs: dict[int, psutil.Process] = {}
        self._is_worker_cache: dict[int, bool] = {}
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
        env = self.cuda_env if self.cuda_env is not None else {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        count = len(self.gpu_indices) if self.gpu_indices is not None else None
        bus_ids = cuda_pci_bus_ids(env) if self.cuda_env is not None else None
        self._handles, self.gpu_note = select_gpus(pynvml, count, bus_ids, env, self.gpu_indices)
        self._clock_events, self._throttle_mask = clock_event_reasons(
            pynvml, self._handles[0][1] if self._handles else None
        )

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, str, str, float]]:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        return self.samples

    def _workers(self) -> list[psutil.Process]:
        pids = descendants(self.root_pid)
        try:
            if pids is None:  # no kernel lists of children: psutil's scan of every process
                root = psutil.Process(self.root_pid)
                tree = [root, *root.children(recursive=True)]
            else:
                tree = [self._procs.get(pid) or psutil.Process(pid) for pid in [self.root_pid, *pids]]
        except psutil.NoSuchProcess:
            return []
        for p in tree:  # keep Process objects so cpu_percent() measures since the previous sample
            self._procs.setdefault(p.pid, p)
        return [self._procs[p.pid] for p in tree]

    def _is_worker(self, p: psutil.Process) -> bool:
        """A rank's own Python process: not a launcher, not the (idle) rank guard. Decided once per process
        (Ray's: at every sample)."""
        if p.pid not in self._is_worker_cache:
            name, argv = p.name(), p.cmdline()
            if name.startswith("ray::") or any("-packages/ray/" in a for a in argv[1:]):
                # Ray's processes retitle themselves as they become actors: decided again at every sample;
                # the ranks are Ray Train's workers
                return name.startswith("ray::RayTrainWorker")
            self._is_worker_cache[p.pid] = (
                "python" in name.lower()
                and "distbench.core.rankguard" not in argv
                and not _drives_ranks(argv)  # a strategy's driver (ray-ddp's): a launcher
            )
        return self._is_worker_cache[p.pid]

    def _loop(self) -> None:
        self.nice = lowest_priority()
        while not self._stop.is_set():
            t = time.time()
            for p in self._workers():
                try:
                    with p.oneshot():
                        if not self._is_worker(p):
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
                ("throttled", lambda: float(bool(self._clock_events(h) & self._throttle_mask))),
            ):
                try:
                    self.samples.append((t, src, metric, float(fn())))
                except Exception:  # metric not supported on this GPU
                    if metric == "throttled":  # unknown, never "not throttled"
                        self.samples.append((t, src, "throttle_unknown", 1.0))
                    continue


def _series(samples, source_prefix: str, metric: str, window) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    lo, hi = window if window else (float("-inf"), float("inf"))
    for t, src, m, v in samples:
        if m == metric and src.startswith(source_prefix) and lo <= t <= hi:
            out.setdefault(src, []).append((t, v))
    return out


def _per_source(fn, series: dict) -> dict:
    """fn (statistics.fmean, max) of each source's values."""
    return {s: fn(v for _, v in vals) for s, vals in series.items()}


def energy_scope(gpus_sampled: int, world_size: int | None, nodes: int = 1) -> tuple[float, str | None]:
    """(share of the point's samples that the sampled GPUs processed, what the figure covers). Only node
    0's GPUs are sampled, so on several nodes energy per sample is that node's energy over its samples."""
    if not world_size:  # unknown: unscoped (the report hides it on several nodes)
        return 1.0, None
    if gpus_sampled >= world_size:
        return 1.0, f"all {gpus_sampled} GPUs of the point"
    where = "node 0's GPUs only" if nodes > 1 else "the sampled GPUs only"
    return gpus_sampled / world_size, f"{where} ({gpus_sampled} of {world_size} GPUs)"


def summarize(
    samples,
    window: tuple[float, float] | None,
    samples_processed: int | None,
    *,
    world_size: int | None = None,
    nodes: int = 1,
) -> dict:
    """Telemetry over the measured window (None: all samples). samples_processed: the whole point's
    (all devices and nodes); with world_size, energy per sample counts only the sampled GPUs' share."""
    out: dict = {"samples": len(samples), "window": list(window) if window else None}
    cpu = _series(samples, "pid", "cpu_percent", window)
    rss = _series(samples, "pid", "rss_bytes", None)
    if cpu:
        out["cpu_util_mean"] = _per_source(statistics.fmean, cpu)
    if rss:
        out["rss_peak_bytes"] = _per_source(max, rss)
    util = _series(samples, "gpu", "util_percent", window)
    if util:
        out["gpu_util_mean"] = _per_source(statistics.fmean, util)
        peaks = out["gpu_mem_peak_bytes"] = _per_source(max, _series(samples, "gpu", "mem_used_bytes", None))
        busy = [p for p in peaks.values() if p > 0]
        if len(busy) > 1:  # DataParallel's GPU 0 overload shows here
            out["mem_imbalance"] = max(busy) / statistics.fmean(busy)
        power = _series(samples, "gpu", "power_w", window)
        if power:
            out["power_w_mean"] = _per_source(statistics.fmean, power)
        energy = _series(samples, "gpu", "energy_j", window)
        if energy and all(len(v) >= 2 and v[-1][0] > v[0][0] for v in energy.values()):
            # The counter difference spans first..last sample inside the window: scale it to the
            # whole measured window so energy per sample is not biased low.
            span = (window[1] - window[0]) if window else None
            out["energy_j"] = sum(
                (v[-1][1] - v[0][1]) * ((span / (v[-1][0] - v[0][0])) if span else 1.0) for v in energy.values()
            )
            out["energy_source"] = "NVML total-energy counter, scaled to the measured window"
            sampled = len(energy)
        elif power and window:
            out["energy_j"] = sum(out["power_w_mean"].values()) * (window[1] - window[0])
            out["energy_source"] = "mean power x measured time"
            sampled = len(power)
        if out.get("energy_j") is not None and samples_processed:
            share, out["energy_scope"] = energy_scope(sampled, world_size, nodes)
            out["energy_per_sample_j"] = out["energy_j"] / (samples_processed * share)
        throttled = [v for vals in _series(samples, "gpu", "throttled", window).values() for _, v in vals]
        unknown = _series(samples, "gpu", "throttle_unknown", window)
        # True if any sample saw the clocks pulled down; None (unknown) if the reasons could not
        # always be read and none said so; False only when every sample read "not throttled".
        out["throttled"] = True if any(throttled) else (None if unknown or not throttled else False)
        clocks = _series(samples, "gpu", "sm_clock_mhz", window)
        if clocks:
            out["sm_clock_mhz_min"] = min(v for vals in clocks.values() for _, v in vals)
    return out

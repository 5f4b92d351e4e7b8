import pytest

from distbench.kinds.sweep import derive
from distbench.run.launch import gpu_indices
from distbench.run.telemetry import summarize
from distbench.workers.stopping import combine_ranks
from tests.builders import point_config


def test_summary_uses_the_measured_window_and_scales_energy():
    s = []
    for t in (0.0, 1.0, 2.0, 3.0, 4.0):
        s += [
            (t, "gpu0", "util_percent", 90.0),
            (t, "gpu0", "power_w", 200.0),
            (t, "gpu0", "energy_j", 200.0 * t),
            (t, "gpu0", "mem_used_bytes", 8e9),
            (t, "gpu1", "mem_used_bytes", 4e9),
            (t, "gpu0", "throttled", 0.0),
            (t, "pid1", "cpu_percent", 50.0),
            (t, "pid1", "rss_bytes", 1e9),
        ]
    out = summarize(s, window=(0.5, 3.5), samples_processed=300)
    # counter moved 400 J between t=1 and t=3; the window is 3 s long -> 600 J
    assert out["energy_j"] == pytest.approx(600.0)
    assert out["energy_per_sample_j"] == pytest.approx(2.0)
    assert out["mem_imbalance"] == pytest.approx(8e9 / 6e9)
    assert out["throttled"] is False
    assert out["cpu_util_mean"] == {"pid1": 50.0}


def test_gpu_indices_follow_cuda_visible_devices():
    cfg = point_config("ddp", 2, model="resnet50", device="cuda", per_device_batch=1)
    assert gpu_indices(cfg, {}) == [0, 1]
    assert gpu_indices(cfg, {"CUDA_VISIBLE_DEVICES": "3,5,7"}) == [3, 5]
    assert gpu_indices(cfg, {"CUDA_VISIBLE_DEVICES": "GPU-abc,GPU-def"}) is None


def test_independent_replicas_take_the_slowest_ranks_series():
    per_rank = [[1.0, 3.0, 1.0], [2.0, 1.5, 2.0]]
    assert combine_ranks(per_rank, synchronized=True) == [2.0, 3.0, 2.0]
    assert combine_ranks(per_rank, synchronized=False) == [2.0, 1.5, 2.0]


def test_derive_keeps_the_median_over_repeats():
    rec = {
        "status": "ok",
        "framework": "torch",
        "strategy": "ddp",
        "world_size": 2,
        "global_batch": 4,
        "step_times_s": [0.1, 0.2],
        "measured_steps": 2,
        "throughput": 33.0,
    }
    base = {"status": "ok", "strategy": "torch", "throughput": 22.0}
    out = derive(rec, {"torch": base})
    assert out["throughput"] == 33.0 and out["speedup"] == pytest.approx(1.5)


def test_cpu_telemetry_samples_the_worker_not_its_rank_guard():
    import subprocess
    import sys
    import time

    from distbench.run.telemetry import Sampler

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distbench.core.rankguard",
            sys.executable,
            "-c",
            "import time\nfor _ in range(10**7): pass\ntime.sleep(1)",
        ]
    )
    sampler = Sampler(proc.pid, interval_s=0.2, gpus=False).start()
    time.sleep(1.5)
    samples = sampler.stop()
    proc.wait(timeout=60)
    sources = {src for _, src, _, _ in samples}
    assert len(sources) == 1 and sources != {f"pid{proc.pid}"}  # the worker, never the guard (proc)


def test_the_sampler_reads_only_the_points_process_tree_at_the_lowest_priority(monkeypatch):
    """Issue 34: the sampler took a core from an N=1 rank's OpenMP team at each sample: psutil's children()
    read every process's stat on the machine (2.3 ms a sample, 95% of its CPU), at the workers' priority.
    It now walks the kernel's lists of the tree's children, and its thread runs at nice 19."""
    import os
    import subprocess
    import sys
    import time

    import psutil

    from distbench.run import telemetry
    from distbench.run.telemetry import Sampler

    if telemetry.descendants(os.getpid()) is None:
        pytest.skip("this kernel keeps no /proc/PID/task/TID/children lists")
    proc = subprocess.Popen(
        [sys.executable, "-m", "distbench.core.rankguard", sys.executable, "-c", "import time; time.sleep(30)"]
    )
    try:
        deadline = time.monotonic() + 30
        while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert telemetry.descendants(proc.pid) == [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]

        def scan(*_a, **_k):
            raise AssertionError("a scan of every process on the machine")

        monkeypatch.setattr(psutil.Process, "children", scan)
        sampler = Sampler(proc.pid, interval_s=0.1, gpus=False).start()
        while not sampler.samples and time.monotonic() < deadline:
            time.sleep(0.05)
        samples = sampler.stop()
    finally:
        proc.kill()
        proc.wait()
    assert sampler.nice == telemetry.SAMPLER_NICE
    assert samples and {src for _, src, _, _ in samples} != {f"pid{proc.pid}"}  # the worker, not its guard

"""The CUDA paths' decisions, tested without a GPU (issue 14): injected device counts, fake
TensorFlow / Horovod / NVML objects, the install's NCCL decision with fake tools on PATH, and the
cross-replica loss-scaling fix run for real on two logical CPU devices."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from distbench.core.config import PointConfig
from distbench.run import telemetry
from distbench.workers import tf_device
from distbench.workers.comm_common import horovod_backend
from distbench.workers.tf_multiworker import worker_gpus
from tests.builders import point_config

ROOT = Path(__file__).resolve().parents[1]


def _cfg(**kw) -> PointConfig:
    return point_config("mirrored", 2, **{"device": "cuda", **kw})


# -- item 3: each process sees only the point's GPUs -----------------------------------------------
class FakeTF:
    """Just enough of tf.config / tf.distribute / tf.test to watch what the launchers ask for."""

    def __init__(self, gpus: int):
        self.gpus = [f"PhysicalGPU{i}" for i in range(gpus)]
        self.visible, self.growth, self.synced = None, [], 0
        self.config = SimpleNamespace(
            list_physical_devices=lambda kind: list(self.gpus) if kind == "GPU" else ["CPU0"],
            set_visible_devices=self._set_visible,
            experimental=SimpleNamespace(
                set_memory_growth=lambda g, on: self.growth.append(g), enable_tensor_float_32_execution=lambda on: None
            ),
        )  # tests/test_mathmode.py
        self.distribute = SimpleNamespace(MirroredStrategy=self._mirrored)
        self.test = SimpleNamespace(experimental=SimpleNamespace(sync_devices=self._sync))

    def _set_visible(self, devices, kind):
        assert kind == "GPU"
        self.visible = list(devices)

    def _mirrored(self, devices):
        return SimpleNamespace(
            num_replicas_in_sync=len(devices), devices=devices, extended=SimpleNamespace(_cross_device_ops=None)
        )

    def _sync(self):
        self.synced += 1


@pytest.fixture
def fake_tf(monkeypatch):
    def make(gpus):
        tf = FakeTF(gpus)
        monkeypatch.setitem(sys.modules, "tensorflow", tf)
        return tf

    return make


def test_gpu_selection():
    assert tf_device.gpu_selection(8, 4) == [0, 1, 2, 3]
    assert tf_device.gpu_selection(8, 1, first=5) == [5]
    with pytest.raises(RuntimeError, match=r"needs GPU 0..3 on this node but TensorFlow sees 2 GPU"):
        tf_device.gpu_selection(2, 4)


def test_tf_baseline_and_horovod_tf_see_one_gpu(fake_tf):
    tf = fake_tf(8)
    tf_device.configure(_cfg(strategy="tf", world_size=1))
    assert tf.visible == ["PhysicalGPU0"] and tf.growth == ["PhysicalGPU0"]
    tf = fake_tf(8)
    tf_device.configure(_cfg(strategy="horovod-tf", world_size=4), visible_gpu=3)  # local rank 3
    assert tf.visible == ["PhysicalGPU3"]


def test_mirrored_sees_exactly_n_gpus(fake_tf):
    from distbench.workers.tf_mirrored import make_distribution

    tf = fake_tf(8)
    dist = make_distribution()
    dist.start(_cfg(world_size=4))
    assert tf.visible == [f"PhysicalGPU{i}" for i in range(4)]
    assert dist.strategy.devices == ["/GPU:0", "/GPU:1", "/GPU:2", "/GPU:3"] and dist.world == 4
    fake_tf(2)
    with pytest.raises(RuntimeError, match="TensorFlow sees 2 GPU"):
        make_distribution().start(_cfg(world_size=4))


def test_multiworker_divides_n_among_workers():
    two_nodes = {"cluster": {"worker": ["a:8888", "b:8888"]}, "task": {"type": "worker", "index": 1}}
    assert worker_gpus(two_nodes, 16) == 8  # not every GPU of the node: 16 replicas on 2 x 8 GPUs
    assert worker_gpus(two_nodes, 4) == 2
    with pytest.raises(RuntimeError, match="5 replicas cannot be divided among 2 worker"):
        worker_gpus(two_nodes, 5)


# -- item 5: every device is synchronized before a clock read --------------------------------------
def test_tf_sync_waits_for_every_device_on_gpus(fake_tf):
    tf = fake_tf(2)
    read = []
    loss = SimpleNamespace(numpy=lambda: read.append(1))
    tf_device.make_sync(_cfg(), tf)(loss)
    assert read == [1] and tf.synced == 1
    assert tf_device.make_sync(_cfg(device="cpu"), tf) is tf_device.sync  # CPU: the function call is synchronous


# -- item 4: what carries Horovod's all-reduce ----------------------------------------------------
def test_horovod_backend_is_what_horovod_uses():
    hvd = lambda nccl, gloo: SimpleNamespace(nccl_built=lambda: nccl, gloo_enabled=lambda: gloo)  # noqa: E731
    assert horovod_backend(hvd(2708, True), "cuda") == "nccl"
    assert horovod_backend(hvd(2708, True), "cpu") == "gloo"
    assert horovod_backend(hvd(0, True), "cuda") == "gloo"  # GPU tensors staged through the host
    assert horovod_backend(hvd(0, False), "cuda") == "mpi"


# -- item 7: telemetry on the workers' GPUs, clock events, unknown is not "not throttled" ----------
class FakeNVML:
    """pynvml with four GPUs; NVML enumerates them by PCI bus id."""

    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonSwThermalSlowdown = 0x20
    nvmlClocksEventReasonHwThermalSlowdown = 0x40
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0
    BUS = ["00000000:1A:00.0", "00000000:3B:00.0", "00000000:88:00.0", "00000000:B1:00.0"]

    def __init__(self, reasons=None):
        self.reasons = reasons or {}  # handle index -> reasons; missing: the query fails

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.BUS)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("h", i)

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self.BUS[h[1]].encode())

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=90)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=1e9)

    def nvmlDeviceGetPowerUsage(self, h):
        return 250000

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return 1000

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1400

    def nvmlDeviceGetTemperature(self, h, kind):
        return 60

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        if h[1] not in self.reasons:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.reasons[h[1]]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        raise AssertionError("the deprecated throttle-reasons query must not be used")


def test_select_gpus_maps_cuda_devices_by_pci_bus_id():
    nv = FakeNVML()
    # FASTEST_FIRST: CUDA device 0 is NVML's GPU 2, CUDA device 1 is NVML's GPU 0 (CUDA's bus id format)
    handles, note = telemetry.select_gpus(
        nv, 2, ["0000:88:00.0", "0000:1a:00.0", "0000:3b:00.0"], {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    )
    assert [i for i, _ in handles] == [2, 0] and note is None
    handles, note = telemetry.select_gpus(nv, 1, ["0000:99:00.0"], {})
    assert handles == [] and "no NVML device at PCI bus id(s) 0000:99:00.0" in note


def test_select_gpus_without_the_driver_never_guesses_under_fastest_first():
    nv = FakeNVML()
    handles, note = telemetry.select_gpus(nv, 2, None, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}, [0, 1])
    assert handles == [] and "CUDA_DEVICE_ORDER=FASTEST_FIRST" in note
    handles, note = telemetry.select_gpus(nv, 2, None, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, [1, 3])
    assert [i for i, _ in handles] == [1, 3] and note is None


def test_cuda_bus_id_query_without_a_driver_is_none():
    if Path("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists():
        pytest.skip("a CUDA driver is installed here")
    assert telemetry.cuda_pci_bus_ids(dict(os.environ)) is None


def test_sampler_uses_the_clock_event_api_and_records_unknown(monkeypatch):
    nv = FakeNVML(reasons={0: 0x1, 2: 0x0})  # GPU 0 idle (not a slowdown), GPU 2 fine, others fail
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setattr(telemetry, "cuda_pci_bus_ids", lambda env: ["0000:88:00.0", "0000:1A:00.0"])
    s = telemetry.Sampler(os.getpid(), gpus=True, gpu_indices=[0, 1], cuda_env={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert [i for i, _ in s._handles] == [2, 0]
    s._sample_gpus(1.0)
    assert {src for _, src, _, _ in s.samples} == {"gpu2", "gpu0"}
    assert telemetry.summarize(s.samples, None, None)["throttled"] is False
    nv.reasons = {0: 0x4}  # GPU 0 power-capped; GPU 2's query now fails
    s._sample_gpus(2.0)
    assert "gpu2" in {src for _, src, m, _ in s.samples if m == "throttle_unknown"}
    assert telemetry.summarize(s.samples, None, None)["throttled"] is True
    only_unknown = [x for x in s.samples if x[1] == "gpu2" and x[0] == 2.0]
    assert telemetry.summarize(only_unknown, None, None)["throttled"] is None  # unknown, not "no"


# -- item 8: the install's NCCL decision ----------------------------------------------------------
def _decide(tmp_path, *, torch_cuda: str, tools=(), env=None):
    """Run install.sh --horovod-gpu-ops with a fake venv python (torch.version.cuda = torch_cuda)
    and fake tools on PATH; returns (exit code, stdout, stderr)."""
    venv, fakebin = tmp_path / "venv", tmp_path / "fakebin"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    fakebin.mkdir(exist_ok=True)
    py = venv / "bin" / "python"
    py.write_text(f"#!/bin/sh\necho '{torch_cuda}'\n")
    py.chmod(0o755)
    for tool in tools:
        (fakebin / tool).write_text("#!/bin/sh\nexit 0\n")
        (fakebin / tool).chmod(0o755)
    run_env = {
        "PATH": f"{fakebin}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "VENV": str(venv),
        "HOROVOD_CUDA_HOME": str(tmp_path / "no-cuda"),
        **(env or {}),
    }
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install.sh"), "--horovod-gpu-ops"],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.returncode, out.stdout.strip(), out.stderr


@pytest.fixture
def no_system_nvcc():
    if any(Path(d, "nvcc").exists() for d in ("/usr/bin", "/bin")):
        pytest.skip("this machine has a system nvcc on PATH")


def test_install_nccl_from_the_toolkit_not_a_visible_gpu(tmp_path, no_system_nvcc):
    # A login node: CUDA torch and the toolkit, no driver, no GPU -> NCCL.
    assert _decide(tmp_path, torch_cuda="12.8", tools=("nvcc",))[:2] == (0, "NCCL")
    cuda_home = tmp_path / "cuda"
    (cuda_home / "bin").mkdir(parents=True)
    (cuda_home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (cuda_home / "bin" / "nvcc").chmod(0o755)
    assert _decide(tmp_path / "b", torch_cuda="12.8", env={"HOROVOD_CUDA_HOME": str(cuda_home)})[:2] == (0, "NCCL")


def test_install_no_nccl_without_toolkit_or_cuda_torch(tmp_path, no_system_nvcc):
    rc, out, err = _decide(tmp_path, torch_cuda="12.8", tools=("nvidia-smi",))
    assert (rc, out) == (0, "") and "no CUDA toolkit was found" in err and "GPU driver is present" in err
    rc, out, err = _decide(tmp_path / "b", torch_cuda="", tools=("nvcc", "nvidia-smi"))
    assert (rc, out) == (0, "") and "torch is a CPU build" in err


def test_install_nccl_forced_either_way(tmp_path):
    assert _decide(tmp_path, torch_cuda="", env={"DISTBENCH_HOROVOD_NCCL": "1"})[:2] == (0, "NCCL")
    assert _decide(tmp_path, torch_cuda="12.8", tools=("nvcc",), env={"DISTBENCH_HOROVOD_NCCL": "0"})[:2] == (0, "")
    rc, out, err = _decide(tmp_path, torch_cuda="12.8", env={"DISTBENCH_HOROVOD_NCCL": "yes"})
    assert rc == 2 and err.strip() == "install.sh: DISTBENCH_HOROVOD_NCCL must be 1, 0 or unset, not 'yes'"


# -- items 2 and 6: run for real, each in a fresh process (global framework state) ----------------
def _python(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.slow
def test_mirrored_amp_skips_the_step_when_any_replica_overflows():
    out = _python("""
        import numpy as np
        from distbench.core.config import PointConfig
        from distbench.workers import tf_common as tfc
        from distbench.workers import tf_device

        cfg = PointConfig(strategy="mirrored", model="resnet18", world_size=2, device="cpu", per_device_batch=2,
                          precision="amp", num_classes=3)
        tf = tf_device.configure(cfg, logical_cpus=2)
        import keras
        assert hasattr(tf.test.experimental, "sync_devices")  # what make_sync uses on GPUs exists in this TF
        strategy = tf.distribute.MirroredStrategy(devices=tf_device.device_names(cfg, 2))
        with strategy.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
            opt = tfc.make_optimizer(cfg)
            opt.build(model.trainable_variables)
        step = tfc.local_step(cfg, model, opt, global_batch=cfg.global_batch)
        run = tf.function(lambda x, y: strategy.run(step, args=(x, y)))

        def batches(bad_replica):
            def fn(ctx):
                x = np.ones((2, 4), np.float32)
                if ctx.replica_id_in_sync_group == bad_replica:
                    x[0, 0] = np.inf  # this replica's loss and gradients overflow
                return tf.constant(x), tf.constant([0, 1])
            return strategy.experimental_distribute_values_from_function(fn)

        def weights():
            return [np.stack([r.numpy() for r in strategy.experimental_local_results(w.value)])
                    for w in model.trainable_weights]

        start, scale = weights(), float(opt.dynamic_scale.numpy())
        run(*batches(bad_replica=1))
        after = weights()
        assert all(np.isfinite(w).all() for w in after), "inf/nan reached the weights"
        assert all(np.array_equal(a, b) for a, b in zip(start, after)), "the step was not skipped"
        assert float(opt.dynamic_scale.numpy()) == scale / 2, "the loss scale was not lowered"
        run(*batches(bad_replica=None))  # finite everywhere: a normal update
        moved = weights()
        assert all(np.isfinite(w).all() for w in moved)
        assert not all(np.array_equal(a, b) for a, b in zip(after, moved)), "a finite step must update"
        assert all(np.array_equal(w[0], w[1]) for w in moved), "replicas diverged"
        print("ok", scale, float(opt.dynamic_scale.numpy()))
    """)
    assert out.startswith("ok")


@pytest.mark.slow
def test_verify_mode_turns_tf32_off_and_deterministic_kernels_on():
    out = _python("""
        import json, os
        import torch
        from distbench.workers import torch_common as tc
        from distbench.workers import tf_common as tfc
        t = tc.verify_determinism()
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        import tensorflow as tf
        f = tfc.verify_determinism(tf)
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
        print(json.dumps([t, f]))
    """)
    import json

    torch_rec, tf_rec = json.loads(out)
    assert torch_rec == {"deterministic_algorithms": "warn_only", "tf32": False, "cublas_workspace_config": ":4096:8"}
    assert tf_rec == {"op_determinism": True, "tf32": False}


# -- issue 22, item 8: NVML clock events probed once, with the deprecated call where the driver is older ---
class OldDriverNVML(FakeNVML):
    """Bindings with both calls, a driver before R535: the newer one is not found (on every call)."""

    nvmlClocksThrottleReasonSwPowerCap = 0x4
    nvmlClocksThrottleReasonHwSlowdown = 0x8

    def __init__(self, reasons=None):
        super().__init__(reasons)
        self.calls = {"newer": 0, "older": 0}

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self.calls["newer"] += 1
        raise RuntimeError("NVML_ERROR_FUNCTION_NOT_FOUND")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        self.calls["older"] += 1
        return self.reasons[h[1]]


def test_clock_events_fall_back_to_the_deprecated_call_on_drivers_before_r535(monkeypatch):
    nv = OldDriverNVML(reasons={0: 0x4, 2: 0x0})
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setattr(telemetry, "cuda_pci_bus_ids", lambda env: ["0000:88:00.0", "0000:1A:00.0"])
    s = telemetry.Sampler(os.getpid(), gpus=True, gpu_indices=[0, 1], cuda_env={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert nv.calls == {"newer": 1, "older": 1}  # probed once, at start
    s._sample_gpus(1.0)
    s._sample_gpus(2.0)
    assert nv.calls == {"newer": 1, "older": 5}  # every sample then asks the call that answers
    summary = telemetry.summarize(s.samples, None, None)
    assert summary["throttled"] is True  # GPU 0 power-capped: known, where before every sample was 'unknown'
    assert not [x for x in s.samples if x[2] == "throttle_unknown"]
    # with the newer call answering, it is the one used (and the deprecated one never asked)
    query, mask = telemetry.clock_event_reasons(FakeNVML(reasons={0: 0}), ("h", 0))
    assert query.__name__ == "nvmlDeviceGetCurrentClocksEventReasons" and mask == 0x4 | 0x8 | 0x20 | 0x40 | 0x80


# -- issue 22, item 7: `distbench comm` measures NCCL on GPUs unless told otherwise ----------------
def test_comm_defaults_to_nccl_on_cuda_and_gloo_on_cpu_workers(monkeypatch):
    from click.testing import CliRunner

    from distbench.commands import comm as cmd
    from distbench.kinds import plans as plan_kinds
    from distbench.kinds.commbench import default_backend
    from distbench.run.devices import DeviceChoice

    assert default_backend(None, "cuda")[0] == "nccl" and default_backend(None, "cpu") == ("gloo", None)
    assert default_backend("gloo", "cuda") == ("gloo", None)  # an explicit choice stands
    ran = []
    monkeypatch.setattr(
        plan_kinds, "resolve_device", lambda device, gpus, visible: DeviceChoice("cuda", 2, "on 2 GPUs")
    )
    fake = {"status": "skipped", "reason": "test", "strategy": "comm-nccl", "world_size": 2}
    monkeypatch.setattr(cmd.runner, "run_point", lambda s, cfg, *a: ran.append(cfg) or dict(fake))
    monkeypatch.setattr(cmd.runner, "new_sweep", _no_sweep)
    result = CliRunner().invoke(cmd.comm, ["--gpus", "2", "--sizes", "1K"])
    assert result.exit_code == 0, result.output
    assert [c.comm_bench.backend for c in ran] == ["nccl"] and ran[0].strategy == "comm-nccl"
    assert "--backend nccl: the default on CUDA GPUs" in result.output


def _no_sweep(*args):
    """runner.new_sweep without a store: the points run, their records are only kept."""
    from distbench.run.runner import OpenSweep

    return contextlib.nullcontext(OpenSweep(None, "s0", Path("/nonexistent")))


# -- issue 22, item 2: Horovod without NCCL is not tabulated next to NCCL DDP on GPUs ---------------
def test_horovod_points_are_skipped_on_cuda_when_horovod_has_no_nccl(monkeypatch):
    from distbench.core import horovod_nccl, strategies
    from distbench.run.plan import SweepOptions, make_plan

    built = {"horovod.torch": False, "horovod.tensorflow": True}
    monkeypatch.setattr(horovod_nccl, "nccl_built", lambda module: built[module])
    monkeypatch.setattr(strategies, "missing_modules", lambda s: [])
    opts = SweepOptions(gpus="1,2", strategies=("ddp", "horovod-torch", "horovod-tf"), add_baselines=True)
    points = {(p.strategy.name, p.config.world_size): p.skip_reason for p in make_plan(opts, visible_gpus=2).points}
    assert points[("horovod-torch", 2)].startswith(
        "horovod.torch was built without NCCL (hvd.nccl_built() is false): on GPUs it would stage every tensor "
        "through host memory over Gloo"
    )
    assert points[("horovod-tf", 2)] is None and points[("ddp", 2)] is None
    cpu = make_plan(SweepOptions(gpus="1,2", strategies=("horovod-torch",), device="cpu"), visible_gpus=0)
    assert all(p.skip_reason is None for p in cpu.points)  # CPU workers: Gloo is what they measure


def test_the_nccl_probe_asks_a_fresh_interpreter(tmp_path, monkeypatch):
    from distbench.core import horovod_nccl

    (tmp_path / "fakehvd_nccl.py").write_text("def nccl_built():\n    return 2708\n")
    (tmp_path / "fakehvd_gloo.py").write_text("def nccl_built():\n    return 0\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    horovod_nccl.nccl_built.cache_clear()
    assert horovod_nccl.nccl_built("fakehvd_nccl") is True
    assert horovod_nccl.nccl_built("fakehvd_gloo") is False
    assert horovod_nccl.nccl_built("no_such_module_here") is None  # the point reports its own import error
    horovod_nccl.nccl_built.cache_clear()


@pytest.mark.slow
def test_the_nccl_probe_agrees_with_the_installed_horovod():
    pytest.importorskip("horovod.torch")
    from distbench.core import horovod_nccl

    horovod_nccl.nccl_built.cache_clear()
    asked = subprocess.run(
        [sys.executable, "-c", "import horovod.torch as h; print(bool(h.nccl_built()))"], capture_output=True, text=True
    )
    assert horovod_nccl.nccl_built("horovod.torch") is (asked.stdout.strip() == "True")

"""Fair CPU efficiency (issue 10 item 5): the per-core baselines in the plan, both efficiencies in derive,
and TensorFlow's thread pools capped at the worker's share of the cores like torch's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from distbench.core.config import point_key
from distbench.core.strategies import parse_strategies
from distbench.kinds.sweep import add_baseline, derive
from distbench.results.kind import RecordKind, record_kind
from distbench.run import plan as plan_mod
from distbench.run.plan import SweepOptions, make_plan
from distbench.slurm.plan import plan_sweep
from tests.builders import point_config
from tests.conftest import require


def _plan(monkeypatch, cores: int, gpus, strategies=("ddp", "horovod-tf"), **kw):
    monkeypatch.setattr(plan_mod, "cpu_cores", lambda: cores)
    opts = SweepOptions(
        model="resnet18",
        gpus=list(gpus),
        strategies=parse_strategies(strategies),
        device="cpu",
        image_size=32,
        **{"batch_size": 2, **kw},
    )
    return make_plan(opts, visible_gpus=0)


def test_plan_adds_a_labelled_baseline_per_distinct_thread_count(monkeypatch):
    plan = _plan(monkeypatch, 4, [1, 2, 4])
    got = [
        (p.strategy.name, p.config.world_size, p.config.threads_per_worker, p.config.baseline_threads)
        for p in plan.points
    ]
    # each framework's baseline on all 4 cores, then again on 2 and on 1 thread(s): the threads of
    # each worker at N=2 and N=4; right after it, so every baseline runs before the scaling points
    assert got[:6] == [
        ("torch", 1, 4, None),
        ("torch", 1, 2, 2),
        ("torch", 1, 1, 1),
        ("tf", 1, 4, None),
        ("tf", 1, 2, 2),
        ("tf", 1, 1, 1),
    ]
    assert ("ddp", 2, 2, None) in got and ("horovod-tf", 4, 1, None) in got
    extra = [p for p in plan.points if p.config.baseline_threads is not None]
    assert all(p.auto_added and record_kind(p.config.to_dict()) is RecordKind.BASELINE_REFERENCE for p in extra)
    assert any("added 'torch' at 1 thread(s)" in n and "efficiency per core" in n for n in plan.notes)
    # resume, the report and compare tell them apart from the main baseline
    keys = {point_key(p.strategy.name, p.config.to_dict()) for p in plan.points}
    assert len(keys) == len(plan.points)


def test_no_per_core_baseline_when_threads_do_not_differ_or_on_gpus(monkeypatch):
    assert not [p for p in _plan(monkeypatch, 1, [1, 2]).points if p.config.baseline_threads]  # 1 core: 1 thread each
    # dp alone on CPU workers is skipped: nothing would use the per-core baseline
    assert not [p for p in _plan(monkeypatch, 2, [1, 2], ("dp",)).points if p.config.baseline_threads]
    gpu = make_plan(SweepOptions(model="resnet18", gpus=[1, 2], strategies=parse_strategies(("ddp",))), visible_gpus=2)
    assert [p.strategy.name for p in gpu.points] == ["torch", "ddp", "ddp"]
    # one per batch size that its N-worker points use
    multi = _plan(monkeypatch, 2, [1, 2], ("ddp",), batch_size=(2, 4))
    assert [(p.config.per_device_batch, p.config.baseline_threads) for p in multi.points if p.strategy.baseline] == [
        (2, None),
        (2, 1),
        (4, None),
        (4, 1),
    ]


def test_slurm_jobs_leave_the_per_core_baselines_out(monkeypatch):
    monkeypatch.setattr(plan_mod, "cpu_cores", lambda: 2)
    opts = SweepOptions(
        model="resnet18", gpus=[1, 2], strategies=parse_strategies(("ddp",)), device="cpu", image_size=32
    )
    slurm = plan_sweep(opts, [1], None)
    assert [p.key for p in slurm.points] == ["torch-g1-n1", "ddp-g1-n1", "ddp-g2-n1"]


def _record(strategy, framework, n, threads, throughput, baseline_threads=None, device="cpu"):
    cfg = point_config(
        strategy, n, device=device, image_size=32, threads_per_worker=threads, baseline_threads=baseline_threads
    ).to_dict()
    return {
        "strategy": strategy,
        "framework": framework,
        "world_size": n,
        "device": device,
        "status": "ok",
        "global_batch": 2 * n,
        "config": cfg,
        "throughput": throughput,
        "measured_steps": 150,
    }


def test_derive_reports_efficiency_against_the_whole_machine_and_per_core():
    whole = _record("torch", "torch", 1, 2, 100)
    per_core = _record("torch", "torch", 1, 1, 60, baseline_threads=1)
    baselines: dict = {}
    for base in (whole, per_core):
        add_baseline(baselines, base)
        derive(base, baselines)
    assert baselines["torch"] is whole  # the per-core reference never replaces the main baseline
    ddp2 = derive(_record("ddp", "torch", 2, 1, 110), baselines)
    assert ddp2["efficiency"] == pytest.approx(110 / (2 * 100))  # whole machine: 55%
    assert ddp2["efficiency_per_core"] == pytest.approx(110 / (2 * 60))  # per core: 92%
    assert ddp2["per_core_baseline"] == "torch on 1 thread(s)"
    ddp1 = derive(_record("ddp", "torch", 1, 2, 90), baselines)
    assert ddp1["efficiency_per_core"] == pytest.approx(ddp1["efficiency"]) == pytest.approx(0.9)
    # the reference itself is not a scaling point
    assert per_core["speedup"] is None and per_core["efficiency"] is None
    assert "reference for efficiency per core" in per_core["speedup_note"]
    # without its per-core baseline a point says so; on GPUs there is no per-core efficiency
    lonely = derive(_record("ddp", "torch", 4, 1, 110), {"torch": whole})
    assert lonely["efficiency_per_core"] is None and "on 1 thread(s)" in lonely["efficiency_per_core_note"]
    gpu_base = _record("torch", "torch", 1, 1, 100, device="cuda")
    gpu = derive(_record("ddp", "torch", 2, 1, 180, device="cuda"), {"torch": gpu_base})
    assert gpu["efficiency"] == pytest.approx(0.9) and gpu["efficiency_per_core"] is None


class _FakeTF:
    """Records tf.config calls: configure() with no TensorFlow runtime."""

    def __init__(self):
        self.calls: list[tuple] = []
        fake = self

        class _Threading:
            def set_intra_op_parallelism_threads(self, n):
                fake.calls.append(("intra", n))

            def set_inter_op_parallelism_threads(self, n):
                fake.calls.append(("inter", n))

        class _Config:
            threading = _Threading()

            def set_visible_devices(self, devices, kind):
                fake.calls.append(("visible", kind, list(devices)))

            def list_physical_devices(self, kind):
                return ["CPU:0"]

            def set_logical_device_configuration(self, device, logical):
                fake.calls.append(("logical", len(logical)))

            LogicalDeviceConfiguration = dict

        self.config = _Config()


@pytest.mark.parametrize("threads,logical,expected", [(1, 1, 1), (2, 1, 2), (1, 2, 2)])
def test_tf_thread_pools_are_capped_at_the_workers_share(monkeypatch, threads, logical, expected):
    from distbench.workers import tf_device

    fake = _FakeTF()
    monkeypatch.setitem(sys.modules, "tensorflow", fake)
    cfg = point_config("tf", logical, threads_per_worker=threads)
    tf_device.configure(cfg, logical_cpus=logical)
    # one worker with one core gets one inter-op thread, not two; a process hosting two replicas gets both shares
    assert ("intra", expected) in fake.calls and ("inter", expected) in fake.calls


@pytest.mark.slow
@require("tensorflow")
def test_real_tf_runtime_keeps_the_cap():
    code = (
        "from distbench.core.config import PointConfig\n"
        "from distbench.workers import tf_device\n"
        "cfg = PointConfig(strategy='tf', model='resnet18', world_size=1, device='cpu', per_device_batch=2,"
        " threads_per_worker=1)\n"
        "tf = tf_device.configure(cfg)\n"
        "print(tf.config.threading.get_intra_op_parallelism_threads(),"
        " tf.config.threading.get_inter_op_parallelism_threads())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["1", "1"]


def test_per_core_efficiency_counts_physical_cores_not_smt_siblings(monkeypatch):
    """Issue 20 item 5: 4 logical CPUs that are 2 cores with 2 hyperthreads each: 2 one-thread workers run
    at once, not 4."""
    from distbench.core import mfu
    from distbench.kinds import sweep as sweep_mod

    assert mfu.physical_cores(4, machine_logical=8, machine_physical=4) == 2
    assert mfu.physical_cores(3, machine_logical=None, machine_physical=None) >= 1
    assert mfu.physical_cores(4, machine_logical=4, machine_physical=None) == 4  # unknown: the logical count
    monkeypatch.setattr(sweep_mod, "cpu_cores", lambda: 4)
    monkeypatch.setattr(sweep_mod.mfu, "physical_cores", lambda logical: logical // 2)
    baselines: dict = {}
    for base in (_record("torch", "torch", 1, 2, 100), _record("torch", "torch", 1, 1, 60, baseline_threads=1)):
        add_baseline(baselines, base)
    ddp4 = derive(_record("ddp", "torch", 4, 1, 120), baselines)
    assert ddp4["efficiency_per_core"] == pytest.approx(1.0)
    assert "2 of the 4 workers can run at once on 2 physical cores" in ddp4["per_core_baseline"]


def test_per_core_efficiency_counts_only_the_workers_that_can_run_at_once(monkeypatch):
    """4 one-thread workers on 2 cores: perfect scaling is 2x the one-thread baseline, so a point at
    exactly 2x reads 100% per core (dividing by N would read 50% for perfect data parallelism)."""
    from distbench.kinds import sweep as sweep_mod

    monkeypatch.setattr(sweep_mod, "cpu_cores", lambda: 2)
    monkeypatch.setattr(sweep_mod.mfu, "physical_cores", lambda logical: logical)  # no SMT
    baselines: dict = {}
    for base in (_record("torch", "torch", 1, 2, 100), _record("torch", "torch", 1, 1, 60, baseline_threads=1)):
        add_baseline(baselines, base)
    ddp4 = derive(_record("ddp", "torch", 4, 1, 120), baselines)
    assert ddp4["efficiency_per_core"] == pytest.approx(1.0)
    assert ddp4["efficiency"] == pytest.approx(120 / (4 * 100))
    assert "2 of the 4 workers can run at once on 2 physical cores" in ddp4["per_core_baseline"]
    ddp2 = derive(_record("ddp", "torch", 2, 1, 110), baselines)
    assert ddp2["per_core_baseline"] == "torch on 1 thread(s)"

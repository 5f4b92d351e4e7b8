"""Builders of records and sweeps whose numbers can be worked out by hand, and the headless Chromium
runner: the tests' shared library (fixtures that use them are in conftest.py).

Records come from distbench.results.record.base_record with known step times:
torch baseline, per-device batch 4, 0.1 s/step -> 40 samples/s.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from distbench.core.config import PointConfig
from distbench.core.workload import Workload
from distbench.kinds.sweep import derive
from distbench.kinds.verify import DEFAULT_RTOL
from distbench.results.record import base_record
from distbench.results.store import Store

# -- point configs ---------------------------------
TINY = dict(image_size=32, steps=2, warmup=1, threads_per_worker=1)
"""What makes a real point quick on CPU workers: 32 px, 2 measured steps after 1 warmup, one thread per worker."""


def point_config(strategy: str = "ddp", n: int = 2, /, **fields) -> PointConfig:
    """The tests' one PointConfig builder: `strategy` at N=`n`, resnet18 on CPU workers, 2 samples per device,
    every other field PointConfig's default unless `fields` sets it."""
    return PointConfig(
        **{"strategy": strategy, "world_size": n, "model": "resnet18", "device": "cpu", "per_device_batch": 2, **fields}
    )


def tiny_config(strategy: str = "ddp", n: int = 2, /, **fields) -> PointConfig:
    """point_config() sized for a real run on CPU workers (TINY), `fields` overriding."""
    return point_config(strategy, n, **{**TINY, **fields})


# -- records and sweeps ---------------------------
def point(
    strategy: str,
    n: int,
    step_s: float | None = None,
    *,
    framework: str = "torch",
    batch: int = 4,
    steps: int = 200,
    jitter: float = 0.01,
    status: str = "ok",
    reason: str | None = None,
    model: str = "resnet50",
    scaling: str = "weak",
    device: str = "cpu",
    times=None,
    nodes: int = 1,
    config: dict | None = None,
    **fields,
) -> dict:
    """A record with `steps` step times step_s * (1 + jitter * z), z a fixed pseudo-random series
    symmetric about 0 so the mean and median are exactly step_s (not periodic: batch means must see real spread; 200 steps give the
    within-run CI its batches). `config`: more PointConfig fields (precision, image_size, ...)."""
    cfg = {
        "model": model,
        "world_size": n,
        "per_device_batch": batch,
        "device": device,
        "scaling": scaling,
        "nodes": nodes,
        **(config or {}),
    }
    r = base_record(cfg, strategy=strategy, framework=framework, status=status, reason=reason)
    if status == "ok":
        if times is None:
            # a pseudo-random half and its mirror image, shuffled: mean and median exactly step_s
            rng = random.Random(f"{strategy}/{n}/{nodes}")
            z = [rng.gauss(0.0, 1.0) for _ in range(steps // 2)]
            mirror = [-v for v in z]
            rng.shuffle(mirror)
            times = [step_s * (1 + jitter * v) for v in z + mirror + [0.0] * (steps % 2)]
        r["step_times_s"] = list(times)
    r.update(fields)
    return r


def add_sweep(
    store: Store, records: list[dict], *, command: str = "distbench scale --gpus 1,2,4", options: dict | None = None
) -> str:
    """Commit records as one sweep, deriving speedup/efficiency the way a real sweep does."""
    sid = store.start_sweep(
        command=command,
        version="0",
        git_sha=None,
        env={"hostname": "testhost", "cpu_count": 2},
        options=options or {"model": "resnet50"},
        notes=["fixture sweep"],
    )
    baselines: dict[str, dict] = {}
    for r in records:
        if r["strategy"] in ("torch", "tf"):
            baselines[r["framework"]] = r
        if not r["strategy"].startswith("comm"):
            derive(r, baselines)
        store.add_point(sid, r)
    store.finish_sweep(sid, "complete")
    return sid


def scaling_records(**extra_ddp) -> list[dict]:
    """Efficiencies: ddp 0.95, 0.90, 0.85, 0.60 at N=1,2,4,8; horovod-torch 0.90, 0.70, 0.50."""
    return [
        point("torch", 1, 0.1),  # 40 samples/s
        point("ddp", 1, 0.1 / 0.95),  # 38 -> 0.95
        point("ddp", 2, 0.1 / 0.90),  # 72 -> speedup 1.8, eff 0.90
        point("ddp", 4, 0.1 / 0.85),  # 136 -> 3.4, 0.85
        point("ddp", 8, 0.1 / 0.60, **extra_ddp),  # 192 -> 4.8, 0.60
        point("horovod-torch", 1, 0.1 / 0.90),
        point("horovod-torch", 2, 0.1 / 0.70),
        point("horovod-torch", 4, 0.1 / 0.50),
        point("dp", 2, status="skipped", reason="DataParallel needs CUDA devices"),
    ]


# -- headless Chromium ------------------------------------------------------------------------------------
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def find_chromium() -> str:
    """Debian's chromium; installed with apt when missing and we are root, else the test is skipped."""
    exe = shutil.which("chromium")
    if exe:
        return exe
    if os.geteuid() != 0:
        pytest.skip("chromium is not installed and not running as root to apt-get install it")
    if not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and there is no apt-get to install it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            pytest.skip(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-300:]}")
    exe = shutil.which("chromium")
    if not exe:
        pytest.skip("apt-get install chromium did not provide a chromium executable")
    return exe


def run_chromium(exe: str, tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{name}"
    return subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def converge_point_configs(opts, *, device: str, cores: int, cache: str, image_size: int, num_classes: int) -> list:
    """The (strategy, config) of every point kinds.plans.plan_converge plans on `device` (seeds outermost)."""
    from distbench.kinds.plans import plan_converge
    from distbench.run.devices import DeviceChoice

    choice = DeviceChoice(device, 0, "")
    plan = plan_converge(opts, choice, cores=cores, cache=cache, image_size=image_size, num_classes=num_classes)
    return [(p.strategy, p.config) for p in plan.points]


def verify(
    *,
    model: str,
    world_size: int,
    strategies: list,
    device: str,
    global_batch: int,
    steps: int,
    image_size: int | None,
    num_classes: int,
    rtol: float = DEFAULT_RTOL,
    lr: float = Workload.lr,
    momentum: float = Workload.momentum,
    seed: int = Workload.seed,
    timeout_s: float = 900.0,
    threads: int = 1,
    progress=lambda what: None,
    workdir: str | None = None,
    sweep=None,
    **workload,
) -> list[dict]:
    """The verdict of each strategy (baselines excluded): plans.plan_verify's points, run_plan's verdicts
    (`workload`: more Workload knobs, e.g. model_size, seq_len, shard_group)."""
    from distbench.kinds.plans import VerifyOptions, plan_verify
    from distbench.kinds.verify import run_plan

    opts = VerifyOptions(
        model=model,
        gpus=world_size,
        strategies=tuple(strategies),
        device=device,
        global_batch=global_batch,
        steps=steps,
        image_size=image_size,
        num_classes=num_classes,
        lr=lr,
        momentum=momentum,
        seed=seed,
        threads=threads,
        **workload,
    )
    return run_plan(plan_verify(opts), rtol=rtol, timeout_s=timeout_s, progress=progress, workdir=workdir, sweep=sweep)

"""Shared fixtures. Real multi-process runs use tiny configs so the suite fits a 2-core machine."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DISTBENCH = [sys.executable, "-m", "distbench.cli"]
TINY = [
    "--model",
    "resnet50",
    "--image-size",
    "32",
    "--batch-size",
    "2",
    "--steps",
    "3",
    "--warmup",
    "1",
    "--timeout",
    "300",
    "--max-time",
    "2",
]


def quick(*, batch: int | None = 2, device: str | None = None, timeout: int | None = 300) -> list[str]:
    """The quickest real point: resnet18 at 32 px, 2 steps after 1 warmup, fixed length (no adaptive
    stopping), no no-sync variant, no telemetry sampler."""
    args = ["--model", "resnet18", "--image-size", "32", "--steps", "2", "--warmup", "1", "--target-ci", "0"]
    args += ["--no-comm", "--telemetry-interval", "0"]
    args += ["--batch-size", str(batch)] if batch is not None else []
    args += ["--device", device] if device else []
    return args + (["--timeout", str(timeout)] if timeout is not None else [])


def have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(*modules: str):
    missing = [m for m in modules if not have(m)]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed (run make install)")


def run_cli(args: list[str], timeout: float = 1200, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [*DISTBENCH, *args], capture_output=True, text=True, timeout=timeout, env=full_env, stdin=subprocess.DEVNULL
    )


def run_json(args: list[str], **kw) -> tuple[subprocess.CompletedProcess, list[dict]]:
    proc = run_cli([*args, "--format", "json"], **kw)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def no_gpu_reason() -> str | None:
    """Why the `gpu` tests cannot run here (None: a CUDA GPU is visible to torch)."""
    try:
        import torch
    except ImportError:
        return "needs a CUDA GPU: torch is not installed"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU: torch.cuda.is_available() is False on this machine"
    return None


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` are skipped, with the reason, where torch sees no CUDA GPU."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    reason = no_gpu_reason() if gpu else None
    for item in gpu if reason else ():
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium (installed with apt when missing and we are root), else the test is skipped."""
    from tests.builders import find_chromium

    return find_chromium()


@pytest.fixture
def horovod_planned(monkeypatch):
    """Plan Horovod points whether or not horovod is installed here (the image has it)."""
    from distbench.run import plan as plan_module

    real = plan_module.registry.not_installed
    monkeypatch.setattr(plan_module.registry, "not_installed", lambda s: None if s.name == "horovod-torch" else real(s))


@pytest.fixture
def sweeps():
    """The sweeps a test starts (tests.test_faults.Sweep); none may leave a process behind."""
    started: list = []
    yield started
    orphans = [pid for s in started for pid in s.cleanup()]
    assert not orphans, f"processes outlived their sweep: {orphans}"

"""The same math mode in both frameworks (issue 10 item 9): --tf32/--no-tf32 (on by default), cuDNN
autotuning on, verify's no-TF32 precedence, and the math mode recorded in every record."""

from __future__ import annotations

import sys

import pytest

from distbench.cli import main
from distbench.core.strategies import parse_strategies
from distbench.run.plan import SweepOptions, make_plan
from tests.builders import point_config
from tests.conftest import require, run_json
from tests.test_efficiency import _FakeTF


def _cfg(device="cuda", **kw):
    return point_config("ddp", 1, device=device, image_size=32, **kw)


@pytest.fixture
def torch_flags():
    """torch's global math flags, put back after the test."""
    torch = pytest.importorskip("torch")
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.get_num_threads(),
    )
    yield torch
    (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
    ) = saved[:4]
    torch.use_deterministic_algorithms(saved[4], warn_only=saved[5])
    torch.set_num_threads(saved[6])


@pytest.mark.parametrize("tf32", [True, False])
def test_torch_gpu_math_mode_follows_the_knob_with_cudnn_autotuning(torch_flags, tf32):
    from distbench.workers.torch_device import configure_threads

    torch = torch_flags
    mode = configure_threads(_cfg(tf32=tf32))
    assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
    assert torch.backends.cudnn.benchmark is True
    assert mode == {"tf32": tf32, "cudnn_autotune": True, "layout": "NCHW", "note": None}
    assert configure_threads(_cfg(tf32=tf32, channels_last=True))["layout"] == "channels_last (NHWC in memory)"


def test_verify_keeps_tf32_off_and_deterministic_kernels(torch_flags):
    from distbench.workers.torch_device import configure_threads, verify_determinism

    torch = torch_flags
    cfg = _cfg(verify=True)  # tf32 on by default: verify must still win
    verify_determinism()
    mode = configure_threads(cfg)
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert torch.backends.cudnn.benchmark is False and torch.backends.cudnn.deterministic
    assert mode["tf32"] is False and mode["cudnn_autotune"] is False and "deterministic" in mode["note"]


def test_torch_cpu_workers_get_threads_and_no_gpu_math(torch_flags):
    from distbench.workers.torch_device import configure_threads

    mode = configure_threads(_cfg(device="cpu", threads_per_worker=1))
    assert torch_flags.get_num_threads() == 1
    assert mode["tf32"] is None and mode["cudnn_autotune"] is None and "do not apply" in mode["note"]


class _FakeGpuTF(_FakeTF):
    """configure()'s GPU branch without a GPU: records visibility, memory growth and TF32 calls."""

    def __init__(self):
        super().__init__()
        fake, config = self, self.config
        config.list_physical_devices = lambda kind: ["GPU:0", "GPU:1"] if kind == "GPU" else ["CPU:0"]
        config.experimental = type(
            "Experimental",
            (),
            {
                "set_memory_growth": staticmethod(lambda g, on: fake.calls.append(("growth", g, on))),
                "enable_tensor_float_32_execution": staticmethod(lambda on: fake.calls.append(("tf32", on))),
            },
        )()


@pytest.mark.parametrize("tf32,verify,expected", [(True, False, True), (False, False, False), (True, True, False)])
def test_tf_gets_the_same_tf32_setting(monkeypatch, tf32, verify, expected):
    from distbench.workers import tf_device

    fake = _FakeGpuTF()
    monkeypatch.setitem(sys.modules, "tensorflow", fake)
    tf_device.configure(_cfg(tf32=tf32, verify=verify))
    assert ("tf32", expected) in fake.calls
    assert ("visible", "GPU", ["GPU:0"]) in fake.calls


def test_tf32_knob_reaches_every_point_and_the_gpu_plan_says_so():
    opts = dict(model="resnet18", gpus=[1, 2], strategies=parse_strategies(("ddp", "mirrored")))
    on = make_plan(SweepOptions(**opts), visible_gpus=2)
    off = make_plan(SweepOptions(**opts, tf32=False), visible_gpus=2)
    assert all(p.config.tf32 for p in on.points) and not any(p.config.tf32 for p in off.points)
    assert any("TF32 on" in n and "cuDNN autotuning on" in n for n in on.notes)
    assert any("TF32 off" in n for n in off.notes)


def test_tf32_flag_takes_no_value(capsys):
    assert main(["scale", "--tf32=maybe", "--gpus", "1"]) == 2
    assert "Option '--tf32' does not take a value" in capsys.readouterr().err


@pytest.mark.slow
@require("torch", "tensorflow")
def test_records_carry_the_math_mode(tmp_path):
    tiny = [
        "--model",
        "resnet18",
        "--image-size",
        "32",
        "--batch-size",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--target-ci",
        "0",
        "--no-comm",
        "--telemetry-interval",
        "0",
        "--timeout",
        "300",
        "--results",
        str(tmp_path / "r.db"),
        "--device",
        "cpu",
    ]
    _, points = run_json(["scale", "--gpus", "1", "--strategy", "torch,tf", "--no-tf32", *tiny])
    modes = {p["strategy"]: p["math_mode"] for p in points}
    assert modes["torch"]["layout"] == "NCHW" and modes["tf"]["layout"] == "NHWC"
    assert all(m["tf32"] is None and "do not apply" in m["note"] for m in modes.values())
    assert all(p["config"]["tf32"] is False for p in points)

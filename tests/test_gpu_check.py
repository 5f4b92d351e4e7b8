"""scripts/gpu-check.sh (`make gpu-check`): without a GPU it refuses in one line (exit 2); --print lists the
steps a node would run; the ratio's bootstrap CI and the clock comparison are plain arithmetic, tested here.
The checks themselves need a GPU and are not run here."""

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"


def _run(tmp_path, *args, smi: str | None = None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if smi is not None:
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n" + smi)
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK")}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("smi", [None, 'echo "NVIDIA-SMI has failed" >&2; exit 9\n'])
def test_no_gpu_is_one_line_and_exit_2(tmp_path, smi):
    done = _run(tmp_path, smi=smi)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "gpu-check: no NVIDIA GPU here (nvidia-smi lists none): nothing to check\n"
    assert not list((ROOT / "docs").glob("gpu-check-*.md.tmp"))


def test_a_bad_option_is_one_line_and_exit_2(tmp_path):
    done = _run(tmp_path, "--fast")
    assert done.returncode == 2 and done.stderr == (
        "gpu-check: unknown option '--fast' (use --print, --out FILE or --only REGEX)\n"
    )


def test_print_lists_every_step_for_the_gpus_found(tmp_path):
    four = "".join(f'echo "GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})"\n' for i in range(4))
    done = _run(tmp_path, "--print", smi=four)
    assert done.returncode == 0, done.stderr
    titles = [line for line in done.stdout.splitlines() if not line.startswith("    ")]
    assert titles == [
        "versions",
        "torch baseline vs the hand-written loop, interleaved (amp)",
        "1-device cost at N=1: dp, ddp, fsdp, wrappers, deepspeed",
        "host clock vs CUDA events (torch, dp, lightning at N=1, short step; 3 alternated rounds)",
        "torch fp32 (TF32) point: does it finish, and where its time goes",
        "decoders: tokens/s, MFU, memory beside the formulas (gpt2 124m, sequence 1024, amp; checkpointing off, on)",
        "decoders, the logits set apart: the same shape with a 1,024-token vocabulary (torch, ddp; checkpointing off, on)",
        "profile: torch vs ddp, per-operation breakdown with CUDA kernels",
        "the test suite's GPU tests (pytest -m gpu)",
        "every strategy at N=2,3,4",
        "comm",
        "infer with power",
        "verify",
    ]
    out = done.stdout
    # run takes one strategy: the N=1 costs are a scale over one device count
    assert "scale --strategy torch,dp,ddp,fsdp,accelerate,lightning,fabric,ignite,deepspeed-zero1" in out
    assert "DISTBENCH_STEP_CLOCK=host" in out and "pytest -q -m gpu tests" in out
    assert "scale --gpus 2,3,4 --strategy all" in out and "comm --gpus 2,3,4" in out
    assert (
        "infer --model resnet50 --batch-sizes 1,32,256 --device cuda" in out
        and "verify --model resnet18 --gpus 2" in out
    )


def test_only_keeps_the_steps_whose_title_matches(tmp_path):
    done = _run(tmp_path, "--print", "--only", "versions|decoders", smi='echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"\n')
    assert done.returncode == 0, done.stderr
    titles = [line for line in done.stdout.splitlines() if not line.startswith("    ")]
    assert titles[0] == "versions" and len(titles) == 3 and all(t.startswith("decoders") for t in titles[1:])
    assert "--model-size 124m $ck" in done.stdout and "--model-size l12-d768-h12-v1024 $ck" in done.stdout


def test_the_memory_step_sets_states_apart_per_layer_token_and_hidden_unit(monkeypatch, capsys):
    h = _helper()
    from distbench.models import decoders

    shape = decoders.decoder_shape("gpt2", "l12-d768-h12-v1024")
    states = 12 * decoders.parameter_count(shape)  # fp32 SGD with momentum, N=1, nothing sharded
    act = 37 * 12 * 1024 * 8 * 768
    record = {
        "strategy": "torch",
        "world_size": 1,
        "status": "ok",
        "throughput": 100.0,
        "mfu": 0.15,
        "per_device_batch": 8,
        "peak_memory_bytes": states + act,
        "config": {"model": "gpt2", "model_size": "l12-d768-h12-v1024", "seq_len": 1024},
    }
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps([record, {**record, "status": "failed", "reason": "x"}])))
    assert h.memory(None) == 0
    out = capsys.readouterr().out.splitlines()
    assert "102,400 tokens/s, MFU 15.0%" in out[0] and out[0].endswith("= 37.0 bytes per layer x token x hidden unit")
    assert out[1] == "torch N=1 ckpt=off: failed: x"


def test_one_gpu_has_no_multi_gpu_steps_and_no_comm(tmp_path):
    done = _run(tmp_path, "--print", smi='echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n')
    assert done.returncode == 0, done.stderr
    assert "every strategy" not in done.stdout and "comm --gpus" not in done.stdout
    assert "verify --model resnet18 --gpus 1" in done.stdout


def test_the_script_parses_and_passes_shellcheck_where_installed():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    shellcheck = next(
        (p for p in (Path(sys.executable).parent / "shellcheck", Path("/usr/bin/shellcheck")) if p.exists()), None
    )
    if shellcheck is None:
        pytest.skip("shellcheck is not installed here")
    done = subprocess.run([str(shellcheck), "-S", "warning", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def _helper():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ratio_ci_brackets_the_median_and_narrows_with_agreeing_pairs():
    h = _helper()
    low, high = h.ratio_ci([1.00, 1.01, 1.02])
    assert 1.00 <= low <= 1.01 <= high <= 1.02
    assert h.ratio_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)


def test_the_clock_step_compares_step_times_with_the_window(monkeypatch, capsys):
    h = _helper()
    records = [
        {
            "strategy": "torch",
            "status": "ok",
            "step_time_median_s": 0.01,
            "measured_steps": 100,
            "measured_window_s": 1.05,
            "stopping": {"clock": "cuda_event"},
        },
        {"strategy": "dp", "status": "failed", "reason": "boom"},
    ]
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(records)))
    assert h.clock(None) == 0
    assert capsys.readouterr().out.splitlines() == [
        "torch: clock cuda_event; step median 10.000 ms x 100 steps = 1.000 s vs the window's host wall time 1.050 s (-4.8%)",
        "dp: failed: boom",
    ]

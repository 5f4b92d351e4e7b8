"""scripts/install.sh fits the machine: its dry run prints the plan and why, for a machine with an NVIDIA driver (a
fake nvidia-smi on PATH) and one without; the packages it installs are declared in setup.cfg and pinned in
constraints.txt."""

import configparser
import os
import re
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install.sh"
OVERRIDES = (
    "DISTBENCH_FORCE_GPU",
    "DISTBENCH_HOROVOD_NCCL",
    "TORCH_SPEC",
    "TF_SPEC",
    "TORCH_INDEX_URL",
    "TORCH_CUDA_TAG",
    "CUDA_HOME",
    "HOROVOD_CUDA_HOME",
    "VENV",
)


def _tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text("#!/bin/sh\n" + script)
    (bin_dir / name).chmod(0o755)


def dry_run(tmp_path, *args, **env):
    """Run the script's dry run with PATH = tmp_path/bin + the system's bin folders (no real nvidia-smi or nvcc)."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in OVERRIDES}
    base.update(
        PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin",
        HOROVOD_CUDA_HOME=str(tmp_path / "no-cuda"),
        VENV=str(tmp_path / "venv"),
        **env,
    )
    done = subprocess.run(
        ["bash", str(SCRIPT), *(args or ["--dry-run"])], env=base, capture_output=True, text=True, timeout=60
    )
    assert not (tmp_path / "venv").exists(), "a dry run must not create the venv"
    return done


def test_cpu_machine_gets_the_cpu_builds(tmp_path):
    done = dry_run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "[install] machine: CPU builds (no nvidia-smi on PATH: no NVIDIA driver)" in done.stderr
    assert "[install] torch: torch==2.13.0 (the CPU wheel" in done.stderr
    assert "[install] TensorFlow: tensorflow-cpu==2.21.0\n" in done.stderr
    assert "[install] pins: constraints.txt\n" in done.stderr
    assert "[install] Horovod: 0.28.1 from the sdist with Gloo\n" in done.stderr
    assert "[install] dry run: nothing installed" in done.stderr


def test_gpu_machine_gets_cuda_torch_tf_and_horovod_with_nccl(tmp_path):
    _tool(
        tmp_path / "bin",
        "nvidia-smi",
        'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\necho "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"\n',
    )
    _tool(tmp_path / "bin", "nvcc", "exit 0\n")
    done = dry_run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "machine: GPU builds (nvidia-smi lists 2 GPU(s): GPU 0: NVIDIA H100 80GB HBM3" in done.stderr
    assert "torch: torch==2.13.0+cu128, its CUDA wheel from https://download.pytorch.org/whl/cu128" in done.stderr
    assert "TensorFlow: tensorflow[and-cuda]==2.21.0" in done.stderr
    assert "pins: constraints.txt without the CPU builds' torch, TensorFlow and CUDA library pins" in done.stderr
    assert "Horovod with NCCL: torch is a CUDA cu128 (to be installed) build" in done.stderr
    assert "[install] Horovod: 0.28.1 from the sdist with Gloo and NCCL\n" in done.stderr


def test_gpu_machine_without_a_cuda_toolkit_says_why_horovod_has_no_nccl(tmp_path):
    _tool(tmp_path / "bin", "nvidia-smi", 'echo "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-0)"\n')
    done = dry_run(tmp_path, TORCH_CUDA_TAG="cu126")
    assert done.returncode == 0, done.stderr
    assert "torch==2.13.0+cu126, its CUDA wheel from https://download.pytorch.org/whl/cu126" in done.stderr
    assert "Horovod without NCCL: torch is a CUDA cu126 (to be installed) build but no CUDA toolkit" in done.stderr
    assert "[install] Horovod: 0.28.1 from the sdist with Gloo\n" in done.stderr


def test_nvidia_smi_without_a_driver_means_cpu(tmp_path):
    _tool(tmp_path / "bin", "nvidia-smi", 'echo "NVIDIA-SMI has failed because it could not communicate" >&2\nexit 9\n')
    done = dry_run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "machine: CPU builds (nvidia-smi is on PATH but lists no GPU: is the driver loaded?)" in done.stderr
    assert "TensorFlow: tensorflow-cpu==2.21.0" in done.stderr


@pytest.mark.parametrize("force, smi, kind", [("1", False, "GPU"), ("0", True, "CPU")])
def test_the_env_override_beats_detection(tmp_path, force, smi, kind):
    if smi:
        _tool(tmp_path / "bin", "nvidia-smi", 'echo "GPU 0: NVIDIA H100 (UUID: GPU-0)"\n')
    done = dry_run(tmp_path, DISTBENCH_FORCE_GPU=force, TORCH_INDEX_URL="https://mirror.example/cu128")
    assert done.returncode == 0, done.stderr
    assert f"machine: {kind} builds (DISTBENCH_FORCE_GPU={force})" in done.stderr
    assert ("https://mirror.example/cu128" in done.stderr) == (kind == "GPU")


@pytest.mark.parametrize(
    "args, env, message",
    [
        (
            ["--dry-run"],
            {"DISTBENCH_FORCE_GPU": "yes"},
            "install.sh: DISTBENCH_FORCE_GPU must be 1, 0 or unset, not 'yes'",
        ),
        (["--dryrun"], {}, "install.sh: unknown option '--dryrun' (use --dry-run or --horovod-gpu-ops)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, env, message):
    done = dry_run(tmp_path, *args, **env)
    assert done.returncode == 2
    assert done.stderr.strip() == message


def _setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def _pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = [Requirement(line) for line in lines if line and not line.startswith("#")]
    assert all(len(p.specifier) == 1 and next(iter(p.specifier)).operator == "==" for p in pins)
    return {canonicalize_name(p.name): str(p.specifier) for p in pins}


def test_what_the_install_adds_is_declared_in_setup_cfg_and_pinned():
    cfg = _setup_cfg()
    extras = {k: [Requirement(r) for r in v.split("\n") if r] for k, v in cfg["options.extras_require"].items()}
    script = SCRIPT.read_text()
    used = re.search(r'^EXTRAS="([^"]+)"$', script, re.M).group(1).split(",")
    assert set(used) <= set(extras)
    declared = [Requirement(r) for r in cfg["options"]["install_requires"].split("\n") if r]
    declared += [r for name in used for r in extras[name]]
    pins = _pins()
    assert [r.name for r in declared if canonicalize_name(r.name) not in pins] == []
    # the frameworks the script installs are the extras' versions, and the CPU ones are pinned the same
    assert str(extras["torch"][0]) == "torch==2.13.0" and pins["torch"] == "==2.13.0"
    assert str(extras["tf"][0]) == "tensorflow-cpu==2.21.0" and pins["tensorflow-cpu"] == "==2.21.0"
    assert str(extras["tf-cuda"][0]) == "tensorflow[and-cuda]==2.21.0"
    assert re.search(r"^TORCH_VERSION=2\.13\.0$", script, re.M) and re.search(r"^TF_VERSION=2\.21\.0$", script, re.M)
    # distbench itself and Horovod (built from its sdist) are not pinned; new dependencies are pinned exactly
    assert "distbench" not in pins and "horovod" not in pins
    assert pins["python-hostlist"] == "==2.3.0" and pins["ruff"] == "==0.16.9"

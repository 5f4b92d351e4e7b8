#!/usr/bin/env bash
# Build the distbench environment in .venv, fitted to the machine:
#   with an NVIDIA driver (`nvidia-smi -L` lists a GPU): torch's CUDA 12 wheel, tensorflow[and-cuda] and
#     Horovod with NCCL, built against the NCCL that the CUDA wheels bring (nvidia-nccl-cu12);
#   elsewhere: the CPU builds (torch's CPU wheel, tensorflow-cpu) and Horovod with Gloo only.
# DISTBENCH_FORCE_GPU=1 or =0 overrides the detection. `scripts/install.sh --dry-run` prints the plan and why,
# installing nothing.
#
# Versions are pinned by constraints.txt (`make lock` regenerates it from a working CPU venv), so two
# installs get the same environment. The GPU plan drops its torch/TensorFlow/CUDA pins (the CPU builds'):
# there torch's CUDA wheel pins its CUDA libraries exactly and TensorFlow takes the ones that fit them.
# Every package installed here is declared in setup.cfg (the extras listed in EXTRAS).
#
# The Horovod wheel is built once and cached under $DISTBENCH_WHEEL_CACHE (default
# ~/.cache/distbench/wheels), keyed by the exact torch and TensorFlow versions it was compiled
# against and whether NCCL was enabled, because Horovod refuses to import against other versions.
#
# NCCL for Horovod is decided by what can build it, not by whether this node has a GPU (a venv
# built on a login node serves the GPU nodes): a CUDA build of torch plus a CUDA toolkit (nvcc).
# DISTBENCH_HOROVOD_NCCL=1 forces it, =0 forbids it. `scripts/install.sh --horovod-gpu-ops` only
# prints the decision (NCCL or nothing) and why.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
TORCH_VERSION=2.13.0
TF_VERSION=2.21.0
# torch 2.13.0 on PyPI is a CUDA 13 build, but tensorflow[and-cuda] 2.21.0 needs the CUDA 12 libraries
# (nvidia-*-cu12, nvidia-nccl-cu12 among them), so the GPU plan takes torch's CUDA 12 wheel from the PyTorch
# index, and both frameworks and Horovod share one NCCL. cu128 is assumed from the release matrix (12.8 is
# built for every release since 2.7); it could not be checked from here (that index is not reachable):
# set TORCH_CUDA_TAG (cu126, cu129, ...) or TORCH_INDEX_URL if 2.13.0 is published for another CUDA 12.
TORCH_CUDA_TAG="${TORCH_CUDA_TAG:-cu128}"
TORCH_INDEX_URL="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/$TORCH_CUDA_TAG}"
HOROVOD_VERSION="${HOROVOD_VERSION:-0.28.1}"
CONSTRAINTS="${DISTBENCH_CONSTRAINTS:-constraints.txt}"
EXTRAS="parquet,horovod,test,lint"
WHEEL_CACHE="${DISTBENCH_WHEEL_CACHE:-$HOME/.cache/distbench/wheels}"

log() { printf '[install] %s\n' "$*" >&2; }
VPY="$VENV/bin/python"

# Print NCCL or nothing: Horovod's GPU operations for this venv; the reason goes to stderr.
horovod_gpu_ops() {
    case "${DISTBENCH_HOROVOD_NCCL:-auto}" in
        1) log "Horovod with NCCL: DISTBENCH_HOROVOD_NCCL=1"; echo NCCL; return ;;
        0) log "Horovod without NCCL: DISTBENCH_HOROVOD_NCCL=0"; return ;;
        auto) ;;
        *) printf 'install.sh: DISTBENCH_HOROVOD_NCCL must be 1, 0 or unset, not %s\n' "'$DISTBENCH_HOROVOD_NCCL'" >&2
           exit 2 ;;
    esac
    local torch_cuda nvcc driver=""
    torch_cuda=${PLANNED_TORCH_CUDA-$("$VPY" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null || true)}
    nvcc=$(command -v nvcc || true)
    local home="${HOROVOD_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}"
    if [ -z "$nvcc" ] && [ -x "$home/bin/nvcc" ]; then nvcc="$home/bin/nvcc"; fi
    if command -v nvidia-smi >/dev/null 2>&1; then driver=" (nvidia-smi: a GPU driver is present)"; fi
    if [ -n "$torch_cuda" ] && [ -n "$nvcc" ]; then
        log "Horovod with NCCL: torch is a CUDA $torch_cuda build and $nvcc compiles the GPU operations$driver"
        echo NCCL
    elif [ -n "$torch_cuda" ]; then
        log "Horovod without NCCL: torch is a CUDA $torch_cuda build but no CUDA toolkit was found (nvcc on PATH" \
            "or in $home/bin)$driver; set CUDA_HOME, or DISTBENCH_HOROVOD_NCCL=1 to force"
    else
        log "Horovod without NCCL: torch is a CPU build$driver; install a CUDA torch (TORCH_SPEC) for GPUs"
    fi
}

# Print gpu or cpu: the build this machine gets; the reason goes to stderr.
machine_kind() {
    case "${DISTBENCH_FORCE_GPU:-auto}" in
        1) log "machine: GPU builds (DISTBENCH_FORCE_GPU=1)"; echo gpu; return ;;
        0) log "machine: CPU builds (DISTBENCH_FORCE_GPU=0)"; echo cpu; return ;;
        auto) ;;
        *) printf 'install.sh: DISTBENCH_FORCE_GPU must be 1, 0 or unset, not %s\n' "'$DISTBENCH_FORCE_GPU'" >&2
           exit 2 ;;
    esac
    local gpus
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        log "machine: CPU builds (no nvidia-smi on PATH: no NVIDIA driver)"; echo cpu
    elif gpus=$(nvidia-smi -L 2>/dev/null) && [ -n "$gpus" ]; then
        log "machine: GPU builds (nvidia-smi lists $(grep -c . <<<"$gpus") GPU(s): $(head -n1 <<<"$gpus"))"; echo gpu
    else
        log "machine: CPU builds (nvidia-smi is on PATH but lists no GPU: is the driver loaded?)"; echo cpu
    fi
}

case "${1:-}" in
    --horovod-gpu-ops) horovod_gpu_ops; exit 0 ;;
    --dry-run|"") ;;
    *) printf 'install.sh: unknown option %s (use --dry-run or --horovod-gpu-ops)\n' "'$1'" >&2; exit 2 ;;
esac

KIND=$(machine_kind)
PIN_ARGS=(-c "$CONSTRAINTS")
if [ "$KIND" = gpu ]; then
    TORCH_SPEC="${TORCH_SPEC:-torch==$TORCH_VERSION+$TORCH_CUDA_TAG}"
    TF_SPEC="${TF_SPEC:-tensorflow[and-cuda]==$TF_VERSION}"
    INDEX_ARGS=(--extra-index-url "$TORCH_INDEX_URL")
    log "torch: $TORCH_SPEC, its CUDA wheel from $TORCH_INDEX_URL"
    log "TensorFlow: $TF_SPEC (its CUDA 12 libraries from PyPI)"
    log "pins: $CONSTRAINTS without the CPU builds' torch, TensorFlow and CUDA library pins"
else
    TORCH_SPEC="${TORCH_SPEC:-torch==$TORCH_VERSION}"
    TF_SPEC="${TF_SPEC:-tensorflow-cpu==$TF_VERSION}"
    INDEX_ARGS=()
    log "torch: $TORCH_SPEC (the CPU wheel where one lies in pip's find-links, as on this project's machines)"
    log "TensorFlow: $TF_SPEC"
    log "pins: $CONSTRAINTS"
fi
if [ "${1:-}" = --dry-run ]; then
    # Horovod's decision for the torch this plan installs, not the one the venv may hold now.
    PLANNED_TORCH_CUDA=""
    if [ "$KIND" = gpu ]; then PLANNED_TORCH_CUDA="$TORCH_CUDA_TAG (to be installed)"; fi
    ops=$(horovod_gpu_ops)
    log "Horovod: $HOROVOD_VERSION from the sdist with Gloo${ops:+ and $ops}"
    log "distbench: editable, with the extras [$EXTRAS] of setup.cfg"
    log "wrappers: the extra [wrappers] of setup.cfg, optional (if it fails to install: a warning, and those points are skipped)"
    log "ray: the extra [ray] of setup.cfg (Ray Train), optional in the same way (ray-ddp points skipped)"
    log "dry run: nothing installed (venv $VENV)"
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV with $($PYTHON --version)"
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# This machine's pip config names local index folders that may not exist; hide that noise only.
quiet_pip() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
if [ "$KIND" = gpu ]; then
    GPU_PINS=$(mktemp)
    grep -Eiv '^(torch|tensorflow([-_]cpu)?|nvidia[-_].*[-_]cu[0-9]+|triton)==' "$CONSTRAINTS" >"$GPU_PINS"
    PIN_ARGS=(-c "$GPU_PINS")
fi

log "installing torch ($TORCH_SPEC) and TensorFlow ($TF_SPEC)"
quiet_pip install -q "${PIN_ARGS[@]}" "${INDEX_ARGS[@]}" "$TORCH_SPEC" "$TF_SPEC" "setuptools<81" wheel
if [ "$KIND" = gpu ] && [ -z "$("$VPY" -c 'import torch; print(torch.version.cuda or "")')" ]; then
    log "error: the GPU plan installed a CPU build of torch; check TORCH_INDEX_URL ($TORCH_INDEX_URL)"
    exit 1
fi
log "installing distbench (editable) with the extras [$EXTRAS]"
quiet_pip install -q "${PIN_ARGS[@]}" --no-build-isolation -e ".[$EXTRAS]"
# The wrapper strategies' libraries (accelerate, lightning, ignite, deepspeed) are optional: if they do not
# install, their points are 'skipped' (the registry's `requires`) and the rest of the install goes on.
log "installing the wrapper libraries (extra [wrappers])"
if ! quiet_pip install -q "${PIN_ARGS[@]}" --no-build-isolation -e ".[wrappers]"; then
    log "warning: the extra [wrappers] (accelerate, lightning, pytorch-ignite, deepspeed) did not install;" \
        "the accelerate, lightning, fabric, ignite and deepspeed points will be 'skipped'"
elif [ "$KIND" != gpu ]; then
    # DeepSpeed's CPU accelerator compiles its shared-memory comm extension on the first
    # init_distributed (minutes on a small machine, inside a point's timeout, and a compile killed
    # halfway leaves a lock that hangs every later run): build it now, into torch's extension cache.
    log "building DeepSpeed's CPU shared-memory comm extension (once, cached in ~/.cache/torch_extensions)"
    if ! "$VPY" -c 'from deepspeed.accelerator import get_accelerator as a; b = a().create_op_builder("ShareMemCommBuilder"); b and b.load()' \
            >/dev/null 2>&1; then
        log "warning: DeepSpeed's shm comm extension did not build; deepspeed points will build it on first use"
    fi
fi

# Ray Train (strategy ray-ddp) is optional in the same way: without it its points are 'skipped'.
log "installing Ray Train (extra [ray])"
if ! quiet_pip install -q "${PIN_ARGS[@]}" --no-build-isolation -e ".[ray]"; then
    log "warning: the extra [ray] (ray[train]) did not install; the ray-ddp points will be 'skipped'"
fi

# Horovod: the wheel is tied to the exact framework versions, so they are part of the cache key.
# An installed Horovod is kept only if it was built with the NCCL decision made now.
GPU_OPS=$(horovod_gpu_ops)
if ! "$VPY" -c 'import sys, horovod.torch as h, horovod.tensorflow; sys.exit(bool(h.nccl_built()) != (sys.argv[1] == "NCCL"))' \
        "$GPU_OPS" >/dev/null 2>&1; then
    TORCH_V=$("$VPY" -c 'import torch; print(torch.__version__)')
    TF_V=$("$VPY" -c 'import os; os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"; import tensorflow as tf; print(tf.__version__)')
    KEY="horovod-${HOROVOD_VERSION}_torch-${TORCH_V}_tf-${TF_V}_gpu-${GPU_OPS:-none}_$("$VPY" -c 'import sys; print("py%d%d" % sys.version_info[:2])')"
    KEY="${KEY//+/-}"
    CACHE_DIR="$WHEEL_CACHE/$KEY"
    if ! ls "$CACHE_DIR"/horovod-*.whl >/dev/null 2>&1; then
        if ! command -v cmake >/dev/null 2>&1; then
            log "cmake not found: installing Debian's cmake"
            apt-get update -qq && apt-get install -y -qq cmake >/dev/null
        fi
        BUILD=$(mktemp -d)
        trap 'rm -rf "$BUILD"' EXIT
        log "building Horovod $HOROVOD_VERSION from the sdist (torch $TORCH_V, TF $TF_V, Gloo${GPU_OPS:+, $GPU_OPS}); this takes ~5 minutes"
        quiet_pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$BUILD"
        tar -xzf "$BUILD"/horovod-"$HOROVOD_VERSION".tar.gz -C "$BUILD"
        SRC="$BUILD/horovod-$HOROVOD_VERSION"
        # Recent torch headers need C++17.
        sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"
        # The TF wheel ships no highwayhash headers, which the XLA op needs.
        sed -i '/xla_mpi_ops.cc/d' "$SRC/horovod/tensorflow/CMakeLists.txt"
        # pip's cmake 4 rejects gloo's old cmake_minimum_required: make sure the system one is used.
        "${PIP[@]}" uninstall -q -y cmake >/dev/null 2>&1 || true
        export PATH="/usr/bin:$PATH"
        export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_MPI=1 \
               HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MXNET=1
        if [ -n "$GPU_OPS" ]; then export HOROVOD_GPU_OPERATIONS="$GPU_OPS"; fi
        # NCCL from the nvidia-nccl-cu12 wheel the CUDA torch and TensorFlow use (it ships libnccl.so.2 only:
        # Horovod's CMake looks for libnccl.so, so link one in). At run time horovod.torch finds libnccl.so.2
        # loaded by torch, which it imports first. Not yet built on a GPU node: no GPU machine was at hand.
        NCCL_DIR=$("$VPY" -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(s.submodule_search_locations[0] if s else "")' 2>/dev/null || true)
        if [ -n "$GPU_OPS" ] && [ -f "$NCCL_DIR/include/nccl.h" ]; then
            mkdir -p "$BUILD/nccl-lib" && ln -sf "$NCCL_DIR"/lib/libnccl.so.2 "$BUILD/nccl-lib/libnccl.so"
            export HOROVOD_NCCL_HOME="$NCCL_DIR" HOROVOD_NCCL_INCLUDE="$NCCL_DIR/include" \
                   HOROVOD_NCCL_LIB="$BUILD/nccl-lib" HOROVOD_NCCL_LINK=SHARED
            log "Horovod's NCCL: $NCCL_DIR (the nvidia-nccl-cu12 wheel)"
        fi
        export MAKEFLAGS="-j$(nproc)"
        mkdir -p "$CACHE_DIR"
        # --no-build-isolation: CMake must find the torch and TF installed in this venv.
        PATH="$VENV/bin:$PATH" quiet_pip wheel -q --no-deps --no-build-isolation -w "$CACHE_DIR.tmp" "$SRC"
        mv "$CACHE_DIR.tmp"/horovod-*.whl "$CACHE_DIR"/ && rm -rf "$CACHE_DIR.tmp"
    else
        log "using cached Horovod wheel from $CACHE_DIR"
    fi
    quiet_pip install -q --no-deps "$CACHE_DIR"/horovod-*.whl
fi

"$VPY" -c 'import horovod.torch, horovod.tensorflow, distbench' 
touch "$VENV/.installed"
log "done: activate with 'source $VENV/bin/activate' or use $VENV/bin/distbench"

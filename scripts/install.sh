#!/usr/bin/env bash
# Build the distbench environment in .venv: torch (CPU wheel or CUDA where present), TensorFlow,
# Horovod built from the PyPI sdist with PyTorch + TensorFlow + Gloo (NCCL where CUDA is present),
# and distbench itself (editable).
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
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TF_SPEC="${TF_SPEC:-tensorflow-cpu==2.21.0}"
HOROVOD_VERSION="${HOROVOD_VERSION:-0.28.1}"
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
    torch_cuda=$("$VPY" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null || true)
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

if [ "${1:-}" = "--horovod-gpu-ops" ]; then
    horovod_gpu_ops
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV with $($PYTHON --version)"
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# This machine's pip config names local index folders that may not exist; hide that noise only.
quiet_pip() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

log "installing torch ($TORCH_SPEC), TensorFlow ($TF_SPEC) and the Python dependencies"
# torch is pinned so pip takes the local CPU wheel instead of the newest multi-GB CUDA build.
quiet_pip install -q "$TORCH_SPEC" "$TF_SPEC" \
    "setuptools<81" wheel packaging \
    click pandas pyarrow rich psutil nvidia-ml-py matplotlib pyyaml cloudpickle cffi \
    pytest pytest-timeout

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

log "installing distbench (editable)"
quiet_pip install -q --no-deps --no-build-isolation -e .
"$VPY" -c 'import horovod.torch, horovod.tensorflow, distbench' 
touch "$VENV/.installed"
log "done: activate with 'source $VENV/bin/activate' or use $VENV/bin/distbench"

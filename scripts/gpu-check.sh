#!/usr/bin/env bash
# `make gpu-check`: the GPU validation any GPU owner can run, on whatever NVIDIA GPUs the node has, in about
# 10 minutes; it writes one Markdown file (default docs/gpu-check-<host>-<date>.md) that docs/gpu-validation.md
# links. Steps (`scripts/gpu-check.sh --print` lists them without running anything):
#   versions; the `torch` baseline interleaved with the hand-written loop scripts/gpu_handloop.py (3 pairs,
#   their throughput ratio with a bootstrap 95% CI over the pairs: scripts/gpu_check.py); dp, ddp, fsdp, the wrappers and
#   deepspeed-zero* at N=1; host clock vs CUDA events (dp and torch at N=1, short step); every strategy at
#   N=2..#GPUs where there are several; infer with power; comm (N >= 2 only: one rank moves no data); verify.
# No GPU: one line, exit 2. It runs the venv's distbench (.venv) if there is one, else $PYTHON (python3) with
# this checkout on PYTHONPATH, so a node without internet can use its own torch (see TORCH_SPEC=system in
# scripts/install.sh). A step that fails is recorded in the file and the check goes on.
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY="${PYTHON:-}"
if [ -z "$PY" ]; then if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi; fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
DB="${GPU_CHECK_RESULTS:-$ROOT/distbench-results/gpu-check.db}"
MODEL="${GPU_CHECK_MODEL:-resnet50}"
BATCH="${GPU_CHECK_BATCH:-256}"
T="${GPU_CHECK_MAX_TIME:-8}"
PRINT=0 OUT="" ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --print) PRINT=1 ;;
        --out) OUT="${2:-}"; shift ;;
        --only) ONLY="${2:-}"; shift ;;
        *) printf 'gpu-check: unknown option %s (use --print, --out FILE or --only REGEX)\n' "'$1'" >&2; exit 2 ;;
    esac
    shift
done

GPUS=0
if command -v nvidia-smi >/dev/null 2>&1; then GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true); fi
if [ "$PRINT" = 1 ] && [ "$GPUS" = 0 ]; then GPUS="${GPU_CHECK_GPUS:-2}"; fi  # what a 2-GPU node would run

DB_ARGS=(--results "$DB")
W=(--model "$MODEL" --batch-size "$BATCH" --device cuda)
STEPS=()
step() {  # title, command (run by bash -c); --only REGEX keeps the steps whose title matches (grep -E)
    if [ -z "$ONLY" ] || printf '%s' "$1" | grep -Eq -- "$ONLY"; then STEPS+=("$1"$'\t'"$2"); fi
}
DISTBENCH="'$PY' -c 'import sys; from distbench.cli import main; sys.exit(main())'"
step "versions" "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; '$PY' -c 'import torch; print(\"torch\", torch.__version__, \"CUDA\", torch.version.cuda, \"NCCL\", torch.cuda.nccl.version(), \"cuDNN\", torch.backends.cudnn.version())'"
step "torch baseline vs the hand-written loop, interleaved (amp)" "'$PY' scripts/gpu_check.py pairs --model $MODEL --batch-size $BATCH --max-time $T ${DB_ARGS[*]}"
step "1-device cost at N=1: dp, ddp, fsdp, wrappers, deepspeed" "$DISTBENCH scale --strategy torch,dp,ddp,fsdp,accelerate,lightning,fabric,ignite,deepspeed-zero1,deepspeed-zero2,deepspeed-zero3 --gpus 1 --precision amp --max-time 5 ${W[*]} ${DB_ARGS[*]}"
step "host clock vs CUDA events (torch, dp, lightning at N=1, short step; 3 alternated rounds)" "for i in 1 2 3; do for c in host events; do echo \"round \$i, clock \$c:\"; env \$([ \$c = host ] && echo DISTBENCH_STEP_CLOCK=host) $DISTBENCH scale --strategy torch,dp,lightning --gpus 1 --model resnet18 --image-size 32 --batch-size 8 --max-time 3 --device cuda --format json ${DB_ARGS[*]} | '$PY' scripts/gpu_check.py clock; done; done"
step "torch fp32 (TF32) point: does it finish, and where its time goes" "$DISTBENCH run --strategy torch --gpus 1 --precision fp32 --max-time $T ${W[*]} ${DB_ARGS[*]}"
DEC=(--model gpt2 --seq-len 1024 --batch-size 8 --gpus 1 --precision amp --max-time 5 --device cuda)
step "decoders: tokens/s, MFU, memory beside the formulas (gpt2 124m, sequence 1024, amp; checkpointing off, on)" "for ck in '' --activation-checkpointing; do $DISTBENCH scale --strategy torch,ddp,fsdp ${DEC[*]} --model-size 124m \$ck --format json ${DB_ARGS[*]} | '$PY' scripts/gpu_check.py memory; done"
step "decoders, the logits set apart: the same shape with a 1,024-token vocabulary (torch, ddp; checkpointing off, on)" "for ck in '' --activation-checkpointing; do $DISTBENCH scale --strategy torch,ddp ${DEC[*]} --model-size l12-d768-h12-v1024 \$ck --format json ${DB_ARGS[*]} | '$PY' scripts/gpu_check.py memory; done"
step "profile: torch vs ddp, per-operation breakdown with CUDA kernels" "$DISTBENCH profile --strategy torch,ddp --gpus 1 ${W[*]} --max-time 5 ${DB_ARGS[*]}"
step "the test suite's GPU tests (pytest -m gpu)" "'$PY' -m pytest -q -m gpu tests"
if [ "$GPUS" -ge 2 ]; then
    NS=$(seq -s, 2 "$GPUS")
    step "every strategy at N=$NS" "$DISTBENCH scale --gpus $NS --strategy all --precision amp --max-time 5 ${W[*]} ${DB_ARGS[*]}"
    step "comm" "$DISTBENCH comm --gpus $NS --sizes 1M:1G --factor 4 ${DB_ARGS[*]}"
fi
step "infer with power" "$DISTBENCH infer --model $MODEL --batch-sizes 1,32,256 --device cuda ${DB_ARGS[*]}"
step "verify" "$DISTBENCH verify --model resnet18 --gpus $([ "$GPUS" -ge 2 ] && echo 2 || echo 1) --device cuda ${DB_ARGS[*]}"

if [ "$PRINT" = 1 ]; then
    for s in "${STEPS[@]}"; do printf '%s\n    %s\n' "${s%%$'\t'*}" "${s#*$'\t'}"; done
    exit 0
fi
if [ "$GPUS" = 0 ]; then
    echo "gpu-check: no NVIDIA GPU here (nvidia-smi lists none): nothing to check" >&2
    exit 2
fi
OUT="${OUT:-docs/gpu-check-$(hostname -s)-$(date -u +%Y%m%d).md}"
mkdir -p "$(dirname "$OUT")" "$(dirname "$DB")"
{
    echo "# gpu-check on $(hostname -s), $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "Written by \`make gpu-check\` (scripts/gpu-check.sh); results stored in \`$DB\`. $GPUS GPU(s)."
} >"$OUT"
START=$SECONDS
for s in "${STEPS[@]}"; do
    title="${s%%$'\t'*}" cmd="${s#*$'\t'}"
    printf 'gpu-check: %s ...\n' "$title" >&2
    t0=$SECONDS
    text=$(COLUMNS=120 timeout "${GPU_CHECK_STEP_TIMEOUT:-300}" bash -c "$cmd" 2>&1); rc=$?
    { echo; echo "## $title"; echo; echo "\`$cmd\`: exit $rc, $((SECONDS - t0)) s"; echo; echo '```'; echo "$text"; echo '```'; } >>"$OUT"
done
echo "gpu-check: wrote $OUT in $((SECONDS - START)) s" >&2

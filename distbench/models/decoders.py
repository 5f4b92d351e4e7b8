"""Framework-free facts of the decoder language models (gpt2, llama): their sizes, parameter counts, FLOPs,
model-state memory and gradient layout. `specs` registers the two families; `torch_decoder` and
`keras_decoder` build them from a `DecoderShape`.

  gpt2   learned positions, pre-LN LayerNorm (with biases), GELU (tanh) MLP of 4 x hidden, biases in every
         linear, output projection tied to the token embedding (GPT-2, Radford et al. 2019; HF `gpt2`).
  llama  rotary positions, RMSNorm (weight only), SwiGLU MLP, grouped-query attention, no biases, untied
         output projection (Llama 2, Touvron et al. 2023; the 1b size is TinyLlama-1.1B's shape).

A size is a name from the family's table or a custom shape `l<layers>-d<hidden>-h<heads>[-kv<kv heads>][-v<V>]`
(the family's vocabulary unless -v gives one, 4 x hidden MLP for gpt2, Llama's 8/3 x hidden rounded up to 256 for llama).
Dropout is 0 in both frameworks (as nanoGPT's pretraining default and Llama's): a step's math is then the
same in train and eval mode.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

FAMILIES = ("gpt2", "llama")


@dataclass(frozen=True)
class DecoderShape:
    family: str
    size: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_positions: int
    """gpt2: its learned position table's length; llama: the context its rotary tables are built for."""
    source: str = "computed"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def tied(self) -> bool:
        return self.family == "gpt2"


def _llama_ffn(hidden: int, multiple: int = 256) -> int:
    """Llama's SwiGLU width: 2/3 of 4 x hidden, rounded up to a multiple of `multiple`."""
    return multiple * math.ceil(int(8 * hidden / 3) / multiple)


def _gpt2(size, layers, hidden, heads, vocab=50257, positions=1024, source="computed") -> DecoderShape:
    return DecoderShape("gpt2", size, layers, hidden, heads, heads, 4 * hidden, vocab, positions, source)


def _llama(size, layers, hidden, heads, kv, vocab=32000, positions=2048, multiple=256, source="computed"):
    return DecoderShape(
        "llama", size, layers, hidden, heads, kv, _llama_ffn(hidden, multiple), vocab, positions, source
    )


SIZES: dict[str, dict[str, DecoderShape]] = {
    "gpt2": {
        "tiny": _gpt2("tiny", 2, 64, 4, vocab=512, positions=256),
        "124m": _gpt2("124m", 12, 768, 12, source="GPT-2 small, HF gpt2: 124,439,808"),
        "350m": _gpt2("350m", 24, 1024, 16, source="GPT-2 medium, HF gpt2-medium: 354,823,168"),
    },
    "llama": {
        "tiny": _llama("tiny", 2, 64, 4, 2, vocab=512, positions=256, multiple=16),
        "125m": _llama("125m", 12, 768, 12, 4),
        "350m": _llama("350m", 24, 1024, 16, 8),
        "1b": _llama("1b", 22, 2048, 32, 4, source="TinyLlama-1.1B's shape: 1,100,048,384"),
    },
}
"""Per family, its named sizes (the first is the smallest; `DEFAULT_SIZE` is the benchmarked default)."""

DEFAULT_SIZE = {"gpt2": "124m", "llama": "125m"}

_CUSTOM = re.compile(r"^l(\d+)-d(\d+)-h(\d+)(?:-kv(\d+))?(?:-v(\d+))?$")


def size_names(family: str) -> list[str]:
    return list(SIZES[family])


def decoder_shape(family: str, size: str | None = None) -> DecoderShape:
    """The shape of `family` at `size` (None: its default). ValueError, one line naming --model-size, for an
    unknown size or a custom shape whose head counts do not divide the hidden size."""
    size = DEFAULT_SIZE[family] if size is None else str(size).strip().lower()
    if size in SIZES[family]:
        return SIZES[family][size]
    m = _CUSTOM.match(size)
    if not m:
        raise ValueError(
            f"--model-size {size!r} is not a size of {family}: use one of {', '.join(SIZES[family])} "
            "or l<layers>-d<hidden>-h<heads>[-kv<kv heads>][-v<vocabulary>]"
        )
    layers, hidden, heads = int(m[1]), int(m[2]), int(m[3])
    kv = int(m[4]) if m[4] else heads
    base = SIZES[family][DEFAULT_SIZE[family]]
    vocab = int(m[5]) if m[5] else base.vocab
    if min(layers, hidden, heads, kv, vocab) < 1:
        raise ValueError(f"--model-size {size!r}: layers, hidden size, head counts and vocabulary must be at least 1")
    if hidden % heads:
        raise ValueError(f"--model-size {size!r}: {heads} heads do not divide the hidden size {hidden}")
    if family == "gpt2" and m[4]:
        raise ValueError(f"--model-size {size!r}: gpt2 has no grouped-query attention (drop -kv{kv})")
    if heads % kv:
        raise ValueError(f"--model-size {size!r}: {kv} key/value heads do not divide the {heads} query heads")
    if family == "llama" and (hidden // heads) % 2:
        raise ValueError(f"--model-size {size!r}: rotary positions need an even head size, got {hidden // heads}")
    if family == "gpt2":
        return _gpt2(size, layers, hidden, heads, vocab, base.max_positions)
    return _llama(size, layers, hidden, heads, kv, vocab, base.max_positions)


def parameter_count(shape: DecoderShape) -> int:
    """Exact trainable parameters (both frameworks build exactly these tensors).

    gpt2 : V d + P d + L (12 d^2 + 13 d) + 2 d          (tied: the output projection is the embedding)
    llama: 2 V d + L (2 d^2 + 2 d kv_dim + 3 d f + 2 d) + d   (kv_dim = kv_heads x head_dim)
    """
    d, L, V, f = shape.hidden, shape.layers, shape.vocab, shape.intermediate
    if shape.family == "gpt2":
        per_layer = 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * d + (d * f + f) + (f * d + d)
        return V * d + shape.max_positions * d + L * per_layer + 2 * d
    kv_dim = shape.kv_heads * shape.head_dim
    per_layer = 2 * d + 2 * d * d + 2 * d * kv_dim + 3 * d * f
    return 2 * V * d + L * per_layer + d


def matmul_parameters(shape: DecoderShape) -> int:
    """The parameters a token's step multiplies with: all of them less the tables that are only looked up
    (gpt2: the position table; its token table is also the output projection, so it counts; llama: the
    input embedding). Norm weights and biases are kept, as the standard 6N count keeps them."""
    if shape.family == "gpt2":
        return parameter_count(shape) - shape.max_positions * shape.hidden
    return parameter_count(shape) - shape.vocab * shape.hidden


def train_flops_per_token(shape: DecoderShape, seq_len: int) -> int:
    """6 N + 12 L d T (PaLM, Chowdhery et al. 2022, appendix B; nanoGPT's estimate_mfu): 6 FLOPs per matmul
    parameter per token for forward and backward, plus the attention scores and their weighted sum,
    2 x 2 x d x T forward per layer (x 3 with backward). Causal masking is not subtracted."""
    return 6 * matmul_parameters(shape) + 12 * shape.layers * shape.hidden * seq_len


OPTIMIZERS = ("adam_mixed", "adam_fp32", "sgd_momentum", "sgd_momentum_master")


def state_bytes_per_param(optimizer: str = "sgd_momentum", precision: str = "fp32") -> dict[str, float]:
    """Model-state bytes per parameter: {'params', 'grads', 'optimizer'} (the optimizer's share is ZeRO's K).

    'adam_mixed': the ZeRO paper's mixed-precision Adam: fp16 params 2, fp16 grads 2, fp32 master
    params + momentum + variance 12 (Rajbhandari et al. 2020, section 3.1). 'adam_fp32': Adam on fp32
    weights, no master copy: 4, 4, momentum + variance 8. 'sgd_momentum' in fp32 (ddp's and fsdp's; bf16
    autocast keeps fp32 weights): params 4, grads 4, momentum 4. 'sgd_momentum_master': the same optimizer
    under DeepSpeed's ZeRO optimizer, which adds an fp32 master copy: 4, 4, master + momentum 8; with
    precision 'fp16' (DeepSpeed's fp16 mode) the params and grads are 2 bytes each.
    """
    half = precision == "fp16"
    if optimizer == "adam_mixed":
        return {"params": 2.0, "grads": 2.0, "optimizer": 12.0}
    if optimizer == "adam_fp32":
        return {"params": 4.0, "grads": 4.0, "optimizer": 8.0}
    if optimizer == "sgd_momentum":
        return {"params": 4.0, "grads": 4.0, "optimizer": 4.0}
    if optimizer == "sgd_momentum_master":
        return {"params": 2.0 if half else 4.0, "grads": 2.0 if half else 4.0, "optimizer": 8.0}
    raise ValueError(f"unknown optimizer {optimizer!r}")


ZERO_STAGES = {
    0: (),
    1: ("optimizer",),
    2: ("optimizer", "grads"),
    3: ("optimizer", "grads", "params"),
}
"""The model states each ZeRO stage divides among the N devices (FSDP's full shard = stage 3; the registry's
Strategy.sharded_states says it per strategy)."""


def model_state_bytes(
    params: int, n: int, sharded: tuple[str, ...], optimizer: str = "sgd_momentum", precision: str = "fp32"
) -> float:
    """Model-state bytes per device with the states `sharded` divided among n (ZeRO's formulas: with
    mixed-precision Adam, stage 1 4P + 12P/N, stage 2 2P + 14P/N, stage 3 16P/N; with fp32 SGD + momentum
    8P + 4P/N, 4P + 8P/N, 12P/N; with DeepSpeed's master copy of it, 8P + 8P/N, 4P + 12P/N, 16P/N)."""
    per = state_bytes_per_param(optimizer, precision)
    return sum(b * params / (n if k in sharded else 1) for k, b in per.items())


def activation_bytes(
    shape: DecoderShape, batch: int, seq_len: int, value_bytes: int = 4, checkpointed: bool = False
) -> int:
    """An estimate of the activations one step keeps for backward, per device: Korthikanti et al. 2022 (arXiv
    2205.05198, section 4.1) count s b d (34 + 5 a s / d) bytes per layer in fp16 with dropout; with no dropout
    (its 1-byte masks, 2 s b d and a s^2 b, gone) and fused attention, which keeps no s x s matrix, that is
    16 values per token and hidden unit per layer, at `value_bytes` each; plus the logits, 3 b s V fp32 values
    (the logits the loss reads in fp32, the log-softmax it keeps for backward, and their gradient: 12 bytes a
    logit, where an H200 measured 13 under fp16 autocast, docs/gpu-validation.md). With activation
    checkpointing a layer keeps only its input (1 value per token and unit), and one layer's full set is live
    again while it is recomputed."""
    tokens = batch * seq_len
    per_layer = 16 * tokens * shape.hidden * value_bytes
    layers = (
        shape.layers * tokens * shape.hidden * value_bytes + per_layer if checkpointed else shape.layers * per_layer
    )
    return layers + 3 * tokens * shape.vocab * 4


def gradient_tensors(shape: DecoderShape) -> list[int]:
    """Element counts of the gradient tensors in the order backward produces them (last layer first), the
    layout DDP's buckets and the prediction's traffic are built from. A tied embedding appears once."""
    d, f = shape.hidden, shape.intermediate
    if shape.family == "gpt2":
        forward = [d, d, 3 * d * d, 3 * d, d * d, d, d, d, d * f, f, f * d, d]  # ln_1, attn, ln_2, mlp
        return [d, d] + forward[::-1] * shape.layers + [shape.max_positions * d, shape.vocab * d]
    kv_dim = shape.kv_heads * shape.head_dim
    forward = [d, d * d, d * kv_dim, d * kv_dim, d * d, d, f * d, f * d, d * f]  # norm, q k v o, norm, gate up down
    return [shape.vocab * d, d] + forward[::-1] * shape.layers + [shape.vocab * d]


def gradient_buckets(
    shape: DecoderShape, cap_bytes: int = 25 * 2**20, first_bytes: int = 2**20, bytes_per_element: int = 4
) -> list[int]:
    """Element counts of DDP's gradient buckets for this shape (gradient_tensors in backward order, the first
    bucket capped at 1 MiB and the rest at 25 MiB, DDP's defaults; fp32 gradients): what prediction needs
    for a decoder size without building it. The same rule as workers.torch_common.bucket_sizes."""
    sizes, current, current_bytes, cap = [], 0, 0, first_bytes
    for numel in gradient_tensors(shape):
        nbytes = numel * bytes_per_element
        if current and current_bytes + nbytes > cap:
            sizes.append(current)
            current, current_bytes, cap = 0, 0, cap_bytes
        current += numel
        current_bytes += nbytes
    if current:
        sizes.append(current)
    return sizes


def with_size(spec, size: str | None):
    """A decoder ModelSpec resolved at `size` (vocabulary, longest sequence, reference count)."""
    shape = decoder_shape(spec.name, size)
    return replace(
        spec,
        vocab_size=shape.vocab,
        num_classes=shape.vocab,
        max_seq_len=shape.max_positions,
        default_seq_len=min(spec.default_seq_len, shape.max_positions),
        reference_params=parameter_count(shape),
        reference=shape.source,
        default_size=shape.size,
    )

"""Framework-free model facts: input shapes, loss kind and reference parameter counts.

Every model exists in both `torch_models` and `keras_models`, layer for layer the same network, and
`reference_params` is the exact trainable-parameter count both frameworks produce at the spec's
default `num_classes` (torch: `sum(p.numel() for p in model.parameters())`; Keras: the sizes of
`model.trainable_weights`). tests/test_models.py checks all three numbers are equal.

Kinds and what the launchers feed them:
  * 'image'     -- float images (torch NCHW, Keras NHWC), class-id targets, loss 'cross_entropy'.
  * 'keypoints' -- float images, confidence-map targets at `output_stride`, loss 'mse'.
  * 'tokens'    -- int token ids (N, seq); class ids (loss 'cross_entropy') or next-token ids
                   (N, seq) (loss 'lm_cross_entropy', mean over every token).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distbench.hints import did_you_mean
from distbench.models import decoders


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str
    """Registry key, as typed on the command line."""
    description: str
    kind: str
    """'image', 'keypoints' or 'tokens' (see the module docstring)."""
    loss: str
    """'cross_entropy' (class ids), 'mse' (confidence maps) or 'lm_cross_entropy' (next token ids)."""
    reference_params: int
    """Exact trainable-parameter count at the default num_classes; both frameworks must match it."""
    reference: str = "torchvision"
    """Where reference_params comes from."""
    channels: int = 3
    """Input channels of image/keypoint models (0 for token models)."""
    num_classes: int = 1000
    """Output size: classes ('cross_entropy'), confidence maps ('mse') or the vocabulary ('lm_cross_entropy').
    Only classification models take a different num_classes from the launchers (see build_model)."""
    default_image_size: int | None = None
    """Side of the square input the reference network is defined at (None for token models)."""
    min_image_size: int | None = None
    """Smallest side the network's downsampling accepts (the final feature map is at least 1x1)."""
    image_size_multiple: int = 1
    """The side must be a multiple of this (16 for unet: four 2x poolings whose outputs the decoder
    upsamples and concatenates with the encoder features, so every level must halve exactly)."""
    output_stride: int = 1
    """Keypoint models: input side / confidence-map side."""
    default_seq_len: int | None = None
    """Token models: sequence length benchmarked by default."""
    min_seq_len: int | None = None
    max_seq_len: int | None = None
    """Token models: longest sequence the network accepts (BERT: its learned position embeddings)."""
    vocab_size: int | None = None
    """Token models: the ids are in [0, vocab_size)."""
    sizes: tuple[str, ...] = ()
    """Decoder families: their named sizes (--model-size; models.decoders), smallest first."""
    default_size: str | None = None
    """Decoder families: the size this spec describes (reference_params, vocab_size, max_seq_len are its)."""


MLP_HIDDEN = 128
"""Hidden units of the 'mlp' model."""
CNN_CHANNELS = (32, 64)
"""Output channels of the 'cnn' model's two 3x3 convolutions (distbench converge's default model)."""
CNN_SIDE = 20
"""The side the 'cnn' model's parameter count is given at (distbench converge's shapes): its classifier
takes the 2x2-pooled-twice feature map, (side // 4)^2 x 64 values."""

# ---- architecture tables shared by torch_models and keras_models (one source, both frameworks) ----

RESNET_LAYOUTS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
"""Per ResNet: (block kind 'basic' or 'bottleneck', blocks per stage), as torchvision."""

VGG16_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
"""torchvision cfg 'D': conv3x3 widths, 'M' = 2x2 max pool."""

MOBILENET_V2_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
"""(expand ratio t, channels c, repeats n, first stride s) at width 1.0; stem 32, last conv 1280."""

_EFFICIENTNET_B0 = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)
"""(expand ratio, kernel, stride, in channels, out channels, layers) of B0, as torchvision."""

EFFICIENTNET_B4 = dict(width_mult=1.4, depth_mult=1.8, dropout=0.4)
"""B4's compound scaling of B0 and its classifier dropout, as torchvision."""

UNET = dict(
    filters=32,
    filters_rate=1.5,
    down_blocks=4,
    up_blocks=3,
    convs_per_block=2,
    kernel_size=3,
    middle_block=True,
    maps=13,
)
"""The SLEAP seed's UNet (stem_blocks 0, block_contraction False, up_interpolate True)."""

BERT_BASE = dict(
    layers=12,
    hidden=768,
    heads=12,
    intermediate=3072,
    vocab=30522,
    max_positions=512,
    type_vocab=2,
    dropout=0.1,
    layer_norm_eps=1e-12,
)

LSTM_LM = dict(vocab=10000, embed=650, hidden=650, layers=2, dropout=0.5)


def make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round to a multiple of divisor, never more than 10% down."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def efficientnet_blocks(
    width_mult: float, depth_mult: float, stochastic_depth_prob: float = 0.2
) -> list[tuple[int, int, int, int, int, int, float]]:
    """Per MBConv block: (stage, expand ratio, kernel, stride, in, out, stochastic-depth prob), as torchvision."""
    stages = [
        (e, k, s, make_divisible(i * width_mult), make_divisible(o * width_mult), int(math.ceil(n * depth_mult)))
        for e, k, s, i, o, n in _EFFICIENTNET_B0
    ]
    total = sum(st[-1] for st in stages)
    blocks, block_id = [], 0
    for stage, (e, k, s, cin, cout, n) in enumerate(stages):
        for j in range(n):
            blocks.append(
                (
                    stage,
                    e,
                    k,
                    s if j == 0 else 1,
                    cin if j == 0 else cout,
                    cout,
                    stochastic_depth_prob * block_id / total,
                )
            )
            block_id += 1
    return blocks


def unet_filters(level: int) -> int:
    """SLEAP: int(filters * filters_rate ** level) -> 32, 48, 72, 108, 162."""
    return int(UNET["filters"] * UNET["filters_rate"] ** level)


MODEL_SPECS: dict[str, ModelSpec] = {
    "resnet18": ModelSpec(
        name="resnet18",
        description="ResNet-18 (basic blocks)",
        kind="image",
        loss="cross_entropy",
        default_image_size=224,
        min_image_size=32,
        reference_params=11_689_512,
    ),
    "resnet50": ModelSpec(
        name="resnet50",
        description="ResNet-50 v1.5 (stride in the 3x3 conv)",
        kind="image",
        loss="cross_entropy",
        default_image_size=224,
        min_image_size=32,
        reference_params=25_557_032,
    ),
    "resnet152": ModelSpec(
        name="resnet152",
        description="ResNet-152 v1.5",
        kind="image",
        loss="cross_entropy",
        default_image_size=224,
        min_image_size=32,
        reference_params=60_192_808,
    ),
    "vgg16": ModelSpec(
        name="vgg16",
        description="VGG-16 without BN; 7x7 adaptive pool, 4096-4096 classifier with dropout 0.5",
        kind="image",
        loss="cross_entropy",
        default_image_size=224,
        min_image_size=32,
        reference_params=138_357_544,
    ),
    "mobilenet_v2": ModelSpec(
        name="mobilenet_v2",
        description="MobileNetV2 width 1.0 (inverted residuals, ReLU6), dropout 0.2",
        kind="image",
        loss="cross_entropy",
        default_image_size=224,
        min_image_size=32,
        reference_params=3_504_872,
    ),
    "efficientnet_b4": ModelSpec(
        name="efficientnet_b4",
        description="EfficientNet-B4 (width 1.4, depth 1.8, MBConv+SE, SiLU, stochastic depth 0.2, dropout 0.4)",
        kind="image",
        loss="cross_entropy",
        default_image_size=380,
        min_image_size=32,
        reference_params=19_341_616,
    ),
    "unet": ModelSpec(
        name="unet",
        description=(
            "SLEAP keypoint UNet: filters 32, rate 1.5, 4 down / 3 up blocks, 2 convs each, middle block, "
            "bilinear upsampling + skip concat, 1x1 head to 13 confidence maps at stride 2, MSE"
        ),
        kind="keypoints",
        loss="mse",
        channels=1,
        num_classes=13,
        default_image_size=160,
        min_image_size=16,
        image_size_multiple=16,
        output_stride=2,
        # The SLEAP backbone (sleap UNet, up_interpolate=True, no block contraction) has 1,295,032
        # parameters ("1.29M" in the seed); the 1x1 confidence-map head adds 48*13 + 13 = 637.
        reference_params=1_295_669,
        reference="SLEAP UNet backbone 1,295,032 + 637 head (seed: 1.29M)",
    ),
    "bert_base": ModelSpec(
        name="bert_base",
        description=(
            "BERT-base encoder (12 layers, hidden 768, 12 heads, FFN 3072, post-LN, GELU) "
            "+ tanh pooler + classification head"
        ),
        kind="tokens",
        loss="cross_entropy",
        channels=0,
        num_classes=2,
        default_seq_len=128,
        min_seq_len=1,
        max_seq_len=512,
        vocab_size=30522,
        # BertModel (embeddings + 12 layers + pooler) = 109,482,240, as HF's bert-base-uncased;
        # the classifier adds 768*2 + 2.
        reference_params=109_483_778,
        reference="HF bert-base-uncased 109,482,240 + 1,538 head (about 110M)",
    ),
    "mlp": ModelSpec(
        name="mlp",
        description=(
            "one hidden layer of 128 ReLU units on 8x8 grayscale digits (scikit-learn's bundled digits, "
            "distbench converge); Glorot-uniform weights and zero biases in both frameworks"
        ),
        kind="image",
        loss="cross_entropy",
        channels=1,
        num_classes=10,
        default_image_size=8,
        min_image_size=1,
        reference_params=MLP_HIDDEN * (8 * 8 + 1) + 10 * (MLP_HIDDEN + 1),
        reference="computed (64 -> 128 -> 10, weights + biases)",
    ),
    "cnn": ModelSpec(
        name="cnn",
        description=(
            "small CNN: two 3x3 convolutions (32, 64 channels, ReLU, 2x2 max pool each), a linear classifier on the "
            "flattened map (distbench converge's default, on its 40x40 synthetic shapes, where the classifier makes "
            "it 82,826 params); Glorot-uniform weights and zero biases in both frameworks"
        ),
        kind="image",
        loss="cross_entropy",
        channels=1,
        num_classes=10,
        default_image_size=CNN_SIDE,
        min_image_size=4,
        reference_params=(9 * CNN_CHANNELS[0] + CNN_CHANNELS[0])
        + (9 * CNN_CHANNELS[0] * CNN_CHANNELS[1] + CNN_CHANNELS[1])
        + (CNN_CHANNELS[1] * (CNN_SIDE // 4) ** 2 * 10 + 10),
        reference="computed (conv 1->32, conv 32->64, 64x5x5 -> 10 at 20x20, weights + biases)",
    ),
    "linear": ModelSpec(
        name="linear",
        description=(
            "global average pooling + one linear layer (3 -> classes): a model whose gradients are a few "
            "bytes (32 at --num-classes 2), for checking that communication measures ~0"
        ),
        kind="image",
        loss="cross_entropy",
        default_image_size=224,
        min_image_size=1,
        reference_params=3 * 1000 + 1000,
        reference="computed (weights 3 x 1000 + bias 1000)",
    ),
    "lstm": ModelSpec(
        name="lstm",
        description=(
            "2-layer LSTM language model, PTB 'medium' sizes: vocab 10000, embedding 650, "
            "hidden 650, dropout 0.5, untied 650->10000 decoder"
        ),
        kind="tokens",
        loss="lm_cross_entropy",
        channels=0,
        num_classes=10000,
        default_seq_len=35,
        min_seq_len=1,
        vocab_size=10000,
        # embedding 6,500,000 + 2 x LSTM(650, 650) 3,385,200 (torch's two bias vectors) + decoder 6,510,000
        reference_params=19_780_400,
        reference="computed (Zaremba et al. medium PTB model, untied)",
    ),
    "gpt2": ModelSpec(
        name="gpt2",
        description=(
            "GPT-2 decoder (pre-LN LayerNorm, GELU MLP, learned positions, output tied to the token embedding), "
            "causal next-token loss; --model-size " + ", ".join(decoders.size_names("gpt2"))
        ),
        kind="tokens",
        loss="lm_cross_entropy",
        channels=0,
        num_classes=50257,
        default_seq_len=1024,
        min_seq_len=1,
        max_seq_len=1024,
        vocab_size=50257,
        reference_params=124_439_808,
        reference="GPT-2 small, HF gpt2: 124,439,808",
        sizes=tuple(decoders.size_names("gpt2")),
        default_size="124m",
    ),
    "llama": ModelSpec(
        name="llama",
        description=(
            "Llama decoder (RMSNorm, SwiGLU, rotary positions, grouped-query attention, untied output), "
            "causal next-token loss; --model-size " + ", ".join(decoders.size_names("llama"))
        ),
        kind="tokens",
        loss="lm_cross_entropy",
        channels=0,
        num_classes=32000,
        default_seq_len=2048,
        min_seq_len=1,
        max_seq_len=2048,
        vocab_size=32000,
        reference_params=124_668_672,
        reference="computed (docs/methodology.md: 12 layers, hidden 768, 12 heads, 4 KV heads, SwiGLU 2048)",
        sizes=tuple(decoders.size_names("llama")),
        default_size="125m",
    ),
}


def sized_spec(spec: "ModelSpec | str", size: str | None) -> ModelSpec:
    """The spec at --model-size `size` (None: the spec's own). ValueError (one line naming the flag) for a
    size of a model that has none, or an unknown or malformed size."""
    spec = _as_spec(spec)
    if size is None:
        return spec
    if not spec.sizes:
        raise ValueError(
            f"--model-size applies to the decoder models ({', '.join(decoders.FAMILIES)}), not {spec.name}"
        )
    return decoders.with_size(spec, size)


def model_names() -> list[str]:
    return sorted(MODEL_SPECS)


def get_spec(name: str) -> ModelSpec:
    try:
        return MODEL_SPECS[name]
    except KeyError:
        raise ValueError(
            f"--model: unknown model {name!r}{did_you_mean(name, model_names())}; valid models: "
            + ", ".join(model_names())
        ) from None


def _as_spec(spec: ModelSpec | str) -> ModelSpec:
    return get_spec(spec) if isinstance(spec, str) else spec


def registered_spec(name: str, registry: dict) -> ModelSpec:
    """The spec of a model a framework's registry defines (one error text for both frameworks)."""
    if name not in registry:
        raise ValueError(
            f"--model: unknown model {name!r}{did_you_mean(name, registry)}; valid models: {', '.join(sorted(registry))}"
        )
    return get_spec(name)


def output_size(spec: ModelSpec, num_classes: int | None) -> int:
    """num_classes applies to classifiers; confidence maps and the LM vocabulary are fixed by the spec."""
    if spec.loss == "cross_entropy" and num_classes is not None:
        return num_classes
    return spec.num_classes


def check_input(spec: ModelSpec | str, image_size: int | None = None, seq_len: int | None = None) -> None:
    """Raise ValueError (one line) if the input size cannot go through the network.

    Only the size that applies to the model's kind is checked (image_size for image/keypoint
    models, seq_len for token models); None means "the default", which is always valid.
    unet: the side must be >= 16 and a multiple of 16 (checked with `image_size % 16`).
    """
    spec = _as_spec(spec)
    if spec.kind in ("image", "keypoints") and image_size is not None:
        if image_size < spec.min_image_size:
            raise ValueError(
                f"--image-size {image_size} is too small for {spec.name}: the minimum is {spec.min_image_size}"
            )
        if image_size % spec.image_size_multiple:
            raise ValueError(
                f"--image-size {image_size} is not valid for {spec.name}: "
                f"it must be a multiple of {spec.image_size_multiple}"
            )
    if spec.kind == "tokens" and seq_len is not None:
        if seq_len < spec.min_seq_len:
            raise ValueError(f"--seq-len {seq_len} is too small for {spec.name}: the minimum is {spec.min_seq_len}")
        if spec.max_seq_len is not None and seq_len > spec.max_seq_len:
            raise ValueError(f"--seq-len {seq_len} is too large for {spec.name}: the maximum is {spec.max_seq_len}")


def input_shape(spec: ModelSpec | str, image_size: int | None = None, seq_len: int | None = None) -> str:
    """Per-sample input, human-readable: '3x224x224' (C x H x W) or 'seq 128 tokens'."""
    spec = _as_spec(spec)
    if spec.kind == "tokens":
        return f"seq {seq_len or spec.default_seq_len} tokens"
    side = image_size or spec.default_image_size
    return f"{spec.channels}x{side}x{side}"

"""Per-layer parameters and FLOPs of the models in models/specs.py, computed here from their architecture tables
(framework-free), and the bucket timeline they imply: when each bucket's gradients are ready during backward.

A layer is a weight layer with its normalisation (a convolution and its batch norm, a linear map). Its forward
costs 2 x multiply-adds per sample; its backward about twice that (the weights' gradient and the inputs'), the
first layer once (no input gradient). Backward runs the layers last to first, so a layer's weight gradient is
ready once the backward of every layer after it and its own have run. Buckets fill with the parameters in that
order (DDP's rule) up to the bucket size. Elementwise work (activations, pooling, softmax) is not counted: the
ready times are FLOP shares, not seconds; a one-device profile measures them.
"""

from __future__ import annotations

from distbench.core.strategies import DDP_BUCKET
from distbench.models import decoders, specs
from distbench.predict import pipeline

DDP_FIRST_BUCKET = 2**20
"""DDP's first bucket (1 MiB, `dist._DEFAULT_FIRST_BUCKET_BYTES`) before its 25 MiB ones."""

Layer = tuple[str, int, float]
"""(name, trainable parameters, forward FLOPs per sample)."""


def _conv(name: str, k: int, cin: int, cout: int, side: int, bias: bool = False, bn: bool = True) -> Layer:
    params = k * k * cin * cout + (cout if bias else 0) + (2 * cout if bn else 0)
    return name, params, 2.0 * k * k * cin * cout * side * side


def _linear(name: str, cin: int, cout: int, tokens: int = 1) -> Layer:
    return name, cin * cout + cout, 2.0 * cin * cout * tokens


def resnet_layers(name: str, side: int = 224, classes: int = 1000) -> list[Layer]:
    kind, blocks = specs.RESNET_LAYOUTS[name]
    side = -(-side // 2)
    out = [_conv("conv1", 7, 3, 64, side)]
    side = -(-side // 2)  # max pool
    inplanes, expansion = 64, (4 if kind == "bottleneck" else 1)
    for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), blocks), start=1):
        for b in range(count):
            stride = 2 if stage > 1 and b == 0 else 1
            out_side = -(-side // stride)
            tag = f"layer{stage}.{b}"
            if kind == "bottleneck":
                out += [_conv(f"{tag}.conv1", 1, inplanes, planes, side)]
                out += [_conv(f"{tag}.conv2", 3, planes, planes, out_side)]
                out += [_conv(f"{tag}.conv3", 1, planes, planes * 4, out_side)]
            else:
                out += [_conv(f"{tag}.conv1", 3, inplanes, planes, out_side)]
                out += [_conv(f"{tag}.conv2", 3, planes, planes, out_side)]
            if stride != 1 or inplanes != planes * expansion:
                out += [_conv(f"{tag}.downsample", 1, inplanes, planes * expansion, out_side)]
            inplanes, side = planes * expansion, out_side
    return out + [_linear("fc", inplanes, classes)]


def vgg16_layers(side: int = 224, classes: int = 1000) -> list[Layer]:
    out, cin = [], 3
    for i, v in enumerate(specs.VGG16_CFG):
        if v == "M":
            side //= 2
            continue
        out.append(_conv(f"features.{i}", 3, cin, v, side, bias=True, bn=False))
        cin = v
    return out + [_linear("fc6", 512 * 7 * 7, 4096), _linear("fc7", 4096, 4096), _linear("fc8", 4096, classes)]


def bert_layers(seq: int = 128, classes: int = 2) -> list[Layer]:
    c = specs.BERT_BASE
    h, f = c["hidden"], c["intermediate"]
    emb = (c["vocab"] + c["max_positions"] + c["type_vocab"]) * h + 2 * h
    out: list[Layer] = [("embeddings", emb, 0.0)]
    for i in range(c["layers"]):
        attn = 4 * (h * h + h)
        out.append((f"layer{i}.attention", attn + 2 * h, 2.0 * 4 * h * h * seq + 2.0 * 2 * seq * seq * h))
        out.append((f"layer{i}.ffn", 2 * h * f + f + h + 2 * h, 2.0 * 2 * h * f * seq))
    return out + [_linear("pooler", h, h), _linear("classifier", h, classes)]


def model_layers(name: str, image_size: int | None = None, seq_len: int | None = None) -> list[Layer] | None:
    """The layers of a model distbench knows, at its input size (None: not tabulated here)."""
    if name in specs.RESNET_LAYOUTS:
        return resnet_layers(name, image_size or 224)
    if name == "vgg16":
        return vgg16_layers(image_size or 224)
    if name == "bert_base":
        return bert_layers(seq_len or specs.get_spec("bert_base").default_seq_len)
    return None


def tensors_per_layer(name: str) -> list[int] | None:
    """Parameter tensors of each layer of model_layers(name), in the same order (a convolution with its batch norm:
    3; a convolution with a bias or a linear map: 2; a BERT attention block 4 linear maps and a layer norm: 10; its
    feed-forward block 2 and a layer norm: 6; the embeddings 3 tables and a layer norm: 5)."""
    if name in specs.RESNET_LAYOUTS:
        return [3] * (len(resnet_layers(name)) - 1) + [2]
    if name == "vgg16":
        return [2] * len(vgg16_layers())
    if name == "bert_base":
        return [5] + [10, 6] * specs.BERT_BASE["layers"] + [2, 2]
    return None


def ready_fractions(layers: list[Layer]) -> list[tuple[float, int]]:
    """(ready fraction of backward, parameters) per layer, in the order backward produces the gradients."""
    back = [f * (1 if i == 0 else 2) for i, (_, _, f) in enumerate(layers)]
    total = sum(back) or 1.0
    out, done = [], 0.0
    for i in reversed(range(len(layers))):
        done += back[i]
        out.append((done / total, layers[i][1]))
    return out


def decoder_tensors(name: str, model_size: str | None, seq_len: int | None) -> list[tuple[int, float]]:
    """(elements, backward FLOPs per sample of the layer that produces it, or 0 after the first of that
    layer) of each gradient tensor of a decoder, in the order backward produces them (decoders.gradient_tensors:
    the output side first, the blocks last to first, the embedding tables last). A block's forward: 2 FLOPs
    per weight and token + 4 d T per token for the attention scores and weighted sum; the output projection
    2 V d per token (gpt2's tied table is its token table, produced last). Backward: twice the forward."""
    shape = decoders.decoder_shape(name, model_size)
    d, t = shape.hidden, seq_len or shape.max_positions
    tensors = decoders.gradient_tensors(shape)
    head = 2  # gpt2: ln_f weight and bias; llama: lm_head and the final norm
    tail = 2 if shape.family == "gpt2" else 1  # gpt2: positions and the tied token table; llama: embed_tokens
    per_block = (len(tensors) - head - tail) // shape.layers
    flops = [0.0] * len(tensors)
    flops[0] = 2.0 * 2 * shape.vocab * d * t
    for i in range(shape.layers):
        first = head + i * per_block
        block = sum(tensors[first : first + per_block])
        flops[first] = 2.0 * (2.0 * block * t + 4.0 * d * t * t)
    return list(zip(tensors, flops))


def decoder_timeline(
    name: str, model_size: str | None, bucket_bytes: float | None, seq_len: int | None = None
) -> pipeline.Timeline:
    """A decoder's buckets (decoders.gradient_tensors filled by DDP's rule: 1 MiB first, then `bucket_bytes`,
    fp32 gradients; None: one message), each ready when the backward FLOPs of the layers that produce its
    tensors have run."""
    rows = decoder_tensors(name, model_size, seq_len)
    total = sum(f for _, f in rows) or 1.0
    ready, done = [], 0.0
    for _, f in rows:
        done += f
        ready.append(done / total)
    cap = bucket_bytes or float("inf")
    first = DDP_FIRST_BUCKET if bucket_bytes == DDP_BUCKET else None
    tl = pipeline.merge(ready, [4.0 * n for n, _ in rows], cap, first)
    source = (
        f"model FLOPs ({name} {model_size or 'default size'}: {len(rows)} gradient tensors in backward order, "
        "models/decoders.py; backward 2x forward per layer)"
    )
    return pipeline.Timeline(tl.ready, tl.shares, source)


def flops_timeline(
    name: str,
    bucket_bytes: float | None,
    image_size: int | None = None,
    seq_len: int | None = None,
    model_size: str | None = None,
) -> pipeline.Timeline | None:
    """Buckets of `bucket_bytes` (FP32 gradients; None: one message) over the model's layers, each ready when
    its last layer's backward has run, by FLOP share. None for a model not tabulated here."""
    if name in decoders.FAMILIES:
        return decoder_timeline(name, model_size, bucket_bytes, seq_len)
    layers = model_layers(name, image_size, seq_len)
    if not layers:
        return None
    fr = ready_fractions(layers)
    cap = bucket_bytes or float("inf")
    tl = pipeline.merge([r for r, _ in fr], [4.0 * p for _, p in fr], cap)
    source = f"model FLOPs ({name}: {len(layers)} weight layers, backward 2x forward per layer)"
    return pipeline.Timeline(tl.ready, tl.shares, source)

"""PyTorch models by name: the registry and what callers ask of a model (build it, count its parameters,
a synthetic batch, the loss, forward FLOPs). The networks are defined per architecture family, layer for
layer the same as their keras_* twins (torchvision's structure):

  torch_resnet (resnet18/50/152), torch_plain (vgg16, linear, mlp, cnn), torch_mobilenet (mobilenet_v2,
  efficientnet_b4), torch_unet (unet), torch_transformer (bert_base), torch_recurrent (lstm),
  torch_decoder (gpt2, llama: sized by model_size, models.decoders).

Weight initialisation is torch's default (it does not change shapes, parameter counts or step cost).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch import nn

from distbench.models.specs import ModelSpec, check_input, output_size, registered_spec, sized_spec
from distbench.models.torch_decoder import build_decoder
from distbench.models.torch_mobilenet import build_efficientnet_b4, build_mobilenet_v2
from distbench.models.torch_plain import build_cnn, build_linear, build_mlp, build_vgg16
from distbench.models.torch_recurrent import build_lstm
from distbench.models.torch_resnet import build_resnet
from distbench.models.torch_transformer import build_bert_base
from distbench.models.torch_unet import build_unet

MODELS: dict[str, Callable[..., nn.Module]] = {
    "resnet18": functools.partial(build_resnet, "resnet18"),
    "resnet50": functools.partial(build_resnet, "resnet50"),
    "resnet152": functools.partial(build_resnet, "resnet152"),
    "vgg16": build_vgg16,
    "mobilenet_v2": build_mobilenet_v2,
    "efficientnet_b4": build_efficientnet_b4,
    "unet": build_unet,
    "bert_base": build_bert_base,
    "lstm": build_lstm,
    "linear": build_linear,
    "mlp": build_mlp,
    "cnn": build_cnn,
    "gpt2": functools.partial(build_decoder, "gpt2"),
    "llama": functools.partial(build_decoder, "llama"),
}
"""Name -> builder(*, num_classes, channels, image_size, seq_len, model_size) (keys: the same as
keras_models.MODELS)."""


def _spec(name: str, model_size: str | None = None) -> ModelSpec:
    return sized_spec(registered_spec(name, MODELS), model_size)


def build_model(
    name: str,
    *,
    num_classes: int | None = None,
    image_size: int | None = None,
    seq_len: int | None = None,
    model_size: str | None = None,
) -> nn.Module:
    """The named network on the CPU, in training mode.

    num_classes: classification head size (image models and bert_base); None = the spec's
    default (1000, bert_base 2). unet always outputs its 13 maps and lstm the vocabulary.
    image_size / seq_len are only validated (check_input): torch modules take any valid size.
    model_size: the decoders' size (None: the spec's default; models.decoders).
    """
    spec = _spec(name, model_size)
    check_input(spec, image_size=image_size, seq_len=seq_len)
    return MODELS[name](
        num_classes=output_size(spec, num_classes),
        channels=spec.channels,
        image_size=image_size,
        seq_len=seq_len,
        model_size=spec.default_size,
    )


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def count_params_without_allocating(name: str, model_size: str | None = None) -> int:
    """The parameter count of the model built on the 'meta' device: shapes only, no memory (any size)."""
    with torch.device("meta"):
        return count_params(build_model(name, model_size=model_size))


def confidence_maps(points: torch.Tensor, height: int, width: int, stride: int, sigma: float = 1.5) -> torch.Tensor:
    """SLEAP's make_confmaps: Gaussians (peak 1) at points (N, K, 2 as x, y, input pixels) on the
    grid 0, stride, 2*stride, ... -> (N, K, height // stride, width // stride)."""
    xv = torch.arange(0, width, stride, dtype=torch.float32)
    yv = torch.arange(0, height, stride, dtype=torch.float32)
    dx = (xv[None, None, None, :] - points[..., 0, None, None]) ** 2
    dy = (yv[None, None, :, None] - points[..., 1, None, None]) ** 2
    return torch.exp(-(dx + dy) / (2 * sigma**2))


def synthetic_batch(
    name: str,
    batch: int,
    *,
    image_size: int | None = None,
    seq_len: int | None = None,
    num_classes: int | None = None,
    seed: int = 0,
    model_size: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) on the CPU, deterministic in seed.

    image: x (N, C, H, W) float32 ~ N(0, 1), y (N,) int64 class ids.
    keypoints: x (N, 1, H, W) float32 in [0, 1), y (N, 13, H/2, W/2) Gaussian confidence maps
    (sigma 1.5 px) at random keypoints. tokens: x (N, seq) int64 ids; y (N,) class ids
    (bert_base) or (N, seq) next-token ids (lstm, gpt2, llama: x and y are one sequence shifted by one).
    """
    spec = _spec(name, model_size)
    check_input(spec, image_size=image_size, seq_len=seq_len)
    g = torch.Generator(device="cpu").manual_seed(seed)
    if spec.kind == "tokens":
        seq = seq_len or spec.default_seq_len
        if spec.loss == "lm_cross_entropy":
            ids = torch.randint(0, spec.vocab_size, (batch, seq + 1), generator=g)
            return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
        x = torch.randint(0, spec.vocab_size, (batch, seq), generator=g)
        return x, torch.randint(0, output_size(spec, num_classes), (batch,), generator=g)
    side = image_size or spec.default_image_size
    if spec.kind == "keypoints":
        x = torch.rand(batch, spec.channels, side, side, generator=g)
        points = torch.rand(batch, spec.num_classes, 2, generator=g) * (side - 1)
        return x, confidence_maps(points, side, side, spec.output_stride)
    x = torch.randn(batch, spec.channels, side, side, generator=g)
    return x, torch.randint(0, output_size(spec, num_classes), (batch,), generator=g)


def loss_fn(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """(outputs, targets) -> scalar mean loss: CrossEntropyLoss, MSELoss, or cross entropy over
    every token for the LM (outputs (N, seq, V) flattened to (N*seq, V))."""
    spec = _spec(name)
    if spec.loss == "mse":
        return nn.MSELoss()
    if spec.loss == "lm_cross_entropy":
        ce = nn.CrossEntropyLoss()

        def lm_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return ce(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))

        return lm_loss
    return nn.CrossEntropyLoss()


@functools.lru_cache(maxsize=None)
def forward_flops_per_sample(
    name: str,
    image_size: int | None = None,
    seq_len: int | None = None,
    num_classes: int | None = None,
    model_size: str | None = None,
) -> int:
    """Forward FLOPs of one sample at the given (default: the spec's) input size and head size.

    Measured with torch.utils.flop_counter.FlopCounterMode on a batch of 1; a multiply-add counts
    as 2 FLOPs, and only matmuls, convolutions and attention are counted (elementwise ops, norms,
    pooling and softmax are not). The model and input live on the 'meta' device: nothing is
    allocated or computed, and ops that CPU kernels would fuse out of the counter's sight
    (CPU flash attention, the fused LSTM) decompose into countable matmuls. Cached per arguments.
    """
    from torch.utils.flop_counter import FlopCounterMode

    spec = _spec(name, model_size)
    check_input(spec, image_size=image_size, seq_len=seq_len)
    with torch.device("meta"):
        # mlp, cnn: sized by image_size
        model = build_model(name, num_classes=num_classes, image_size=image_size, model_size=model_size).eval()
        if spec.kind == "tokens":
            x = torch.zeros(1, seq_len or spec.default_seq_len, dtype=torch.long)
        else:
            side = image_size or spec.default_image_size
            x = torch.zeros(1, spec.channels, side, side)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(x)
    return int(counter.get_total_flops())

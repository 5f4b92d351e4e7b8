"""Keras 3 models by name: the registry and what callers ask of a model (build it, count its parameters,
a synthetic batch, the losses). The networks are defined per architecture family, layer for layer the same
as their torch_* twins:

  keras_resnet (resnet18/50/152), keras_plain (vgg16, linear, mlp, cnn), keras_mobilenet (mobilenet_v2,
  efficientnet_b4), keras_unet (unet), keras_transformer (bert_base), keras_recurrent (lstm),
  keras_decoder (gpt2, llama: sized by model_size, models.decoders).

Conventions every family follows: channels-last (NHWC) because TensorFlow's CPU kernels need it. Strided
convolutions use explicit zero padding and 'valid' convolutions so the geometry is exactly torch's (Keras'
'same' pads asymmetrically at stride 2); at stride 1 an odd kernel's 'same' padding is symmetric, i.e.
torch's padding=(k-1)//2, and is used as is. BatchNorm matches torch: epsilon 1e-5, momentum 0.9 (= torch 0.1).

Keras models are built for one input size (image_size / seq_len, default the spec's): the Input
shape is static (VGG's adaptive pool needs it, and XLA/TF prefer it).

Loss callables here take (outputs, targets), the same order as torch_models.loss_fn (the reverse
of Keras' (y_true, y_pred)); compile_loss(name) gives a keras.losses.Loss for model.compile.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import keras
from keras import ops

from distbench.models.keras_decoder import build_decoder
from distbench.models.keras_mobilenet import build_efficientnet_b4, build_mobilenet_v2
from distbench.models.keras_plain import build_cnn, build_linear, build_mlp, build_vgg16
from distbench.models.keras_recurrent import build_lstm
from distbench.models.keras_resnet import build_resnet
from distbench.models.keras_transformer import build_bert_base
from distbench.models.keras_unet import build_unet
from distbench.models.specs import ModelSpec, check_input, output_size, registered_spec, sized_spec

MODELS: dict[str, Callable[..., keras.Model]] = {
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
torch_models.MODELS)."""


def _spec(name: str, model_size: str | None = None) -> ModelSpec:
    return sized_spec(registered_spec(name, MODELS), model_size)


def build_model(
    name: str,
    *,
    num_classes: int | None = None,
    image_size: int | None = None,
    seq_len: int | None = None,
    model_size: str | None = None,
) -> keras.Model:
    """The named network, built for one input size (None = the spec's default).

    num_classes: classification head size (image models and bert_base); None = the spec's
    default (1000, bert_base 2). unet always outputs its 13 maps and lstm the vocabulary.
    """
    spec = _spec(name, model_size)
    check_input(spec, image_size=image_size, seq_len=seq_len)
    return MODELS[name](
        num_classes=output_size(spec, num_classes),
        channels=spec.channels,
        image_size=image_size or spec.default_image_size,
        seq_len=seq_len or spec.default_seq_len,
        model_size=spec.default_size,
    )


def count_params(model: keras.Model) -> int:
    """Trainable parameters: the same quantity as torch's parameters() (BN running stats excluded)."""
    return int(sum(math.prod(w.shape) for w in model.trainable_weights))


def confidence_maps(points, height: int, width: int, stride: int, sigma: float = 1.5):
    """SLEAP's make_confmaps, channels last: points (N, K, 2 as x, y) -> (N, height//stride, width//stride, K)."""
    import tensorflow as tf

    xv = tf.range(0, width, stride, dtype=tf.float32)
    yv = tf.range(0, height, stride, dtype=tf.float32)
    px, py = points[:, None, None, :, 0], points[:, None, None, :, 1]  # (N, 1, 1, K)
    dx = (xv[None, None, :, None] - px) ** 2
    dy = (yv[None, :, None, None] - py) ** 2
    return tf.exp(-(dx + dy) / (2 * sigma**2))


def synthetic_batch(
    name: str,
    batch: int,
    *,
    image_size: int | None = None,
    seq_len: int | None = None,
    num_classes: int | None = None,
    seed: int = 0,
    model_size: str | None = None,
):
    """(inputs, targets) as TF tensors, deterministic in seed (stateless RNG).

    image: x (N, H, W, C) float32 ~ N(0, 1), y (N,) int32 class ids.
    keypoints: x (N, H, W, 1) float32 in [0, 1), y (N, H/2, W/2, 13) Gaussian confidence maps
    (sigma 1.5 px) at random keypoints. tokens: x (N, seq) int32 ids; y (N,) class ids
    (bert_base) or (N, seq) next-token ids (lstm: x and y are one sequence shifted by one).
    """
    import tensorflow as tf

    spec = _spec(name, model_size)
    check_input(spec, image_size=image_size, seq_len=seq_len)
    s0, s1 = (seed, 0), (seed, 1)
    if spec.kind == "tokens":
        seq = seq_len or spec.default_seq_len
        if spec.loss == "lm_cross_entropy":
            ids = tf.random.stateless_uniform((batch, seq + 1), s0, minval=0, maxval=spec.vocab_size, dtype=tf.int32)
            return ids[:, :-1], ids[:, 1:]
        x = tf.random.stateless_uniform((batch, seq), s0, minval=0, maxval=spec.vocab_size, dtype=tf.int32)
        return x, tf.random.stateless_uniform(
            (batch,), s1, minval=0, maxval=output_size(spec, num_classes), dtype=tf.int32
        )
    side = image_size or spec.default_image_size
    if spec.kind == "keypoints":
        x = tf.random.stateless_uniform((batch, side, side, spec.channels), s0)
        points = tf.random.stateless_uniform((batch, spec.num_classes, 2), s1) * (side - 1)
        return x, confidence_maps(points, side, side, spec.output_stride)
    x = tf.random.stateless_normal((batch, side, side, spec.channels), s0)
    return x, tf.random.stateless_uniform((batch,), s1, minval=0, maxval=output_size(spec, num_classes), dtype=tf.int32)


def per_example_loss_fn(name: str) -> Callable:
    """(outputs, targets) -> per-example losses, shape (N,), for tf.distribute's compute_average_loss.

    cross_entropy: sparse CE from logits; mse: mean over (H, W, maps); lm_cross_entropy: mean CE over
    the sequence. Outputs are cast to float32 (mixed precision keeps the loss in float32)."""
    spec = _spec(name)

    def per_example(outputs, targets):
        outputs = ops.cast(outputs, "float32")
        if spec.loss == "mse":
            return ops.mean(ops.square(outputs - ops.cast(targets, "float32")), axis=(1, 2, 3))
        ce = keras.losses.sparse_categorical_crossentropy(targets, outputs, from_logits=True)
        return ops.mean(ce, axis=1) if spec.loss == "lm_cross_entropy" else ce

    return per_example


def compile_loss(name: str) -> keras.losses.Loss:
    """The mean loss as a keras.losses.Loss, (y_true, y_pred) order, for model.compile/fit."""
    spec = _spec(name)
    if spec.loss == "mse":
        return keras.losses.MeanSquaredError()
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def loss_fn(name: str) -> Callable:
    """(outputs, targets) -> scalar mean loss (keras.losses, reduction 'sum_over_batch_size' = mean over
    samples, and over every token for the LM), the same value as torch_models.loss_fn."""
    loss = compile_loss(name)

    def mean_loss(outputs, targets):
        return loss(targets, ops.cast(outputs, "float32"))

    return mean_loss

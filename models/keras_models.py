"""Keras 3 definitions. Layer for layer the same as torch_models.py.

Channels-last (NHWC) because TensorFlow's CPU kernels need it. Strided convolutions use explicit
zero padding and 'valid' convolutions so the geometry is exactly torch's (Keras' 'same' pads
asymmetrically at stride 2). BatchNorm matches torch: epsilon 1e-5, momentum 0.9 (= torch 0.1).
"""
from __future__ import annotations

import keras
from keras import layers

_RESNET_LAYOUTS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}


def _bn(name: str):
    return layers.BatchNormalization(axis=-1, epsilon=1e-5, momentum=0.9, name=name)


def _conv(x, filters: int, kernel: int, stride: int, pad: int, name: str):
    if pad:
        x = layers.ZeroPadding2D(pad, name=name + "_pad")(x)
    return layers.Conv2D(filters, kernel, strides=stride, padding="valid", use_bias=False, name=name)(x)


def _basic(x, cin: int, width: int, stride: int, name: str):
    cout = width
    identity = x
    if stride != 1 or cin != cout:
        identity = _bn(name + "_down_bn")(_conv(x, cout, 1, stride, 0, name + "_down_conv"))
    out = layers.ReLU()(_bn(name + "_bn1")(_conv(x, width, 3, stride, 1, name + "_conv1")))
    out = _bn(name + "_bn2")(_conv(out, width, 3, 1, 1, name + "_conv2"))
    return layers.ReLU()(layers.Add()([out, identity])), cout


def _bottleneck(x, cin: int, width: int, stride: int, name: str):
    cout = width * 4
    identity = x
    if stride != 1 or cin != cout:
        identity = _bn(name + "_down_bn")(_conv(x, cout, 1, stride, 0, name + "_down_conv"))
    out = layers.ReLU()(_bn(name + "_bn1")(_conv(x, width, 1, 1, 0, name + "_conv1")))
    out = layers.ReLU()(_bn(name + "_bn2")(_conv(out, width, 3, stride, 1, name + "_conv2")))
    out = _bn(name + "_bn3")(_conv(out, cout, 1, 1, 0, name + "_conv3"))
    return layers.ReLU()(layers.Add()([out, identity])), cout


def _resnet(name: str):
    kind, stages = _RESNET_LAYOUTS[name]
    block = _basic if kind == "basic" else _bottleneck

    def build(num_classes: int = 1000, channels: int = 3, image_size: int | None = None) -> keras.Model:
        inp = keras.Input(shape=(image_size, image_size, channels), name="image")
        x = layers.ReLU()(_bn("bn1")(_conv(inp, 64, 7, 2, 3, "conv1")))
        x = layers.ZeroPadding2D(1)(x)
        x = layers.MaxPooling2D(3, 2, padding="valid")(x)
        cin = 64
        for i, n in enumerate(stages):
            for j in range(n):
                x, cin = block(x, cin, 64 * 2 ** i, 2 if (j == 0 and i > 0) else 1, f"layer{i + 1}_{j}")
        x = layers.GlobalAveragePooling2D()(x)
        out = layers.Dense(num_classes, name="fc")(x)
        return keras.Model(inp, out, name=name)

    return build


MODELS = {name: _resnet(name) for name in _RESNET_LAYOUTS}


def build_model(name: str, num_classes: int = 1000, channels: int = 3,
                image_size: int | None = None) -> keras.Model:
    try:
        builder = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(sorted(MODELS))}") from None
    return builder(num_classes=num_classes, channels=channels, image_size=image_size)


def count_params(model: keras.Model) -> int:
    """Trainable parameters: the same quantity as torch's parameters() (BN running stats excluded)."""
    return int(sum(int(w.numpy().size) for w in model.trainable_weights))

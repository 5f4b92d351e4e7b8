"""ResNet-18/50/152 in Keras 3 (keras_models' conventions; torch_resnet.py is the same network).

Blocks per stage come from specs.RESNET_LAYOUTS. Layer names follow torch's module names.
"""

from __future__ import annotations

import keras
from keras import layers

from distbench.models.specs import RESNET_LAYOUTS


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


def build_resnet(name: str, *, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    """The ResNet `name` ('resnet18', 'resnet50' or 'resnet152')."""
    kind, stages = RESNET_LAYOUTS[name]
    block = _basic if kind == "basic" else _bottleneck
    inp = keras.Input(shape=(image_size, image_size, channels), name="image")
    x = layers.ReLU()(_bn("bn1")(_conv(inp, 64, 7, 2, 3, "conv1")))
    x = layers.ZeroPadding2D(1)(x)
    x = layers.MaxPooling2D(3, 2, padding="valid")(x)
    cin = 64
    for i, n in enumerate(stages):
        for j in range(n):
            x, cin = block(x, cin, 64 * 2**i, 2 if (j == 0 and i > 0) else 1, f"layer{i + 1}_{j}")
    x = layers.GlobalAveragePooling2D()(x)
    out = layers.Dense(num_classes, name="fc")(x)
    return keras.Model(inp, out, name=name)

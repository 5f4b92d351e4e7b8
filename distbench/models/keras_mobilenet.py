"""Inverted-residual (MobileNet-family) networks in Keras 3: MobileNetV2 and EfficientNet-B4, which share
torchvision's conv-BN-activation unit (keras_models' conventions; torch_mobilenet.py holds the same networks)."""

from __future__ import annotations

import keras
from keras import layers

from distbench.models.specs import EFFICIENTNET_B4, MOBILENET_V2_SETTING, efficientnet_blocks, make_divisible


def _conv_bn_act(x, cout: int, kernel: int, stride: int, act: str | None, name: str, depthwise: bool = False):
    """torchvision's Conv2dNormActivation: conv (no bias, padding (k-1)//2), BN, optional activation."""
    pad = (kernel - 1) // 2
    padding = "same" if stride == 1 else "valid"
    if stride != 1 and pad:
        x = layers.ZeroPadding2D(pad, name=name + "_pad")(x)
    if depthwise:
        x = layers.DepthwiseConv2D(kernel, strides=stride, padding=padding, use_bias=False, name=name + "_conv")(x)
    else:
        x = layers.Conv2D(cout, kernel, strides=stride, padding=padding, use_bias=False, name=name + "_conv")(x)
    x = layers.BatchNormalization(axis=-1, epsilon=1e-5, momentum=0.9, name=name + "_bn")(x)  # as torch's
    if act == "relu6":
        x = layers.ReLU(max_value=6.0, name=name + "_relu6")(x)
    elif act is not None:
        x = layers.Activation(act, name=name + "_" + act)(x)
    return x


def _inverted_residual(x, cin: int, cout: int, stride: int, expand_ratio: int, name: str):
    hidden = int(round(cin * expand_ratio))
    out = x
    if expand_ratio != 1:
        out = _conv_bn_act(out, hidden, 1, 1, "relu6", name + "_expand")
    out = _conv_bn_act(out, hidden, 3, stride, "relu6", name + "_dw", depthwise=True)
    out = _conv_bn_act(out, cout, 1, 1, None, name + "_project")
    if stride == 1 and cin == cout:
        out = layers.Add(name=name + "_add")([x, out])
    return out


def build_mobilenet_v2(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    inp = keras.Input(shape=(image_size, image_size, channels), name="image")
    cin, last = make_divisible(32), make_divisible(1280)
    x = _conv_bn_act(inp, cin, 3, 2, "relu6", "features_0")
    idx = 1
    for t, c, n, s in MOBILENET_V2_SETTING:
        cout = make_divisible(c)
        for i in range(n):
            x = _inverted_residual(x, cin, cout, s if i == 0 else 1, t, f"features_{idx}")
            cin, idx = cout, idx + 1
    x = _conv_bn_act(x, last, 1, 1, "relu6", f"features_{idx}")
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.2)(x)
    out = layers.Dense(num_classes, name="classifier_1")(x)
    return keras.Model(inp, out, name="mobilenet_v2")


def _squeeze_excitation(x, channels: int, squeeze: int, name: str):
    s = layers.GlobalAveragePooling2D(keepdims=True, name=name + "_avgpool")(x)
    s = layers.Conv2D(squeeze, 1, name=name + "_fc1")(s)
    s = layers.Activation("silu", name=name + "_silu")(s)
    s = layers.Conv2D(channels, 1, name=name + "_fc2")(s)
    s = layers.Activation("sigmoid", name=name + "_sigmoid")(s)
    return layers.Multiply(name=name + "_scale")([s, x])


def _mbconv(x, cin: int, cout: int, kernel: int, stride: int, expand_ratio: int, sd_prob: float, name: str):
    expanded = make_divisible(cin * expand_ratio)
    out = x
    if expanded != cin:
        out = _conv_bn_act(out, expanded, 1, 1, "silu", name + "_expand")
    out = _conv_bn_act(out, expanded, kernel, stride, "silu", name + "_dw", depthwise=True)
    out = _squeeze_excitation(out, expanded, max(1, cin // 4), name + "_se")
    out = _conv_bn_act(out, cout, 1, 1, None, name + "_project")
    if stride == 1 and cin == cout:
        if sd_prob > 0:
            # torchvision's StochasticDepth(p, 'row'): drop the branch per sample, scale by 1/(1-p).
            out = layers.Dropout(sd_prob, noise_shape=(None, 1, 1, 1), name=name + "_stochastic_depth")(out)
        out = layers.Add(name=name + "_add")([out, x])
    return out


def build_efficientnet_b4(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    c = EFFICIENTNET_B4
    blocks = efficientnet_blocks(c["width_mult"], c["depth_mult"])
    inp = keras.Input(shape=(image_size, image_size, channels), name="image")
    x = _conv_bn_act(inp, blocks[0][4], 3, 2, "silu", "features_0")
    counts: dict[int, int] = {}
    for stage, e, k, s, cin, cout, sd in blocks:
        j = counts[stage] = counts.get(stage, -1) + 1
        x = _mbconv(x, cin, cout, k, s, e, sd, f"features_{stage + 1}_{j}")
    last_in = blocks[-1][5]
    x = _conv_bn_act(x, 4 * last_in, 1, 1, "silu", f"features_{len(counts) + 1}")
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(c["dropout"])(x)
    out = layers.Dense(num_classes, name="classifier_1")(x)
    return keras.Model(inp, out, name="efficientnet_b4")

"""SLEAP's UNet with a confidence-map head, in Keras 3 (keras_models' conventions; torch_unet.py is the same
network)."""

from __future__ import annotations

import keras
from keras import layers

from distbench.models.specs import UNET


def _unet_convs(x, filters: int, n: int, kernel: int, name: str):
    for i in range(n):
        x = layers.Conv2D(filters, kernel, padding="same", use_bias=True, name=f"{name}_conv{i}")(x)
        x = layers.Activation("relu", name=f"{name}_act{i}_relu")(x)
    return x


def build_unet(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    """SLEAP's UNet, see torch_unet.UNet (layer names follow SLEAP's)."""
    filters, rate = UNET["filters"], UNET["filters_rate"]
    down, up, convs, kernel = UNET["down_blocks"], UNET["up_blocks"], UNET["convs_per_block"], UNET["kernel_size"]

    def level(i: int) -> int:
        return int(filters * rate**i)

    inp = keras.Input(shape=(image_size, image_size, channels), name="image")
    x, skips = inp, []
    for i in range(down):
        if i > 0:
            x = layers.MaxPooling2D(2, 2, padding="same", name=f"enc{i}_pool")(x)
        x = _unet_convs(x, level(i), convs, kernel, f"enc{i}")
        skips.append(x)
    x = layers.MaxPooling2D(2, 2, padding="same", name=f"enc{down}_last_pool")(x)
    if UNET["middle_block"]:
        x = _unet_convs(x, level(down), convs - 1, kernel, "enc_middle_expand")
        x = _unet_convs(x, level(down), 1, kernel, "enc_middle_contract")
    for j in range(up):
        x = layers.UpSampling2D(2, interpolation="bilinear", name=f"dec{j}_interp_bilinear")(x)
        x = layers.Concatenate(name=f"dec{j}_skip_concat")([skips.pop(), x])
        x = _unet_convs(x, level(down - 1 - j), convs, kernel, f"dec{j}_refine")
    out = layers.Conv2D(num_classes, 1, name="confmaps")(x)
    return keras.Model(inp, out, name="unet")

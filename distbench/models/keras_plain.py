"""Plain feed-forward networks (no skip connections) in Keras 3: VGG-16, and the two small probes 'linear'
and 'mlp' (keras_models' conventions; torch_plain.py holds the same networks)."""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

from distbench.models.specs import CNN_CHANNELS, MLP_HIDDEN, VGG16_CFG


class AdaptiveAveragePooling2D(layers.Layer):
    """torch.nn.AdaptiveAvgPool2d for a static NHWC input: output bin i averages input rows
    floor(i*H/out) .. ceil((i+1)*H/out)-1 (the same for columns). Written as two constant averaging
    matrices so it is exact for any size, including inputs smaller than the output (replication).
    No weights; the identity when the input is already out x out (VGG at 224)."""

    def __init__(self, output_size: int, **kwargs):
        super().__init__(**kwargs)
        self.output_size = output_size

    @staticmethod
    def _matrix(n_in: int, n_out: int) -> np.ndarray:
        m = np.zeros((n_out, n_in), dtype=np.float32)
        for i in range(n_out):
            lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
            m[i, lo:hi] = 1.0 / (hi - lo)
        return m

    def call(self, x):
        h, w = x.shape[1], x.shape[2]
        if h is None or w is None:
            raise ValueError("AdaptiveAveragePooling2D needs a static input size (build with image_size)")
        if h == w == self.output_size:
            return x
        ph = ops.convert_to_tensor(self._matrix(h, self.output_size), dtype=x.dtype)
        pw = ops.convert_to_tensor(self._matrix(w, self.output_size), dtype=x.dtype)
        return ops.einsum("ih,jw,nhwc->nijc", ph, pw, x)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.output_size, self.output_size, input_shape[3])

    def get_config(self):
        return {**super().get_config(), "output_size": self.output_size}


def build_vgg16(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    inp = keras.Input(shape=(image_size, image_size, channels), name="image")
    x, i = inp, 0
    for v in VGG16_CFG:
        if v == "M":
            x = layers.MaxPooling2D(2, 2, padding="valid", name=f"features_{i}")(x)
            i += 1
        else:
            x = layers.Conv2D(v, 3, padding="same", name=f"features_{i}")(x)
            x = layers.ReLU(name=f"features_{i + 1}")(x)
            i += 2
    x = AdaptiveAveragePooling2D(7, name="avgpool")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(4096, name="classifier_0")(x)
    x = layers.Dropout(0.5)(layers.ReLU()(x))
    x = layers.Dense(4096, name="classifier_3")(x)
    x = layers.Dropout(0.5)(layers.ReLU()(x))
    out = layers.Dense(num_classes, name="classifier_6")(x)
    return keras.Model(inp, out, name="vgg16")


def build_linear(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    """Global average pooling, then one dense layer: gradients of a few bytes (spec 'linear')."""
    inp = keras.Input(shape=(image_size, image_size, channels), name="image")
    out = layers.Dense(num_classes, name="fc")(layers.GlobalAveragePooling2D()(inp))
    return keras.Model(inp, out, name="linear")


def build_mlp(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    """Flatten, one hidden ReLU layer, the classifier (spec 'mlp'); Dense's defaults: Glorot-uniform weights,
    zero biases (torch_plain.build_mlp sets the same)."""
    inp = keras.Input(shape=(image_size, image_size, channels), name="image")
    x = layers.Dense(MLP_HIDDEN, activation="relu", name="hidden")(layers.Flatten()(inp))
    return keras.Model(inp, layers.Dense(num_classes, name="fc")(x), name="mlp")


def build_cnn(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    """Two 3x3 convolutions (ReLU, 2x2 max pool each), a dense classifier on the flattened map (spec 'cnn');
    the layers' defaults: Glorot-uniform weights, zero biases (torch_plain.build_cnn sets the same)."""
    inp = keras.Input(shape=(image_size, image_size, channels), name="image")
    x = inp
    for i, width in enumerate(CNN_CHANNELS):
        x = layers.Conv2D(width, 3, padding="same", activation="relu", name=f"conv{i + 1}")(x)
        x = layers.MaxPooling2D(2, 2, padding="valid")(x)
    out = layers.Dense(num_classes, name="fc")(layers.Flatten()(x))
    return keras.Model(inp, out, name="cnn")

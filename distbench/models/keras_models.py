"""Keras 3 definitions. Layer for layer the same as torch_models.py.

Channels-last (NHWC) because TensorFlow's CPU kernels need it. Strided convolutions use explicit
zero padding and 'valid' convolutions so the geometry is exactly torch's (Keras' 'same' pads
asymmetrically at stride 2); at stride 1 an odd kernel's 'same' padding is symmetric, i.e. torch's
padding=(k-1)//2, and is used as is. BatchNorm matches torch: epsilon 1e-5, momentum 0.9 (= torch 0.1).

Keras models are built for one input size (image_size / seq_len, default the spec's): the Input
shape is static (VGG's adaptive pool needs it, and XLA/TF prefer it).

Loss callables here take (outputs, targets), the same order as torch_models.loss_fn (the reverse
of Keras' (y_true, y_pred)); compile_loss(name) gives a keras.losses.Loss for model.compile.
"""

from __future__ import annotations

import math
from typing import Callable

import keras
import numpy as np
from keras import layers, ops

from distbench.models.specs import (
    BERT_BASE,
    LSTM_LM,
    MLP_HIDDEN,
    MOBILENET_V2_SETTING,
    UNET,
    VGG16_CFG,
    ModelSpec,
    check_input,
    efficientnet_blocks,
    make_divisible,
    output_size,
    registered_spec,
)

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

    def build(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
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

    return build


# ---- VGG-16 -------------------------------------------------------------------------------------


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


def _vgg16(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
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


# ---- MobileNetV2 / EfficientNet shared pieces ---------------------------------------------------


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
    x = _bn(name + "_bn")(x)
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


def _mobilenet_v2(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
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


def _efficientnet(width_mult: float, depth_mult: float, dropout: float, model_name: str):
    def build(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
        blocks = efficientnet_blocks(width_mult, depth_mult)
        inp = keras.Input(shape=(image_size, image_size, channels), name="image")
        x = _conv_bn_act(inp, blocks[0][4], 3, 2, "silu", "features_0")
        counts: dict[int, int] = {}
        for stage, e, k, s, cin, cout, sd in blocks:
            j = counts[stage] = counts.get(stage, -1) + 1
            x = _mbconv(x, cin, cout, k, s, e, sd, f"features_{stage + 1}_{j}")
        last_in = blocks[-1][5]
        x = _conv_bn_act(x, 4 * last_in, 1, 1, "silu", f"features_{len(counts) + 1}")
        x = layers.GlobalAveragePooling2D()(x)
        x = layers.Dropout(dropout)(x)
        out = layers.Dense(num_classes, name="classifier_1")(x)
        return keras.Model(inp, out, name=model_name)

    return build


# ---- SLEAP UNet ---------------------------------------------------------------------------------


def _unet_convs(x, filters: int, n: int, kernel: int, name: str):
    for i in range(n):
        x = layers.Conv2D(filters, kernel, padding="same", use_bias=True, name=f"{name}_conv{i}")(x)
        x = layers.Activation("relu", name=f"{name}_act{i}_relu")(x)
    return x


def _unet(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    """SLEAP's UNet, see torch_models.UNet (layer names follow SLEAP's)."""
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


# ---- BERT-base ----------------------------------------------------------------------------------


class PositionEmbedding(layers.Layer):
    """Learned absolute positions (torch: nn.Embedding(max_positions, hidden) at arange(seq)): x + table[:seq]."""

    def __init__(self, max_positions: int, hidden: int, **kwargs):
        super().__init__(**kwargs)
        self.max_positions, self.hidden = max_positions, hidden

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            shape=(self.max_positions, self.hidden),
            name="embeddings",
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )

    def call(self, x):
        table = ops.cast(self.embeddings[: ops.shape(x)[1]], x.dtype)
        return x + table[None]

    def get_config(self):
        return {**super().get_config(), "max_positions": self.max_positions, "hidden": self.hidden}


def _bert_layer(x, hidden: int, heads: int, intermediate: int, dropout: float, eps: float, name: str):
    a = layers.MultiHeadAttention(heads, hidden // heads, dropout=dropout, name=name + "_attention")(x, x)
    a = layers.Dropout(dropout)(a)
    x = layers.LayerNormalization(epsilon=eps, name=name + "_attention_norm")(layers.Add()([x, a]))
    h = layers.Dense(intermediate, name=name + "_intermediate")(x)
    h = layers.Activation("gelu")(h)  # exact (erf) GELU, as torch's nn.GELU()
    h = layers.Dropout(dropout)(layers.Dense(hidden, name=name + "_output")(h))
    return layers.LayerNormalization(epsilon=eps, name=name + "_output_norm")(layers.Add()([x, h]))


def _bert_base(*, num_classes: int, seq_len: int, **_) -> keras.Model:
    c = BERT_BASE
    ids = keras.Input(shape=(seq_len,), dtype="int32", name="tokens")
    x = layers.Embedding(c["vocab"], c["hidden"], name="word_embeddings")(ids)
    x = PositionEmbedding(c["max_positions"], c["hidden"], name="position_embeddings")(x)
    # Single-segment input: every token type is 0.
    tt = layers.Embedding(c["type_vocab"], c["hidden"], name="token_type_embeddings")(ops.zeros_like(ids))
    x = layers.Add()([x, tt])
    x = layers.Dropout(c["dropout"])(layers.LayerNormalization(epsilon=c["layer_norm_eps"], name="embeddings_norm")(x))
    for i in range(c["layers"]):
        x = _bert_layer(
            x, c["hidden"], c["heads"], c["intermediate"], c["dropout"], c["layer_norm_eps"], f"encoder_{i}"
        )
    pooled = layers.Dense(c["hidden"], activation="tanh", name="pooler")(x[:, 0, :])
    out = layers.Dense(num_classes, name="classifier")(layers.Dropout(c["dropout"])(pooled))
    return keras.Model(ids, out, name="bert_base")


# ---- LSTM language model ------------------------------------------------------------------------


class TwoBiasLSTMCell(layers.LSTMCell):
    """LSTMCell with torch.nn.LSTM's parameters: W_ih, W_hh and two bias vectors b_ih and b_hh.

    Both biases are trainable weights and both enter every gate pre-activation (as their sum,
    which is exactly what torch computes: W_ih x + b_ih + W_hh h + b_hh), so the parameter count
    and the gradients match torch. `bias` is that sum, so Keras' cuDNN path and its generic cell
    step both use it unchanged. Gate order i, f, g(c), o is the same in both frameworks.
    """

    def build(self, input_shape):
        self.kernel = self.add_weight(
            shape=(input_shape[-1], 4 * self.units), name="kernel", initializer=self.kernel_initializer
        )
        self.recurrent_kernel = self.add_weight(
            shape=(self.units, 4 * self.units), name="recurrent_kernel", initializer=self.recurrent_initializer
        )
        self.bias_ih = self.add_weight(shape=(4 * self.units,), name="bias_ih", initializer=self._forget_one)
        self.bias_hh = self.add_weight(shape=(4 * self.units,), name="bias_hh", initializer="zeros")
        self.built = True

    def _forget_one(self, shape, dtype=None):
        u = self.units
        return ops.concatenate([ops.zeros((u,), dtype), ops.ones((u,), dtype), ops.zeros((2 * u,), dtype)])

    @property
    def bias(self):
        return ops.add(self.bias_ih, self.bias_hh)


class TorchLSTM(layers.LSTM):
    """keras.layers.LSTM (cuDNN-capable) whose cell is TwoBiasLSTMCell."""

    def __init__(self, units: int, return_sequences: bool = True, **kwargs):
        cell = TwoBiasLSTMCell(units, name="lstm_cell")
        layers.RNN.__init__(self, cell, return_sequences=return_sequences, **kwargs)
        # What keras.layers.LSTM.__init__ sets besides the cell (default activations and bias).
        self.input_spec = layers.InputSpec(ndim=3)
        self.use_cudnn = "auto"
        if keras.backend.backend() == "tensorflow":
            self.supports_jit = False  # cuDNN ops are not XLA-compatible

    def get_config(self):
        return {"name": self.name, "units": self.cell.units, "return_sequences": self.return_sequences}


def _linear(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    """Global average pooling, then one dense layer: gradients of a few bytes (spec 'linear')."""
    inp = keras.Input(shape=(image_size, image_size, channels), name="image")
    out = layers.Dense(num_classes, name="fc")(layers.GlobalAveragePooling2D()(inp))
    return keras.Model(inp, out, name="linear")


def _mlp(*, num_classes: int, channels: int, image_size: int, **_) -> keras.Model:
    """Flatten, one hidden ReLU layer, the classifier (spec 'mlp'); Dense's defaults: Glorot-uniform weights,
    zero biases (torch_models._mlp sets the same)."""
    inp = keras.Input(shape=(image_size, image_size, channels), name="image")
    x = layers.Dense(MLP_HIDDEN, activation="relu", name="hidden")(layers.Flatten()(inp))
    return keras.Model(inp, layers.Dense(num_classes, name="fc")(x), name="mlp")


def _lstm(*, seq_len: int, **_) -> keras.Model:
    c = LSTM_LM
    ids = keras.Input(shape=(seq_len,), dtype="int32", name="tokens")
    x = layers.Dropout(c["dropout"])(layers.Embedding(c["vocab"], c["embed"], name="embedding")(ids))
    for i in range(c["layers"]):
        x = layers.Dropout(c["dropout"])(TorchLSTM(c["hidden"], name=f"lstm_{i}")(x))
    out = layers.Dense(c["vocab"], name="decoder")(x)  # (N, seq, vocab) logits
    return keras.Model(ids, out, name="lstm")


MODELS = {name: _resnet(name) for name in _RESNET_LAYOUTS}
MODELS.update(
    {
        "vgg16": _vgg16,
        "mobilenet_v2": _mobilenet_v2,
        "efficientnet_b4": _efficientnet(1.4, 1.8, 0.4, "efficientnet_b4"),
        "unet": _unet,
        "bert_base": _bert_base,
        "lstm": _lstm,
        "linear": _linear,
        "mlp": _mlp,
    }
)


def _spec(name: str) -> ModelSpec:
    return registered_spec(name, MODELS)


def build_model(
    name: str, *, num_classes: int | None = None, image_size: int | None = None, seq_len: int | None = None
) -> keras.Model:
    """The named network, built for one input size (None = the spec's default).

    num_classes: classification head size (image models and bert_base); None = the spec's
    default (1000, bert_base 2). unet always outputs its 13 maps and lstm the vocabulary.
    """
    spec = _spec(name)
    check_input(spec, image_size=image_size, seq_len=seq_len)
    return MODELS[name](
        num_classes=output_size(spec, num_classes),
        channels=spec.channels,
        image_size=image_size or spec.default_image_size,
        seq_len=seq_len or spec.default_seq_len,
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
):
    """(inputs, targets) as TF tensors, deterministic in seed (stateless RNG).

    image: x (N, H, W, C) float32 ~ N(0, 1), y (N,) int32 class ids.
    keypoints: x (N, H, W, 1) float32 in [0, 1), y (N, H/2, W/2, 13) Gaussian confidence maps
    (sigma 1.5 px) at random keypoints. tokens: x (N, seq) int32 ids; y (N,) class ids
    (bert_base) or (N, seq) next-token ids (lstm: x and y are one sequence shifted by one).
    """
    import tensorflow as tf

    spec = _spec(name)
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

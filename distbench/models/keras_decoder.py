"""The decoder language models (gpt2, llama) in Keras 3 (keras_models' conventions; torch_decoder.py is the
same networks, tensor for tensor, and models.decoders holds their shapes and counts)."""

from __future__ import annotations

import keras
from keras import layers, ops

from distbench.models.decoders import DecoderShape, decoder_shape

_INIT = keras.initializers.RandomNormal(stddev=0.02)


class TiedEmbedding(layers.Layer):
    """Token table (V, d) plus, for gpt2, learned positions (P, d). call(ids) embeds; call(x, logits=True)
    is the tied output projection x @ table^T (torch: F.linear(x, wte.weight))."""

    def __init__(self, vocab: int, hidden: int, positions: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab, self.hidden, self.positions = vocab, hidden, positions

    def build(self, input_shape):
        self.wte = self.add_weight(shape=(self.vocab, self.hidden), name="wte", initializer=_INIT)
        self.wpe = self.add_weight(shape=(self.positions, self.hidden), name="wpe", initializer=_INIT)

    def call(self, x, logits=False):
        if logits:
            return ops.matmul(x, ops.transpose(ops.cast(self.wte, x.dtype)))
        dtype = self.compute_dtype
        tokens = ops.take(ops.cast(self.wte, dtype), ops.cast(x, "int32"), axis=0)
        return tokens + ops.cast(self.wpe, dtype)[None, : ops.shape(x)[1]]

    def get_config(self):
        return {**super().get_config(), "vocab": self.vocab, "hidden": self.hidden, "positions": self.positions}


class RMSNorm(layers.Layer):
    def __init__(self, eps: float = 1e-5, **kwargs):
        super().__init__(**kwargs)
        self.eps = eps

    def build(self, input_shape):
        self.weight = self.add_weight(shape=(input_shape[-1],), name="weight", initializer="ones")

    def call(self, x):
        x32 = ops.cast(x, "float32")
        normed = x32 * ops.rsqrt(ops.mean(ops.square(x32), axis=-1, keepdims=True) + self.eps)
        return ops.cast(normed, x.dtype) * ops.cast(self.weight, x.dtype)

    def get_config(self):
        return {**super().get_config(), "eps": self.eps}


def _causal_attention(q, k, v):
    """q, k, v (N, heads, S, head_dim) -> (N, heads, S, head_dim), softmax(q k^T / sqrt(hd) + causal mask) v."""
    s, hd = ops.shape(q)[2], ops.shape(q)[3]
    scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) / ops.sqrt(ops.cast(hd, q.dtype))
    mask = ops.tril(ops.ones((s, s), dtype="bool"))
    scores = ops.where(mask[None, None], scores, ops.cast(-1e9 if q.dtype == "float32" else -3e4, q.dtype))
    return ops.matmul(ops.softmax(scores, axis=-1), v)


class DecoderAttention(layers.Layer):
    """gpt2: one fused qkv projection with bias, no positions (they are added to the embeddings); llama:
    separate q/k/v/o projections without biases, rotary positions, grouped key/value heads."""

    def __init__(self, shape: dict, **kwargs):
        super().__init__(**kwargs)
        self.shape_config = shape
        s = DecoderShape(**shape)
        self.family, self.heads, self.kv_heads, self.head_dim = s.family, s.heads, s.kv_heads, s.head_dim
        d = s.hidden
        if s.family == "gpt2":
            self.c_attn = layers.Dense(3 * d, name="c_attn", kernel_initializer=_INIT)
            self.attn_proj = layers.Dense(d, name="attn_proj", kernel_initializer=_INIT)
        else:
            hd = s.head_dim
            self.q_proj = layers.Dense(s.heads * hd, use_bias=False, name="q_proj", kernel_initializer=_INIT)
            self.k_proj = layers.Dense(s.kv_heads * hd, use_bias=False, name="k_proj", kernel_initializer=_INIT)
            self.v_proj = layers.Dense(s.kv_heads * hd, use_bias=False, name="v_proj", kernel_initializer=_INIT)
            self.o_proj = layers.Dense(d, use_bias=False, name="o_proj", kernel_initializer=_INIT)

    def _split(self, t, heads):
        n, s = ops.shape(t)[0], ops.shape(t)[1]
        return ops.transpose(ops.reshape(t, (n, s, heads, self.head_dim)), (0, 2, 1, 3))

    def call(self, x):
        n, s, d = ops.shape(x)[0], ops.shape(x)[1], ops.shape(x)[2]
        if self.family == "gpt2":
            q, k, v = ops.split(self.c_attn(x), 3, axis=-1)
            q, k, v = (self._split(t, self.heads) for t in (q, k, v))
            out = self.attn_proj
        else:
            q, k, v = self._split(self.q_proj(x), self.heads), self._split(self.k_proj(x), self.kv_heads), None
            v = self._split(self.v_proj(x), self.kv_heads)
            cos, sin = _rotary(s, self.head_dim, q.dtype)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            group = self.heads // self.kv_heads
            k, v = ops.repeat(k, group, axis=1), ops.repeat(v, group, axis=1)
            out = self.o_proj
        a = ops.reshape(ops.transpose(_causal_attention(q, k, v), (0, 2, 1, 3)), (n, s, d))
        return out(a)

    def get_config(self):
        return {**super().get_config(), "shape": self.shape_config}


def _rotary(s, head_dim: int, dtype, theta: float = 10000.0):
    inv = 1.0 / theta ** (ops.arange(0, head_dim, 2, dtype="float32") / head_dim)
    angles = ops.outer(ops.arange(s, dtype="float32"), inv)
    angles = ops.concatenate([angles, angles], axis=-1)
    return ops.cast(ops.cos(angles), dtype), ops.cast(ops.sin(angles), dtype)


def _rotate(x, cos, sin):
    half = ops.shape(x)[-1] // 2
    rotated = ops.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def _gpt2_block(x, s: DecoderShape, name: str):
    h = layers.LayerNormalization(epsilon=1e-5, name=name + "_ln_1")(x)
    x = layers.Add()([x, DecoderAttention(s.__dict__, name=name + "_attn")(h)])
    h = layers.LayerNormalization(epsilon=1e-5, name=name + "_ln_2")(x)
    h = layers.Dense(s.intermediate, name=name + "_c_fc", kernel_initializer=_INIT)(h)
    h = layers.Activation(lambda t: keras.activations.gelu(t, approximate=True))(h)  # torch's tanh GELU
    return layers.Add()([x, layers.Dense(s.hidden, name=name + "_mlp_proj", kernel_initializer=_INIT)(h)])


def _llama_block(x, s: DecoderShape, name: str):
    h = RMSNorm(name=name + "_input_norm")(x)
    x = layers.Add()([x, DecoderAttention(s.__dict__, name=name + "_attn")(h)])
    h = RMSNorm(name=name + "_post_norm")(x)
    dense = dict(use_bias=False, kernel_initializer=_INIT)
    gate = layers.Dense(s.intermediate, activation="silu", name=name + "_gate_proj", **dense)(h)
    up = layers.Dense(s.intermediate, name=name + "_up_proj", **dense)(h)
    return layers.Add()([x, layers.Dense(s.hidden, name=name + "_down_proj", **dense)(layers.Multiply()([gate, up]))])


def build_decoder(family: str, *, seq_len: int, model_size: str | None = None, **_) -> keras.Model:
    s = decoder_shape(family, model_size)
    ids = keras.Input(shape=(seq_len,), dtype="int32", name="tokens")
    if family == "gpt2":
        emb = TiedEmbedding(s.vocab, s.hidden, s.max_positions, name="embeddings")
        x = emb(ids)
        for i in range(s.layers):
            x = _gpt2_block(x, s, f"block_{i}")
        logits = emb(layers.LayerNormalization(epsilon=1e-5, name="ln_f")(x), logits=True)
    else:
        x = layers.Embedding(s.vocab, s.hidden, name="embed_tokens", embeddings_initializer=_INIT)(ids)
        for i in range(s.layers):
            x = _llama_block(x, s, f"block_{i}")
        x = RMSNorm(name="norm")(x)
        logits = layers.Dense(s.vocab, use_bias=False, name="lm_head", kernel_initializer=_INIT)(x)
    return keras.Model(ids, logits, name=family)

"""BERT-base (post-LN encoder, pooler, classifier) in Keras 3 (keras_models' conventions; torch_transformer.py
is the same network)."""

from __future__ import annotations

import keras
from keras import layers, ops

from distbench.models.specs import BERT_BASE


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


def build_bert_base(*, num_classes: int, seq_len: int, **_) -> keras.Model:
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

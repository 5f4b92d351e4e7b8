"""The LSTM language model in Keras 3, with torch.nn.LSTM's two bias vectors (keras_models' conventions;
torch_recurrent.py is the same network)."""

from __future__ import annotations

import keras
from keras import layers, ops

from distbench.models.specs import LSTM_LM


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


def build_lstm(*, seq_len: int, **_) -> keras.Model:
    c = LSTM_LM
    ids = keras.Input(shape=(seq_len,), dtype="int32", name="tokens")
    x = layers.Dropout(c["dropout"])(layers.Embedding(c["vocab"], c["embed"], name="embedding")(ids))
    for i in range(c["layers"]):
        x = layers.Dropout(c["dropout"])(TorchLSTM(c["hidden"], name=f"lstm_{i}")(x))
    out = layers.Dense(c["vocab"], name="decoder")(x)  # (N, seq, vocab) logits
    return keras.Model(ids, out, name="lstm")

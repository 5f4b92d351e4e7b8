"""The LSTM language model in PyTorch (keras_recurrent.py is the same network)."""

from __future__ import annotations

from torch import nn

from distbench.models.specs import LSTM_LM


class LSTMLanguageModel(nn.Module):
    """Embedding -> dropout -> [LSTM -> dropout] x layers -> Linear to the vocabulary, per token.

    One nn.LSTM per layer (Keras has one layer per LSTM); each has torch's two bias vectors
    (bias_ih, bias_hh), which keras_recurrent.TorchLSTM reproduces.
    """

    def __init__(self, vocab: int = 10000, embed: int = 650, hidden: int = 650, layers: int = 2, dropout: float = 0.5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstms = nn.ModuleList(
            [nn.LSTM(embed if i == 0 else hidden, hidden, batch_first=True) for i in range(layers)]
        )
        self.dropout = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, ids):
        x = self.dropout(self.embedding(ids))
        for lstm in self.lstms:
            x = self.dropout(lstm(x)[0])
        return self.decoder(x)  # (N, seq, vocab) logits


def build_lstm(**_) -> nn.Module:
    return LSTMLanguageModel(**LSTM_LM)

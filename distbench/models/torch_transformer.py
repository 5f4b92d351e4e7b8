"""BERT-base (post-LN encoder, pooler, classifier) in PyTorch (keras_transformer.py is the same network)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from distbench.models.specs import BERT_BASE


class BertEmbeddings(nn.Module):
    def __init__(self, vocab: int, hidden: int, max_positions: int, type_vocab: int, dropout: float, eps: float):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids):
        # Single-segment input: every token type is 0.
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = (
            self.word_embeddings(ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(torch.zeros_like(ids))
        )
        return self.dropout(self.LayerNorm(x))


class BertLayer(nn.Module):
    """Post-LN encoder layer: separate q/k/v/out projections with biases (Keras MultiHeadAttention's
    weights), attention-prob dropout, GELU (erf) FFN. No attention mask: the batches have no padding."""

    def __init__(self, hidden: int, heads: int, intermediate: int, dropout: float, eps: float):
        super().__init__()
        self.heads, self.attn_dropout = heads, dropout
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        n, s, h = x.shape

        def heads(t):
            return t.view(n, s, self.heads, h // self.heads).transpose(1, 2)

        a = F.scaled_dot_product_attention(
            heads(self.query(x)),
            heads(self.key(x)),
            heads(self.value(x)),
            dropout_p=self.attn_dropout if self.training else 0.0,
        )
        a = a.transpose(1, 2).reshape(n, s, h)
        x = self.attention_norm(x + self.dropout(self.attention_output(a)))
        return self.output_norm(x + self.dropout(self.output(self.act(self.intermediate(x)))))


class BertClassifier(nn.Module):
    def __init__(
        self,
        num_classes: int = 2,
        layers: int = 12,
        hidden: int = 768,
        heads: int = 12,
        intermediate: int = 3072,
        vocab: int = 30522,
        max_positions: int = 512,
        type_vocab: int = 2,
        dropout: float = 0.1,
        layer_norm_eps: float = 1e-12,
    ):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, max_positions, type_vocab, dropout, layer_norm_eps)
        self.encoder = nn.Sequential(
            *[BertLayer(hidden, heads, intermediate, dropout, layer_norm_eps) for _ in range(layers)]
        )
        self.pooler = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, num_classes))

    def forward(self, ids):
        x = self.encoder(self.embeddings(ids))
        return self.classifier(self.pooler(x[:, 0]))


def build_bert_base(*, num_classes: int, **_) -> nn.Module:
    return BertClassifier(num_classes=num_classes, **BERT_BASE)

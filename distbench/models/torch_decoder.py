"""The decoder language models (gpt2, llama) in PyTorch; keras_decoder.py is the same networks and
models.decoders holds their shapes and counts.

Activation checkpointing: `set_checkpointing(model, True)` recomputes each block's activations in the
backward pass (torch.utils.checkpoint, non-reentrant), so every strategy that trains the module honours it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from distbench.models.decoders import DecoderShape, decoder_shape


class _Blocks(nn.Module):
    """The decoder's blocks, run in order, each under activation checkpointing when it is on."""

    def __init__(self, blocks: list[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(blocks)
        self.checkpointing = False

    def forward(self, x):
        for block in self.layers:
            if self.checkpointing and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return x


class GPT2Block(nn.Module):
    def __init__(self, d: int, heads: int, f: int):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.c_attn = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.c_fc = nn.Linear(d, f)
        self.mlp_proj = nn.Linear(f, d)

    def forward(self, x):
        n, s, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (t.view(n, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(n, s, d)
        x = x + self.attn_proj(a)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, shape: DecoderShape):
        super().__init__()
        d = shape.hidden
        self.wte = nn.Embedding(shape.vocab, d)
        self.wpe = nn.Embedding(shape.max_positions, d)
        self.blocks = _Blocks([GPT2Block(d, shape.heads, shape.intermediate) for _ in range(shape.layers)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.blocks(self.wte(ids) + self.wpe(positions))
        return F.linear(self.ln_f(x), self.wte.weight)  # tied output projection


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotary_tables(positions: int, head_dim: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (positions, head_dim) of the rotary embedding, halves repeated (Llama's rotate_half form)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(positions, dtype=torch.float32), inv)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class LlamaBlock(nn.Module):
    def __init__(self, shape: DecoderShape):
        super().__init__()
        d, hd = shape.hidden, shape.head_dim
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, hd
        self.input_norm = RMSNorm(d)
        self.q_proj = nn.Linear(d, shape.heads * hd, bias=False)
        self.k_proj = nn.Linear(d, shape.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, shape.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(shape.heads * hd, d, bias=False)
        self.post_norm = RMSNorm(d)
        self.gate_proj = nn.Linear(d, shape.intermediate, bias=False)
        self.up_proj = nn.Linear(d, shape.intermediate, bias=False)
        self.down_proj = nn.Linear(shape.intermediate, d, bias=False)
        cos, sin = rotary_tables(shape.max_positions, hd)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        n, s, d = x.shape
        h = self.input_norm(x)
        q = self.q_proj(h).view(n, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(n, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(n, s, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.cos[:s].to(q.dtype), self.sin[:s].to(q.dtype)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(n, s, d)
        x = x + self.o_proj(a)
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, shape: DecoderShape):
        super().__init__()
        self.embed_tokens = nn.Embedding(shape.vocab, shape.hidden)
        self.blocks = _Blocks([LlamaBlock(shape) for _ in range(shape.layers)])
        self.norm = RMSNorm(shape.hidden)
        self.lm_head = nn.Linear(shape.hidden, shape.vocab, bias=False)

    def forward(self, ids):
        return self.lm_head(self.norm(self.blocks(self.embed_tokens(ids))))


def build_decoder(family: str, *, model_size: str | None = None, **_) -> nn.Module:
    shape = decoder_shape(family, model_size)
    model = GPT2(shape) if family == "gpt2" else Llama(shape)
    if not any(p.is_meta for p in model.parameters()):
        _init(model)
    return model


def _init(model: nn.Module) -> None:
    """GPT-2's initialisation: normal(0, 0.02) weights and embeddings, zero biases (shapes are unaffected)."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)


def set_checkpointing(model: nn.Module, on: bool) -> int:
    """Turn activation checkpointing of every decoder block on or off; the number of blocks (0: none)."""
    blocks = 0
    for m in model.modules():
        if isinstance(m, _Blocks):
            m.checkpointing = on
            blocks += len(m.layers)
    return blocks

"""Encoder and decoder layers (section 3.1) and the position-wise feed-forward network (section 3.3).

Every sub-layer is wrapped as ``LayerNorm(x + Dropout(Sublayer(x)))`` (post-norm, as in the paper);
``normalize_before=True`` gives ``x + Dropout(Sublayer(LayerNorm(x)))`` (pre-norm; the stack then ends with
a final LayerNorm, added by the encoder/decoder).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from nmt_toolkit.modules.attention import MultiheadAttention
from nmt_toolkit.modules.caches import CrossAttentionCache, SelfAttentionCache

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}  # silu = x·sigmoid(x), Marian's "swish"


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    return F.dropout(x, p, training) if training and p > 0 else x


class FeedForward(nn.Module):
    """Section 3.3: ``FFN(x) = max(0, x W1 + b1) W2 + b2`` (or GELU, SiLU), with optional activation dropout."""

    def __init__(self, embed_dim: int, ffn_embed_dim: int, activation_fn: str = "relu",
                 activation_dropout: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(embed_dim, ffn_embed_dim)
        self.fc2 = nn.Linear(ffn_embed_dim, embed_dim)
        self.activation = ACTIVATIONS[activation_fn]
        self.activation_dropout = activation_dropout
        # fc1 and fc2 keep nn.Linear's default initialisation, as fairseq's do (docs/training.md, parity)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(_dropout(self.activation(self.fc1(x)), self.activation_dropout, self.training))


class _Residual(nn.Module):
    """Shared post-/pre-norm residual wiring for one sub-layer."""

    def __init__(self, embed_dim: int, dropout: float, normalize_before: bool):
        super().__init__()
        self.norm = nn.LayerNorm(embed_dim)
        self.dropout = dropout
        self.normalize_before = normalize_before

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) if self.normalize_before else x

    def post(self, residual: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = residual + _dropout(y, self.dropout, self.training)
        return x if self.normalize_before else self.norm(x)


class TransformerEncoderLayer(nn.Module):
    """Self-attention, then FFN."""

    def __init__(self, embed_dim: int, ffn_embed_dim: int, heads: int, key_dim: Optional[int] = None,
                 value_dim: Optional[int] = None, dropout: float = 0.1, attention_dropout: float = 0.0,
                 activation_dropout: float = 0.0, activation_fn: str = "relu", normalize_before: bool = False):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, heads, key_dim, value_dim, attention_dropout, True)
        self.self_attn_res = _Residual(embed_dim, dropout, normalize_before)
        self.ffn = FeedForward(embed_dim, ffn_embed_dim, activation_fn, activation_dropout)
        self.ffn_res = _Residual(embed_dim, dropout, normalize_before)

    def forward(self, x: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x`` [B, S, D]; ``padding_mask`` [B, S] True at pads (None when there are none)."""
        y, _ = self.self_attn(self.self_attn_res.pre(x), key_padding_mask=padding_mask)
        x = self.self_attn_res.post(x, y)
        return self.ffn_res.post(x, self.ffn(self.ffn_res.pre(x)))


class TransformerDecoderLayer(nn.Module):
    """Masked self-attention, encoder–decoder attention, then FFN."""

    def __init__(self, embed_dim: int, ffn_embed_dim: int, heads: int, key_dim: Optional[int] = None,
                 value_dim: Optional[int] = None, dropout: float = 0.1, attention_dropout: float = 0.0,
                 activation_dropout: float = 0.0, activation_fn: str = "relu", normalize_before: bool = False):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, heads, key_dim, value_dim, attention_dropout, True)
        self.self_attn_res = _Residual(embed_dim, dropout, normalize_before)
        self.encoder_attn = MultiheadAttention(embed_dim, heads, key_dim, value_dim, attention_dropout, False)
        self.encoder_attn_res = _Residual(embed_dim, dropout, normalize_before)
        self.ffn = FeedForward(embed_dim, ffn_embed_dim, activation_fn, activation_dropout)
        self.ffn_res = _Residual(embed_dim, dropout, normalize_before)

    def forward(self, x: torch.Tensor, encoder_out: Optional[torch.Tensor],
                encoder_padding_mask: Optional[torch.Tensor], need_attn: bool = False,
                self_cache: Optional[SelfAttentionCache] = None, cross_cache: Optional[CrossAttentionCache] = None):
        """``x`` [B, T, D]. Returns ``(x, attn [B, H, T, S] or None)``.

        Targets are right-padded, so the causal mask alone keeps real positions from seeing padding.
        Incremental decoding passes the layer's caches and one new position per row (``T`` = 1); the
        residual and norm wiring is this same code, so decoding computes what training computed.
        """
        y, _ = self.self_attn(self.self_attn_res.pre(x), causal=True, cache=self_cache)
        x = self.self_attn_res.post(x, y)
        y, attn = self.encoder_attn(self.encoder_attn_res.pre(x), encoder_out, encoder_padding_mask,
                                    cache=cross_cache, need_weights=need_attn)
        x = self.encoder_attn_res.post(x, y)
        return self.ffn_res.post(x, self.ffn(self.ffn_res.pre(x))), attn

"""A Transformer whose feed-forward sub-layers are gated linear units (Shazeer 2020, "GLU Variants
Improve Transformer"): ``FFN(x) = (act(x W) ⊙ x V) W2``, with act = sigmoid (GLU), GELU (GEGLU) or SiLU
(SwiGLU), instead of section 3.3's ``max(0, x W1 + b1) W2 + b2``.

It reuses everything else of the built-in model by composition: build the built-in Transformer, then swap
each layer's ``ffn`` module. The model keeps the built-in interface (``forward``, ``forward_encoder``,
incremental ``forward_decoder`` …), so training, beam search, checkpoints and averaging work unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass


import torch
import torch.nn.functional as F
from torch import nn

from nmt_toolkit.config import option
from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel, transformer_base, transformer_tiny
from nmt_toolkit.registry import register_architecture, register_model

GATES = {"sigmoid": torch.sigmoid, "gelu": F.gelu, "silu": F.silu}


@dataclass
class GluTransformerConfig(TransformerConfig):
    """The built-in model's options, plus the gate of the feed-forward units."""

    glu_gate: str = option("silu", "gate activation of the GLU feed-forward: sigmoid (GLU), gelu (GEGLU) "
                                   "or silu (SwiGLU)", choices=sorted(GATES))
    glu_bias: bool = option(False, "add biases to the three feed-forward projections (Shazeer 2020 has none)")


class GluFeedForward(nn.Module):
    """``(gate(x W) ⊙ x V) W2``; d_ff is the width of the gated hidden layer."""

    def __init__(self, embed_dim: int, ffn_embed_dim: int, gate: str, bias: bool, activation_dropout: float):
        super().__init__()
        self.w_gate = nn.Linear(embed_dim, ffn_embed_dim, bias=bias)
        self.w_value = nn.Linear(embed_dim, ffn_embed_dim, bias=bias)
        self.w_out = nn.Linear(ffn_embed_dim, embed_dim, bias=bias)
        self.gate = GATES[gate]
        self.activation_dropout = activation_dropout
        for fc in (self.w_gate, self.w_value, self.w_out):
            nn.init.xavier_uniform_(fc.weight)
            if fc.bias is not None:
                nn.init.zeros_(fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.gate(self.w_gate(x)) * self.w_value(x)
        if self.training and self.activation_dropout > 0:
            h = F.dropout(h, self.activation_dropout, True)
        return self.w_out(h)


@register_model("glu_transformer", config=GluTransformerConfig)
class GluTransformerModel(TransformerModel):
    @classmethod
    def build_model(cls, cfg: GluTransformerConfig, src_dict, tgt_dict) -> "GluTransformerModel":
        model = super().build_model(cfg, src_dict, tgt_dict)  # the built-in model, as an instance of cls
        for layer in list(model.encoder.layers) + list(model.decoder.layers):
            layer.ffn = GluFeedForward(cfg.embed_dim, cfg.ffn_embed_dim, cfg.glu_gate, cfg.glu_bias,
                                       cfg.activation_dropout)
        return model


@register_architecture("glu_transformer", "glu_transformer_tiny")
def glu_transformer_tiny(cfg: GluTransformerConfig) -> None:
    """transformer_tiny with SwiGLU feed-forward layers (d_ff 344 ≈ 2/3 · 512 keeps the parameter count)."""
    transformer_tiny(cfg)
    cfg.ffn_embed_dim = 344


@register_architecture("glu_transformer", "glu_transformer_base")
def glu_transformer_base(cfg: GluTransformerConfig) -> None:
    """transformer_base with SwiGLU feed-forward layers (d_ff 1365 ≈ 2/3 · 2048, as Shazeer 2020)."""
    transformer_base(cfg)
    cfg.ffn_embed_dim = 1365

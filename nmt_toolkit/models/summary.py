"""What a model costs, without data: parameters per component and FLOPs per target token.

``nmt-train --dry-run`` prints :func:`model_summary`; with ``--vocab-size V`` (no data folder) it builds the
model on a stand-in joined dictionary through :func:`build_for_dry_run`.
"""
from __future__ import annotations

from typing import Any

import torch

from nmt_toolkit.models import build_model


class SizedDictionary:
    """A stand-in for a joined dictionary of ``size`` symbols (fairseq's specials: <pad> is 1)."""

    def __init__(self, size: int):
        if size < 4:
            raise ValueError(f"a vocabulary needs at least the 4 special symbols, got --vocab-size {size}")
        self.size = size

    def __len__(self) -> int:
        return self.size

    def bos(self) -> int:
        return 0

    def pad(self) -> int:
        return 1

    def eos(self) -> int:
        return 2

    def unk(self) -> int:
        return 3

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SizedDictionary) and other.size == self.size

    def __hash__(self) -> int:
        return hash(self.size)


def build_for_dry_run(model_name: str, cfg: Any, vocab_size: int, device: Any = "meta"):
    """Build the registered model ``model_name`` with one shared vocabulary of ``vocab_size`` symbols.

    By default on the ``meta`` device: shapes and counts without allocating or initialising weights
    (instant even for the big model); pass ``device="cpu"`` for a model that can run.
    """
    vocab = SizedDictionary(vocab_size)
    with torch.device(device):
        return build_model(model_name, cfg, vocab, vocab)


def _human(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def model_summary(model, cfg: Any = None, src_len: int = 25, tgt_len: int = 25) -> str:
    """A printable summary: parameters per component, the exact total, forward FLOPs per target token.

    ``cfg`` (the model config) adds the architecture's shape to the header when given.
    """
    lines = []
    if cfg is not None:
        c = cfg
        heads = getattr(c, "attention_heads", None)
        d = getattr(c, "embed_dim", None)
        if heads and d:
            dk = getattr(c, "key_dim", None) or d // heads
            dv = getattr(c, "value_dim", None) or d // heads
            lines.append(
                f"model: N={c.encoder_layers}+{c.decoder_layers} d_model={d} d_ff={c.ffn_embed_dim} h={heads} "
                f"d_k={dk} d_v={dv} positions={c.positional_embeddings} "
                f"share_all_embeddings={c.share_all_embeddings}")
    by_component = model.num_parameters_by_component()
    width = max(len(k) for k in by_component) + 2
    lines.append("parameters:")
    for name, n in by_component.items():
        lines.append(f"  {name:<{width}}{n:>14,}")
    total = sum(p.numel() for p in model.parameters())  # a shared Parameter is counted once
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    lines.append(f"total parameters: {total:,} ({total / 1e6:.2f}M; trainable {trainable:,})")
    flops = model.flops_per_target_token(src_len, tgt_len)
    lines.append(f"forward FLOPs per target token: {_human(flops)} "
                 f"(source length = {src_len}, target length = {tgt_len}; matmuls only, 2 FLOPs per multiply-add; "
                 f"training step ~3x = {_human(3 * flops)})")
    return "\n".join(lines)

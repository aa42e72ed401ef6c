"""fairseq ``transformer`` weights → our :class:`~nmt_toolkit.models.transformer.TransformerModel`.

fairseq keeps separate Q, K and V projections and names its sub-layer norms after the sub-layer; we fuse
the projections into one matrix per attention (``in_proj`` = [Q; K; V] for self-attention, ``kv_proj`` =
[K; V] for encoder–decoder attention) and hold each norm in the sub-layer's residual wrapper. The mapping is
exact (a concatenation and renaming), so a fairseq model and ours with these weights compute the same
function; ``tests/parity/`` checks that against numbers recorded from real fairseq.

Learned positional tables: fairseq counts positions from ``padding_idx + 1`` and keeps the unused rows
``0 .. padding_idx``; ours starts at position 0, so those rows are dropped. Sinusoidal encodings carry no
weights (our model must be built with ``sinusoid_layout="fairseq"`` to compute fairseq's).
"""
from __future__ import annotations

import re
from typing import Mapping

import torch

from nmt_toolkit.errors import NmtError

_LAYER_NORMS = {"self_attn_layer_norm": "self_attn_res.norm", "encoder_attn_layer_norm": "encoder_attn_res.norm",
                "final_layer_norm": "ffn_res.norm"}
_IGNORED = re.compile(r"(^|\.)(version|_float_tensor)$|embed_positions\._float_tensor$")


def convert_state_dict(state: Mapping[str, torch.Tensor], padding_idx: int = 1) -> dict[str, torch.Tensor]:
    """Our ``state_dict`` from a fairseq ``transformer`` model's ``state_dict`` (``checkpoint["model"]``).

    Raises :class:`NmtError` naming any fairseq tensor it does not know how to place, so that a model with
    an unsupported feature (layernorm_embedding, adaptive softmax, …) is refused instead of half-loaded."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()

    def take(name: str) -> torch.Tensor:
        used.add(name)
        return state[name]

    for side in ("encoder", "decoder"):
        if f"{side}.embed_tokens.weight" in state:
            out[f"{side}.embed.embed_tokens.weight"] = take(f"{side}.embed_tokens.weight")
        if f"{side}.embed_positions.weight" in state:  # learned positions (sinusoidal ones have no weights)
            out[f"{side}.embed.embed_positions.weight"] = take(f"{side}.embed_positions.weight")[padding_idx + 1:]
        for part in ("weight", "bias"):
            if f"{side}.layer_norm.{part}" in state:
                out[f"{side}.layer_norm.{part}"] = take(f"{side}.layer_norm.{part}")
        layers = sorted({int(m.group(1)) for k in state for m in [re.match(rf"{side}\.layers\.(\d+)\.", k)] if m})
        for i in layers:
            src, dst = f"{side}.layers.{i}.", f"{side}.layers.{i}."
            for part in ("weight", "bias"):
                q, k, v = (take(f"{src}self_attn.{x}_proj.{part}") for x in "qkv")
                out[f"{dst}self_attn.in_proj.{part}"] = torch.cat([q, k, v], dim=0)
                out[f"{dst}self_attn.out_proj.{part}"] = take(f"{src}self_attn.out_proj.{part}")
                if side == "decoder":
                    out[f"{dst}encoder_attn.q_proj.{part}"] = take(f"{src}encoder_attn.q_proj.{part}")
                    k, v = (take(f"{src}encoder_attn.{x}_proj.{part}") for x in "kv")
                    out[f"{dst}encoder_attn.kv_proj.{part}"] = torch.cat([k, v], dim=0)
                    out[f"{dst}encoder_attn.out_proj.{part}"] = take(f"{src}encoder_attn.out_proj.{part}")
                for fc in ("fc1", "fc2"):
                    out[f"{dst}ffn.{fc}.{part}"] = take(f"{src}{fc}.{part}")
                for theirs, ours in _LAYER_NORMS.items():
                    if f"{src}{theirs}.{part}" in state:
                        out[f"{dst}{ours}.{part}"] = take(f"{src}{theirs}.{part}")
    if "decoder.output_projection.weight" in state:
        proj = take("decoder.output_projection.weight")
        tied = proj.data_ptr() == state.get("decoder.embed_tokens.weight", proj).data_ptr() or torch.equal(
            proj, state.get("decoder.embed_tokens.weight", torch.empty(0)))
        if not tied:
            out["decoder.output_projection.weight"] = proj
    left = sorted(k for k in state if k not in used and not _IGNORED.search(k))
    if left:
        raise NmtError(f"fairseq weights that have no place in our transformer: {', '.join(left[:5])}"
                       + (f" and {len(left) - 5} more" if len(left) > 5 else ""))
    return out

"""Attention probabilities of any layer and head, for the heatmaps of the paper's Figures 3–5.

Beam search keeps only what it needs (the last layer's encoder–decoder attention, averaged over heads).
For a plot we instead re-run the chosen sentence teacher-forced on its hypothesis and ask one attention
module for its per-head probabilities (``need_weights=True``, the slower explicit-softmax path) through
forward hooks, so the model's code knows nothing of plotting.
"""
from __future__ import annotations

from typing import Optional

import torch

KINDS = ("encoder", "decoder", "encoder-decoder")


def attention_module(model, kind: str, layer: int):
    """The attention module a map of ``kind`` at ``layer`` comes from (a UsageError for a layer out of range)."""
    if kind == "encoder":
        layers, name = model.encoder.layers, "self_attn"
    elif kind == "decoder":
        layers, name = model.decoder.layers, "self_attn"
    elif kind == "encoder-decoder":
        layers, name = model.decoder.layers, "encoder_attn"
    else:
        raise ValueError(f"attention kind {kind!r}: expected one of {', '.join(KINDS)}")
    if not -len(layers) <= layer < len(layers):
        from nmt_toolkit.errors import UsageError

        stack = "encoder" if kind == "encoder" else "decoder"
        raise UsageError(f"--attention-plot-layer {layer}: the {stack} has {len(layers)} layers "
                         f"(0..{len(layers) - 1}, or -1 for the last)")
    return getattr(layers[layer], name)


@torch.inference_mode()
def attention_probs(model, src_tokens: torch.Tensor, hyp_tokens: torch.Tensor, eos: int, kind: str = "encoder-decoder",
                    layer: int = -1) -> torch.Tensor:
    """Per-head attention probabilities ``[H, rows, cols]`` of one sentence.

    ``src_tokens`` [S] (no padding), ``hyp_tokens`` [T] (the output, EOS last). Rows/columns: encoder —
    source × source; decoder — output × decoder inputs (EOS then the output shifted right), causal;
    encoder-decoder — output × source.
    """
    module = attention_module(model, kind, layer)
    captured: list[torch.Tensor] = []

    def ask_for_weights(_mod, args, kwargs):
        kwargs["need_weights"] = True
        return args, kwargs

    def keep(_mod, _args, output):
        captured.append(output[1])

    handles = [module.register_forward_pre_hook(ask_for_weights, with_kwargs=True),
               module.register_forward_hook(keep)]
    was_training = model.training
    model.eval()
    try:
        src = src_tokens.view(1, -1)
        prev = torch.cat([hyp_tokens.new_tensor([eos]), hyp_tokens[:-1]]).view(1, -1)
        encoder_out = model.forward_encoder(src, torch.tensor([src.size(1)], device=src.device))
        if kind != "encoder":
            model.forward_decoder(prev.to(src.device), encoder_out)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    if not captured or captured[-1] is None:
        raise RuntimeError(f"the {kind} attention module returned no probabilities")
    return captured[-1][0].float().cpu()


def select_heads(probs: torch.Tensor, head: Optional[int]) -> torch.Tensor:
    """One head ``[rows, cols]``, or the mean over heads when ``head`` is None or negative."""
    if head is None or head < 0:
        return probs.mean(dim=0)
    if head >= probs.size(0):
        from nmt_toolkit.errors import UsageError

        raise UsageError(f"--attention-plot-head {head}: the model has {probs.size(0)} heads (0..{probs.size(0) - 1})")
    return probs[head]

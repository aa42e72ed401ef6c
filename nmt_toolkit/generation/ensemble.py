"""Several models decoding as one: each keeps its own encoder output and incremental state.

The ensemble's distribution is the average of the models' probabilities, computed in log space
(``logsumexp(log p_m) - log M``), as fairseq's ``EnsembleModel`` does; for one model it is that model's
``log_softmax``. An ensemble of a model with itself therefore equals the model.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn


def _last_position_attn(attn: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    if attn is None:
        return None
    if isinstance(attn, (list, tuple)):
        attn = attn[0] if attn else None
        if attn is None:
            return None
    if attn.dim() == 4:  # [B, heads, T, S]: average the heads
        attn = attn.mean(dim=1)
    return attn[:, -1, :] if attn.dim() == 3 else attn


def _log_softmax_in_place(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """fp32 log-softmax, written over ``logits`` when they are fp32 already.

    Under inference the logits a model returns are the caller's to overwrite (the model contract in
    docs/architecture.md): normalising them in place saves a [rows, V] allocation and a pass over memory
    per decoding step, which is a measurable part of a beam step on CPU."""
    if logits.dtype != torch.float32 or logits.requires_grad:
        logits = logits.float()
        if temperature != 1.0:
            logits = logits / temperature
        return F.log_softmax(logits, dim=-1)
    if temperature != 1.0:
        logits.div_(temperature)
    return torch.log_softmax(logits, dim=-1, out=logits)


class EnsembleModel(nn.Module):
    """The model contract of docs/architecture.md, lifted to a list of models."""

    def __init__(self, models: Sequence[nn.Module]):
        super().__init__()
        if not models:
            raise ValueError("an ensemble needs at least one model")
        self.models = nn.ModuleList(models)

    @property
    def single(self) -> bool:
        return len(self.models) == 1

    def max_positions(self) -> tuple[int, int]:
        src, tgt = 10**9, 10**9
        for m in self.models:
            pos = m.max_positions() if hasattr(m, "max_positions") else (10**9, 10**9)
            if isinstance(pos, int):
                pos = (pos, pos)
            src, tgt = min(src, int(pos[0])), min(tgt, int(pos[1]))
        return src, tgt

    def forward_encoder(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> list:
        return [m.forward_encoder(src_tokens, src_lengths) for m in self.models]

    def reorder_encoder_out(self, encoder_outs: list, new_order: torch.Tensor) -> list:
        return [m.reorder_encoder_out(e, new_order) for m, e in zip(self.models, encoder_outs)]

    @property
    def sentence_level(self) -> bool:
        """Whether every model decodes with encoder outputs kept once per sentence (not per beam)."""
        return all(getattr(m, "supports_sentence_level_encoder_out", False) for m in self.models)

    def make_decoder_states(self, beam: int = 1, sentences: Optional[int] = None, capacity: int = 16) -> list:
        """One empty incremental state per model: the model's own (``make_decoder_state``), or a plain dict
        for a model without one (a plugin's ``forward_decoder`` that keeps its own dict)."""
        return [m.make_decoder_state(beam=beam, sentences=sentences, capacity=capacity)
                if hasattr(m, "make_decoder_state") else {} for m in self.models]

    def reorder_incremental_state(self, states: list, new_order: torch.Tensor,
                                  sentence_order: Optional[torch.Tensor] = None, per_sentence: bool = False) -> None:
        for i, (m, s) in enumerate(zip(self.models, states)):
            if per_sentence:
                out = m.reorder_incremental_state(s, new_order, sentence_order=sentence_order, per_sentence=True)
            else:
                out = m.reorder_incremental_state(s, new_order)
            if isinstance(out, dict) and out is not s:  # a model may return a new state instead of editing
                states[i] = out

    def log_probs(self, prev_output_tokens: torch.Tensor, encoder_outs: list, states: Optional[list],
                  temperature: float = 1.0, need_attn: bool = False, last_only: bool = True):
        """Log-probabilities (fp32) of the next token: ``[B, V]`` when ``last_only`` else ``[B, T, V]``.

        With ``states`` (one per model, :meth:`make_decoder_states`) decoding is incremental: only the last
        position is computed. Returns ``(lprobs, attn)``; ``attn`` is the encoder–decoder attention (``[B, S]`` /
        ``[B, T, S]``, averaged over models) when ``need_attn``.
        """
        all_lp, attn_sum = [], None
        for i, m in enumerate(self.models):
            logits, attn = m.forward_decoder(prev_output_tokens, encoder_outs[i],
                                             incremental_state=None if states is None else states[i],
                                             need_attn=need_attn)
            if last_only:
                logits = logits[:, -1, :]
                attn = _last_position_attn(attn) if need_attn else None
            elif need_attn and attn is not None and attn.dim() == 4:
                attn = attn.mean(dim=1)
            all_lp.append(_log_softmax_in_place(logits, temperature))
            if need_attn and attn is not None:
                attn = attn.float()
                attn_sum = attn if attn_sum is None else attn_sum + attn
        if self.single:
            return all_lp[0], attn_sum
        lprobs = torch.logsumexp(torch.stack(all_lp, dim=0), dim=0) - math.log(len(self.models))
        if attn_sum is not None:
            attn_sum = attn_sum / len(self.models)
        return lprobs, attn_sum

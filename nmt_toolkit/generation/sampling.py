"""Candidate selection by sampling (``--sampling``, top-k, nucleus) instead of beam search's top-k.

The search loop asks for ``2 * beam`` candidates per sentence, as in beam search, so the EOS handling is
shared: here each active beam draws two tokens (with replacement) from its (optionally truncated)
distribution, and the candidates are sorted by their cumulative score. Scores stay those of the
un-truncated distribution (with temperature), as fairseq reports them.
"""
from __future__ import annotations

from typing import Optional

import torch


def truncate(lprobs: torch.Tensor, topk: int = -1, topp: float = -1.0) -> torch.Tensor:
    """``lprobs`` with every token outside the top-k / the nucleus of mass ``topp`` set to -inf."""
    out = lprobs
    if topk is not None and topk > 0 and topk < lprobs.size(-1):
        kth = lprobs.topk(topk, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if topp is not None and 0 < topp < 1:
        sorted_lp, order = out.sort(dim=-1, descending=True)
        cum = sorted_lp.exp().cumsum(dim=-1)
        # keep the smallest prefix whose mass reaches topp: drop a token when the mass before it already does
        drop_sorted = (cum - sorted_lp.exp()) >= topp
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def sample_candidates(lprobs: torch.Tensor, prev_scores: Optional[torch.Tensor], bsz: int, beam: int,
                      topk: int, topp: float, generator: Optional[torch.Generator]):
    """``(cand_scores, cand_indices)`` of shape ``[bsz, 2*beam]``, indices into the flattened beam×V space.

    ``lprobs`` is ``[bsz*beam, V]``; ``prev_scores`` the cumulative scores ``[bsz*beam]`` (None at step 0,
    where all beams are the same and ``2*beam`` tokens are drawn from the first).
    """
    vocab = lprobs.size(-1)
    probs = truncate(lprobs, topk, topp).exp()
    dead = probs.sum(-1) <= 0
    if dead.any():  # a beam with no possible token (forced away): draw anything, its score stays -inf
        probs[dead] = 1.0
    if prev_scores is None:
        first = probs.view(bsz, beam, vocab)[:, 0]
        tok = torch.multinomial(first, 2 * beam, replacement=True, generator=generator)  # [bsz, 2k]
        scores = lprobs.view(bsz, beam, vocab)[:, 0].gather(1, tok)
        indices = tok  # beam 0
    else:
        tok = torch.multinomial(probs, 2, replacement=True, generator=generator)  # [bsz*k, 2]
        scores = lprobs.gather(1, tok) + prev_scores.unsqueeze(1)
        beams = torch.arange(beam, device=lprobs.device).repeat(bsz).unsqueeze(1)
        indices = (beams * vocab + tok).view(bsz, 2 * beam)
        scores = scores.view(bsz, 2 * beam)
    scores, order = scores.sort(dim=1, descending=True)
    return scores, indices.gather(1, order)

"""Candidate selection by sampling (``--sampling``, top-k, nucleus) instead of beam search's top-k.

fairseq's ``Sampling`` search (fairseq/search.py, ``Sampling.step``): the ``beam`` hypotheses of a sentence are
``beam`` independent samples. Each step every beam draws **one** token from its own (temperature-scaled,
optionally truncated) distribution and continues with it; at the first step, where all beams are the same
sentence start, the ``beam`` tokens are drawn (with replacement) from that one distribution. The candidates
are returned in beam order, one per beam, and are never re-ranked by score: beam ``b``'s candidate is beam
``b``'s continuation (keeping the likelier of several draws, as an earlier version did, is no longer a draw
from the distribution). Scores stay those of the un-truncated distribution (with temperature), as fairseq
reports them. How the search finishes sampled beams is in generation/beam_search.py.
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
    """``(cand_scores, cand_indices)`` of shape ``[bsz, beam]``: candidate ``b`` of a sentence is the token beam
    ``b`` drew, its index into the flattened beam×V space and its cumulative score.

    At step 0 (``prev_scores`` None) ``lprobs`` is ``[bsz, V]``, one row per sentence, from which ``beam``
    tokens are drawn, all continuing beam 0. Later it is ``[bsz*beam, V]`` and ``prev_scores`` the cumulative
    scores ``[bsz*beam]``: one token is drawn from each row.
    """
    vocab = lprobs.size(-1)
    probs = truncate(lprobs, topk, topp).exp()
    dead = probs.sum(-1) <= 0
    if dead.any():  # a row with no possible token (forced away): draw anything, its score stays -inf
        probs[dead] = 1.0
    if prev_scores is None:
        tok = torch.multinomial(probs, beam, replacement=True, generator=generator)  # [bsz, beam]
        return lprobs.gather(1, tok), tok  # every candidate continues beam 0 (index = token)
    tok = torch.multinomial(probs, 1, replacement=True, generator=generator)  # [bsz*beam, 1]
    scores = (lprobs.gather(1, tok) + prev_scores.unsqueeze(1)).view(bsz, beam)
    beams = torch.arange(beam, device=lprobs.device).repeat(bsz).unsqueeze(1)
    return scores, (beams * vocab + tok).view(bsz, beam)

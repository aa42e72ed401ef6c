"""Sampling (``--sampling``, top-k, nucleus) as a search strategy beside beam search (generation/strategies.py).

It follows fairseq 0.12's ``Sampling`` search with its ``SequenceGenerator``: the ``beam`` hypotheses of a
sentence are ``beam`` independent samples. ``Sampling.step`` (fairseq/search.py, lines 764-819) returns
``beam`` candidates, not ``2*beam``: each step every beam draws **one** token from its own (temperature-scaled,
optionally truncated) distribution and continues with it; at the first step, where all beams are the same
sentence start, the ``beam`` tokens are drawn (with replacement) from that one distribution. The candidates
are returned in beam order, one per beam, and are never re-ranked by score: beam ``b``'s candidate is beam
``b``'s continuation (keeping the likelier of several draws would not be a draw from the distribution).
Scores stay those of the un-truncated distribution (with temperature), as fairseq reports them.

Finishing. fairseq's generator (fairseq/sequence_generator.py, lines 436-540) finalizes a beam whose draw is
EOS and from then on ignores it (``cands_to_ignore``: its later EOS draws are not finalized again), and a
sentence is done when ``beam`` hypotheses have finished (``finalize_hypos``/``is_finished``, lines 708-757),
or at the maximum length, where EOS is forced. Here each beam continues its own draw in place; a beam that
drew EOS continues with score -inf, which keeps it out of finalization, and the ``beam`` rule stops the
sentence once ``beam`` have finished. (fairseq also moves the finished slots behind the live ones, which only
changes which row takes which random draw.) The n-best are the best ``nbest`` of the ``beam`` samples by
length-penalised score.
"""
from __future__ import annotations

from typing import Optional

import torch

from nmt_toolkit.generation.search_steps import NEG_INF, split_flat_index


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


class SamplingStrategy:
    """``beam`` independent samples per sentence (the module docstring); ``generator`` seeds the draws."""

    early_stop = "beam"  # a sentence is done once each of its samples has ended

    def __init__(self, beam: int, topk: int, topp: float, generator: Optional[torch.Generator]):
        self.beam, self.topk, self.topp, self.generator = beam, topk, topp, generator

    def candidates(self, lprobs: torch.Tensor, prev: Optional[torch.Tensor], n: int, width: int):
        """``(scores, beams, tokens)`` [n, beam]: beam ``b``'s draw in place ``b``."""
        scores, index = sample_candidates(lprobs, prev, n, self.beam, self.topk, self.topp, self.generator)
        return (scores,) + split_flat_index(index, lprobs.size(-1), width, 2 * self.beam)

    def continuing(self, scores: torch.Tensor, beams: torch.Tensor, eos_mask: torch.Tensor,
                   in_parent_rows: bool = False):
        """Every beam goes on with its own draw (index None: all candidates, in place); one that drew EOS has
        finished and continues dead (score -inf: never finalized again), like fairseq's ``cands_to_ignore``."""
        return scores.masked_fill(eos_mask, NEG_INF), None

    def survivors(self, done: torch.Tensor) -> torch.Tensor:
        """The sentences that stay, in their order: the random draws are taken row by row."""
        return (~done).nonzero().squeeze(1)

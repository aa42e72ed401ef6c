"""How a search picks what continues: beam search (:class:`BeamStrategy`) or sampling
(:class:`~nmt_toolkit.generation.sampling.SamplingStrategy`), chosen from the options by :func:`make_strategy`
(fairseq's ``search.py``: a ``Search`` per strategy, one generator around them).

A strategy answers three questions of the dynamic search's step (generation/beam_search.py):
``candidates`` — which (cumulative score, beam, token) triples a sentence considers; ``continuing`` — which of
them go on (EOS ones are finalised by the search either way); ``survivors`` — in which order the sentences
that are not done stay in the batch. ``early_stop`` is the rule it runs under. The static-shape search
(static_search.py) runs :class:`BeamStrategy` only.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from nmt_toolkit.generation.sampling import SamplingStrategy
from nmt_toolkit.generation.search_steps import chunked_row_topk, first_non_eos, top_candidates


def parent_slots(parents: torch.Tensor) -> torch.Tensor:
    """For each sentence's ``k`` continuing hypotheses, ``parents`` [n, k] (the slot 0..k-1 of the beam each
    continues), a slot of its own: the parent's slot for the first hypothesis continuing that beam, and the
    slots no beam claimed, in increasing order, for the others. Placed there, a hypothesis whose parent's row
    it takes needs no copy of its decoder cache (modules/caches.py copies only the rows that change); the
    order of a sentence's beams means nothing to the search itself."""
    k = parents.size(1)
    earlier_sibling = (parents.unsqueeze(2) == parents.unsqueeze(1)).tril(diagonal=-1).any(dim=2)
    first = ~earlier_sibling
    claimed = torch.zeros(parents.size(0), k + 1, dtype=torch.long, device=parents.device)
    claimed.scatter_(1, torch.where(first, parents, k), 1)
    free = (claimed[:, :k] * k + torch.arange(k, device=parents.device)).argsort(dim=1)  # unclaimed first
    rank = (earlier_sibling.long().cumsum(dim=1) - 1).clamp(min=0)
    return torch.where(first, parents, free.gather(1, rank))


def compacting_order(done: torch.Tensor) -> torch.Tensor:
    """The sentences that stay, as indices into the current ones: the first ``m`` places (``m`` = how many
    stay) keep their sentence where it is still active, and the places freed there take the active
    sentences from behind. Only those move, so a cache laid out by sentence copies few of them (see the
    beam layout in modules/attention.py); the order of sentences means nothing to the search itself."""
    m = int((~done).sum())
    keep = torch.arange(m, device=done.device)
    holes = done[:m].nonzero().squeeze(1)
    if holes.numel():
        keep[holes] = (~done[m:]).nonzero().squeeze(1) + m
    return keep


class BeamStrategy:
    """Beam search: the best ``2k`` candidates over beam×V per sentence, the first ``k`` that do not end go on.

    ``row_topk`` finds a row's best candidates in a large vocabulary (search_steps.top_candidates)."""

    def __init__(self, beam: int, early_stop: str, row_topk: Callable = chunked_row_topk):
        self.beam = beam
        self.early_stop = "beam" if beam == 1 else early_stop  # greedy: the first EOS ends the sentence
        self.row_topk = row_topk

    def candidates(self, lprobs: torch.Tensor, prev: Optional[torch.Tensor], n: int, width: int):
        """``(scores, beams, tokens)`` [n, 2k], best first."""
        return top_candidates(lprobs, prev, n, width, self.beam, self.row_topk)

    def continuing(self, scores: torch.Tensor, beams: torch.Tensor, eos_mask: torch.Tensor,
                   in_parent_rows: bool = False):
        """``(scores [n, k], index [n, k])``: the first ``k`` non-EOS candidates, by their index into the
        candidates. ``in_parent_rows`` places each in its parent's slot where it can (:func:`parent_slots`),
        for a decoder cache that copies only the rows that change."""
        active = first_non_eos(eos_mask, self.beam)
        if in_parent_rows:
            slots = parent_slots(beams.gather(1, active))
            active = torch.empty_like(active).scatter_(1, slots, active)
        return scores.gather(1, active), active

    def survivors(self, done: torch.Tensor) -> torch.Tensor:
        """The sentences that stay, laid out so that few move (:func:`compacting_order`)."""
        return compacting_order(done)


def make_strategy(cfg, seed: Optional[int], device: torch.device):
    """The strategy the options ask for: sampling (seeded on ``device`` when ``seed`` is given) or beam search."""
    if cfg.sampling:
        generator = None
        if seed is not None:
            generator = torch.Generator(device=device)
            generator.manual_seed(seed)
        return SamplingStrategy(cfg.beam, cfg.sampling_topk, cfg.sampling_topp, generator)
    return BeamStrategy(cfg.beam, cfg.early_stop)


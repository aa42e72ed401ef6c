"""``--format html`` of nmt-generate and nmt-interactive: each input line is an HTML text (a fragment or a
document), read as nmt-serve reads one (:class:`~nmt_toolkit.markup.html.HtmlText`: blocks, runs, sentences,
the inline tags set aside). Its sentences are translated with their alignments, all the lines' sentences
batched together as plain sentences are, and the line's translation is its HTML rendered with each sentence
replaced by its translation and the markup put back (:mod:`~nmt_toolkit.markup.placement`).

A line's hypothesis of rank ``r`` takes every sentence's ``r``-th hypothesis (its best where it has fewer):
its score is the sum of the sentences' scores (the line is as likely as all its sentences together), its
per-token scores are theirs one after another, and its word alignment is the one placement used, counted over
the line's sentences (:func:`~nmt_toolkit.markup.placement.word_pairs`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from nmt_toolkit.markup.html import HtmlText, UnreadableHtml
from nmt_toolkit.markup.placement import Aligned, word_pairs


@dataclass(frozen=True)
class HtmlHypothesis:
    """One rank of a line's translation: the rendered ``html``, its ``score`` and ``positional_scores``
    (natural log, as the search's hypothesis dicts hold them) and the word alignment ``pairs``
    (``(source word, target word)``)."""

    html: str
    score: float
    positional_scores: tuple[float, ...]
    pairs: tuple[tuple[int, int], ...]


class HtmlLines:
    """Input lines read as HTML for ``translator``: :attr:`sentences` (every line's, in order), then
    :meth:`encode` and :meth:`hypotheses` with the search's results. ``what`` and ``first`` name the lines
    in errors (``--input FILE line 3``)."""

    def __init__(self, translator, lines: Sequence[str], what: str, first: int = 1):
        self.translator, self.what, self.first = translator, what, first
        language = translator.task.cfg.source_lang or "en"
        self.texts: list[HtmlText] = []
        for k, line in enumerate(lines):
            try:
                self.texts.append(HtmlText(line, language))
            except UnreadableHtml as exc:
                raise UnreadableHtml(f"{what} line {first + k}: {exc}") from None
        self.owner = [k for k, text in enumerate(self.texts) for _ in text.sentences]
        self.sentences = [s for text in self.texts for s in text.sentences]
        self.tokens: list[list[Optional[str]]] = []

    def encode(self, budget: bool = True) -> list[np.ndarray]:
        """Every sentence's source ids (:meth:`Translator.encode`; a sentence too long for the model is an
        error naming its line and its place in it)."""
        ids: list[np.ndarray] = []
        for k, text in enumerate(self.texts):
            if text.sentences:
                ids += self.translator.encode(text.sentences, f"{self.what} line {self.first + k}", budget=budget,
                                              unit="sentence")
        self.tokens = self.translator.source_pieces(self.sentences, ids)
        return ids

    def hypotheses(self, found: dict[int, list[dict]]) -> list[list[HtmlHypothesis]]:
        """Each line's hypotheses, best first, from ``found``: each sentence's hypothesis dicts (with their
        ``alignment``) by its index in :attr:`sentences` (a sentence missing there has an empty translation)."""
        per_line: list[list[int]] = [[] for _ in self.texts]
        for i, k in enumerate(self.owner):
            per_line[k].append(i)
        return [self._line(text, indices, found) for text, indices in zip(self.texts, per_line)]

    def _line(self, text: HtmlText, indices: list[int], found: dict[int, list[dict]]) -> list[HtmlHypothesis]:
        ranks = max((len(found.get(i, ())) for i in indices), default=0)
        out = []
        for rank in range(max(ranks, 1)):
            chosen = [found[i][min(rank, len(found[i]) - 1)] if found.get(i) else None for i in indices]
            aligned = [self._aligned(hyp, i) for hyp, i in zip(chosen, indices)]
            scores = [float(p) for hyp in chosen if hyp is not None for p in hyp["positional_scores"].tolist()]
            out.append(HtmlHypothesis(text.render(aligned), sum(float(h["score"]) for h in chosen if h is not None),
                                      tuple(scores), tuple(word_pairs(text.sentences, aligned))))
        return out

    def _aligned(self, hyp: Optional[dict], index: int) -> Aligned:
        if hyp is None:
            return Aligned("")
        pieces = self.translator.task.tgt_dict.string(hyp["tokens"])
        alignment = hyp.get("alignment")
        return Aligned(self.translator.detokenize(pieces), pieces.split(),
                       None if alignment is None else alignment.tolist(), self.tokens[index])

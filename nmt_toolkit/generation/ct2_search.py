"""The search through a ``ctranslate2.Translator``, on symbol lists: what ``--engine ctranslate2`` runs.

It needs neither torch nor a task: sources are lists of subword symbols (CTranslate2 appends the end token
itself), results are hypothesis dicts with the output ``symbols``, the ``score`` (natural log, normalised by
the length penalty as the torch engine normalises it), the ``positional_scores`` (a float32 array, or None
when scores were not asked for) and, when asked for, the ``alignment`` (:func:`alignment_of`). :class:`~nmt_toolkit.generation.ct2_engine.CTranslate2Generator` wraps it
for the programs' tensors; :mod:`~nmt_toolkit.generation.ct2_text` runs it on raw text without loading torch
at all. How each option maps, and why some searches are repeated, is in ``ct2_engine``'s docstring.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from nmt_toolkit.errors import UsageError

#: ``score_batch`` scores batches of at most this many target positions: it holds a log-softmax over the
#: whole vocabulary at every position, so 108 outputs of 256 tokens over 8,000 types would take 0.9 GB
#: (its "tokens" batches count the source's tokens, not these)
SCORE_POSITIONS = 512


def score_batching(targets: list[list[str]]) -> dict:
    """``score_batch``'s batching for ``targets``: as many per batch as keep the longest within
    :data:`SCORE_POSITIONS`."""
    longest = max((len(t) + 1 for t in targets), default=1)
    return dict(max_batch_size=max(1, SCORE_POSITIONS // longest), batch_type="examples")


def alignment_of(attention) -> list[int]:
    """For each output token, the source position its attention weighs most, as the torch engine takes it.

    CTranslate2 returns, per output token, the attention over the source tokens without the end token it
    appended (the export's attention: the last layer's, averaged over every head, export/ctranslate2.py). A
    row is a softmax over all source positions, so the end token's share is what the row lacks of 1: put
    back as the last column, the argmax is over the same positions as the torch engine's (Multi30k, 200
    sentences, 3,153 tokens teacher-forced on the torch engine's output: every argmax the same, the
    probabilities within 1e-6)."""
    rows = np.asarray(attention, dtype=np.float64)
    if rows.size == 0:
        return []
    return np.concatenate([rows, 1.0 - rows.sum(axis=1, keepdims=True)], axis=1).argmax(axis=1).tolist()


def unsupported_options(gen, extra: tuple = ()) -> list[str]:
    """The options of ``gen`` (a GenerationConfig) CTranslate2 cannot honour, as flag strings."""
    lacking = list(extra)
    if gen.lenpen != 0 and gen.lenpen_style != "fairseq":
        lacking.append(f"--lenpen-style {gen.lenpen_style} (CTranslate2 divides by |Y|^alpha: use --lenpen-style "
                       f"fairseq, or --lenpen 0)")
    if gen.beam > 1 and not gen.sampling and gen.early_stop != "beam":
        lacking.append(f"--early-stop {gen.early_stop} (CTranslate2 stops when --beam hypotheses have finished: "
                       f"use --early-stop beam)")
    if gen.unkpen:
        lacking.append("--unkpen")
    if getattr(gen, "max_len_source", "sentence") != "sentence":
        lacking.append("--max-len-source batch (the engine limits each sentence by its own length)")
    if gen.temperature != 1.0 and not gen.sampling:
        lacking.append("--temperature without --sampling")
    if gen.sampling and gen.beam != 1:
        lacking.append("--sampling with --beam > 1 (CTranslate2 draws one sample per sentence: use --beam 1)")
    if len((gen.path or "").split(":")) > 1:
        lacking.append("ensembles (several --path)")
    return lacking


def refuse_unsupported(gen, extra: tuple = ()) -> None:
    """One line naming every option of ``gen`` CTranslate2 cannot honour (at load, and for the options a
    request or ``with_options`` asks for alike)."""
    lacking = unsupported_options(gen, extra)
    if lacking:
        raise UsageError("--engine ctranslate2 has no " + "; ".join(lacking))


class CT2Search:
    """``gen``'s search (a GenerationConfig, engine rules applied) through ``translator``, for a model of
    ``rows`` positions. ``max_batch_size``: CTranslate2 splits a call's sentences (sorted by length) into
    batches of this many (``batch_type`` "examples", or padded tokens with "tokens") and decodes them on its
    ``inter_threads`` replicas at once (0: one batch)."""

    def __init__(self, translator, gen, rows: int, scores: bool = True, max_batch_size: int = 0,
                 batch_type: str = "examples"):
        self.translator, self.gen, self.rows = translator, gen, rows
        self.scores = scores  # False: no score_batch pass (nothing prints per-token scores)
        self.batching = dict(max_batch_size=max_batch_size, batch_type=batch_type)

    def limits(self, lengths: list[int]) -> list[int]:
        """Each sentence's longest output (end token included) from its source length (its EOS included)."""
        gen = self.gen
        return [max(min(int(gen.max_len_a * int(n) + gen.max_len_b), self.rows - 1), max(gen.min_len, 1))
                for n in lengths]

    def _options(self) -> dict:
        gen = self.gen
        options = dict(beam_size=gen.beam, num_hypotheses=gen.nbest, length_penalty=gen.lenpen,
                       no_repeat_ngram_size=gen.no_repeat_ngram_size, min_decoding_length=gen.min_len,
                       max_input_length=self.rows, return_scores=True, **self.batching)
        if gen.sampling:
            options.update(beam_size=1, sampling_topk=0 if gen.sampling_topk < 1 else gen.sampling_topk,
                           sampling_topp=1.0 if gen.sampling_topp <= 0 else gen.sampling_topp,
                           sampling_temperature=gen.temperature)
        return options

    def search(self, sources: list[list[str]], lengths: list[int], prefixes: Optional[list[list[str]]] = None,
               alignment: bool = False) -> list[list[dict]]:
        """The ``--nbest`` hypotheses of each source, best first; ``lengths``: each source's length as the
        torch engine counts it (its EOS included), which sets its length limit; ``alignment``: each with
        its alignment."""
        gen = self.gen
        limits = self.limits(lengths)
        options = {**self._options(), "return_attention": alignment}
        # With a length penalty, how many hypotheses a call returns does not change its search: asking for
        # the whole final beam costs nothing, and it is what ranks a sentence cut at its limit (below) and
        # one with a forced prefix, which CTranslate2 counts as 0 (decoding.cc) where the torch engine counts
        # its log-probabilities: with a length penalty those rank hypotheses of different lengths otherwise
        whole_beam = gen.beam > gen.nbest and not gen.sampling and gen.lenpen != 0
        if whole_beam:
            options["num_hypotheses"] = gen.beam
        found = self._search_together(sources, limits, prefixes, options)
        for limit in sorted({limits[i] for i, hyps in enumerate(found) if hyps is None}):
            idx = [i for i, hyps in enumerate(found) if hyps is None and limits[i] == limit]
            self._search_at(idx, limit, sources, prefixes, options, found)
        cut = set() if gen.sampling else {i for i, hyps in enumerate(found)
                                          if any(len(hyp) + 1 > limits[i] for hyp, _, _ in hyps[: gen.nbest])}
        if cut and gen.beam > gen.nbest and not whole_beam:  # no length penalty: the search depends on nbest
            for limit in sorted({limits[i] for i in cut}):
                self._search_at([i for i in cut if limits[i] == limit], limit, sources, prefixes,
                                {**options, "num_hypotheses": gen.beam}, found)
        if alignment and gen.beam > 1 and len(sources) > 1:
            self._first_step_attention(sources, prefixes, found)
        ranked = cut | (set(range(len(sources))) if whole_beam and prefixes is not None and
                        gen.forced_prefix_score == "model" else set())
        chosen = [hyps if i in ranked else hyps[: gen.nbest] for i, hyps in enumerate(found)]
        forced = [0] * len(sources) if prefixes is None else [len(p) for p in prefixes]
        out = self._hypotheses(sources, chosen, set(range(len(sources))) if self.scores else ranked, forced)
        for hyps in out:  # CTranslate2 returns its n-best in its own order; ours is best score first
            hyps.sort(key=lambda h: -h["score"])
        return [hyps[: gen.nbest] for hyps in out]

    def _first_step_attention(self, sources, prefixes, found: list) -> None:
        """CTranslate2 4.8's beam search over a batch of several sentences returns another row as the first
        step's attention of every sentence but the first (64 Multi30k sentences: row 0 of 63 differs from the
        same sentence searched alone, no later row does; greedy search is not affected). That step reads the
        start token (and a forced prefix) alone, so its row is the same in every hypothesis of a sentence: it
        is taken from a one-step greedy search of the batch."""
        steps = 1 + (0 if prefixes is None else max(len(p) for p in prefixes))
        first = self.translator.translate_batch(sources, target_prefix=prefixes, beam_size=1, max_decoding_length=steps,
                                                return_attention=True, max_input_length=self.rows, **self.batching)
        for i, result in enumerate(first):
            if result.attention and result.attention[0]:
                row = result.attention[0][0]
                found[i] = [(hyp, score, [row, *attention[1:]] if attention else attention)
                            for hyp, score, attention in found[i]]

    def _search_at(self, idx: list[int], limit: int, sources, prefixes, options, found: list) -> None:
        """The sentences ``idx`` searched in one call under ``limit``; their results into ``found``."""
        results = self.translator.translate_batch(
            [sources[i] for i in idx], target_prefix=None if prefixes is None else [prefixes[i] for i in idx],
            max_decoding_length=limit, **options)
        for i, result in zip(idx, results):
            found[i] = _found(result)

    def _search_together(self, sources, limits, prefixes, options) -> list:
        """One ``translate_batch`` call for sentences of different length limits, under the largest: a
        sentence's ``(hypothesis, score)`` list where that search is provably the one its own limit gives, else
        None (searched again under its own limit).

        CTranslate2's beam search (decoding.cc) looks at the limit only at its last step, where every live
        hypothesis is taken as finished; before it, a sentence's steps are the same under any limit. With a
        length penalty a sentence stops at the step where its finished hypotheses reach ``--beam`` (fewer:
        greedy), and asked for all ``--beam`` of them it returns at least one finished at that step: the
        longest returned is its last step. A sentence that stopped two steps before its own limit decoded as
        under that limit; its first hypotheses are those a call asking for fewer returns. Without a
        length penalty the stop depends on ``--nbest`` and a beam's last step cannot be read from its result;
        sampling draws from one random stream: both keep one call per limit."""
        gen = self.gen
        found: list = [None] * len(sources)
        if len(set(limits)) == 1 or gen.sampling or (gen.beam > 1 and gen.lenpen == 0):
            return found
        results = self.translator.translate_batch(
            sources, target_prefix=prefixes, max_decoding_length=max(limits),
            **{**options, "num_hypotheses": gen.beam if gen.beam > 1 else gen.nbest})
        for i, result in enumerate(results):
            if result.hypotheses and max(len(hyp) for hyp in result.hypotheses) <= limits[i] - 2:
                found[i] = _found(result)[: options["num_hypotheses"]]
        return found

    def _hypothesis(self, symbols: list[str], log_probs, forced: int = 0) -> dict:
        """A hypothesis dict from ``score_batch``'s log-probabilities (the end token's last); its first
        ``forced`` tokens (a forced prefix) count 0 with ``--forced-prefix-score zero``, as in the torch
        engine."""
        pos = np.asarray(log_probs, dtype=np.float32)
        if forced and self.gen.forced_prefix_score == "zero":
            pos[:forced] = 0.0
        lp = len(log_probs) ** self.gen.lenpen if self.gen.lenpen else 1.0
        return {"symbols": symbols, "score": float(pos.sum()) / lp, "positional_scores": pos}

    def _hypotheses(self, sources, found, scored_rows: set, forced: list[int]) -> list[list[dict]]:
        """Each sentence's ``(symbols, CTranslate2 score, attention)`` as hypothesis dicts; those of
        ``scored_rows`` scored by ``score_batch`` in one call: the target's log-probabilities, the end token's
        included (a hypothesis cut at its limit ends with the end token the torch engine forces there)."""
        pairs = [(i, hyp, score) for i, hyps in enumerate(found) for hyp, score, _ in hyps]
        attention = [a for hyps in found for _, _, a in hyps]
        wanted = [k for k, (i, _, _) in enumerate(pairs) if i in scored_rows]
        targets = [pairs[k][1] for k in wanted]
        scored = dict(zip(wanted, self.translator.score_batch(
            [sources[pairs[k][0]] for k in wanted], targets, max_input_length=self.rows,
            **score_batching(targets)))) if wanted else {}
        out: list = [[] for _ in sources]
        for k, (i, hyp, score) in enumerate(pairs):
            if k in scored:
                out[i].append(self._hypothesis(hyp, scored[k].log_probs, forced[i]))
            else:  # CTranslate2's own search score; per-token scores are not computed (not printed)
                out[i].append({"symbols": hyp, "score": score, "positional_scores": None})
            out[i][-1]["alignment"] = None if attention[k] is None else alignment_of(attention[k])
        return out

    def score(self, sources: list[list[str]], targets: list[list[str]], forced: int = 0) -> list[list[dict]]:
        """Each target's teacher-forced log-probabilities as a one-hypothesis list."""
        scored = self.translator.score_batch(sources, targets, max_input_length=self.rows, **score_batching(targets))
        return [[self._hypothesis(t, s.log_probs, forced)] for t, s in zip(targets, scored)]


def _found(result) -> list[tuple]:
    """A ``translate_batch`` result as ``(symbols, score, attention or None)`` per hypothesis."""
    attention = result.attention or [None] * len(result.hypotheses)
    return list(zip(result.hypotheses, result.scores, attention))

"""``--engine ctranslate2``: nmt-generate and nmt-interactive decoding through a CTranslate2 model.

:class:`CTranslate2Generator` answers what the programs ask of :class:`SequenceGenerator` — ``generate``,
``score_reference``, ``eos``/``pad``, ``model.max_positions()`` — with the same hypothesis dicts, so the
S-/H-/D-/P- lines and the detokenization are the torch engine's own code. The model comes from
``nmt-export`` (a folder with ``nmt_export.json``) or from a checkpoint exported on the fly into a temporary
folder (quantization none).

How the options map (CTranslate2 4.8's ``Translator.translate_batch``): ``--beam`` → ``beam_size``,
``--nbest`` → ``num_hypotheses``, ``--lenpen`` → ``length_penalty``, ``--no-repeat-ngram-size`` → the same,
``--prefix-size`` → ``target_prefix``, ``--min-len`` → ``min_decoding_length``, ``--max-len-a/b`` → each
sentence's limit ``a * |source| + b`` (CTranslate2 takes one ``max_decoding_length`` per call: a batch is
searched once under its largest limit, and the sentences whose result that search cannot prove to be the one
of their own limit are searched again, one call per limit, see :meth:`CTranslate2Generator._search_together`;
a sentence that reaches its limit is decoded again for its whole final beam, ranked with the end token the
torch engine forces there), ``--sampling`` → random sampling (``sampling_topk``, ``sampling_topp``,
``sampling_temperature``; one sample per sentence, so ``--beam 1``), ``--score-reference`` → ``score_batch``.

Language tags (a multilingual model): the source's tag is a token of the source the task built, passed on
as it is; the target's tag is the search's forced first token, i.e. CTranslate2's ``target_prefix``, which
CTranslate2 returns at the head of each hypothesis; the translator drops it from the output for both
engines. CTranslate2's search counts a prefix's log-probabilities as 0, the torch engine's counts them
(``--forced-prefix-score model``, the default): with a length penalty that ranks hypotheses of different
lengths otherwise, so the whole final beam is taken and ranked by ``score_batch``'s scores, the prefix
included. With ``--forced-prefix-score zero`` both count it as 0: CTranslate2's own ranking stands, and the
prefix's scores from ``score_batch`` are printed as 0.

Length penalty. CTranslate2 ranks a finished hypothesis by ``sum(log p) / |Y|^alpha`` with ``|Y|`` counting
the end token — fairseq's style, our ``--lenpen-style fairseq`` (checked: the same 40 of 40 hypotheses and
scores on Multi30k, tests/test_ctranslate2.py) — and stops a sentence once ``--beam`` hypotheses have
finished, our ``--early-stop beam``. The paper's GNMT penalty and the exact ``bound`` rule do not exist
there: those settings are refused rather than silently changed. Scores printed (H-, P-) are the target's
log-probabilities from CTranslate2's ``score_batch``, normalised as the torch engine does; with
nmt-generate's ``--quiet`` (no score printed) that second pass is skipped.

Options CTranslate2 lacks are one error line naming them: ``--unkpen`` (it can only forbid ``<unk>``),
``--temperature`` without ``--sampling``, ``--print-alignment`` and ``--attention-plot`` (it returns one
head's attention, not our head average), ensembles, ``--fp16``/``--bf16`` (the exported quantization decides).
"""
from __future__ import annotations

import logging
import os
import tempfile
from typing import Optional

import torch

from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.export.ctranslate2 import require_ctranslate2
from nmt_toolkit.outputs import discard_staging

logger = logging.getLogger("nmt_toolkit.generation.ct2_engine")


def unsupported_options(gen, need_attn: bool = False, extra: tuple = ()) -> list[str]:
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
    if need_attn:
        lacking.append("--print-alignment/--attention-plot")
    if len((gen.path or "").split(":")) > 1:
        lacking.append("ensembles (several --path)")
    return lacking


class _Positions:
    """What the programs ask of ``generator.model``: the longest source and target the export holds."""

    def __init__(self, rows: int):
        self.rows = rows

    def max_positions(self) -> tuple[int, int]:
        return self.rows, self.rows


class CTranslate2Generator:
    """Decoding through ``ctranslate2.Translator`` (see the module docstring)."""

    def __init__(self, model, task, gen, device: str = "cpu", threads: int = 0, seed: Optional[int] = None,
                 scores: bool = True):
        """``model``: the ``--path`` as :func:`~nmt_toolkit.loading.open_model` read it, an export or a
        checkpoint (exported here for this run, from what was read)."""
        self._tmp = None  # first: close() (from __del__) runs even when the lines below raise
        ct2 = require_ctranslate2()
        self.gen, self.src_dict, self.tgt_dict = gen, task.src_dict, task.tgt_dict
        self.scores = scores  # False (nmt-generate --quiet prints no scores): no score_batch pass
        self.eos, self.pad = self.tgt_dict.eos(), self.tgt_dict.pad()
        if model.export is not None:
            folder, record = model.path, model.export
        elif model.folder is not None:
            raise DataError(f"--path {model.path}: not a folder written by nmt-export --format ctranslate2 "
                            f"(no nmt_export.json)")
        else:  # a checkpoint: export it for this run
            from nmt_toolkit.export.ctranslate2 import export

            self._tmp = tempfile.mkdtemp(prefix="nmt-ct2-")
            folder = os.path.join(self._tmp, "model")
            logger.info("exporting %s to CTranslate2 (quantization none) in %s", model.path, folder)
            record = export(model, task, folder)
        self._check_dictionaries(folder, record)
        self.model = _Positions(int(record["max_positions"]))
        if seed is not None:
            ct2.set_random_seed(seed)
        try:
            self.translator = ct2.Translator(folder, device=device, intra_threads=threads)
        except (RuntimeError, ValueError) as exc:
            raise DataError(f"--path {folder}: CTranslate2 cannot load it ({exc})") from None

    def _check_dictionaries(self, folder: str, record: dict) -> None:
        from nmt_toolkit.data.dictionary import Dictionary, fingerprint_mismatch

        for side, mine in (("source", self.src_dict), ("target", self.tgt_dict)):
            name = record.get("dictionaries", {}).get(side)
            path = os.path.join(folder, name or f"<no {side} dictionary>")
            if not name or not os.path.isfile(path):
                raise DataError(f"{folder}: the export has no {side} dictionary ({path})")
            problem = fingerprint_mismatch(Dictionary.load(path).fingerprint(), mine.fingerprint())
            if problem:
                raise DataError(f"{path}: wrong dictionary: the exported model's {side} dictionary differs from the "
                                f"data-bin's ({problem}); decode with the data-bin the model was trained on")

    def close(self) -> None:
        if self._tmp:
            discard_staging(self._tmp)
            self._tmp = None

    def __del__(self):
        self.close()

    # ------------------------------------------------------------------ tokens

    def _source(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> list[list[str]]:
        """Symbols of each source without padding and without its EOS (CTranslate2 appends it)."""
        rows = src_tokens.cpu().tolist()
        return [[self.src_dict[t] for t in row[: int(n)] if t != self.src_dict.eos()]
                for row, n in zip(rows, src_lengths.tolist())]

    def _ids(self, symbols: list[str]) -> torch.Tensor:
        return torch.tensor([self.tgt_dict.index(s) for s in symbols] + [self.eos], dtype=torch.long)

    def _hypothesis(self, ids: torch.Tensor, log_probs: list[float], forced: int = 0) -> dict:
        """A hypothesis dict from ``score_batch``'s log-probabilities; its first ``forced`` tokens (a forced
        prefix) count 0 with ``--forced-prefix-score zero``, as in the torch engine."""
        pos = torch.tensor(log_probs, dtype=torch.float32)
        if forced and self.gen.forced_prefix_score == "zero":
            pos[:forced] = 0.0
        lp = len(log_probs) ** self.gen.lenpen if self.gen.lenpen else 1.0
        return {"tokens": ids, "score": float(pos.sum()) / lp, "positional_scores": pos, "attention": None,
                "alignment": None}

    # ------------------------------------------------------------------ the generator interface

    def generate(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                 prefix_tokens: Optional[torch.Tensor] = None, need_attn: bool = False) -> list[list[dict]]:
        if need_attn:
            raise UsageError("--engine ctranslate2 has no --print-alignment/--attention-plot")
        gen, rows = self.gen, self.model.rows
        sources = self._source(src_tokens, src_lengths)
        limits = [max(min(int(gen.max_len_a * int(n) + gen.max_len_b), rows - 1), max(gen.min_len, 1))
                  for n in src_lengths.tolist()]
        prefixes = None
        if prefix_tokens is not None:
            prefixes = [[self.tgt_dict[t] for t in row if t not in (self.pad, self.eos)]
                        for row in prefix_tokens.cpu().tolist()]
        options = dict(beam_size=gen.beam, num_hypotheses=gen.nbest, length_penalty=gen.lenpen,
                       no_repeat_ngram_size=gen.no_repeat_ngram_size, min_decoding_length=gen.min_len,
                       max_input_length=rows, return_scores=True)
        if gen.sampling:
            options.update(beam_size=1, sampling_topk=0 if gen.sampling_topk < 1 else gen.sampling_topk,
                           sampling_topp=1.0 if gen.sampling_topp <= 0 else gen.sampling_topp,
                           sampling_temperature=gen.temperature)
        # CTranslate2 counts a forced prefix's log-probabilities as 0 (decoding.cc), so with a length penalty
        # it ranks finished hypotheses of different lengths otherwise than the torch engine, which counts them
        # (a language tag is such a prefix): take the whole final beam and rank it by the scores with them
        rank_beam = (prefixes is not None and gen.lenpen != 0 and gen.beam > gen.nbest and not gen.sampling
                     and gen.forced_prefix_score == "model")
        if rank_beam:
            options["num_hypotheses"] = gen.beam
        found = self._search_together(sources, limits, prefixes, options)
        for limit in sorted({limits[i] for i, hyps in enumerate(found) if hyps is None}):
            idx = [i for i, hyps in enumerate(found) if hyps is None and limits[i] == limit]
            results = self.translator.translate_batch(
                [sources[i] for i in idx], target_prefix=None if prefixes is None else [prefixes[i] for i in idx],
                max_decoding_length=limit, **options)
            for i, result in zip(idx, results):
                found[i] = list(zip(result.hypotheses, result.scores))
        forced = [0] * len(sources) if prefixes is None else [len(p) for p in prefixes]
        out = self._hypotheses(sources, found, self.scores or rank_beam, forced)
        cut = [i for i, hyps in enumerate(out) if any(len(h["tokens"]) > limits[i] for h in hyps)]
        if cut and not gen.sampling:
            self._rerank_at_the_limit(cut, sources, limits, prefixes, options, out, forced)
        for hyps in out:  # CTranslate2 returns its n-best in its own order; ours is best score first
            hyps.sort(key=lambda h: -h["score"])
        return [hyps[: gen.nbest] for hyps in out]

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
                found[i] = list(zip(result.hypotheses, result.scores))[: options["num_hypotheses"]]
        return found

    def _hypotheses(self, sources, found, scores: bool, forced: list[int]) -> list[list[dict]]:
        """Each sentence's ``(symbols, CTranslate2 score)`` as hypothesis dicts, scored by ``score_batch`` in
        one call (unless ``scores`` are not wanted)."""
        pairs = [(i, hyp, score) for i, hyps in enumerate(found) for hyp, score in hyps]
        if scores:
            scored = self.translator.score_batch([sources[i] for i, _, _ in pairs], [h for _, h, _ in pairs],
                                                 max_input_length=self.model.rows)
        out: list = [[] for _ in sources]
        for k, (i, hyp, score) in enumerate(pairs):
            ids = self._ids(hyp)
            if scores:
                out[i].append(self._hypothesis(ids, scored[k].log_probs, forced[i]))
            else:  # CTranslate2's own search score; per-token scores are not computed (not printed)
                out[i].append({"tokens": ids, "score": score, "positional_scores": torch.full((len(ids),), float("nan")),
                               "attention": None, "alignment": None})
        return out

    def _rerank_at_the_limit(self, cut, sources, limits, prefixes, options, out, forced) -> None:
        """Sentences whose hypotheses reached their length limit: CTranslate2 ranks those cut-off hypotheses
        without the end token the torch engine forces there (and scores). Their whole final beam is taken and
        ranked by the scores with the end token, as the torch engine ranks it."""
        gen = self.gen
        for i in cut:
            result = self.translator.translate_batch(
                [sources[i]], target_prefix=None if prefixes is None else [prefixes[i]],
                max_decoding_length=limits[i], **{**options, "num_hypotheses": gen.beam})[0]
            scored = self.translator.score_batch([sources[i]] * len(result.hypotheses), result.hypotheses,
                                                 max_input_length=self.model.rows)
            hyps = [self._hypothesis(self._ids(h), s.log_probs, forced[i]) for h, s in zip(result.hypotheses, scored)]
            out[i] = sorted(hyps, key=lambda h: -h["score"])[: gen.nbest]

    def score_reference(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, target: torch.Tensor,
                        need_attn: bool = False, forced: int = 0) -> list[list[dict]]:
        if need_attn:
            raise UsageError("--engine ctranslate2 has no --print-alignment/--attention-plot")
        sources = self._source(src_tokens, src_lengths)
        targets = [[self.tgt_dict[t] for t in row if t not in (self.pad, self.eos)] for row in target.cpu().tolist()]
        scored = self.translator.score_batch(sources, targets, max_input_length=self.model.rows)
        return [[self._hypothesis(self._ids(t), s.log_probs, forced)] for t, s in zip(targets, scored)]

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
``--temperature`` without ``--sampling``, ensembles, ``--fp16``/``--bf16`` (the exported quantization
decides); ``--attention-plot`` (nmt-generate refuses it: it plots the torch model's layers).

Alignments (``--print-alignment``, ``--format html``, nmt-serve's HTML): CTranslate2's ``return_attention``,
which an export made by ``nmt-export`` averages over every head of the last layer, as the torch engine's;
the argmax per output token is taken over the same positions (``ct2_search.alignment_of``). An export whose
record names no ``alignment_heads`` returns one head's attention: alignments are refused for it.
"""
from __future__ import annotations

import copy
import logging
import os
import tempfile
from typing import Optional

import torch

from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.generation.ct2_search import CT2Search, unsupported_options  # noqa: F401 (re-exported)
from nmt_toolkit.export.ctranslate2 import require_ctranslate2
from nmt_toolkit.outputs import discard_staging

logger = logging.getLogger("nmt_toolkit.generation.ct2_engine")


class _Positions:
    """What the programs ask of ``generator.model``: the longest source and target the export holds."""

    def __init__(self, rows: int):
        self.rows = rows

    def max_positions(self) -> tuple[int, int]:
        return self.rows, self.rows


class CTranslate2Generator:
    """Decoding through ``ctranslate2.Translator`` (see the module docstring)."""

    def __init__(self, model, task, gen, device: str = "cpu", threads: int = 0, seed: Optional[int] = None,
                 scores: bool = True, replicas: int = 1):
        """``model``: the ``--path`` as :func:`~nmt_toolkit.loading.open_model` read it, an export or a
        checkpoint (exported here for this run, from what was read); ``threads`` in all (0: CTranslate2's
        default), shared by ``replicas`` copies that decode batches at once (callers on several threads)."""
        self._tmp = None  # first: close() (from __del__) runs even when the lines below raise
        ct2 = require_ctranslate2()
        self.gen, self.src_dict, self.tgt_dict = gen, task.src_dict, task.tgt_dict
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
        #: why hypotheses cannot carry alignments (None: they can)
        self.alignment_refusal = None if record.get("alignment_heads") else (
            f"--path {folder}: the export records no alignment_heads, so CTranslate2 would return one head's "
            f"attention, not the mean of the last layer's heads; export it again with nmt-export")
        if seed is not None:
            ct2.set_random_seed(seed)
        try:
            self.translator = ct2.Translator(folder, device=device, inter_threads=replicas,
                                             intra_threads=max(1, threads // replicas) if threads else 0)
        except (RuntimeError, ValueError) as exc:
            raise DataError(f"--path {folder}: CTranslate2 cannot load it ({exc})") from None
        # on the CPU a call's sentences (a server's batch of requests) decode in batches of cpu_batch_size,
        # shared among the replicas
        self.search = CT2Search(self.translator, gen, self.model.rows, scores,
                                max_batch_size=(gen.cpu_batch_size or 0) if device == "cpu" else 0)

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

    def with_gen(self, gen, scores: Optional[bool] = None) -> "CTranslate2Generator":
        """The same loaded model searching with ``gen`` (``scores``: whether to compute per-token scores, by
        default as this one does); the original keeps (and removes) its export folder."""
        other = copy.copy(self)
        other._tmp, other.gen = None, gen
        other.search = CT2Search(self.search.translator, gen, self.search.rows,
                                 self.search.scores if scores is None else scores, **self.search.batching)
        return other

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

    def _symbols(self, rows: torch.Tensor) -> list[list[str]]:
        """Target symbols of each row, without padding and EOS."""
        return [[self.tgt_dict[t] for t in row if t not in (self.pad, self.eos)] for row in rows.cpu().tolist()]

    def _as_tensors(self, hyps: list[dict]) -> list[dict]:
        """The search's hypotheses as the torch engine's dicts: token ids with EOS, per-token scores."""
        out = []
        for hyp in hyps:
            ids = torch.tensor([self.tgt_dict.index(s) for s in hyp["symbols"]] + [self.eos], dtype=torch.long)
            pos = hyp["positional_scores"]
            pos = torch.full((len(ids),), float("nan")) if pos is None else torch.from_numpy(pos)
            alignment = hyp.get("alignment")
            out.append({"tokens": ids, "score": hyp["score"], "positional_scores": pos, "attention": None,
                        "alignment": None if alignment is None else torch.tensor(alignment, dtype=torch.long)})
        return out

    # ------------------------------------------------------------------ the generator interface

    def generate(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                 prefix_tokens: Optional[torch.Tensor] = None, need_attn: bool = False) -> list[list[dict]]:
        if need_attn and self.alignment_refusal is not None:
            raise UsageError(self.alignment_refusal)
        prefixes = None if prefix_tokens is None else self._symbols(prefix_tokens)
        found = self.search.search(self._source(src_tokens, src_lengths), src_lengths.tolist(), prefixes,
                                   alignment=need_attn)
        return [self._as_tensors(hyps) for hyps in found]

    def score_reference(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, target: torch.Tensor,
                        need_attn: bool = False, forced: int = 0) -> list[list[dict]]:
        if need_attn:
            raise UsageError("--engine ctranslate2 scores references without their attention: drop "
                             "--print-alignment with --score-reference")
        found = self.search.score(self._source(src_tokens, src_lengths), self._symbols(target), forced)
        return [self._as_tensors(hyps) for hyps in found]

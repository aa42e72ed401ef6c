"""BLEU and chrF through sacreBLEU's API (same defaults as the ``sacrebleu`` command, so the same numbers),
the paper's tokenized BLEU with compound splitting, and paired bootstrap significance.

Tokenized BLEU reproduces tensor2tensor's ``get_ende_bleu.sh``: Moses-tokenize both sides (sacremoses when
installed, else sacreBLEU's ``13a`` tokenizer, with a warning), split compounds with
``s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g``, then ``multi-bleu.perl`` — i.e. BLEU on whitespace tokens,
case-sensitive, no smoothing (sacreBLEU with ``tokenize="none", smooth_method="none"``).

sacreBLEU (60 ms at import) and sacremoses (400 ms) are imported by the functions that use them: nmt-train
without ``--eval-bleu`` and every ``--help`` need neither.
"""
from __future__ import annotations

import logging
import re
from typing import Sequence

from nmt_toolkit.errors import DataError

logger = logging.getLogger(__name__)

_COMPOUND = re.compile(r"(\S)-(\S)")


def check_lengths(named: Sequence[tuple[str, Sequence[str]]]) -> None:
    """All files must have as many lines as the first, and at least one (sacreBLEU's scorers index the first
    line: empty files would end in an IndexError inside it); the error names the files and counts."""
    first_name, first = named[0]
    for name, lines in named[1:]:
        if len(lines) != len(first):
            raise DataError(f"line count mismatch: {first_name} has {len(first)} lines but {name} has {len(lines)}")
    if not first:
        raise DataError(f"nothing to score: {' and '.join(name for name, _ in named)} are empty")


def sacrebleu_metrics(names: Sequence[str], refs: Sequence[Sequence[str]]) -> dict:
    """sacreBLEU metric objects with the command's defaults, references cached."""
    from sacrebleu.metrics import BLEU, CHRF

    out = {}
    for name in names:
        if name == "bleu":
            out["BLEU"] = BLEU(references=refs)
        elif name == "chrf":
            out["chrF2"] = CHRF(references=refs)
        else:
            raise ValueError(name)
    return out


def corpus_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]], metrics: Sequence[str] = ("bleu", "chrf")):
    """``[(score object, signature string)]`` for each metric, as ``sacrebleu REF -i HYP -m …`` computes."""
    results = []
    for metric in sacrebleu_metrics(metrics, refs).values():
        score = metric.corpus_score(hyps, None)
        results.append((score, str(metric.get_signature())))
    return results


def moses_tokenize(lines: Sequence[str], lang: str) -> list[str]:
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        if not getattr(moses_tokenize, "warned", False):
            moses_tokenize.warned = True
            logger.warning("sacremoses is not installed: tokenizing with sacreBLEU's 13a tokenizer instead of "
                           "Moses' tokenizer.perl (pip install sacremoses for the paper's exact tokenization)")
        from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

        tok = Tokenizer13a()
        return [tok(line) for line in lines]
    mt = MosesTokenizer(lang=lang)
    return [mt.tokenize(line, return_str=True) for line in lines]


def split_compounds(line: str) -> str:
    """``rich-text`` → ``rich ##AT##-##AT## text`` (non-overlapping, like the perl one-liner)."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def tokenized_bleu(hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str = "de",
                   compound_split: bool = False, tokenize: bool = True):
    """multi-bleu.perl's BLEU on Moses-tokenized (and optionally compound-split) text."""
    from sacrebleu.metrics import BLEU

    def prep(lines):
        lines = moses_tokenize(lines, lang) if tokenize else list(lines)
        return [split_compounds(x) for x in lines] if compound_split else lines

    bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    return bleu.corpus_score(prep(hyps), [prep(r) for r in refs])


def paired_bootstrap(systems: Sequence[tuple[str, Sequence[str]]], refs: Sequence[Sequence[str]],
                     metrics: Sequence[str] = ("bleu", "chrf"), n_samples: int = 1000):
    """sacreBLEU's paired bootstrap resampling: the first system is the baseline.

    Returns ``(signatures {metric: str}, scores {"System": names, metric: [Result…]})``.
    """
    from sacrebleu.significance import PairedTest

    test = PairedTest(list(systems), sacrebleu_metrics(metrics, refs), references=None, test_type="bs",
                      n_samples=n_samples)
    sigs, scores = test()
    return {k: str(v) for k, v in sigs.items()}, scores

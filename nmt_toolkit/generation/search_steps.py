"""The steps of a beam search, each written once: the dynamic search (beam_search.py) and the static-shape
search (static_search.py) are two loops over the same pieces.

A step of either search runs them in this order (the pieces of Sockeye 3's beam search: ``UpdateScores``,
``TopK``, ``SortNormalizeAndUpdateFinished``): the log-probabilities of the last position are constrained
(:func:`constrain_lprobs`; the dynamic search also :func:`force_prefix` and :func:`ban_repeated_ngrams`) →
the top ``2*beam`` candidates over beam×V per sentence (:func:`top_candidates`; twice the beam, so that
``beam`` non-EOS candidates remain when some end) → the EOS candidates among the first ``beam`` are merged
into the sentence's finished set (:func:`merge_finished`) → the first ``beam`` non-EOS candidates continue
(:func:`first_non_eos`) → the early-stop rule says which sentences are done (:func:`sentences_done`). At the
end :func:`collect_hypotheses` returns the n-best. Sampling replaces the candidate choice and what continues
(generation/sampling.py); generation/strategies.py picks one or the other.

Scores. A hypothesis Y (its tokens including the final EOS, |Y| of them) scores
``sum log p(y_t | y_<t, x) / lp(|Y|)`` with the GNMT length penalty ``lp(n) = ((5 + n) / 6) ** alpha``
(the paper's, ``lenpen_style="gnmt"``) or fairseq's ``n ** alpha``. Hypotheses are ranked by that score;
scores are natural logs here (the printers divide by ln 2). A forced prefix (a multilingual model's target
token, ``--prefix-size``) counts in ``|Y|``; its tokens add their own log-probabilities (fairseq's rule) or,
with ``forced_prefix_score="zero"``, nothing, as Hugging Face's forced BOS and CTranslate2's target prefix
score them (:func:`force_prefix`; the static search takes no prefix, so the option never concerns it).

Length limits. At most ``max_len = min(a * src_len + b, max_target_positions - 1)`` tokens before the
EOS, per sentence (``src_len`` is the sentence's own length, EOS included, or with ``max_len_source="batch"``
the longest of its batch, as fairseq-generate counts); EOS is forced at step ``max_len`` and forbidden before
step ``min_len``.

Early stopping (``early_stop="bound"``, the rule of tensor2tensor's beam search, which the paper used): a
sentence is done when no active hypothesis can still beat the finished ones it returns, i.e. the
``nbest``-th best finished score. An active hypothesis with cumulative log-probability ``c <= 0`` after
``L`` tokens can only end with a score ``c' <= c`` at a length ``n`` in ``[L+1, max_len+1]``, so its final
score is at most ``c / max(lp(L+1), lp(max_len+1))`` (for alpha > 0 the penalty grows with length, and
dividing a negative score by a larger penalty raises it: the bound uses the longest possible length). When
the ``nbest``-th finished score is >= the best active bound, nothing can change the output and the sentence
leaves the batch: the result is the one ``early_stop="never"`` (every sentence searched to its maximum
length) returns. Finished hypotheses are kept as the best ``beam`` seen (a better late one replaces the
worst). ``early_stop="beam"`` is fairseq's rule: done as soon as ``beam`` hypotheses have finished (it can
miss a longer hypothesis that the length penalty would have preferred). Greedy decoding (``beam=1``) and
sampling always use the ``beam`` rule, so ``beam=1`` is exactly the greedy loop (argmax until EOS).

Host step or device position. The dynamic search knows its step as a Python int and may read the device
(skip work that is not needed, index only the rows concerned); the static search's step is recorded once as a
CUDA graph, so it holds its position in a device tensor and never reads a device value. The steps take either
where they can; :func:`constrain_lprobs` has one branch for each, with the same result.
"""
from __future__ import annotations

from typing import Callable, Optional, Union

import torch

from nmt_toolkit.errors import UsageError

NEG_INF = float("-inf")
CHUNKED_TOPK_MIN_VOCAB = 1024  # from this vocabulary size on, a row's candidates are found by chunked_row_topk
_GROUP_SIZES = (8, 16, 12, 10, 6, 4)

Step = Union[int, torch.Tensor]  # the dynamic search's step, or the static search's position (a 0-dim tensor)


class SearchStopped(Exception):
    """A search gave up between two steps because its caller's ``stop`` check said so (a server's request timed
    out or its client went away): its batch has no result."""


def check_stop(stop: Optional[Callable[[], bool]]) -> None:
    """Between two steps of a search: raise :class:`SearchStopped` when the caller's ``stop()`` is true. The
    check comes from outside the model (a deadline, a cancelled request), so a decode never outlives it by
    more than one step."""
    if stop is not None and stop():
        raise SearchStopped("the search was stopped by its caller")


def length_penalty(length, alpha: float, style: str = "gnmt"):
    """lp(|Y|): GNMT's ((5+|Y|)/6)^alpha (the paper's) or fairseq's |Y|^alpha; works on floats and tensors."""
    if style == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if style == "fairseq":
        return length ** alpha
    raise ValueError(f"unknown length penalty style {style!r} (choices: gnmt, fairseq)")


def decoder_start(models, tgt_dict) -> int:
    """The symbol every hypothesis starts from (the decoder's first input): each model's
    ``decoder_start(tgt_dict)``, EOS for a model without one; the models of an ensemble must agree."""
    starts = {m.decoder_start(tgt_dict) if callable(getattr(m, "decoder_start", None)) else tgt_dict.eos()
              for m in models}
    if len(starts) > 1:
        raise UsageError("the ensemble's models start decoding from different symbols (--decoder-start eos and "
                         "pad); decode with them separately")
    return starts.pop()


def output_limits(src_lengths: torch.Tensor, cfg, max_target_positions: int, device: torch.device) -> torch.Tensor:
    """Each sentence's most output tokens before the EOS: ``a * src_len + b`` (``src_len`` the sentence's own
    length or, with ``max_len_source="batch"``, fairseq's padded width of the batch), at least ``min_len`` (and
    1), at most what the model's target positions allow."""
    basis = src_lengths.double()
    if cfg.max_len_source == "batch":
        basis = basis.max().expand_as(basis)
    ceiling = max(max_target_positions - 1, 1)
    max_len = (cfg.max_len_a * basis + cfg.max_len_b).clamp(max=ceiling).long()  # capped before .long() wraps
    return max_len.clamp(min=max(cfg.min_len, 1), max=ceiling).to(device)


def constrain_lprobs(lprobs: torch.Tensor, step: Step, row_max: torch.Tensor, cfg, pad: int, unk: int,
                     eos: int) -> torch.Tensor:
    """The rules every search applies to a step's log-probabilities, in place: pad is never output, <unk>
    loses ``unkpen``, EOS is forbidden before ``min_len`` and is the only token left to a row at its limit
    (``row_max``). With an int ``step`` only the rows at their limit are touched (usually none); with a device
    position every row is masked, which reads nothing back to the host."""
    lprobs[:, pad] = NEG_INF
    if cfg.unkpen:
        lprobs[:, unk] -= cfg.unkpen
    if isinstance(step, int):
        if step < cfg.min_len:
            lprobs[:, eos] = NEG_INF
        at_max = (row_max <= step).nonzero().squeeze(1)
        if at_max.numel():
            eos_lp = lprobs[at_max, eos]
            lprobs.index_fill_(0, at_max, NEG_INF)
            lprobs[at_max, eos] = eos_lp
        return lprobs
    eos_lp = lprobs[:, eos].masked_fill(step < cfg.min_len, NEG_INF)
    lprobs.masked_fill_((row_max <= step).unsqueeze(1), NEG_INF)
    lprobs[:, eos] = eos_lp
    return lprobs


def force_prefix(lprobs: torch.Tensor, prefix_rows: torch.Tensor, step: int, pad: int,
                 score: str = "model") -> torch.Tensor:
    """Rows whose forced prefix (``prefix_rows``, pad where it ends) has a token at ``step`` may output only it,
    with its own log-probability (``score="model"``, fairseq's rule) or with 0 (``"zero"``: the token adds
    nothing to the hypothesis' score, as Hugging Face's forced BOS and CTranslate2's target prefix count it)."""
    if step >= prefix_rows.size(1):
        return lprobs
    ptok = prefix_rows[:, step]
    forced = ptok != pad
    if not bool(forced.any()):
        return lprobs
    kept = lprobs.gather(1, ptok.unsqueeze(1))
    if score == "zero":  # a token the rules forbid here (past the length limit) stays forbidden
        kept = kept.masked_fill(kept > NEG_INF, 0.0)
    only = torch.full_like(lprobs, NEG_INF).scatter_(1, ptok.unsqueeze(1), kept)
    return torch.where(forced.unsqueeze(1), only, lprobs)


def ban_repeated_ngrams(lprobs: torch.Tensor, tokens: torch.Tensor, step: int, size: int, pad: int) -> torch.Tensor:
    """No hypothesis repeats an n-gram of ``size`` tokens: a token that would complete an n-gram already among
    the row's output tokens (``tokens[:, 1:step + 1]``) gets -inf. The decoder's start symbol (EOS or pad) is no
    output: counted, ``size=1`` would forbid EOS and no hypothesis could end."""
    if size <= 0 or step < size:
        return lprobs
    seq = tokens[:, 1 : step + 1]
    windows = seq.unfold(1, size, 1)  # [rows, W, size]: every complete n-gram so far
    last = seq[:, step + 1 - size:].unsqueeze(1)  # the n-gram's first size - 1 tokens (none for size 1)
    match = (windows[:, :, : size - 1] == last).all(dim=2)  # n-grams starting like the current suffix
    banned = torch.where(match, windows[:, :, size - 1], torch.full_like(match, pad, dtype=torch.long))
    return lprobs.scatter(1, banned, NEG_INF)


def chunked_row_topk(x: torch.Tensor, kk: int):
    """``x.topk(kk, dim=1)`` for wide rows, faster on CPU. A row of ``W = c * m`` values is cut into ``m``
    groups of ``c`` (group b holds positions ``a * m + b``, so that the group maxima are one vectorised
    reduction); the ``kk`` groups with the largest maxima are kept (each of the row's ``kk`` best values
    lies in one of them: a value outside them has ``kk`` larger group maxima above it) and the top-``kk`` is
    taken among their ``kk * c`` values."""
    rows, width = x.shape
    c = next((c for c in _GROUP_SIZES if width % c == 0), None)
    if c is None or width // c <= 4 * kk:
        return x.topk(kk, dim=1)
    m = width // c
    groups = x.reshape(rows, c, m).amax(dim=1).topk(kk, dim=1).indices  # [rows, kk]
    idx = (groups.unsqueeze(2) + torch.arange(0, width, m, device=x.device)).view(rows, kk * c)
    values, j = x.gather(1, idx).topk(kk, dim=1)
    return values, idx.gather(1, j)


def plain_row_topk(x: torch.Tensor, kk: int):
    """``x.topk(kk, dim=1)``: one kernel on a GPU, where the static search runs (its ties among -inf values
    resolve as torch's own top-k does, so the static search keeps torch's)."""
    return x.topk(kk, dim=1)


def top_candidates(lprobs: torch.Tensor, prev: Optional[torch.Tensor], n: int, width: int, k: int,
                   row_topk: Callable = chunked_row_topk):
    """``(scores, beams, tokens)`` [n, 2k]: the best ``2k`` continuations of each of ``n`` sentences over its
    ``width`` rows × V, by cumulative score (``prev`` [n * width]: each row's score so far; None: 0, the
    dynamic search's first step), best first; ``beams`` is the row (0..width-1) each extends.

    Large vocabularies take the best 2k of each row first (a candidate of its sentence is one of its row's
    best 2k, by ``row_topk``), then the best 2k of the sentence's width * 2k: no beam×V sum is materialised.
    With fewer than 2k values in all, the rest are -inf candidates pointing at a real row."""
    vocab = lprobs.size(-1)
    if vocab >= CHUNKED_TOPK_MIN_VOCAB:
        row_scores, row_tokens = row_topk(lprobs, 2 * k)
        if prev is not None:
            row_scores = row_scores + prev.unsqueeze(1)
        scores, j = row_scores.view(n, width * 2 * k).topk(2 * k, dim=1)
        beams = torch.div(j, 2 * k, rounding_mode="floor")
        return scores, beams, row_tokens.view(n, width * 2 * k).gather(1, j)
    if prev is None:
        flat = lprobs
    else:
        flat = (lprobs.view(n, width, vocab) + prev.view(n, width, 1)).view(n, width * vocab)
    if flat.size(1) < 2 * k:
        flat = torch.nn.functional.pad(flat, (0, 2 * k - flat.size(1)), value=NEG_INF)
    scores, index = flat.topk(2 * k, dim=1)
    return (scores,) + split_flat_index(index, vocab, width, 2 * k)


def split_flat_index(index: torch.Tensor, vocab: int, width: int, wanted: int):
    """``(beams, tokens)`` of indices into a sentence's flattened width×V scores; padded indices (when fewer
    than ``wanted`` values exist) point at the sentence's last row."""
    beams = torch.div(index, vocab, rounding_mode="floor")
    tokens = index - beams * vocab
    if width * vocab < wanted:
        beams = beams.clamp(max=width - 1)
    return beams, tokens


def first_non_eos(eos_mask: torch.Tensor, k: int) -> torch.Tensor:
    """Indices [n, k] into each sentence's candidates (best first) of the first ``k`` that do not end: they
    continue (the EOS ones were finalised). Each row has one EOS, so at most ``k`` of ``2k`` candidates end."""
    ncand = eos_mask.size(1)
    order_key = eos_mask.long() * ncand + torch.arange(ncand, device=eos_mask.device)
    return order_key.topk(k, dim=1, largest=False).values.clamp(max=ncand - 1)


def merge_finished(old: dict, new: dict) -> dict:
    """Each sentence's best ``beam`` of its finished hypotheses (``old``) and this step's (``new``): dicts of
    tensors [n, beam, …] with ``scores`` [n, beam] (-inf: empty) and per-hypothesis fields (tokens, cumulative
    scores, length, attention); returns the merged fields, best first. The callers choose which sentences take
    the result (the dynamic search indexes those with a new one, the static search masks the others)."""
    k = old["scores"].size(1)
    best, pick = torch.cat([old["scores"], new["scores"]], dim=1).topk(k, dim=1)
    merged = {"scores": best}
    for name, value in new.items():
        if name == "scores":
            continue
        both = torch.cat([old[name], value], dim=1)
        idx = pick.view(pick.shape + (1,) * (both.dim() - 2)).expand((-1, -1) + both.shape[2:])
        merged[name] = both.gather(1, idx)
    return merged


def sentences_done(rule: str, nbest: int, act_scores: torch.Tensor, fin_scores: Optional[torch.Tensor],
                   sent_max: torch.Tensor, step: Step,
                   bound_lp: Optional[Callable[[torch.Tensor, Step], torch.Tensor]] = None) -> torch.Tensor:
    """Which sentences can stop after ``step`` under the early-stop ``rule`` (the module docstring): a sentence
    at its limit or with no live hypothesis always; ``beam``: once it has ``beam`` finished; ``bound``: once its
    ``nbest``-th finished score (``fin_scores`` [n, beam], best first) is at least the best score a live one
    (``act_scores`` [n, beam]) can still reach, ``c / bound_lp(sent_max, step)`` — the largest penalty still
    reachable, at the sentence's limit or (alpha < 0) the next length; ``bound_lp`` None: no length penalty."""
    best_active = act_scores.max(dim=1).values
    ended = (sent_max <= step) | (best_active == NEG_INF)
    if rule == "never":
        return ended
    if rule == "beam":
        return ended | (fin_scores[:, -1] > NEG_INF)
    settled = fin_scores[:, nbest - 1]  # the last hypothesis the sentence returns
    bound = best_active if bound_lp is None else best_active.double() / bound_lp(sent_max, step)
    return ended | ((settled > NEG_INF) & (settled.double() >= bound))


def collect_hypotheses(fin: dict, src_lengths: torch.Tensor, nbest: int, eos: int) -> list[list[dict]]:
    """The ``nbest`` best finished hypotheses of each sentence as the generator returns them (see
    ``SequenceGenerator.generate``); a sentence where nothing finished gets one empty output."""
    scores = fin["scores"].cpu()
    tokens, cum, length = fin["tokens"].cpu(), fin["cum"].cpu(), fin["length"].cpu()
    attn = fin["attn"].cpu() if "attn" in fin else None
    pos = cum.clone()
    pos[:, :, 1:] -= cum[:, :, :-1]
    out = []
    for i in range(scores.size(0)):
        hyps = []
        for j in range(nbest):
            s = float(scores[i, j])
            if s == NEG_INF and hyps:
                break
            n = int(length[i, j])
            hyp = {"tokens": tokens[i, j, 1 : n + 1].clone(), "score": s,
                   "positional_scores": pos[i, j, :n].clone(), "attention": None, "alignment": None}
            if n == 0:  # nothing finished (every path was forbidden): an empty output
                hyp["tokens"] = torch.tensor([eos])
                hyp["positional_scores"] = torch.tensor([NEG_INF])
            if attn is not None and n > 0:
                a = attn[i, j, 1 : n + 1, : int(src_lengths[i])]
                hyp["attention"] = a.clone()
                hyp["alignment"] = a[:-1].argmax(dim=1) if n > 1 else torch.zeros(0, dtype=torch.long)
            hyps.append(hyp)
        out.append(hyps)
    return out

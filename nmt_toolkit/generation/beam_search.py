"""Batched beam search over incremental decoding (SequenceGenerator) and teacher-forced scoring.

All beams of all sentences of a batch form one decoder batch of ``bsz * beam`` rows (the first step, where
every beam is the same sentence start, runs one row per sentence). The encoder runs once; its output and
the encoder–decoder keys/values are kept once per *sentence* (models that declare
``supports_sentence_level_encoder_out``), the beams of a sentence attending as one query block.
The search owns each model's incremental state (``make_decoder_state``, see modules/caches.py).
Each step: log_softmax (fp32) of the last position → top ``2*beam`` over beam×V per sentence (twice the
beam, so that ``beam`` non-EOS candidates remain when some end; computed as the top ``2*beam`` of each row
plus its cumulative score, then of the sentence's rows) → the EOS candidates among the first ``beam`` are
*finalized* → the first ``beam`` non-EOS candidates continue → the incremental state follows them and the
sentences that are done leave the batch (the last active sentences take their places; only then are the
per-sentence encoder tensors indexed).

Scores. A hypothesis Y (its tokens including the final EOS, |Y| of them) scores
``sum log p(y_t | y_<t, x) / lp(|Y|)`` with the GNMT length penalty ``lp(n) = ((5 + n) / 6) ** alpha``
(the paper's, ``lenpen_style="gnmt"``) or fairseq's ``n ** alpha``. Hypotheses are ranked by that score;
scores are natural logs here (the printers divide by ln 2).

Length limits. At most ``max_len = min(a * src_len + b, max_target_positions - 1)`` tokens before the
EOS, per sentence (``src_len`` is the sentence's own length, EOS included, or with ``max_len_source="batch"`` the
longest of its batch, as fairseq-generate counts); EOS is forced at step ``max_len`` and forbidden before
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

Sampling (``sampling=True``) follows fairseq 0.12's ``Sampling`` search with its ``SequenceGenerator``: the
``beam`` hypotheses of a sentence are ``beam`` independent samples. ``Sampling.step`` (fairseq/search.py,
lines 764-819) returns ``beam`` candidates, not ``2*beam``: one draw per beam from its own row, at step 0
``beam`` draws from the sentence start, in beam order and not re-ranked (generation/sampling.py). The
generator (fairseq/sequence_generator.py, lines 436-540) finalizes a beam whose draw is EOS and from then on
ignores it (``cands_to_ignore``: its later EOS draws are not finalized again), and a sentence is done when
``beam`` hypotheses have finished (``finalize_hypos``/``is_finished``, lines 708-757), or at the maximum
length, where EOS is forced. Here each beam continues its own draw in place; a beam that drew EOS continues with
score -inf, which keeps it out of finalization, and the ``beam`` rule stops the sentence once ``beam`` have
finished. (fairseq also moves the finished slots behind the live ones, which only changes which row takes
which random draw.) The n-best are the best ``nbest`` of the ``beam`` samples by length-penalised score.

On a GPU, ``static_search`` (``auto``: on CUDA, ``on``, ``off``) runs the same search with static shapes whose
step is a CUDA graph (generation/static_search.py); what it does not support falls back to this one.
"""
from __future__ import annotations

import functools
import logging
import math
from typing import Any, Optional, Sequence

import torch

from nmt_toolkit.generation.ensemble import EnsembleModel
from nmt_toolkit.generation.sampling import sample_candidates
from nmt_toolkit.device_policy import reorder_in_place, sdpa_backends
from nmt_toolkit.modules.caches import DecoderState

NEG_INF = float("-inf")
logger = logging.getLogger("nmt_toolkit.generation")


def length_penalty(length, alpha: float, style: str = "gnmt"):
    """lp(|Y|): GNMT's ((5+|Y|)/6)^alpha (the paper's) or fairseq's |Y|^alpha; works on floats and tensors."""
    if style == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if style == "fairseq":
        return length ** alpha
    raise ValueError(f"unknown length penalty style {style!r} (choices: gnmt, fairseq)")


_CHUNKED_TOPK_MIN_VOCAB = 1024
_GROUP_SIZES = (8, 16, 12, 10, 6, 4)


def _row_topk(x: torch.Tensor, kk: int):
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


def _on_device_sdpa(method):
    """Run a generator method inside :func:`~nmt_toolkit.device_policy.sdpa_backends` for its model's
    device (the encoder and the teacher-forced decoder meet a new batch shape with every batch)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with sdpa_backends(self._device()):
            return method(self, *args, **kwargs)

    return wrapper


def _parent_slots(parents: torch.Tensor) -> torch.Tensor:
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


def _compacting_order(done: torch.Tensor) -> torch.Tensor:
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


class SequenceGenerator:
    """Beam search / greedy / sampling over one model or an ensemble (see the module docstring)."""

    def __init__(self, models: Sequence[torch.nn.Module] | torch.nn.Module, tgt_dict, beam_size: int = 4,
                 max_len_a: float = 1.0, max_len_b: int = 50, min_len: int = 1, lenpen: float = 0.6,
                 lenpen_style: str = "gnmt", unkpen: float = 0.0, nbest: int = 1, no_repeat_ngram_size: int = 0,
                 early_stop: str = "bound", sampling: bool = False, sampling_topk: int = -1,
                 sampling_topp: float = -1.0, temperature: float = 1.0, seed: Optional[int] = None,
                 max_len_source: str = "sentence", static_search: str = "auto", static_check_interval: int = 4):
        if isinstance(models, torch.nn.Module) and not isinstance(models, EnsembleModel):
            models = [models]
        self.model = models if isinstance(models, EnsembleModel) else EnsembleModel(list(models))
        self.model.eval()
        self.pad, self.eos, self.unk = tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk()
        self.vocab_size = len(tgt_dict)
        self.beam_size, self.nbest = beam_size, nbest
        self.max_len_a, self.max_len_b, self.min_len = max_len_a, max_len_b, min_len
        if max_len_source not in ("sentence", "batch"):
            raise ValueError(f"unknown max_len_source {max_len_source!r} (choices: sentence, batch)")
        self.max_len_source = max_len_source
        self.lenpen, self.lenpen_style, self.unkpen = lenpen, lenpen_style, unkpen
        self.no_repeat_ngram_size = no_repeat_ngram_size
        if early_stop not in ("bound", "beam", "never"):
            raise ValueError(f"unknown early_stop {early_stop!r} (choices: bound, beam, never)")
        if not 1 <= nbest <= beam_size:
            raise ValueError(f"nbest must be between 1 and the beam size ({beam_size}), got {nbest}")
        self.early_stop = "beam" if (beam_size == 1 or sampling) else early_stop
        self.sampling, self.sampling_topk, self.sampling_topp = sampling, sampling_topk, sampling_topp
        self.temperature = temperature
        self.generator = None
        if sampling and seed is not None:
            self.generator = torch.Generator(device=self._device())
            self.generator.manual_seed(seed)
        length_penalty(1.0, lenpen, lenpen_style)  # validates the style
        if static_search not in ("auto", "on", "off"):
            raise ValueError(f"unknown static_search {static_search!r} (choices: auto, on, off)")
        self.static_search, self._static = static_search, None
        self.static_check_interval = static_check_interval
        if static_search == "on":
            self._static_for()  # options that rule it out are an error now, not at the first batch

    @classmethod
    def from_config(cls, models, tgt_dict, cfg: Any, seed: Optional[int] = None) -> "SequenceGenerator":
        """Build from a :class:`~nmt_toolkit.generation.config.GenerationConfig`."""
        return cls(models, tgt_dict, beam_size=cfg.beam, max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b,
                   min_len=cfg.min_len, lenpen=cfg.lenpen, lenpen_style=cfg.lenpen_style, unkpen=cfg.unkpen,
                   nbest=cfg.nbest, no_repeat_ngram_size=cfg.no_repeat_ngram_size, early_stop=cfg.early_stop,
                   sampling=cfg.sampling, sampling_topk=cfg.sampling_topk, sampling_topp=cfg.sampling_topp,
                   temperature=cfg.temperature, seed=seed,
                   max_len_source=getattr(cfg, "max_len_source", "sentence"),
                   static_search=getattr(cfg, "static_search", "auto"),
                   static_check_interval=getattr(cfg, "static_check_interval", 4))

    def _device(self) -> torch.device:
        p = next(self.model.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    def lp(self, length):
        return length_penalty(length, self.lenpen, self.lenpen_style)

    def _static_for(self, device: Optional[torch.device] = None, need_attn: bool = False, prefix_tokens=None):
        """The static-shape search for this call, or None: ``auto`` takes it on CUDA when nothing rules it out;
        ``on`` everywhere, and what rules it out is a usage error naming the option."""
        if self.static_search == "off" or (self.static_search == "auto" and (device is None or device.type != "cuda")):
            return None
        from nmt_toolkit.generation.static_search import StaticBeamSearch, unsupported

        reason = unsupported(self, need_attn, prefix_tokens)
        if reason is not None:
            if self.static_search == "on":
                from nmt_toolkit.errors import UsageError

                raise UsageError(f"--static-search on: the static-shape search does not support {reason}; "
                                 f"use --static-search auto or off")
            logger.debug("static-shape search off for this batch: %s is not supported", reason)
            return None
        if self._static is None:
            self._static = StaticBeamSearch(self, self.static_check_interval)
        return self._static

    def release(self) -> None:
        """Free the static-shape search's buffers and CUDA graphs (kept between batches of the same shape)."""
        if self._static is not None:
            self._static.release()

    # ------------------------------------------------------------------ search
    @_on_device_sdpa
    @torch.inference_mode()
    def generate(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                 prefix_tokens: Optional[torch.Tensor] = None, need_attn: bool = False) -> list[list[dict]]:
        """Translate a batch; returns per sentence (batch order) the ``nbest`` best hypotheses, best first.

        A hypothesis is ``{"tokens": LongTensor (EOS last), "score": float (ln, length-penalised),
        "positional_scores": FloatTensor (ln p per token), "attention": FloatTensor [|Y|, src_len] or None,
        "alignment": LongTensor [|Y|-1] (argmax source position per token) or None}``.
        """
        static = self._static_for(src_tokens.device, need_attn, prefix_tokens)
        if static is not None:
            return static.generate(src_tokens, src_lengths)
        model, k, eos, pad = self.model, self.beam_size, self.eos, self.pad
        bsz, src_len = src_tokens.shape
        dev = src_tokens.device
        max_tgt = model.max_positions()[1]
        basis = src_lengths.double()
        if self.max_len_source == "batch":  # fairseq: the padded width of the batch, for every sentence
            basis = basis.max().expand_as(basis)
        max_len = (self.max_len_a * basis + self.max_len_b).long()
        max_len = max_len.clamp(min=max(self.min_len, 1), max=max(max_tgt - 1, 1)).to(dev)
        steps = int(max_len.max())

        per_sentence = model.sentence_level  # encoder outputs and enc-dec keys/values once per sentence
        encoder_outs = model.forward_encoder(src_tokens, src_lengths)
        width = 1  # the first step runs one row per sentence (all beams start alike); then k rows per sentence
        states = model.make_decoder_states(beam=k, sentences=bsz if per_sentence else None, capacity=steps + 1)
        in_place = reorder_in_place(dev)
        for state in states:
            if isinstance(state, DecoderState):
                state.reorder_in_place = in_place

        tokens = torch.full((bsz * width, steps + 2), pad, dtype=torch.long, device=dev)
        tokens[:, 0] = eos
        scores = torch.zeros(bsz * width, steps + 1, device=dev)  # cumulative log-probs after each step
        attn = torch.zeros(bsz * width, steps + 2, src_len, device=dev) if need_attn else None
        prefix_rows = prefix_tokens.repeat_interleave(width, dim=0) if prefix_tokens is not None else None

        fin = {"scores": torch.full((bsz, k), NEG_INF, device=dev),
               "tokens": torch.full((bsz, k, steps + 2), pad, dtype=torch.long, device=dev),
               "cum": torch.zeros(bsz, k, steps + 1, device=dev),
               "length": torch.zeros(bsz, k, dtype=torch.long, device=dev)}
        if need_attn:
            fin["attn"] = torch.zeros(bsz, k, steps + 2, src_len, device=dev)

        sent_ids = torch.arange(bsz, device=dev)  # original index of each active sentence
        sent_max = max_len.clone()
        row_max = sent_max.repeat_interleave(width)
        beam_offsets = torch.arange(bsz, device=dev).unsqueeze(1) * k
        sent_offsets = torch.arange(bsz, device=dev).unsqueeze(1)
        n = bsz
        for step in range(steps + 1):
            lprobs, step_attn = model.log_probs(tokens[:, : step + 1], encoder_outs, states,
                                                temperature=self.temperature, need_attn=need_attn)
            lprobs = self._constrain(lprobs, tokens, step, row_max, prefix_rows)
            if attn is not None and step_attn is not None:
                attn[:, step + 1, : step_attn.size(-1)] = step_attn
            vocab = lprobs.size(-1)

            # ---- candidates: 2k per sentence over beam x V (sampling: k, one per beam, in beam order)
            prev = None if step == 0 else scores[:, step - 1]
            if self.sampling:
                cand_scores, cand_idx = sample_candidates(lprobs, prev, n, k, self.sampling_topk,
                                                          self.sampling_topp, self.generator)
            elif vocab >= _CHUNKED_TOPK_MIN_VOCAB:
                # the best 2k of each row first (a candidate of its sentence is one of its row's best 2k),
                # then the best 2k of the sentence's width * 2k: no beam x V sum is ever materialised
                row_scores, row_tokens = _row_topk(lprobs, 2 * k)
                if prev is not None:
                    row_scores = row_scores + prev.unsqueeze(1)
                cand_scores, j = row_scores.view(n, width * 2 * k).topk(2 * k, dim=1)
                cand_beams = torch.div(j, 2 * k, rounding_mode="floor")
                cand_tokens = row_tokens.view(n, width * 2 * k).gather(1, j)
            else:
                if width == 1:
                    flat = lprobs if prev is None else lprobs + prev.unsqueeze(1)
                else:
                    flat = (lprobs.view(n, k, vocab) + prev.view(n, k, 1)).view(n, k * vocab)
                if flat.size(1) < 2 * k:
                    flat = torch.nn.functional.pad(flat, (0, 2 * k - flat.size(1)), value=NEG_INF)
                cand_scores, cand_idx = flat.topk(2 * k, dim=1)
            if self.sampling or vocab < _CHUNKED_TOPK_MIN_VOCAB:
                cand_beams = torch.div(cand_idx, vocab, rounding_mode="floor")
                cand_tokens = cand_idx - cand_beams * vocab
                if width * vocab < 2 * k:  # padded (-inf) candidates: point them at a real row of their sentence
                    cand_beams = cand_beams.clamp(max=width - 1)
            cand_rows = cand_beams + (beam_offsets[:n] if width == k else sent_offsets[:n])
            del lprobs  # [rows, V]: freed before the next step allocates its own (glibc then reuses the block)
            eos_mask = (cand_tokens == eos) & (cand_scores > NEG_INF)

            # ---- finalize EOS candidates among the first k (vectorised over sentences)
            fin_mask = eos_mask[:, :k]
            if bool(fin_mask.any()):
                self._finalize(fin, fin_mask, cand_rows[:, :k], cand_scores[:, :k], tokens, scores, attn,
                               sent_ids, step)

            if self.sampling:
                # ---- every beam continues with its own draw; one that drew EOS is finished and stays dead
                # (score -inf: never finalized again), like fairseq's cands_to_ignore
                act_scores = cand_scores.masked_fill(eos_mask, NEG_INF)
                act_rows, act_tokens = cand_rows, cand_tokens
            else:
                # ---- the first k non-EOS candidates continue
                ncand = cand_scores.size(1)
                order_key = eos_mask.long() * ncand + torch.arange(ncand, device=dev)
                active = order_key.topk(k, dim=1, largest=False).values
                active = active.clamp(max=ncand - 1)
                if width == k and in_place:  # each continuing hypothesis in its parent's row where it can:
                    # an in-place reorder copies just the rows that change (modules/caches.py)
                    slots = _parent_slots(cand_beams.gather(1, active))
                    active = torch.empty_like(active).scatter_(1, slots, active)
                act_scores = cand_scores.gather(1, active)
                act_rows = cand_rows.gather(1, active)
                act_tokens = cand_tokens.gather(1, active)

            done = self._done(fin, sent_ids, act_scores, sent_max, step)
            keep = None
            if bool(done.any()):
                # sampling keeps the sentence order: its random draws are taken row by row
                keep = (~done).nonzero().squeeze(1) if self.sampling else _compacting_order(done)
                if keep.numel() == 0:
                    break
                act_scores, act_rows, act_tokens = act_scores[keep], act_rows[keep], act_tokens[keep]
                sent_ids, sent_max = sent_ids[keep], sent_max[keep]
                n = keep.numel()
            new_order = act_rows.view(-1)
            if per_sentence:
                if keep is not None:
                    encoder_outs = model.reorder_encoder_out(encoder_outs, keep)
            elif keep is not None or width < k:  # one encoder row per decoder row: any row of its sentence
                encoder_outs = model.reorder_encoder_out(encoder_outs, new_order)
            tokens = tokens.index_select(0, new_order)
            tokens[:, step + 1] = act_tokens.view(-1)
            scores = scores.index_select(0, new_order)
            scores[:, step] = act_scores.view(-1)
            if attn is not None:
                attn = attn.index_select(0, new_order)
            if prefix_rows is not None:
                prefix_rows = prefix_rows.index_select(0, new_order)
            row_max = row_max.index_select(0, new_order)
            if per_sentence:
                model.reorder_incremental_state(states, new_order, sentence_order=keep, per_sentence=True)
            else:
                model.reorder_incremental_state(states, new_order)
            width = k
        return self._collect(fin, src_lengths)

    def _constrain(self, lprobs, tokens, step, row_max, prefix_rows):
        """Apply pad ban, <unk> penalty, min/max length, forced prefix and the no-repeat-n-gram ban."""
        lprobs[:, self.pad] = NEG_INF
        if self.unkpen:
            lprobs[:, self.unk] -= self.unkpen
        if step < self.min_len:
            lprobs[:, self.eos] = NEG_INF
        at_max = (row_max <= step).nonzero().squeeze(1)
        if at_max.numel():  # only EOS is left to rows at their maximum length
            eos_lp = lprobs[at_max, self.eos]
            lprobs.index_fill_(0, at_max, NEG_INF)
            lprobs[at_max, self.eos] = eos_lp
        if prefix_rows is not None and step < prefix_rows.size(1):
            ptok = prefix_rows[:, step]
            forced = ptok != self.pad
            if bool(forced.any()):
                kept = lprobs.gather(1, ptok.unsqueeze(1))
                only = torch.full_like(lprobs, NEG_INF).scatter_(1, ptok.unsqueeze(1), kept)
                lprobs = torch.where(forced.unsqueeze(1), only, lprobs)
        ng = self.no_repeat_ngram_size
        if ng > 0 and step + 1 >= ng:
            seq = tokens[:, : step + 1]
            windows = seq.unfold(1, ng, 1)  # [rows, W, ng]: every complete n-gram so far
            last = seq[:, step + 2 - ng:].unsqueeze(1) if ng > 1 else seq[:, :0].unsqueeze(1)
            match = (windows[:, :, : ng - 1] == last).all(dim=2)  # n-grams starting like the current suffix
            banned_tok = torch.where(match, windows[:, :, ng - 1], torch.full_like(match, self.pad, dtype=torch.long))
            lprobs = lprobs.scatter(1, banned_tok, NEG_INF)
        return lprobs

    def _finalize(self, fin, fin_mask, rows, cand_scores, tokens, scores, attn, sent_ids, step):
        """Merge this step's EOS hypotheses into each sentence's best-``beam`` finished set."""
        k = self.beam_size
        sel = fin_mask.any(dim=1).nonzero().squeeze(1)
        orig = sent_ids[sel]
        rows, mask, c = rows[sel], fin_mask[sel], cand_scores[sel]
        length = step + 1
        new_scores = torch.where(mask, c / self.lp(float(length)), torch.full_like(c, NEG_INF))
        flat_rows = rows.reshape(-1)
        new_tokens = tokens.index_select(0, flat_rows).view(len(sel), k, -1)
        new_tokens[:, :, step + 1] = self.eos
        new_cum = scores.index_select(0, flat_rows).view(len(sel), k, -1).clone()
        new_cum[:, :, step] = c
        new_cum[:, :, step + 1:] = 0
        all_scores = torch.cat([fin["scores"][orig], new_scores], dim=1)
        best, pick = all_scores.topk(k, dim=1)

        def merge(old, new):
            both = torch.cat([old, new], dim=1)
            idx = pick.view(pick.shape + (1,) * (both.dim() - 2)).expand((-1, -1) + both.shape[2:])
            return both.gather(1, idx)

        fin["tokens"][orig] = merge(fin["tokens"][orig], new_tokens)
        fin["cum"][orig] = merge(fin["cum"][orig], new_cum)
        fin["length"][orig] = merge(fin["length"][orig], torch.full_like(pick, length))
        if "attn" in fin and attn is not None:
            new_attn = attn.index_select(0, flat_rows).view((len(sel), k) + attn.shape[1:])
            fin["attn"][orig] = merge(fin["attn"][orig], new_attn)
        fin["scores"][orig] = best

    def _done(self, fin, sent_ids, act_scores, sent_max, step) -> torch.Tensor:
        """Which active sentences can stop after this step (the rule in the module docstring)."""
        best_active = act_scores.max(dim=1).values
        ended = (sent_max <= step) | (best_active == NEG_INF)
        if self.early_stop == "never":
            return ended
        fin_scores = fin["scores"].index_select(0, sent_ids)  # best first
        if self.early_stop == "beam":
            return ended | (fin_scores[:, -1] > NEG_INF)
        settled = fin_scores[:, self.nbest - 1]  # the last hypothesis the sentence returns
        if self.lenpen == 0:
            bound = best_active
        else:
            longest = sent_max.double() + 1
            bound_lp = torch.maximum(self.lp(longest), torch.full_like(longest, self.lp(float(step + 2))))
            bound = best_active.double() / bound_lp
        return ended | ((settled > NEG_INF) & (settled.double() >= bound))

    def _collect(self, fin, src_lengths) -> list[list[dict]]:
        scores = fin["scores"].cpu()
        tokens, cum, length = fin["tokens"].cpu(), fin["cum"].cpu(), fin["length"].cpu()
        attn = fin["attn"].cpu() if "attn" in fin else None
        pos = cum.clone()
        pos[:, :, 1:] -= cum[:, :, :-1]
        out = []
        for i in range(scores.size(0)):
            hyps = []
            for j in range(self.nbest):
                s = float(scores[i, j])
                if s == NEG_INF and hyps:
                    break
                n = int(length[i, j])
                hyp = {"tokens": tokens[i, j, 1 : n + 1].clone(), "score": s,
                       "positional_scores": pos[i, j, :n].clone(), "attention": None, "alignment": None}
                if n == 0:  # nothing finished (every path was forbidden): an empty output
                    hyp["tokens"] = torch.tensor([self.eos])
                    hyp["positional_scores"] = torch.tensor([NEG_INF])
                if attn is not None and n > 0:
                    a = attn[i, j, 1 : n + 1, : int(src_lengths[i])]
                    hyp["attention"] = a.clone()
                    hyp["alignment"] = a[:-1].argmax(dim=1) if n > 1 else torch.zeros(0, dtype=torch.long)
                hyps.append(hyp)
            out.append(hyps)
        return out

    # ------------------------------------------------------------------ teacher forcing
    @_on_device_sdpa
    @torch.inference_mode()
    def score_reference(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, target: torch.Tensor,
                        need_attn: bool = False) -> list[list[dict]]:
        """Teacher-forced scores of ``target`` ([B, T], right-padded, EOS-terminated), normalised exactly
        as the search's scores (sum of ln p over tokens incl. EOS, divided by lp(|Y|)); same output layout."""
        model, pad = self.model, self.pad
        prev = torch.full_like(target, pad)
        prev[:, 0] = self.eos
        prev[:, 1:] = target[:, :-1]
        prev = prev.masked_fill(prev == pad, pad)
        encoder_outs = model.forward_encoder(src_tokens, src_lengths)
        lprobs, attn = model.log_probs(prev, encoder_outs, None, temperature=self.temperature,
                                       need_attn=need_attn, last_only=False)
        tok_lp = lprobs.gather(2, target.unsqueeze(2)).squeeze(2)
        nonpad = target != pad
        tok_lp = tok_lp.masked_fill(~nonpad, 0.0)
        lengths = nonpad.sum(1)
        totals = tok_lp.sum(1) / self.lp(lengths.double()).float()
        out = []
        for i in range(target.size(0)):
            n = int(lengths[i])
            hyp = {"tokens": target[i, :n].cpu(), "score": float(totals[i]),
                   "positional_scores": tok_lp[i, :n].float().cpu(), "attention": None, "alignment": None}
            if need_attn and attn is not None:
                a = attn[i, :n, : int(src_lengths[i])].float().cpu()
                hyp["attention"] = a
                hyp["alignment"] = a[:-1].argmax(dim=1)
            out.append([hyp])
        return out

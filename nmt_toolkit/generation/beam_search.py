"""Batched beam search over incremental decoding (SequenceGenerator) and teacher-forced scoring.

All beams of all sentences of a batch form one decoder batch of ``bsz * beam`` rows (the first step, where
every beam is the same sentence start, runs one row per sentence). The encoder runs once; its output and
the encoder–decoder keys/values are kept once per *sentence* (models that declare
``supports_sentence_level_encoder_out``), the beams of a sentence attending as one query block.
The search owns each model's incremental state (``make_decoder_state``, see modules/caches.py).

Each step runs the named steps of generation/search_steps.py (where the scores, the length limits and the
early-stop rules are explained) under a strategy of generation/strategies.py — beam search, or sampling
(generation/sampling.py): log_softmax (fp32) of the last position → constraints → candidates → the EOS
candidates among the first ``beam`` are *finalized* → the strategy's continuing hypotheses go on → the
incremental state follows them and the sentences that are done leave the batch (the strategy says in which
order the others stay; only then are the per-sentence encoder tensors indexed).

On a GPU, ``static_search`` (``auto``: on CUDA, ``on``, ``off``) runs the same steps with static shapes, the
step a CUDA graph (generation/static_search.py); what it does not support falls back to this one.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from nmt_toolkit.config import check_ranges
from nmt_toolkit.device_policy import reorder_in_place, sdpa_backends
from nmt_toolkit.errors import UsageError
from nmt_toolkit.generation.config import GenerationConfig
from nmt_toolkit.generation.constrained import ConstrainedBeamStrategy
from nmt_toolkit.generation.ensemble import EnsembleModel
from nmt_toolkit.generation.search_steps import (NEG_INF, ban_repeated_ngrams, check_stop, collect_hypotheses,
                                                 constrain_lprobs, decoder_start, force_prefix, length_penalty,
                                                 merge_finished, output_limits, sentences_done)
from nmt_toolkit.generation.static_search import StaticBeamSearch, unsupported
from nmt_toolkit.generation.strategies import make_strategy
from nmt_toolkit.modules.caches import DecoderState

__all__ = ["SequenceGenerator", "length_penalty"]
logger = logging.getLogger("nmt_toolkit.generation")


def _on_device_sdpa(method):
    """Run a generator method inside :func:`~nmt_toolkit.device_policy.sdpa_backends` for its model's
    device (the encoder and the teacher-forced decoder meet a new batch shape with every batch)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with sdpa_backends(self._device()):
            return method(self, *args, **kwargs)

    return wrapper


@dataclass
class _Batch:
    """The dynamic search's state between steps: ``n`` active sentences of ``width`` rows each (1 before the
    first step, then ``beam``); ``sent_ids`` maps them to the batch's sentences, whose finished hypotheses
    ``fin`` holds (scores [bsz, beam], tokens, cum, length, attn)."""

    steps: int
    per_sentence: bool  # encoder outputs and enc-dec keys/values once per sentence
    in_place: bool  # the decoder caches reorder in place: continuing hypotheses take their parent's row
    encoder_outs: list
    states: list
    tokens: torch.Tensor  # [rows, steps + 2]: EOS, then each row's tokens
    scores: torch.Tensor  # [rows, steps + 1]: cumulative log-probabilities after each step
    attn: Optional[torch.Tensor]  # [rows, steps + 2, src_len] with need_attn
    prefix_rows: Optional[torch.Tensor]
    row_max: torch.Tensor  # [rows]: the output limit of the row's sentence
    fin: dict
    sent_ids: torch.Tensor  # [n]: the batch index of each active sentence
    sent_max: torch.Tensor  # [n]
    beam_offsets: torch.Tensor  # [bsz, 1]: the first row of each sentence at width beam
    sent_offsets: torch.Tensor  # [bsz, 1]: at width 1
    n: int
    width: int = 1


class SequenceGenerator:
    """Beam search / greedy / sampling over one model or an ensemble (see the module docstring), with the
    options of ``cfg`` (a :class:`~nmt_toolkit.generation.config.GenerationConfig`; its defaults when None);
    ``seed`` seeds sampling."""

    def __init__(self, models: Sequence[torch.nn.Module] | torch.nn.Module, tgt_dict,
                 cfg: Optional[GenerationConfig] = None, seed: Optional[int] = None):
        cfg = GenerationConfig() if cfg is None else cfg
        if isinstance(models, torch.nn.Module) and not isinstance(models, EnsembleModel):
            models = [models]
        self.model = models if isinstance(models, EnsembleModel) else EnsembleModel(list(models))
        self.model.eval()
        self.pad, self.eos, self.unk = tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk()
        self.start = decoder_start(self.model.models, tgt_dict)
        self.vocab_size = len(tgt_dict)
        check_ranges(cfg)  # a config built in code: its choices and ranges, as the flags check them
        cfg = cfg.for_engine("torch")
        if not 1 <= cfg.nbest <= cfg.beam:
            raise ValueError(f"nbest must be between 1 and the beam size ({cfg.beam}), got {cfg.nbest}")
        self.cfg = cfg
        self.strategy = make_strategy(cfg, seed, self._device())
        self._static = None
        if cfg.static_search == "on":
            self._static_for()  # options that rule it out are an error now, not at the first batch

    def _device(self) -> torch.device:
        p = next(self.model.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    def lp(self, length):
        return length_penalty(length, self.cfg.lenpen, self.cfg.lenpen_style)

    def _static_for(self, device: Optional[torch.device] = None, need_attn: bool = False, prefix_tokens=None,
                    constraints=None):
        """The static-shape search for this call, or None: ``auto`` takes it on CUDA when nothing rules it out;
        ``on`` everywhere, and what rules it out is a usage error naming the option."""
        mode = self.cfg.static_search
        if mode == "off" or (mode == "auto" and (device is None or device.type != "cuda")):
            return None
        reason = "--constraints" if constraints is not None else unsupported(self, need_attn, prefix_tokens)
        if reason is not None:
            if mode == "on":
                raise UsageError(f"--static-search on: the static-shape search does not support {reason}; "
                                 f"use --static-search auto or off")
            logger.debug("static-shape search off for this batch: %s is not supported", reason)
            return None
        if self._static is None:
            self._static = StaticBeamSearch(self, self.cfg.static_check_interval)
        return self._static

    def _strategy_for(self, constraints):
        """The search's strategy, or for a batch with constraints a constrained beam search of its own."""
        if constraints is None:
            return self.strategy
        if self.cfg.sampling:
            raise UsageError("--constraints: constrained decoding is a beam search; it does not sample "
                             "(drop --sampling)")
        kind = "ordered" if self.cfg.constraints == "off" else self.cfg.constraints
        return ConstrainedBeamStrategy(self.cfg.beam, self.strategy.early_stop, constraints, kind, self.eos)

    def release(self) -> None:
        """Free the static-shape search's buffers and CUDA graphs (kept between batches of the same shape)."""
        if self._static is not None:
            self._static.release()

    # ------------------------------------------------------------------ search
    @_on_device_sdpa
    @torch.inference_mode()
    def generate(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                 prefix_tokens: Optional[torch.Tensor] = None, need_attn: bool = False,
                 stop: Optional[Callable[[], bool]] = None,
                 constraints: Optional[Sequence[Sequence[Sequence[int]]]] = None) -> list[list[dict]]:
        """Translate a batch; returns per sentence (batch order) the ``nbest`` best hypotheses, best first.
        ``constraints``: per sentence, target phrases (token ids, no EOS) that every output must contain
        (generation/constrained.py; ``cfg.constraints`` says whether in order, "ordered" when "off").

        A hypothesis is ``{"tokens": LongTensor (EOS last), "score": float (ln, length-penalised),
        "positional_scores": FloatTensor (ln p per token), "attention": FloatTensor [|Y|, src_len] or None,
        "alignment": LongTensor [|Y|-1] (argmax source position per token) or None}``. ``stop``, asked before
        each step, ends the search with :class:`~nmt_toolkit.generation.search_steps.SearchStopped` when true.
        """
        static = self._static_for(src_tokens.device, need_attn, prefix_tokens, constraints)
        if static is not None:
            return static.generate(src_tokens, src_lengths, stop=stop)
        k, strategy = self.cfg.beam, self._strategy_for(constraints)
        b = self._start(src_tokens, src_lengths, prefix_tokens, need_attn)
        for step in range(b.steps + 1):
            check_stop(stop)
            cand_scores, cand_beams, cand_tokens = self._candidates(b, step, strategy)
            cand_rows = cand_beams + (b.beam_offsets[: b.n] if b.width == k else b.sent_offsets[: b.n])
            eos_mask = (cand_tokens == self.eos) & (cand_scores > NEG_INF)
            fin_mask = eos_mask[:, :k]
            if bool(fin_mask.any()):
                self._finalize(b, fin_mask, cand_rows[:, :k], cand_scores[:, :k], step)
            act_scores, active = strategy.continuing(cand_scores, cand_beams, eos_mask, b.width == k and b.in_place)
            act_rows, act_tokens = cand_rows, cand_tokens
            if active is not None:
                act_rows, act_tokens = cand_rows.gather(1, active), cand_tokens.gather(1, active)
            done = self._done(b, act_scores, step)
            keep = None
            if bool(done.any()):
                keep = strategy.survivors(done)
                if keep.numel() == 0:
                    break
            self._advance(b, step, act_scores, act_rows, act_tokens, keep)
        found = collect_hypotheses(b.fin, src_lengths, self.cfg.nbest, self.eos)
        if constraints is not None:
            self._without_unmet_constraints(found, constraints, src_tokens, src_lengths, prefix_tokens, need_attn,
                                            stop)
        return found

    def _without_unmet_constraints(self, found, constraints, src_tokens, src_lengths, prefix_tokens, need_attn,
                                   stop) -> None:
        """A sentence none of whose hypotheses met its constraints by its length limit has finished nothing
        (fairseq stops there with an assertion error): it is translated again without them, with a warning."""
        unmet = [i for i, hyps in enumerate(found) if constraints[i] and hyps[0]["score"] == NEG_INF]
        if not unmet:
            return
        logger.warning("%d sentence(s) met their constraints within no output-length limit: translated without "
                       "them", len(unmet))
        index = torch.tensor(unmet, device=src_tokens.device)
        prefix = None if prefix_tokens is None else prefix_tokens[index]
        again = self.generate(src_tokens[index], src_lengths[index], prefix, need_attn, stop)
        for i, hyps in zip(unmet, again):
            found[i] = hyps

    def _start(self, src_tokens, src_lengths, prefix_tokens, need_attn) -> _Batch:
        """Encode the batch and allocate the search's state: one row per sentence, nothing finished."""
        model, k, pad = self.model, self.cfg.beam, self.pad
        bsz, src_len = src_tokens.shape
        dev = src_tokens.device
        max_len = output_limits(src_lengths, self.cfg, model.max_positions()[1], dev)
        steps = int(max_len.max())
        per_sentence = model.sentence_level
        encoder_outs = model.forward_encoder(src_tokens, src_lengths)
        states = model.make_decoder_states(beam=k, sentences=bsz if per_sentence else None, capacity=steps + 1)
        in_place = reorder_in_place(dev)
        for state in states:
            if isinstance(state, DecoderState):
                state.reorder_in_place = in_place
        tokens = torch.full((bsz, steps + 2), pad, dtype=torch.long, device=dev)
        tokens[:, 0] = self.start
        fin = {"scores": torch.full((bsz, k), NEG_INF, device=dev),
               "tokens": torch.full((bsz, k, steps + 2), pad, dtype=torch.long, device=dev),
               "cum": torch.zeros(bsz, k, steps + 1, device=dev),
               "length": torch.zeros(bsz, k, dtype=torch.long, device=dev)}
        if need_attn:
            fin["attn"] = torch.zeros(bsz, k, steps + 2, src_len, device=dev)
        return _Batch(steps=steps, per_sentence=per_sentence, in_place=in_place, encoder_outs=encoder_outs,
                      states=states, tokens=tokens, scores=torch.zeros(bsz, steps + 1, device=dev),
                      attn=torch.zeros(bsz, steps + 2, src_len, device=dev) if need_attn else None,
                      prefix_rows=prefix_tokens, row_max=max_len.clone(), fin=fin,
                      sent_ids=torch.arange(bsz, device=dev), sent_max=max_len.clone(),
                      beam_offsets=torch.arange(bsz, device=dev).unsqueeze(1) * k,
                      sent_offsets=torch.arange(bsz, device=dev).unsqueeze(1), n=bsz)

    def _candidates(self, b: _Batch, step: int, strategy):
        """The step's constrained log-probabilities (freed on return, before the next step allocates its own)
        and the strategy's candidates among them."""
        lprobs, step_attn = self.model.log_probs(b.tokens[:, : step + 1], b.encoder_outs, b.states,
                                                 temperature=self.cfg.temperature, need_attn=b.attn is not None)
        lprobs = constrain_lprobs(lprobs, step, b.row_max, self.cfg, self.pad, self.unk, self.eos)
        if b.prefix_rows is not None:
            lprobs = force_prefix(lprobs, b.prefix_rows, step, self.pad, self.cfg.forced_prefix_score)
        if self.cfg.no_repeat_ngram_size > 0:
            lprobs = ban_repeated_ngrams(lprobs, b.tokens, step, self.cfg.no_repeat_ngram_size, self.pad)
        if b.attn is not None and step_attn is not None:
            b.attn[:, step + 1, : step_attn.size(-1)] = step_attn
        prev = None if step == 0 else b.scores[:, step - 1]
        return strategy.candidates(lprobs, prev, b.n, b.width)

    def _finalize(self, b: _Batch, fin_mask, rows, cand_scores, step: int) -> None:
        """Merge this step's EOS hypotheses into the finished sets of the sentences that have one."""
        k, fin = self.cfg.beam, b.fin
        sel = fin_mask.any(dim=1).nonzero().squeeze(1)
        orig = b.sent_ids[sel]
        rows, mask, c = rows[sel], fin_mask[sel], cand_scores[sel]
        length = step + 1
        flat_rows = rows.reshape(-1)
        new = {"scores": torch.where(mask, c / self.lp(float(length)), torch.full_like(c, NEG_INF))}
        new["tokens"] = b.tokens.index_select(0, flat_rows).view(len(sel), k, -1)
        new["tokens"][:, :, step + 1] = self.eos
        new["cum"] = b.scores.index_select(0, flat_rows).view(len(sel), k, -1).clone()
        new["cum"][:, :, step] = c
        new["cum"][:, :, step + 1:] = 0
        new["length"] = torch.full_like(mask, length, dtype=torch.long)
        if b.attn is not None:
            new["attn"] = b.attn.index_select(0, flat_rows).view((len(sel), k) + b.attn.shape[1:])
        merged = merge_finished({name: fin[name][orig] for name in new}, new)
        for name, value in merged.items():
            fin[name][orig] = value

    def _done(self, b: _Batch, act_scores, step: int) -> torch.Tensor:
        """Which active sentences can stop after this step (search_steps.sentences_done)."""
        rule = self.strategy.early_stop
        fin_scores = None if rule == "never" else b.fin["scores"].index_select(0, b.sent_ids)  # best first
        bound_lp = None if self.cfg.lenpen == 0 else self._bound_lp
        return sentences_done(rule, self.cfg.nbest, act_scores, fin_scores, b.sent_max, step, bound_lp)

    def _bound_lp(self, sent_max: torch.Tensor, step: int) -> torch.Tensor:
        """The largest length penalty a live hypothesis can still reach: at its sentence's limit, or (alpha < 0)
        at the next length."""
        longest = sent_max.double() + 1
        return torch.maximum(self.lp(longest), torch.full_like(longest, self.lp(float(step + 2))))

    def _advance(self, b: _Batch, step: int, act_scores, act_rows, act_tokens, keep) -> None:
        """The continuing hypotheses become the rows of the next step: the sentences in ``keep`` (None: all)
        stay, token history, scores and decoder state follow each hypothesis' parent row."""
        model = self.model
        if keep is not None:
            act_scores, act_rows, act_tokens = act_scores[keep], act_rows[keep], act_tokens[keep]
            b.sent_ids, b.sent_max = b.sent_ids[keep], b.sent_max[keep]
            b.n = keep.numel()
        new_order = act_rows.view(-1)
        if b.per_sentence:
            if keep is not None:
                b.encoder_outs = model.reorder_encoder_out(b.encoder_outs, keep)
        elif keep is not None or b.width < self.cfg.beam:  # one encoder row per decoder row: any row of its sentence
            b.encoder_outs = model.reorder_encoder_out(b.encoder_outs, new_order)
        b.tokens = b.tokens.index_select(0, new_order)
        b.tokens[:, step + 1] = act_tokens.view(-1)
        b.scores = b.scores.index_select(0, new_order)
        b.scores[:, step] = act_scores.view(-1)
        if b.attn is not None:
            b.attn = b.attn.index_select(0, new_order)
        if b.prefix_rows is not None:
            b.prefix_rows = b.prefix_rows.index_select(0, new_order)
        b.row_max = b.row_max.index_select(0, new_order)
        if b.per_sentence:
            model.reorder_incremental_state(b.states, new_order, sentence_order=keep, per_sentence=True)
        else:
            model.reorder_incremental_state(b.states, new_order)
        b.width = self.cfg.beam

    # ------------------------------------------------------------------ teacher forcing
    @_on_device_sdpa
    @torch.inference_mode()
    def score_reference(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, target: torch.Tensor,
                        need_attn: bool = False, forced: int = 0) -> list[list[dict]]:
        """Teacher-forced scores of ``target`` ([B, T], right-padded, EOS-terminated), normalised exactly
        as the search's scores (sum of ln p over tokens incl. EOS, divided by lp(|Y|)); same output layout.
        Its first ``forced`` tokens are ones the search would force (a language token): with
        ``forced_prefix_score="zero"`` they count 0, as there."""
        model, pad = self.model, self.pad
        prev = torch.full_like(target, pad)
        prev[:, 0] = self.start
        prev[:, 1:] = target[:, :-1]
        prev = prev.masked_fill(prev == pad, pad)
        encoder_outs = model.forward_encoder(src_tokens, src_lengths)
        lprobs, attn = model.log_probs(prev, encoder_outs, None, temperature=self.cfg.temperature,
                                       need_attn=need_attn, last_only=False)
        tok_lp = lprobs.gather(2, target.unsqueeze(2)).squeeze(2)
        nonpad = target != pad
        tok_lp = tok_lp.masked_fill(~nonpad, 0.0)
        if forced and self.cfg.forced_prefix_score == "zero":
            tok_lp[:, :forced] = 0.0
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

"""The static-shape beam search: SequenceGenerator's search with every tensor shape fixed for a whole batch.

Why. On a GPU the dynamic search (beam_search.py) is bound by the host: each step launches hundreds of small
kernels, and its shapes change as sentences leave the batch and caches grow, so nothing can be recorded
once and replayed. Here the shapes stay put and the step never reads the device from the host, so on CUDA
the whole step — decoder, log-softmax, candidate selection, finalisation, reorder — is one CUDA graph
(generation/cuda_graphs.py); on the CPU the same step runs eagerly, and that is how the tests compare it
with the dynamic search.

What stays fixed. ``rows = sentences × beam``: a finished sentence keeps its rows (masked: its candidates
are never finalised again), padded sentences (a lone EOS as source) fill the batch up to a bucket of
:func:`sentence_bucket`. The self-attention caches (:class:`~nmt_toolkit.modules.caches.StaticDecoderState`)
are preallocated for the output limit of the batch's padded source width (``a * width + b``, rounded up to
:data:`LENGTH_BUCKET`) and written at a position held in a device tensor; a step attends over a *window* of leading positions (the written ones,
rounded up to :data:`LENGTH_BUCKET`) with a mask for those not yet written, so attention and the cache reorder
cost what the output so far costs, not the limit. The source is padded to a multiple of
:data:`LENGTH_BUCKET`; its encoder–decoder keys/values are projected once per batch and copied into fixed
buffers. A shape is thus (sentence bucket, source width, window); a test set meets a few dozen.

Same search. Each step runs the steps of generation/search_steps.py that the dynamic search
(:class:`~nmt_toolkit.generation.beam_search.SequenceGenerator`) runs, on the device: the constraints
(``min_len``, ``max_len``, ``unkpen``), the top ``2*beam`` candidates over beam×V (the first step masks every
beam but the first, which is the dynamic search's one row per sentence), EOS candidates among the first
``beam`` merged into the sentence's best-``beam`` finished set, the first ``beam`` others continue
(:class:`~nmt_toolkit.generation.strategies.BeamStrategy`), the caches and token history follow by an
in-place ``index_select``, and the early-stop rules (``bound``, ``beam``, ``never``) decide which sentences
are done.
The host reads only whether all are, every ``check_interval`` steps (each read waits for the device; steps
run past the end are harmless). Hypotheses equal the dynamic search's (tested on the CPU: tokens identical,
scores to float rounding — the step's products have other row counts and attention is masked).

Not supported (SequenceGenerator falls back to the dynamic search, or ``static_search="on"`` names them):
sampling, ``no_repeat_ngram_size``, prefix tokens, per-step attention (``need_attn``: alignments), and models
without ``supports_static_decoder_state`` or the per-sentence encoder layout.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from nmt_toolkit.generation.search_steps import (NEG_INF, check_stop, collect_hypotheses, constrain_lprobs,
                                                 merge_finished, output_limits, plain_row_topk, sentences_done)
from nmt_toolkit.generation.strategies import BeamStrategy
from nmt_toolkit.modules.caches import StaticCursor, StaticDecoderState

LENGTH_BUCKET = 16  # positions and source widths are rounded up to this (a new shape every 16 tokens)
MAX_PLANS = 2  # plans (buffers and graphs of one shape) kept; sorted test sets visit each shape once in a row


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def sentence_bucket(n: int) -> int:
    """Sentences per batch, rounded up to 8, 12, 16, 24, 32, 48, … (powers of two and 1.5 × them): at most a
    third of the rows are padding, and a whole test set batched by ``--max-tokens`` meets few sizes."""
    if n <= 8:
        return 8
    power = 1 << (n - 1).bit_length()  # the power of two >= n
    return power * 3 // 4 if n <= power * 3 // 4 else power


def step_shapes(sentences: int, source_width: int, steps: int, max_positions: tuple[int, int],
                max_len_a: float = 1.0, max_len_b: int = 50) -> tuple[int, int, int, list]:
    """``(sentence bucket, padded source width, capacity, windows)`` of a batch of ``source_width`` whose
    longest output limit is ``steps`` tokens, for a model of ``max_positions`` (source, target): the plan it
    uses and the shapes of its steps (one per window). The capacity is the limit of the padded width
    (``a * width + b``), so every batch of a width bucket shares one plan; rounding stops at the model's
    positions (a learned table ends there)."""
    width = max(min(round_up(source_width, LENGTH_BUCKET), max_positions[0]), source_width)
    longest = max(steps, min(int(max_len_a * width + max_len_b), max_positions[1] - 1))
    capacity = min(round_up(longest + 1, LENGTH_BUCKET), max_positions[1])
    windows = sorted({min(round_up(t + 1, LENGTH_BUCKET), capacity) for t in range(steps + 1)})
    return sentence_bucket(sentences), width, capacity, windows


def _step_graphs(dev: torch.device):
    if dev.type != "cuda":
        return None
    from nmt_toolkit.generation.cuda_graphs import StepGraphs

    return StepGraphs(dev)


def unsupported(generator, need_attn: bool = False, prefix_tokens=None) -> Optional[str]:
    """What keeps ``generator`` (a SequenceGenerator) off the static search for this call, by option name."""
    if generator.cfg.sampling:
        return "--sampling"
    if generator.cfg.no_repeat_ngram_size > 0:
        return "--no-repeat-ngram-size"
    if prefix_tokens is not None:
        return "--prefix-size"
    if need_attn:
        return "--print-alignment (attention of each step)"
    model = generator.model
    if not model.sentence_level or not all(getattr(m, "supports_static_decoder_state", False) for m in model.models):
        names = ", ".join(sorted({type(m).__name__ for m in model.models}))
        return f"a model without a static-shape decoder state ({names})"
    return None


@dataclass
class _Plan:
    """The buffers of one shape (sentences, source width, capacity), reused by every batch of that shape."""

    sentences: int
    rows: int
    capacity: int
    cursor: StaticCursor
    states: list
    tokens: torch.Tensor  # [rows, capacity + 1]: EOS, then the tokens of each hypothesis
    scores: torch.Tensor  # [rows, capacity]: cumulative log-probability after each step
    cum: torch.Tensor  # [rows]: the current cumulative score (the first step: 0 for beam 0, -inf for the others)
    row_max: torch.Tensor  # [rows]: the output limit of the row's sentence
    sent_max: torch.Tensor  # [sentences]
    done: torch.Tensor  # [sentences] bool
    fin: dict  # scores [n, beam], tokens [n, beam, capacity + 1], cum [n, beam, capacity], length [n, beam]
    lp: torch.Tensor  # [capacity + 2] float64: lp(length)
    offsets: torch.Tensor  # [sentences, 1]: the first row of each sentence
    graphs: object = None  # generation/cuda_graphs.py's StepGraphs on CUDA; None: eager steps


class StaticBeamSearch:
    """The static-shape search of a :class:`SequenceGenerator` (its options; see the module docstring)."""

    def __init__(self, generator, check_interval: int = 4, max_plans: int = MAX_PLANS):
        self.gen = generator
        self.check_interval = max(1, check_interval)
        self.max_plans = max_plans
        self._local = threading.local()  # plans per thread: CPU decode workers run batches at once
        self.shapes: set = set()  # (rows, source width, window) of every step run: what graphs are recorded for
        self.make_graphs = _step_graphs  # device -> the recorder of a new plan's steps (None: eager)
        self.strategy = BeamStrategy(generator.cfg.beam, generator.cfg.early_stop, row_topk=plain_row_topk)

    @property
    def plans(self) -> OrderedDict:
        """This thread's plans, the most recently used last."""
        if not hasattr(self._local, "plans"):
            self._local.plans = OrderedDict()
        return self._local.plans

    def release(self) -> None:
        """Free this thread's plans, buffers and graphs (e.g. before the device is needed for training again;
        a decode worker's go with its thread)."""
        self.plans.clear()

    # ------------------------------------------------------------------ one batch
    def generate(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                 stop: Optional[Callable[[], bool]] = None) -> list[list[dict]]:
        g, cfg = self.gen, self.gen.cfg
        bsz, src_len = src_tokens.shape
        dev = src_tokens.device
        max_positions = g.model.max_positions()
        max_len = output_limits(src_lengths, cfg, max_positions[1], dev)
        steps = int(max_len.max())
        n, width, capacity, _ = step_shapes(bsz, src_len, steps, max_positions, cfg.max_len_a, cfg.max_len_b)
        plan = self._plan(n, width, capacity, dev)

        src = src_tokens.new_full((n, width), g.pad)
        src[:bsz, :src_len] = src_tokens
        src[bsz:, 0] = g.eos
        lengths = src_lengths.new_ones(n)
        lengths[:bsz] = src_lengths
        encoder_outs = g.model.forward_encoder(src, lengths)
        self._reset(plan, max_len, bsz)
        projected = [{"encoder_out": None, "encoder_padding_mask": None} for _ in encoder_outs]
        for step in range(steps + 1):
            check_stop(stop)  # a host-side call: no device read
            if step and step % self.check_interval == 0 and bool(plan.done.all()):
                break
            plan.cursor.window = window = min(round_up(step + 1, LENGTH_BUCKET), capacity)
            self.shapes.add((plan.rows, width, window))
            if step == 0:  # projects the encoder output into the plan's buffers: never recorded
                self._step(plan, encoder_outs)
                self._check_weights(dev)
            elif plan.graphs is None:
                self._step(plan, projected)
            else:
                plan.graphs.run(window, lambda: self._step(plan, projected))
        fin = {key: value[:bsz] for key, value in plan.fin.items()}
        return collect_hypotheses(fin, src_lengths, cfg.nbest, g.eos)

    def _plan(self, n: int, width: int, capacity: int, dev: torch.device) -> _Plan:
        key = (n, width, capacity, dev)
        plan = self.plans.get(key)
        if plan is not None:
            self.plans.move_to_end(key)
            return plan
        while len(self.plans) >= self.max_plans:
            self.plans.popitem(last=False)
        g, k = self.gen, self.gen.cfg.beam
        rows = n * k
        cursor = StaticCursor(torch.zeros((), dtype=torch.long, device=dev), torch.arange(capacity, device=dev))
        lengths = torch.arange(capacity + 2, dtype=torch.float64, device=dev)
        fin = {"scores": torch.empty(n, k, device=dev),
               "tokens": torch.empty(n, k, capacity + 1, dtype=torch.long, device=dev),
               "cum": torch.empty(n, k, capacity, device=dev),
               "length": torch.empty(n, k, dtype=torch.long, device=dev)}
        plan = _Plan(n, rows, capacity, cursor, [StaticDecoderState(capacity, cursor) for _ in g.model.models],
                     torch.empty(rows, capacity + 1, dtype=torch.long, device=dev),
                     torch.empty(rows, capacity, device=dev), torch.empty(rows, device=dev),
                     torch.empty(rows, dtype=torch.long, device=dev), torch.empty(n, dtype=torch.long, device=dev),
                     torch.empty(n, dtype=torch.bool, device=dev), fin, g.lp(lengths),
                     torch.arange(n, device=dev).unsqueeze(1) * k)
        plan.graphs = self.make_graphs(dev)
        self.plans[key] = plan
        return plan

    def _check_weights(self, dev: torch.device) -> None:
        """Recorded steps read the models' tensors where they were: if any moved since (a cast, a reassigned
        parameter, a positional table grown for a longer batch at this batch's first step), record anew."""
        where = tuple(t.data_ptr() for m in self.gen.model.models for t in (*m.parameters(), *m.buffers()))
        if getattr(self._local, "weights", where) != where:
            for plan in self.plans.values():
                if plan.graphs is not None:
                    plan.graphs = self.make_graphs(dev)
        self._local.weights = where

    def _reset(self, p: _Plan, max_len: torch.Tensor, bsz: int) -> None:
        g, k = self.gen, self.gen.cfg.beam
        p.tokens.fill_(g.pad)
        p.tokens[:, 0] = g.start
        p.scores.zero_()
        p.cum.view(p.sentences, k).fill_(NEG_INF)[:, 0] = 0.0
        p.sent_max.fill_(1)
        p.sent_max[:bsz] = max_len
        p.row_max.view(p.sentences, k).copy_(p.sent_max.unsqueeze(1))
        p.done.fill_(False)
        p.done[bsz:] = True  # padded sentences
        p.fin["scores"].fill_(NEG_INF)
        p.fin["tokens"].fill_(g.pad)
        p.fin["cum"].zero_()
        p.fin["length"].zero_()
        for state in p.states:
            state.new_batch()

    # ------------------------------------------------------------------ one step (recorded on CUDA)
    def _step(self, p: _Plan, encoder_outs: list) -> None:
        """Decode position ``p.cursor.position`` for every row and update the search state in place; no
        host read of a device value (a CUDA graph records it)."""
        g, k, n, rows = self.gen, self.gen.cfg.beam, p.sentences, p.rows
        pos = p.cursor.position
        last = p.tokens.gather(1, pos.view(1, 1).expand(rows, 1))
        lprobs, _ = g.model.log_probs(last, encoder_outs, p.states, temperature=g.cfg.temperature)
        lprobs = constrain_lprobs(lprobs, pos, p.row_max, g.cfg, g.pad, g.unk, g.eos)
        cand_scores, cand_beams, cand_tokens = self.strategy.candidates(lprobs, p.cum, n, k)
        cand_rows = cand_beams + p.offsets
        eos_mask = (cand_tokens == g.eos) & (cand_scores > NEG_INF)
        self._finalize(p, eos_mask[:, :k] & ~p.done.unsqueeze(1), cand_rows[:, :k], cand_scores[:, :k])

        act_scores, active = self.strategy.continuing(cand_scores, cand_beams, eos_mask)
        act_rows = cand_rows.gather(1, active).view(-1)
        act_tokens = cand_tokens.gather(1, active).view(-1)
        p.done |= self._done(p, act_scores, pos)

        at = pos.view(1, 1).expand(rows, 1)
        p.tokens.copy_(p.tokens.index_select(0, act_rows))
        p.tokens.scatter_(1, at + 1, act_tokens.unsqueeze(1))
        p.scores.copy_(p.scores.index_select(0, act_rows))
        p.scores.scatter_(1, at, act_scores.view(rows, 1))
        p.cum.copy_(act_scores.view(-1))
        for state in p.states:
            state.reorder(act_rows)
        pos.add_(1)

    def _finalize(self, p: _Plan, fin_mask, rows, cand_scores) -> None:
        """Merge this step's EOS hypotheses into each sentence's best-``beam`` finished set
        (search_steps.merge_finished for every sentence at once; those without one keep theirs untouched)."""
        g, fin = self.gen, p.fin
        n, k = fin_mask.shape
        pos = p.cursor.position
        length = (pos + 1).view(1)
        lp = p.lp.gather(0, length).float()
        new_scores = torch.where(fin_mask, cand_scores / lp, torch.full_like(cand_scores, NEG_INF))
        flat = rows.reshape(-1)
        new_tokens = p.tokens.index_select(0, flat).view(n, k, -1)
        new_tokens.scatter_(2, length.view(1, 1, 1).expand(n, k, 1), g.eos)
        hist = p.scores.index_select(0, flat).view(n, k, -1)
        at = p.cursor.positions.view(1, 1, -1)
        new_cum = torch.where(at < pos, hist, torch.where(at == pos, cand_scores.unsqueeze(2), torch.zeros_like(hist)))
        new = {"scores": new_scores, "tokens": new_tokens, "cum": new_cum, "length": length.expand(n, k)}
        update = fin_mask.any(dim=1)
        for name, value in merge_finished(fin, new).items():
            old = fin[name]
            old.copy_(torch.where(update.view((n,) + (1,) * (old.dim() - 1)), value, old))

    def _done(self, p: _Plan, act_scores: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Which sentences can stop after this step (search_steps.sentences_done); the length penalties come
        from the plan's table, indexed on the device."""
        cfg = self.gen.cfg

        def bound_lp(sent_max: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            return torch.maximum(p.lp.gather(0, sent_max + 1), p.lp.gather(0, (pos + 2).view(1)))

        return sentences_done(self.strategy.early_stop, cfg.nbest, act_scores, p.fin["scores"], p.sent_max, pos,
                              None if cfg.lenpen == 0 else bound_lp)

"""What incremental decoding keeps between steps: typed caches, one per attention, in one DecoderState.

Why typed. The caller (the beam search) owns the state and reorders it after every step; a dataclass
per cache kind with its own ``reorder(indices)`` keeps the layout in one place instead of in key names
that every reader must know.

- :class:`SelfAttentionCache`: the decoder self-attention's keys ``[rows, H, capacity, d_k]`` and values
  ``[rows, H, capacity, d_v]`` of the positions decoded so far, one row per hypothesis. Preallocated for
  ``capacity`` positions (the search knows its longest output) and grown by doubling, so a step writes
  one position instead of concatenating. A reorder copies only the filled part: with ``reorder_in_place``
  only the rows that change, in place (most hypotheses keep their row from one step to the next); else
  every row, into a reused spare buffer (no host synchronisation).
- :class:`CrossAttentionCache`: the encoder–decoder keys/values, projected once from the encoder output,
  ``[n, H, S, d]`` with ``keep`` ``[n, 1, 1, S]`` (True at real source positions; None without padding).
  ``n`` counts *sentences* when the encoder output is kept once per sentence: the ``w`` consecutive rows
  (beams) of a sentence then attend as one block of ``w`` queries (see
  :meth:`~nmt_toolkit.modules.attention.MultiheadAttention.forward`), and no beam needs its own copy.
- :class:`DecoderState`: the caches of every decoder layer, and what the search tells the model: ``beam``
  (rows per sentence once the search runs), ``sentences`` (how many are active), ``capacity``.

Static shapes (the static-shape beam search, generation/static_search.py, whose step a CUDA graph can
replay): :class:`StaticDecoderState` holds :class:`StaticSelfAttentionCache` s preallocated for every position
the batch can decode and zero-filled; a step writes the position held in a device tensor
(:class:`StaticCursor`), so the same recorded kernels serve every step, and attends over the first ``window``
positions with a mask hiding those not yet written. Rows never leave (a finished sentence stays in place);
a reorder copies into the same buffers. Its encoder–decoder caches are copied into buffers kept across
batches of the same shape. The decoder treats both states alike through ``started``, ``start``,
``position`` and ``reorder``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch


def moved_rows(indices: torch.Tensor, rows: int) -> Optional[torch.Tensor]:
    """The positions ``j`` with ``indices[j] != j``, for a reorder of ``rows`` rows into ``len(indices)`` that
    copies only those (:func:`copy_rows_in_place`); None where only a whole copy will do: rows that grow, or
    gradients being recorded (an in-place copy would overwrite what backward needs)."""
    if indices.numel() > rows or torch.is_grad_enabled():
        return None
    return (indices != torch.arange(indices.numel(), device=indices.device)).nonzero().squeeze(1)


def copy_rows_in_place(buf: torch.Tensor, indices: torch.Tensor, moved: torch.Tensor) -> None:
    """``buf[j] = buf[indices[j]]`` for every ``j`` in ``moved`` (dim 0, in place). The moved rows' sources
    are gathered before any is written, so a row may be the source of another and be overwritten itself."""
    if moved.numel():
        buf.index_copy_(0, moved, buf.index_select(0, indices.index_select(0, moved)))


@dataclass
class SelfAttentionCache:
    """Keys and values of the decoded positions (see the module docstring); ``length`` positions are filled."""

    k: torch.Tensor
    v: torch.Tensor
    length: int = 0
    _spare: Optional[tuple] = field(default=None, repr=False)

    @classmethod
    def empty(cls, rows: int, heads: int, key_dim: int, value_dim: int, capacity: int,
              like: torch.Tensor) -> "SelfAttentionCache":
        capacity = max(capacity, 1)
        return cls(like.new_empty(rows, heads, capacity, key_dim), like.new_empty(rows, heads, capacity, value_dim))

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k`` [rows, H, T, d_k] and ``v`` after the filled positions; return views of all filled ones."""
        end = self.length + k.size(2)
        if end > self.k.size(2):
            self._resize(max(end, 2 * self.k.size(2)))
        self.k[:, :, self.length:end] = k
        self.v[:, :, self.length:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def _resize(self, capacity: int) -> None:
        grown = []
        for old in (self.k, self.v):
            new = old.new_empty(old.shape[:2] + (capacity, old.size(3)))
            new[:, :, :self.length] = old[:, :, :self.length]
            grown.append(new)
        self.k, self.v = grown
        self._spare = None

    def reorder(self, indices: torch.Tensor, moved: Optional[torch.Tensor] = None) -> None:
        """Row ``j`` continues row ``indices[j]`` (a beam reorder; rows may repeat or disappear).

        ``moved`` (:func:`moved_rows`, given when the rows do not grow): the rows ``j`` with ``indices[j] != j``.
        Then only those rows are copied, in place, and the cache keeps its first ``len(indices)`` rows: most
        hypotheses of a beam keep their row from one step to the next, finished sentences leave from the
        end or shift the rest down, and the copy of the whole cache grows with every decoded position."""
        if torch.is_grad_enabled() and self.k.requires_grad:  # out= records no gradient
            self.k, self.v = self.k.index_select(0, indices), self.v.index_select(0, indices)
            return
        if moved is not None and self.k.is_contiguous() and self.v.is_contiguous():
            heads = self.k.size(1)
            per_head = torch.arange(heads, device=indices.device)
            indices, moved = ((r.unsqueeze(1) * heads + per_head).view(-1) for r in (indices, moved))
            for buf in (self.k, self.v):  # 2-D, a row per hypothesis and head: its filled part is contiguous
                copy_rows_in_place(buf.view(-1, buf[0, 0].numel())[:, :self.length * buf.size(3)], indices, moved)
            n = indices.numel() // heads
            self.k, self.v = self.k[:n], self.v[:n]
            return
        rows, n = self.k.size(0), indices.numel()
        spare = self._spare
        if spare is None or spare[0].size(0) < n:
            spare = tuple(t.new_empty((max(n, rows),) + t.shape[1:]) for t in (self.k, self.v))
        outs = []
        for buf, out in zip((self.k, self.v), spare):
            out = out[:n]
            torch.index_select(buf[:, :, :self.length], 0, indices, out=out[:, :, :self.length])
            outs.append(out)
        self._spare = (self.k, self.v)  # double buffering: no allocation per step
        self.k, self.v = outs

    def visible(self) -> None:
        """Every cached position is written: no mask."""
        return None


@dataclass
class StaticCursor:
    """Where a static-shape step writes: ``position`` (a 0-dim long tensor on the device, advanced by the
    search inside its step) and ``window`` (how many leading positions the step attends over and reorders;
    a host-side int, chosen by the search for each step, > position)."""

    position: torch.Tensor
    positions: torch.Tensor  # arange(capacity) on the device, to build the visibility mask without allocating
    window: int = 16


@dataclass
class StaticSelfAttentionCache:
    """Keys ``[rows, H, capacity, d_k]`` and values of every position a batch may decode (see the module
    docstring); written at ``cursor.position``, read over ``cursor.window`` positions."""

    k: torch.Tensor
    v: torch.Tensor
    cursor: StaticCursor

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this step's ``k`` [rows, H, 1, d_k] and ``v`` at the cursor; return the window's keys/values."""
        at = self.cursor.position.view(1)
        self.k.index_copy_(2, at, k)
        self.v.index_copy_(2, at, v)
        w = self.cursor.window
        return self.k[:, :, :w], self.v[:, :, :w]

    def visible(self) -> torch.Tensor:
        """``[1, 1, 1, window]`` bool: True at the positions written so far (the current one included)."""
        return (self.cursor.positions[: self.cursor.window] <= self.cursor.position).view(1, 1, 1, -1)

    def reorder(self, indices: torch.Tensor) -> None:
        """Row ``j`` continues row ``indices[j]`` (same row count), copied into the same buffers."""
        w = self.cursor.window
        for buf in (self.k, self.v):
            buf[:, :, :w].copy_(buf[:, :, :w].index_select(0, indices))


@dataclass
class CrossAttentionCache:
    """Encoder–decoder keys/values projected once (see the module docstring)."""

    k: torch.Tensor
    v: torch.Tensor
    keep: Optional[torch.Tensor] = None

    def reorder(self, indices: torch.Tensor, moved: Optional[torch.Tensor] = None) -> None:
        """Entry ``j`` becomes entry ``indices[j]`` (rows or sentences, whichever the cache holds); with
        ``moved`` (:func:`moved_rows`) only the entries that change are copied, in place."""
        if moved is None or (torch.is_grad_enabled() and self.k.requires_grad):
            self.k, self.v = self.k.index_select(0, indices), self.v.index_select(0, indices)
            if self.keep is not None:
                self.keep = self.keep.index_select(0, indices)
            return
        n = indices.numel()
        for name in ("k", "v", "keep"):
            buf = getattr(self, name)
            if buf is not None:
                copy_rows_in_place(buf, indices, moved)
                setattr(self, name, buf[:n])


@dataclass
class DecoderState:
    """The incremental state of one model's decoder (see the module docstring).

    ``beam``: rows per sentence from the second step on (the first runs one row per sentence);
    ``sentences``: active sentences (None: every row is its own sentence); ``capacity``: positions to
    preallocate; ``reorder_in_place``: a reorder copies only the rows that change, in place, instead of
    gathering every row (the search sets it where that pays: ``nmt_toolkit/device_policy.py``). The
    per-layer caches are created by the decoder at its first step."""

    beam: int = 1
    sentences: Optional[int] = None
    capacity: int = 16
    reorder_in_place: bool = False
    self_attn: list = field(default_factory=list)
    cross_attn: list = field(default_factory=list)

    @property
    def started(self) -> bool:
        return bool(self.self_attn)

    def length(self) -> int:
        """Positions decoded so far."""
        return self.self_attn[0].length if self.self_attn else 0

    @staticmethod
    def position(prev_output_tokens: torch.Tensor) -> int:
        """The position of the newest token of ``prev_output_tokens`` (all tokens so far, one row per hypothesis)."""
        return prev_output_tokens.size(1) - 1

    def start(self, self_attention: list, cross_caches: list, like: torch.Tensor) -> None:
        """First step: empty self-attention caches from each layer's module, and its encoder–decoder caches."""
        self.self_attn = [attn.empty_cache(like.size(0), self.capacity, like) for attn in self_attention]
        self.cross_attn = cross_caches

    def reorder(self, indices: torch.Tensor, sentence_order: Optional[torch.Tensor] = None,
                per_sentence: bool = False) -> None:
        """Rows follow ``indices``. Cross-attention caches follow ``indices`` too, unless ``per_sentence``:
        they then hold one entry per sentence and follow ``sentence_order`` (the sentences kept, as
        indices into the current ones), or stay where it is None."""
        moved = moved_rows(indices, self.self_attn[0].k.size(0)) if self.self_attn and self.reorder_in_place else None
        for cache in self.self_attn:
            cache.reorder(indices, moved)
        order = sentence_order if per_sentence else indices
        if order is not None and self.cross_attn:
            if order is not indices:
                moved = moved_rows(order, self.cross_attn[0].k.size(0)) if self.reorder_in_place else None
            for cache in self.cross_attn:
                cache.reorder(order, moved)
        if per_sentence and sentence_order is not None:
            self.sentences = sentence_order.numel()


@dataclass
class StaticDecoderState:
    """The incremental state of one model's decoder for the static-shape search (see the module docstring).

    ``capacity``: positions preallocated; ``cursor``: where the next step writes (the models of an ensemble
    share one). ``started`` is False until the first step of each batch (:meth:`new_batch`), which projects
    the encoder output and copies its keys and values here; later steps pass only their newest tokens."""

    capacity: int
    cursor: StaticCursor
    self_attn: list = field(default_factory=list)
    cross_attn: list = field(default_factory=list)
    started: bool = False

    def position(self, prev_output_tokens: torch.Tensor) -> torch.Tensor:
        """The step's position, a device tensor (``prev_output_tokens`` holds only the newest tokens)."""
        return self.cursor.position

    def new_batch(self) -> None:
        """The next step starts a batch: its encoder–decoder keys/values are copied in, positions restart at 0."""
        self.started = False
        self.cursor.position.zero_()
        for cache in self.self_attn:  # stale values must not be inf/NaN: masked keys still meet 0 * value
            cache.k.zero_()
            cache.v.zero_()

    def start(self, self_attention: list, cross_caches: list, like: torch.Tensor) -> None:
        """Allocate the buffers on first use (zeros), else copy into them: the addresses a captured step
        reads stay fixed. A cross cache without padding gets an all-True mask (the buffer always has one)."""
        if not self.self_attn:
            self.self_attn = [StaticSelfAttentionCache(
                like.new_zeros(like.size(0), attn.num_heads, self.capacity, attn.key_dim),
                like.new_zeros(like.size(0), attn.num_heads, self.capacity, attn.value_dim), self.cursor)
                for attn in self_attention]
        if not self.cross_attn:
            self.cross_attn = [CrossAttentionCache(torch.empty_like(c.k), torch.empty_like(c.v),
                                                   torch.empty(c.k.size(0), 1, 1, c.k.size(2), dtype=torch.bool,
                                                               device=c.k.device)) for c in cross_caches]
        for mine, new in zip(self.cross_attn, cross_caches):
            mine.k.copy_(new.k)
            mine.v.copy_(new.v)
            if new.keep is None:
                mine.keep.fill_(True)
            else:
                mine.keep.copy_(new.keep)
        self.started = True

    def reorder(self, indices: torch.Tensor) -> None:
        """Rows follow ``indices`` (within their sentences); the encoder–decoder caches stay, one per sentence."""
        for cache in self.self_attn:
            cache.reorder(indices)

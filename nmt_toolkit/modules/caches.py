"""What incremental decoding keeps between steps: typed caches, one per attention, in one DecoderState.

Why typed. The caller (the beam search) owns the state and reorders it after every step; a dataclass
per cache kind with its own ``reorder(indices)`` keeps the layout in one place instead of in key names
that every reader must know.

- :class:`SelfAttentionCache`: the decoder self-attention's keys ``[rows, H, capacity, d_k]`` and values
  ``[rows, H, capacity, d_v]`` of the positions decoded so far, one row per hypothesis. Preallocated for
  ``capacity`` positions (the search knows its longest output) and grown by doubling, so a step writes
  one position instead of concatenating; a reorder copies only the filled part, into a reused spare buffer.
- :class:`CrossAttentionCache`: the encoder–decoder keys/values, projected once from the encoder output,
  ``[n, H, S, d]`` with ``keep`` ``[n, 1, 1, S]`` (True at real source positions; None without padding).
  ``n`` counts *sentences* when the encoder output is kept once per sentence: the ``w`` consecutive rows
  (beams) of a sentence then attend as one block of ``w`` queries (see
  :meth:`~nmt_toolkit.modules.attention.MultiheadAttention.forward`), and no beam needs its own copy.
- :class:`DecoderState`: the caches of every decoder layer, and what the search tells the model: ``beam``
  (rows per sentence once the search runs), ``sentences`` (how many are active), ``capacity``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch


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

    def reorder(self, indices: torch.Tensor) -> None:
        """Row ``j`` continues row ``indices[j]`` (a beam reorder; rows may repeat or disappear)."""
        if torch.is_grad_enabled() and self.k.requires_grad:  # out= records no gradient
            self.k, self.v = self.k.index_select(0, indices), self.v.index_select(0, indices)
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


@dataclass
class CrossAttentionCache:
    """Encoder–decoder keys/values projected once (see the module docstring)."""

    k: torch.Tensor
    v: torch.Tensor
    keep: Optional[torch.Tensor] = None

    def reorder(self, indices: torch.Tensor) -> None:
        """Entry ``j`` becomes entry ``indices[j]`` (rows or sentences, whichever the cache holds)."""
        self.k, self.v = self.k.index_select(0, indices), self.v.index_select(0, indices)
        if self.keep is not None:
            self.keep = self.keep.index_select(0, indices)


@dataclass
class DecoderState:
    """The incremental state of one model's decoder (see the module docstring).

    ``beam``: rows per sentence from the second step on (the first runs one row per sentence);
    ``sentences``: active sentences (None: every row is its own sentence); ``capacity``: positions to
    preallocate. The per-layer caches are created by the decoder at its first step."""

    beam: int = 1
    sentences: Optional[int] = None
    capacity: int = 16
    self_attn: list = field(default_factory=list)
    cross_attn: list = field(default_factory=list)

    @property
    def started(self) -> bool:
        return bool(self.self_attn)

    def length(self) -> int:
        """Positions decoded so far."""
        return self.self_attn[0].length if self.self_attn else 0

    def reorder(self, indices: torch.Tensor, sentence_order: Optional[torch.Tensor] = None,
                per_sentence: bool = False) -> None:
        """Rows follow ``indices``. Cross-attention caches follow ``indices`` too, unless ``per_sentence``:
        they then hold one entry per sentence and follow ``sentence_order`` (the sentences kept, as
        indices into the current ones), or stay where it is None."""
        for cache in self.self_attn:
            cache.reorder(indices)
        order = sentence_order if per_sentence else indices
        if order is not None:
            for cache in self.cross_attn:
                cache.reorder(order)
        if per_sentence and sentence_order is not None:
            self.sentences = sentence_order.numel()

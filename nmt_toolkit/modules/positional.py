"""Positional encodings (section 3.5 of the paper, and the learned variant of Table 3 row E).

Sequences are right-padded, so the first real token of every sentence is at position 0 and positions are
simply ``offset + arange(T)``; what is added at padded positions never reaches real positions (padded keys
are masked in attention).
"""
from __future__ import annotations

import torch
from torch import nn

from nmt_toolkit.errors import UsageError


def sinusoidal_table(num_positions: int, dim: int, offset: int = 0) -> torch.Tensor:
    """Section 3.5, written out, interleaved as in the paper (float32, ``[num_positions, dim]``)::

        PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
        PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

    Computed in float64 so that large positions keep full float32 accuracy.
    """
    pos = torch.arange(offset, offset + num_positions, dtype=torch.float64).unsqueeze(1)
    two_i = torch.arange(0, dim, 2, dtype=torch.float64)  # 2i for i = 0 .. ceil(d/2)-1
    angle = pos / torch.pow(10000.0, two_i / dim)  # [P, ceil(d/2)]
    table = torch.empty(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return table.float()


def fairseq_sinusoidal_table(num_positions: int, dim: int, offset: int = 0, padding_idx: int = 1) -> torch.Tensor:
    """fairseq's (and tensor2tensor's) variant of section 3.5, for models trained by or for fairseq::

        PE(pos, i)       = sin(p · 10000^(-i / (d/2 - 1)))    i < d/2
        PE(pos, d/2 + i) = cos(p · 10000^(-i / (d/2 - 1)))    with p = pos + padding_idx + 1

    (the sine half, then the cosine half; fairseq counts positions from ``padding_idx + 1``). Computed in
    float32 with fairseq's own operations, so that an imported fairseq model sees bit-identical encodings.
    """
    import math

    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    first = offset + padding_idx + 1
    angle = torch.arange(first, first + num_positions, dtype=torch.float).unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)
    if dim % 2:
        table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
    return table


def marian_sinusoidal_table(num_positions: int, dim: int, offset: int = 0) -> torch.Tensor:
    """Marian's (and Hugging Face's ``MarianSinusoidalPositionalEmbedding``) layout of section 3.5: the
    paper's frequencies and positions from 0, but the sines in the first half of the vector and the cosines
    in the second (an odd ``dim`` gives the sines the extra column)::

        PE(pos, i)           = sin(pos / 10000^(2i / d_model))    i < ceil(d/2)
        PE(pos, ceil(d/2)+i) = cos(pos / 10000^(2i / d_model))

    the columns of :func:`sinusoidal_table` reordered, so the values are the same float32 numbers."""
    table = sinusoidal_table(num_positions, dim, offset)
    return torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)


SINUSOID_LAYOUTS = {"paper": sinusoidal_table, "fairseq": fairseq_sinusoidal_table, "marian": marian_sinusoidal_table}


class SinusoidalPositionalEmbedding(nn.Module):
    """The fixed encoding of section 3.5 for any length: the table is cached and extended on demand.

    ``layout`` is ``paper`` (sines and cosines interleaved, :func:`sinusoidal_table`), ``fairseq``
    (:func:`fairseq_sinusoidal_table`) or ``marian`` (:func:`marian_sinusoidal_table`)."""

    def __init__(self, dim: int, init_size: int = 256, layout: str = "paper"):
        super().__init__()
        if layout not in SINUSOID_LAYOUTS:
            raise UsageError(f"--sinusoid-layout {layout}: expected one of {', '.join(SINUSOID_LAYOUTS)}")
        self.dim = dim
        self.make_table = SINUSOID_LAYOUTS[layout]
        self.register_buffer("table", self.make_table(init_size, dim), persistent=False)

    def forward(self, length: int, offset: int | torch.Tensor = 0, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Encodings of positions ``offset .. offset+length-1``: ``[length, dim]``. A tensor ``offset`` (a
        static-shape decoding step's position, on the device) reads the table as it is: :meth:`reserve` first."""
        if isinstance(offset, torch.Tensor):
            return _rows(self.table, offset, length, dtype)
        end = offset + length
        if end > self.table.size(0):
            size = max(end, 2 * self.table.size(0))
            self.table = self.make_table(size, self.dim).to(self.table.device)
        out = self.table[offset:end]
        return out if dtype is None else out.to(dtype)

    def reserve(self, num_positions: int) -> None:
        """Compute the table for positions ``0 .. num_positions-1`` now."""
        if num_positions > self.table.size(0):
            self.table = self.make_table(num_positions, self.dim).to(self.table.device)

    def max_positions(self) -> int:
        return int(1e6)  # unbounded in principle; a large number keeps callers' min() simple


class LearnedPositionalEmbedding(nn.Module):
    """A learned table of ``max_positions`` rows (Table 3 row E), initialised N(0, d^-0.5)."""

    def __init__(self, max_positions: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_positions, dim))
        nn.init.normal_(self.weight, mean=0.0, std=dim ** -0.5)

    def forward(self, length: int, offset: int | torch.Tensor = 0, dtype: torch.dtype | None = None) -> torch.Tensor:
        if isinstance(offset, torch.Tensor):  # a static-shape step's position (below max_positions by construction)
            return _rows(self.weight, offset, length, dtype)
        end = offset + length
        if end > self.weight.size(0):
            raise UsageError(
                f"sequence of {end} positions is longer than the learned positional table "
                f"(--max-positions {self.weight.size(0)}); raise --max-positions or use "
                f"--positional-embeddings sinusoidal"
            )
        out = self.weight[offset:end]
        return out if dtype is None else out.to(dtype)

    def reserve(self, num_positions: int) -> None:
        """Nothing to compute: the table is the parameter (callers keep to :meth:`max_positions`)."""

    def max_positions(self) -> int:
        return self.weight.size(0)


def _rows(table: torch.Tensor, offset: torch.Tensor, length: int, dtype: torch.dtype | None) -> torch.Tensor:
    """``table[offset : offset+length]`` for a device-tensor ``offset``, without reading it on the host."""
    out = table.index_select(0, offset.reshape(1) + torch.arange(length, device=offset.device))
    return out if dtype is None else out.to(dtype)


def build_positional_embedding(kind: str, dim: int, max_positions: int, layout: str = "paper") -> nn.Module:
    if kind == "sinusoidal":
        return SinusoidalPositionalEmbedding(dim, layout=layout)
    if kind == "learned":
        return LearnedPositionalEmbedding(max_positions, dim)
    raise UsageError(f"--positional-embeddings {kind}: expected sinusoidal or learned")


__all__ = ["sinusoidal_table", "fairseq_sinusoidal_table", "marian_sinusoidal_table", "SinusoidalPositionalEmbedding", "LearnedPositionalEmbedding",
           "build_positional_embedding"]

"""Sentence pairs over memory-mapped shards, and the collater that pads them into a batch.

A collated sample (the contract of docs/architecture.md)::

    {"id": LongTensor[B], "nsentences": B, "ntokens": non-pad target tokens,
     "net_input": {"src_tokens": LongTensor[B,S], "src_lengths": LongTensor[B],
                   "prev_output_tokens": LongTensor[B,T]},
     "target": LongTensor[B,T]}

Padding is on the right. Sources and targets end with EOS. ``prev_output_tokens`` is the target shifted
right by one with EOS as the first symbol (fairseq's EOS-as-BOS convention): for a target ``a b </s>`` the
decoder reads ``</s> a b`` and predicts ``a b </s>``. Collation is vectorised with numpy (one boolean-mask
scatter per tensor, no per-token Python loop). An empty list collates to ``{}`` (a rank's filler batch).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch


def pad_sequences(seqs: Sequence[np.ndarray], pad: int, shift_eos: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad ``seqs`` into an int64 ``[B, max_len]`` array; returns it and the lengths.

    With ``shift_eos`` each row becomes ``[shift_eos] + seq[:-1]`` (the decoder input of a target).
    """
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = int(lengths.max()) if len(seqs) else 0
    out = np.full((len(seqs), width), pad, dtype=np.int64)
    mask = np.arange(width)[None, :] < lengths[:, None]
    flat = np.concatenate(seqs).astype(np.int64, copy=False) if len(seqs) else np.zeros(0, np.int64)
    out[mask] = flat
    if shift_eos is not None:
        shifted = np.full_like(out, pad)
        if width:
            shifted[:, 0] = shift_eos
            shifted[:, 1:] = out[:, :-1]
            shifted[~mask] = pad
        out = shifted
    return out, lengths


class LanguagePairDataset:
    """Pairs ``(src[i], tgt[i])`` of two indexed datasets (``tgt`` may be None for inference)."""

    def __init__(self, src, src_sizes, src_dict, tgt=None, tgt_sizes=None, tgt_dict=None):
        if tgt is not None and len(src) != len(tgt):
            raise ValueError(f"source and target datasets differ in length: {len(src)} vs {len(tgt)}")
        self.src, self.tgt = src, tgt
        self.src_sizes = np.asarray(src_sizes, dtype=np.int64)
        self.tgt_sizes = np.asarray(tgt_sizes, dtype=np.int64) if tgt is not None else None
        self.src_dict, self.tgt_dict = src_dict, tgt_dict if tgt_dict is not None else src_dict

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> dict:
        item = {"id": int(i), "source": np.asarray(self.src[i])}
        if self.tgt is not None:
            item["target"] = np.asarray(self.tgt[i])
        return item

    @property
    def sizes(self) -> np.ndarray:
        """``[N, 2]`` source and target lengths (target 0 without targets)."""
        tgt = self.tgt_sizes if self.tgt_sizes is not None else np.zeros_like(self.src_sizes)
        return np.stack([self.src_sizes, tgt], axis=1)

    def num_tokens_vec(self) -> np.ndarray:
        """Per pair, the larger of source and target length: what a padded batch costs per sentence."""
        if self.tgt_sizes is None:
            return self.src_sizes
        return np.maximum(self.src_sizes, self.tgt_sizes)

    def num_tokens(self, i: int) -> int:
        return int(self.num_tokens_vec()[i])

    def ordered_indices(self, shuffle: bool = True, seed: int = 1) -> np.ndarray:
        """Indices sorted by (source length, target length); ties in a seeded random order (bucketing)."""
        n = len(self)
        order = np.random.RandomState(seed).permutation(n) if shuffle else np.arange(n)
        if self.tgt_sizes is not None:
            order = order[np.argsort(self.tgt_sizes[order], kind="mergesort")]
        return order[np.argsort(self.src_sizes[order], kind="mergesort")]

    def filter_by_size(self, indices: np.ndarray, max_positions) -> tuple[np.ndarray, np.ndarray]:
        """Split ``indices`` into (kept, too long) for ``max_positions = (max_src, max_tgt)``."""
        max_src, max_tgt = max_positions if isinstance(max_positions, (tuple, list)) else (max_positions, max_positions)
        ok = np.ones(len(indices), dtype=bool)
        if max_src is not None:
            ok &= self.src_sizes[indices] <= max_src
        if max_tgt is not None and self.tgt_sizes is not None:
            ok &= self.tgt_sizes[indices] <= max_tgt
        return indices[ok], indices[~ok]

    def limits_exceeded(self, max_positions, max_tokens: Optional[int]) -> list[str]:
        """The options (with their values) whose limit some pair is longer than: what to raise when no pair
        was left to batch."""
        max_src, max_tgt = max_positions if isinstance(max_positions, (tuple, list)) else (max_positions, max_positions)
        found = []
        if max_src is not None and len(self) and int(self.src_sizes.max()) > max_src:
            found.append(f"--max-source-positions {max_src}")
        if max_tgt is not None and self.tgt_sizes is not None and len(self) and int(self.tgt_sizes.max()) > max_tgt:
            found.append(f"--max-target-positions {max_tgt}")
        if max_tokens and len(self) and int(self.num_tokens_vec().max()) > max_tokens:
            found.append(f"--max-tokens {max_tokens}")
        return found

    def collater(self, samples: Sequence[dict]) -> dict:
        return collate(samples, self.src_dict.pad(), self.tgt_dict.eos() if self.tgt_dict else self.src_dict.eos())


def collate(samples: Sequence[dict], pad: int, eos: int) -> dict:
    """Pad a list of ``{"id", "source", "target"?}`` items into the batch dict of the module docstring."""
    if len(samples) == 0:
        return {}
    ids = torch.tensor([s["id"] for s in samples], dtype=torch.long)
    src, src_lengths = pad_sequences([s["source"] for s in samples], pad)
    batch = {
        "id": ids,
        "nsentences": len(samples),
        "net_input": {"src_tokens": torch.from_numpy(src), "src_lengths": torch.from_numpy(src_lengths)},
    }
    if samples[0].get("target") is not None:
        targets = [s["target"] for s in samples]
        tgt, tgt_lengths = pad_sequences(targets, pad)
        prev, _ = pad_sequences(targets, pad, shift_eos=eos)
        batch["target"] = torch.from_numpy(tgt)
        batch["net_input"]["prev_output_tokens"] = torch.from_numpy(prev)
        batch["ntokens"] = int(tgt_lengths.sum())
    else:
        batch["target"] = None
        batch["ntokens"] = int(src_lengths.sum())
    return batch

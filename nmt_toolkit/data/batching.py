"""Token-budget batches, a seeded per-epoch shuffle, rank sharding and a resumable epoch iterator.

- :func:`batch_by_size` walks indices sorted by length (length bucketing) and cuts a batch when adding the
  next pair would exceed ``max_tokens`` **padded** tokens, i.e. ``batch size × longest pair in it`` where a
  pair's length is ``max(source length, target length)`` (fairseq's ``batch_by_size``), or ``max_sentences``
  pairs. A full batch is trimmed to a multiple of ``required_batch_size_multiple`` when it can be (the rest
  starts the next batch). A pair longer than ``max_tokens`` by itself is dropped by the caller.
- Batches are fixed once; each epoch shuffles their order with ``seed + epoch``.
- :class:`EpochBatchIterator` shards the shuffled batches across ``num_shards`` ranks (rank ``r`` takes
  batches ``r, r+K, …``). Every rank gets the same number, ``ceil(batches / K)``: a rank that runs out is
  given an **empty batch**, which collates to ``{}`` (as fairseq pads with empty lists). The trainer must
  still take part in the gradient all-reduce for it (e.g. a dummy forward/backward whose loss is × 0).
- With ``reload`` (sharded training data) the dataset and its batches are rebuilt when the epoch changes, so
  ``len()`` may change from one epoch to the next.
- ``state_dict()`` is ``{"epoch", "iterations_in_epoch"}``; after ``load_state_dict`` the next
  ``next_epoch_itr()`` continues the same epoch at exactly the next batch.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np


def batch_by_size(indices: np.ndarray, num_tokens: np.ndarray, max_tokens: Optional[int] = None,
                  max_sentences: Optional[int] = None, required_batch_size_multiple: int = 1) -> list[np.ndarray]:
    """Group ``indices`` (in order) into batches; ``num_tokens[i]`` is pair ``i``'s padded length."""
    indices = np.asarray(indices, dtype=np.int64)
    max_tokens = max_tokens if max_tokens and max_tokens > 0 else None
    max_sentences = max_sentences if max_sentences and max_sentences > 0 else None
    if max_tokens is None and max_sentences is None:
        raise ValueError("batch_by_size needs max_tokens or max_sentences")
    mult = max(1, int(required_batch_size_multiple))
    lens = np.asarray(num_tokens, dtype=np.int64)[indices].tolist()
    batches: list[np.ndarray] = []
    start = 0
    longest = 0
    for pos, n in enumerate(lens):
        longest = max(longest, n)
        while True:  # cut until the current batch plus pair ``pos`` fits (or it is alone)
            size = pos - start + 1
            over = (max_tokens is not None and longest * size > max_tokens) or \
                   (max_sentences is not None and size > max_sentences)
            if not over or size == 1:
                break
            cur = size - 1
            keep = max(mult * (cur // mult), cur % mult)
            batches.append(indices[start:start + keep])
            start += keep
            longest = max(lens[start:pos + 1])
    if start < len(lens):
        batches.append(indices[start:])
    return batches


class _Epoch:
    """Iterator over one epoch's collated batches; counts how many were taken."""

    def __init__(self, owner: "EpochBatchIterator", batches: list, offset: int):
        self.owner = owner
        self.batches = batches
        self.n = offset

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        return self

    def has_next(self) -> bool:
        return self.n < len(self.batches)

    def __next__(self):
        if self.n >= len(self.batches):
            raise StopIteration
        batch = self.collate_at(self.n)
        self.advance()
        return batch

    def collate_at(self, pos: int):
        """The collated batch at position ``pos`` of this epoch, without moving the iterator: a prefetcher
        (training/prefetch.py) prepares batches ahead on a thread and calls :meth:`advance` as the trainer
        takes them, so the position saved in checkpoints counts consumed batches only."""
        return self.owner.collate_fn([self.owner.dataset[int(i)] for i in self.batches[pos]])

    def advance(self) -> None:
        """One batch was consumed."""
        self.n += 1
        self.owner.iterations_in_epoch = self.n


class EpochBatchIterator:
    """Fixed batches, shuffled per epoch with ``seed + epoch``, sharded so that every rank gets as many."""

    def __init__(self, dataset, batch_sampler: Sequence[np.ndarray], collate_fn: Optional[Callable] = None,
                 seed: int = 1, num_shards: int = 1, shard_id: int = 0, epoch: int = 1,
                 reload: Optional[Callable[[int], tuple]] = None):
        """``reload(epoch) -> (dataset, batches)``, if given, is called when the epoch changes (data shards)."""
        if not 0 <= shard_id < max(1, num_shards):
            raise ValueError(f"shard_id {shard_id} out of range for {num_shards} shards")
        self.dataset = dataset
        self.batches = list(batch_sampler)
        self.collate_fn = collate_fn or dataset.collater
        self.seed = seed
        self.num_shards = max(1, num_shards)
        self.shard_id = shard_id
        self.epoch = max(1, epoch)
        self.iterations_in_epoch = 0
        self.shuffle = True
        self._current: Optional[_Epoch] = None
        self._resume_offset: Optional[int] = None
        self.reload = reload
        self._loaded_epoch = self.epoch

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return math.ceil(len(self.batches) / self.num_shards)

    def _epoch_batches(self, epoch: int, shuffle: bool) -> list:
        order = np.arange(len(self.batches))
        if shuffle:
            order = np.random.RandomState((self.seed + epoch) % (2 ** 32)).permutation(len(self.batches))
        mine = [self.batches[i] for i in order[self.shard_id::self.num_shards]]
        mine += [np.zeros(0, dtype=np.int64)] * (len(self) - len(mine))  # filler: collates to {}
        return mine

    def next_epoch_itr(self, shuffle: bool = True) -> _Epoch:
        """The iterator of the next epoch, or of the resumed epoch after :meth:`load_state_dict`."""
        offset = 0
        if self._resume_offset is not None:
            offset, self._resume_offset = self._resume_offset, None
            shuffle = self.shuffle
        elif self._current is not None:
            self.epoch += 1
        self.shuffle = shuffle
        if self.reload is not None and self._loaded_epoch != self.epoch:
            self.dataset, batches = self.reload(self.epoch)
            self.batches = list(batches)
            self.collate_fn = self.dataset.collater
            self._loaded_epoch = self.epoch
        self.iterations_in_epoch = offset
        self._current = _Epoch(self, self._epoch_batches(self.epoch, shuffle), offset)
        return self._current

    def has_next(self) -> bool:
        """Whether the current epoch has batches left."""
        return self._current is not None and self._current.has_next()

    def end_of_epoch(self) -> bool:
        return self._current is not None and not self._current.has_next()

    def state_dict(self) -> dict:
        if self.end_of_epoch():
            return {"epoch": self.epoch + 1, "iterations_in_epoch": 0, "shuffle": self.shuffle}
        return {"epoch": self.epoch, "iterations_in_epoch": self.iterations_in_epoch, "shuffle": self.shuffle}

    def load_state_dict(self, state: dict) -> None:
        self.epoch = int(state["epoch"])
        self.shuffle = bool(state.get("shuffle", True))
        offset = int(state.get("iterations_in_epoch", 0))
        self._current = None
        self.iterations_in_epoch = offset
        self._resume_offset = offset if offset > 0 else None

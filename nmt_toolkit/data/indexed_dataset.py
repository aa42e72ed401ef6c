"""Memory-mapped token sequences in fairseq's ``MMapIndexedDataset`` layout (version 1).

``<prefix>.idx``::

    b"MMIDIDX\\x00\\x00"   9 bytes of magic
    <Q  version (1)
    <B  dtype code (8 = uint16, 9 = uint32, 4 = int32, 5 = int64, …)
    <Q  N, the number of sequences
    N × int32   sizes (tokens per sequence, EOS included)
    N × int64   byte offsets of each sequence in ``.bin``

``<prefix>.bin``: the token ids back to back. The reader maps both files with ``numpy.memmap``, so opening
costs O(1) memory whatever the corpus size and ``ds[i]`` is O(1); nothing is read until it is indexed.
Data binarized by fairseq loads here and ours loads in fairseq.
"""
from __future__ import annotations

import os
import struct
from typing import BinaryIO, Optional

import numpy as np

from nmt_toolkit.errors import DataError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_BYTES = len(MAGIC) + 8 + 1 + 8  # magic, version, dtype code, count

DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float64,
          8: np.uint16, 9: np.uint32, 10: np.uint64}


def code_of(dtype) -> int:
    dtype = np.dtype(dtype)
    for code, dt in DTYPES.items():
        if np.dtype(dt) == dtype:
            return code
    raise ValueError(f"no MMIDIDX code for dtype {dtype}")


def best_dtype(vocab_size: int):
    """uint16 when the vocabulary has < 65500 symbols (fairseq's rule), else uint32."""
    return np.uint16 if vocab_size is not None and vocab_size < 65500 else np.uint32


def index_file_path(prefix: str) -> str:
    return prefix + ".idx"


def data_file_path(prefix: str) -> str:
    return prefix + ".bin"


def dataset_exists(prefix: str) -> bool:
    return os.path.exists(index_file_path(prefix)) and os.path.exists(data_file_path(prefix))


class IndexedDatasetBuilder:
    """Writes ``.bin`` as sequences arrive and ``.idx`` on :meth:`finalize`; only sizes stay in memory."""

    def __init__(self, prefix: str, dtype=np.uint16):
        self.prefix = prefix
        self.dtype = np.dtype(dtype)
        self._bin: BinaryIO = open(data_file_path(prefix), "wb")
        self._sizes: list[np.ndarray] = []

    def add_chunk(self, flat_ids: np.ndarray, sizes: np.ndarray) -> None:
        """Append many sequences at once: their ids back to back and their lengths."""
        self._bin.write(np.asarray(flat_ids).astype(self.dtype, copy=False).tobytes())
        self._sizes.append(np.asarray(sizes, dtype=np.int32))

    def finalize(self) -> None:
        self._bin.close()
        sizes = np.concatenate(self._sizes) if self._sizes else np.zeros(0, np.int32)
        write_index(index_file_path(self.prefix), sizes, self.dtype)


def write_index(path: str, sizes: np.ndarray, dtype) -> None:
    sizes = np.asarray(sizes, dtype=np.int32)
    itemsize = np.dtype(dtype).itemsize
    pointers = np.zeros(len(sizes), dtype=np.int64)
    if len(sizes) > 1:
        np.cumsum(sizes[:-1].astype(np.int64) * itemsize, out=pointers[1:])
    with open(path, "wb") as handle:
        handle.write(MAGIC)
        handle.write(struct.pack("<Q", VERSION))
        handle.write(struct.pack("<B", code_of(dtype)))
        handle.write(struct.pack("<Q", len(sizes)))
        handle.write(sizes.tobytes())
        handle.write(pointers.tobytes())


def _check_index(idx_path: str, sizes: np.ndarray, pointers: np.ndarray, itemsize: int) -> None:
    """Sizes ≥ 1 (every sentence ends with EOS) and each offset where the previous sentence ends, as the
    writers of this format (ours, fairseq's) lay the sentences out back to back. Vectorised: O(N) in numpy."""
    if not len(sizes):
        return
    small = sizes < 1
    if small.any():
        i = int(np.flatnonzero(small)[0])
        raise DataError(f"{idx_path}: sentence {i} has size {int(sizes[i])}; every sentence holds at least its "
                        f"EOS (size ≥ 1): the index is damaged, binarize the text again")
    expected = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1].astype(np.int64) * itemsize, out=expected[1:])
    wrong = pointers != expected
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        where = f"where sentence {i - 1} ends" if i else "the start"
        raise DataError(f"{idx_path}: sentence {i} starts at byte {int(pointers[i])} of the .bin, not at "
                        f"{int(expected[i])} ({where}): the index is damaged, binarize the text again")


class MMapIndexedDataset:
    """Read-only sequences of a ``.bin/.idx`` pair; ``ds[i]`` is a numpy view of sequence ``i``.

    A truncated, foreign or inconsistent pair is refused at open with a :class:`DataError` naming the file
    and the first bad sentence (counting from 0, as the ids of ``S-``/``D-`` lines): the whole index is
    checked, and with ``vocab_size`` every token id and every sentence's final EOS (:meth:`check_tokens`).
    Otherwise a damaged shard reads as empty or garbage sentences, and an id past the dictionary fails as an
    IndexError deep inside training.
    """

    def __init__(self, prefix: str, vocab_size: Optional[int] = None, eos: int = 2):
        self.prefix = prefix
        idx_path, bin_path = index_file_path(prefix), data_file_path(prefix)
        for path in (idx_path, bin_path):
            if not os.path.isfile(path):
                raise DataError(f"{path}: no such file")
        idx_bytes = os.path.getsize(idx_path)
        with open(idx_path, "rb") as handle:
            header = handle.read(HEADER_BYTES)
        if len(header) < HEADER_BYTES or header[: len(MAGIC)] != MAGIC:
            raise DataError(f"{idx_path}: not an MMIDIDX index file (bad magic); was it written by nmt-preprocess or fairseq?")
        (version,) = struct.unpack("<Q", header[9:17])
        if version != VERSION:
            raise DataError(f"{idx_path}: index version {version}, only version {VERSION} is supported")
        code = header[17]
        if code not in DTYPES:
            raise DataError(f"{idx_path}: unknown dtype code {code}")
        self.dtype = np.dtype(DTYPES[code])
        (n,) = struct.unpack("<Q", header[18:26])
        expected = HEADER_BYTES + n * (4 + 8)
        if idx_bytes != expected:
            raise DataError(f"{idx_path}: truncated or corrupt index ({idx_bytes} bytes, {expected} expected for {n} sequences)")
        self._len = n
        if n:
            self.sizes = np.memmap(idx_path, dtype=np.int32, mode="r", offset=HEADER_BYTES, shape=(n,))
            self.pointers = np.memmap(idx_path, dtype=np.int64, mode="r", offset=HEADER_BYTES + 4 * n, shape=(n,))
        else:
            self.sizes = np.zeros(0, np.int32)
            self.pointers = np.zeros(0, np.int64)
        bin_bytes = os.path.getsize(bin_path)
        _check_index(idx_path, self.sizes, self.pointers, self.dtype.itemsize)
        needed = int(self.pointers[-1]) + int(self.sizes[-1]) * self.dtype.itemsize if n else 0
        if needed != bin_bytes:
            what = "truncated" if needed > bin_bytes else "longer than its index says"
            raise DataError(f"{bin_path}: {what} ({bin_bytes} bytes, index {idx_path} expects {needed})")
        self._bin: Optional[np.ndarray] = (
            np.memmap(bin_path, dtype=self.dtype, mode="r") if bin_bytes else np.zeros(0, self.dtype))
        if vocab_size is not None:
            self.check_tokens(vocab_size, eos)

    def __len__(self) -> int:
        return self._len

    def check_tokens(self, vocab_size: int, eos: int) -> None:
        """Every id is below ``vocab_size`` and every sentence ends with ``eos``.

        Reads the whole ``.bin`` once, vectorised (a max over the memmap and one gather of the N last tokens):
        about 1 ms per MB from the page cache, a fraction of a second for a WMT-sized shard, against an
        IndexError hours into training. A zero-filled ``.bin`` fails the EOS check."""
        path, data = data_file_path(self.prefix), self._bin
        if not len(data):
            return
        if data.dtype.kind == "f":
            raise DataError(f"{path}: holds {data.dtype} values, not token ids; binarize it again")
        negative = data.dtype.kind == "i" and data.min() < 0
        if negative or data.max() >= vocab_size:
            bad = int(np.flatnonzero((data < 0) | (data >= vocab_size))[0])
            i = self._sentence_at(bad)
            raise DataError(f"{path}: sentence {i} holds token id {int(data[bad])}, outside its dictionary's "
                            f"{vocab_size} symbols; was it binarized with another dictionary? binarize it again")
        last = self.pointers // self.dtype.itemsize + self.sizes.astype(np.int64) - 1
        ends = data[last] != eos
        if ends.any():
            i = int(np.flatnonzero(ends)[0])
            raise DataError(f"{path}: sentence {i} does not end with EOS (id {eos}): the file is damaged or "
                            f"was not written by nmt-preprocess or fairseq; binarize it again")

    def _sentence_at(self, token: int) -> int:
        """The sentence that holds the ``token``-th id of ``.bin``."""
        starts = self.pointers // self.dtype.itemsize
        return int(np.searchsorted(starts, token, side="right")) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if not -self._len <= i < self._len:
            raise IndexError(f"{self.prefix}: index {i} out of range ({self._len} sequences)")
        start = int(self.pointers[i]) // self.dtype.itemsize
        return self._bin[start: start + int(self.sizes[i])]

    def get(self, i: int) -> np.ndarray:
        """Sequence ``i`` as an int64 array (a copy, safe to hand to torch)."""
        return self[i].astype(np.int64)

    @staticmethod
    def exists(prefix: str) -> bool:
        return dataset_exists(prefix)

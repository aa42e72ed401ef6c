"""The .bin/.idx writer against an independent reader written from docs/file-formats.md alone; corrupt files
refused."""
import struct

import numpy as np
import pytest

from nmt_toolkit.data.indexed_dataset import IndexedDatasetBuilder, MMapIndexedDataset
from nmt_toolkit.errors import DataError


def independent_read(prefix):
    """~20 lines from the format description: magic, <Q version, <B dtype, <Q N, N int32 sizes, N int64 offsets."""
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    (version,) = struct.unpack("<Q", idx[9:17])
    assert version == 1
    dtype = {8: np.uint16, 9: np.uint32, 4: np.int32, 5: np.int64}[idx[17]]
    (n,) = struct.unpack("<Q", idx[18:26])
    sizes = struct.unpack(f"<{n}i", idx[26:26 + 4 * n])
    offsets = struct.unpack(f"<{n}q", idx[26 + 4 * n:26 + 12 * n])
    data = open(prefix + ".bin", "rb").read()
    width = np.dtype(dtype).itemsize
    return [np.frombuffer(data[o:o + s * width], dtype=dtype).tolist() for o, s in zip(offsets, sizes)]


def _write(prefix, seqs, dtype=np.uint16):
    b = IndexedDatasetBuilder(prefix, dtype)
    for start in range(0, len(seqs), 7):  # as binarize.py writes: chunks of sequences back to back
        chunk = seqs[start:start + 7]
        b.add_chunk(np.concatenate([np.array(s) for s in chunk]), np.array([len(s) for s in chunk]))
    b.finalize()


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_matches_independent_reader(tmp_path, dtype):
    rng = np.random.RandomState(0)
    seqs = [rng.randint(0, 60000, size=rng.randint(1, 30)).tolist() + [2] for _ in range(200)] + [[2]]
    prefix = str(tmp_path / "train.en-de.en")
    _write(prefix, seqs, dtype)
    assert independent_read(prefix) == seqs
    ds = MMapIndexedDataset(prefix)
    assert len(ds) == len(seqs) and ds.sizes.tolist() == [len(s) for s in seqs]
    assert ds[123].tolist() == seqs[123] and ds[-1].tolist() == [2]


def test_truncated_and_foreign_files_refused(tmp_path):
    prefix = str(tmp_path / "x")
    _write(prefix, [[5, 6, 2], [7, 2]])
    data = open(prefix + ".bin", "rb").read()
    open(prefix + ".bin", "wb").write(data[:-2])
    with pytest.raises(DataError, match=r"x\.bin.*truncated"):
        MMapIndexedDataset(prefix)
    open(prefix + ".bin", "wb").write(data)
    idx = open(prefix + ".idx", "rb").read()
    open(prefix + ".idx", "wb").write(idx[:-3])
    with pytest.raises(DataError, match=r"x\.idx"):
        MMapIndexedDataset(prefix)
    open(prefix + ".idx", "wb").write(b"PK\x03\x04 not an index at all, a zip file" * 2)
    with pytest.raises(DataError, match=r"x\.idx.*magic"):
        MMapIndexedDataset(prefix)
    open(prefix + ".idx", "wb").write(idx[:9] + struct.pack("<Q", 2) + idx[17:])
    with pytest.raises(DataError, match="version 2"):
        MMapIndexedDataset(prefix)

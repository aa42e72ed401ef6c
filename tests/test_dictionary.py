"""Dictionary: fairseq indices and file format, padding fillers, malformed files."""
import numpy as np
import pytest
from collections import Counter

from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.errors import DataError


def test_specials_order_and_padding(tmp_path):
    d = Dictionary.from_counts(Counter({"b": 2, "a": 2, "c": 5}), padding_factor=8)
    assert [d.bos(), d.pad(), d.eos(), d.unk()] == [0, 1, 2, 3]
    assert d.symbols[:7] == ["<s>", "<pad>", "</s>", "<unk>", "c", "a", "b"]  # by count, ties alphabetical
    assert len(d) == 8 and d[7] == "madeupword0000"
    path = tmp_path / "dict.txt"
    d.save(str(path))
    assert path.read_text().splitlines() == ["c 5", "a 2", "b 2", "madeupword0000 0"]  # no specials, fillers kept
    assert Dictionary.load(str(path)) == d


def test_encode_line_and_string():
    d = Dictionary.from_counts(Counter({"x": 3, "y": 1}), padding_factor=1)
    ids = d.encode_line("x  y zzz\n")
    assert ids.dtype == np.int32 and ids.tolist() == [4, 5, d.unk(), d.eos()]
    assert d.string(ids) == "x y <unk>"
    assert d.index("zzz") == d.unk() and "zzz" not in d


def test_threshold_and_nwords():
    c = Counter({"a": 10, "b": 5, "c": 1})
    assert Dictionary.from_counts(c, threshold=2, padding_factor=1).symbols[4:] == ["a", "b"]
    assert Dictionary.from_counts(c, nwords=1, padding_factor=1).symbols[4:] == ["a"]


@pytest.mark.parametrize("text,line", [("a 1\nb\n", 2), ("a 1\nb x\n", 2), ("a 1\na 2\n", 2)])
def test_malformed_file_names_file_and_line(tmp_path, text, line):
    path = tmp_path / "dict.en.txt"
    path.write_text(text)
    with pytest.raises(DataError, match=f"{path}.*line {line}"):
        Dictionary.load(str(path))


def test_checksum_follows_the_ids_not_the_counts():
    """preprocess.json records it per split: only what changes the ids may change it."""
    import hashlib

    a = Dictionary.from_counts(Counter({"a": 10, "b": 5}), padding_factor=1)
    b = Dictionary.from_counts(Counter({"a": 99, "b": 1}), padding_factor=1)
    swapped = Dictionary.from_counts(Counter({"a": 1, "b": 5}), padding_factor=1)
    assert a.checksum() == b.checksum() == hashlib.sha256("<s>\n<pad>\n</s>\n<unk>\na\nb".encode()).hexdigest()
    assert swapped.checksum() != a.checksum()

"""Dictionary: fairseq indices and file format, padding fillers, malformed files."""
import numpy as np
import pytest
from collections import Counter

from nmt_toolkit.data.dictionary import Dictionary, fingerprint_mismatch
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


def test_one_fingerprint_and_one_comparison_for_every_record():
    """Checkpoints, manifests and preprocess.json record ``{size, sha256}``; a data-bin's ``checksum`` key is the
    same digest; a record without a digest (fairseq's checkpoints) agrees unless one is required."""
    import hashlib

    a = Dictionary.from_counts(Counter({"a": 10, "b": 5}), padding_factor=1)
    swapped = Dictionary.from_counts(Counter({"a": 1, "b": 5}), padding_factor=1)
    digest = hashlib.sha256("<s>\n<pad>\n</s>\n<unk>\na\nb".encode()).hexdigest()
    other = hashlib.sha256("<s>\n<pad>\n</s>\n<unk>\nb\na".encode()).hexdigest()
    assert a.fingerprint() == {"size": 6, "sha256": digest}
    assert fingerprint_mismatch({"lang": "en", "size": 6, "sha256": digest}, a.fingerprint()) is None
    assert fingerprint_mismatch({"file": "dict.en.txt", "size": 6, "checksum": digest}, a.fingerprint()) is None
    assert fingerprint_mismatch(a.fingerprint(), swapped.fingerprint()) == (
        f"6 symbols, sha256 {digest[:12]}… against 6 symbols, sha256 {other[:12]}…")
    assert fingerprint_mismatch({"size": 6, "checksum": other}, a.fingerprint()).startswith(f"6 symbols, sha256 {other[:12]}")
    assert fingerprint_mismatch(None, a.fingerprint()) is None and fingerprint_mismatch({}, a.fingerprint()) is None
    assert fingerprint_mismatch(a.fingerprint(), {"file": "dict.txt"}, required=True) == (
        f"6 symbols, sha256 {digest[:12]}… against None symbols, sha256 None…")
    assert fingerprint_mismatch(a.fingerprint(), {"size": 7, "sha256": digest}, required=True) is not None


def test_an_export_with_other_dictionaries_is_refused_by_the_ctranslate2_engine(tmp_path):
    """The engine compares the export's dictionary files with the data-bin's through the same fingerprints."""
    from types import SimpleNamespace

    from nmt_toolkit.generation.ct2_engine import CTranslate2Generator

    mine = Dictionary.from_counts(Counter({"a": 10, "b": 5}), padding_factor=1)
    theirs = Dictionary.from_counts(Counter({"a": 1, "b": 5}), padding_factor=1)
    mine.save(str(tmp_path / "source_vocabulary.txt"))
    theirs.save(str(tmp_path / "target_vocabulary.txt"))
    record = {"dictionaries": {"source": "source_vocabulary.txt", "target": "target_vocabulary.txt"}}
    engine = SimpleNamespace(src_dict=mine, tgt_dict=mine)
    with pytest.raises(DataError, match=r"target_vocabulary\.txt: wrong dictionary: the exported model's target "
                                        r"dictionary differs from the data-bin's \(6 symbols, sha256 [0-9a-f]{12}… "
                                        r"against 6 symbols"):
        CTranslate2Generator._check_dictionaries(engine, str(tmp_path), record)
    CTranslate2Generator._check_dictionaries(SimpleNamespace(src_dict=mine, tgt_dict=theirs), str(tmp_path), record)


def test_fairseq_overwrite_lines_append_a_slot_as_fairseq_does(tmp_path):
    """``#fairseq:overwrite`` makes fairseq's ``add_symbol(word, n, overwrite=True)`` append a new slot that the
    symbol then maps to; the earlier slot stays. Numbers from real fairseq 0.12.3.1 (``Dictionary.load`` on this
    file, then ``len``, ``symbols``, ``count``, ``index``, ``encode_line('a b <unk> zzz')``):
    length 8, symbols <s> <pad> </s> <unk> a <unk> b a, counts 1 1 1 1 5 1 3 7, index a 7, b 6, <unk> 5,
    an unknown word 3 (``unk()`` stays 3), ids [7, 6, 5, 3, 2]. Without the last line: length 7, b at 6."""
    path = tmp_path / "dict.txt"
    path.write_text("a 5\n<unk> 1 #fairseq:overwrite\nb 3\na 7 #fairseq:overwrite\n")
    d = Dictionary.load(str(path))
    assert len(d) == 8 and d.symbols == ["<s>", "<pad>", "</s>", "<unk>", "a", "<unk>", "b", "a"]
    assert d.count == [1, 1, 1, 1, 5, 1, 3, 7]
    assert [d.index(w) for w in ("a", "b", "<unk>", "zzz")] == [7, 6, 5, 3] and d.unk() == 3
    assert d.encode_line("a b <unk> zzz").tolist() == [7, 6, 5, 3, 2]
    path.write_text("a 5\n<unk> 1 #fairseq:overwrite\nb 3\n")
    assert len(Dictionary.load(str(path))) == 7 and Dictionary.load(str(path)).index("b") == 6
    # saved with the flag on each repeated symbol, so that the file loads again here and in fairseq
    # (fairseq's own save drops the flag and then refuses its file as a duplicate)
    d.save(str(path))
    assert path.read_text().splitlines() == ["a 5", "<unk> 1 #fairseq:overwrite", "b 3", "a 7 #fairseq:overwrite"]
    again = Dictionary.load(str(path))
    assert again.symbols == d.symbols and again.count == d.count and again.index("a") == 7

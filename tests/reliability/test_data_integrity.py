"""Damaged or foreign data files are refused with one line naming the file (and the first bad sentence, or
the line), never read as empty sentences, never a traceback.

Shards are crafted byte by byte with ``struct`` from the format description (docs/file-formats.md), not with
the code under test; each program-level case snapshots the files before and after.
"""
from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

from nmt_toolkit.data.indexed_dataset import MMapIndexedDataset
from nmt_toolkit.errors import DataError
from tests.reliability.harness import assert_refused, assert_unchanged, run_in_process, snapshot
from tests.train_helpers import TINY, make_bin

MAGIC = b"MMIDIDX\x00\x00"
UINT16 = 8


def write_shard(prefix, sizes, offsets, data: bytes, code=UINT16, count=None):
    """An ``.idx`` written field by field, and the ``.bin`` as the given bytes."""
    n = len(sizes) if count is None else count
    idx = MAGIC + struct.pack("<Q", 1) + struct.pack("<B", code) + struct.pack("<Q", n)
    idx += struct.pack(f"<{len(sizes)}i", *sizes) + struct.pack(f"<{len(offsets)}q", *offsets)
    with open(f"{prefix}.idx", "wb") as handle:
        handle.write(idx)
    with open(f"{prefix}.bin", "wb") as handle:
        handle.write(data)


def read_shard(prefix):
    """(sizes, offsets, token bytes) of a uint16 shard, read with struct alone."""
    idx = open(f"{prefix}.idx", "rb").read()
    assert idx[:9] == MAGIC and idx[17] == UINT16
    (n,) = struct.unpack("<Q", idx[18:26])
    sizes = list(struct.unpack(f"<{n}i", idx[26:26 + 4 * n]))
    offsets = list(struct.unpack(f"<{n}q", idx[26 + 4 * n:26 + 12 * n]))
    return sizes, offsets, open(f"{prefix}.bin", "rb").read()


# Five sentences of a 16-symbol dictionary, EOS = 2: sizes 3, 2, 4, 1, 3; byte offsets 0, 6, 10, 18, 20.
SENTENCES = [[5, 6, 2], [7, 2], [8, 9, 10, 2], [2], [11, 12, 2]]
SIZES = [3, 2, 4, 1, 3]
OFFSETS = [0, 6, 10, 18, 20]
TOKENS = b"".join(struct.pack("<H", t) for s in SENTENCES for t in s)  # 13 ids, 26 bytes


def test_the_hand_made_shard_reads_back(tmp_path):
    prefix = str(tmp_path / "x")
    write_shard(prefix, SIZES, OFFSETS, TOKENS)
    ds = MMapIndexedDataset(prefix, vocab_size=16, eos=2)
    assert [ds[i].tolist() for i in range(5)] == SENTENCES


def _with(values, i, v):
    out = list(values)
    out[i] = v
    return out


def _tokens_with(position, value):
    ids = [t for s in SENTENCES for t in s]
    ids[position] = value
    return struct.pack(f"<{len(ids)}H", *ids)


CORRUPT = {
    # name: (sizes, offsets, .bin bytes, file named, what the line says)
    "offset past the end of .bin": (SIZES, _with(OFFSETS, 1, 26 + 100), TOKENS, "x.idx", "sentence 1 starts at byte 126"),
    "offsets out of order": (SIZES, _with(OFFSETS, 2, 4), TOKENS, "x.idx", "sentence 2 starts at byte 4"),
    "size -5": (_with(SIZES, 2, -5), OFFSETS, TOKENS, "x.idx", "sentence 2 has size -5"),
    "size 0": (_with(SIZES, 1, 0), OFFSETS, TOKENS, "x.idx", "sentence 1 has size 0"),
    "zero-filled .bin": (SIZES, OFFSETS, bytes(26), "x.bin", "sentence 0 does not end with EOS"),
    "id beyond the dictionary": (SIZES, OFFSETS, _tokens_with(7, 16), "x.bin", "sentence 2 holds token id 16"),
    "id 65535": (SIZES, OFFSETS, _tokens_with(11, 65535), "x.bin", "sentence 4 holds token id 65535"),
    "no EOS at the end": (SIZES, OFFSETS, _tokens_with(4, 9), "x.bin", "sentence 1 does not end with EOS"),
}


@pytest.mark.parametrize("case", list(CORRUPT))
def test_damaged_shards_are_refused_at_open(tmp_path, case):
    sizes, offsets, data, named, said = CORRUPT[case]
    prefix = str(tmp_path / "x")
    write_shard(prefix, sizes, offsets, data)
    with pytest.raises(DataError) as info:
        MMapIndexedDataset(prefix, vocab_size=16, eos=2)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(tmp_path / named)) and said in message, message


def test_signed_ids_below_zero_are_refused(tmp_path):
    prefix = str(tmp_path / "x")
    ids = [5, -1, 2, 7, 2]
    write_shard(prefix, [3, 2], [0, 12], struct.pack("<5i", *ids), code=4)  # int32
    with pytest.raises(DataError, match=r"x\.bin: sentence 0 holds token id -1"):
        MMapIndexedDataset(prefix, vocab_size=16, eos=2)


# ---------------------------------------------------------------------------------------------- programs

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A data-bin and a checkpoint of 2 updates on it."""
    root = tmp_path_factory.mktemp("integrity")
    data = make_bin(root)
    save = root / "ckpt"
    result = run_in_process("nmt-train", [data, *TINY, "--max-update", "2", "--save-dir", save, "--no-progress-bar"])
    assert result.status == 0, result.stderr[-2000:]
    return data, str(save / "checkpoint_last.pt")


def damaged_copy(data, tmp_path, split, lang, damage):
    """A copy of the data-bin whose ``split``/``lang`` shard is rewritten by ``damage(sizes, offsets, bytes)``."""
    copy = tmp_path / "bin"
    shutil.copytree(data, copy)
    prefix = str(copy / f"{split}.xx-yy.{lang}")
    sizes, offsets, tokens = read_shard(prefix)
    write_shard(prefix, *damage(sizes, offsets, tokens))
    return copy, prefix


DAMAGE = {
    "offset past the end": (lambda s, o, b: (s, _with(o, 5, len(b) + 10), b), "idx", "sentence 5"),
    "size -5": (lambda s, o, b: (_with(s, 5, -5), o, b), "idx", "sentence 5"),
    "size 0": (lambda s, o, b: (_with(s, 5, 0), o, b), "idx", "sentence 5"),
    "zero-filled .bin": (lambda s, o, b: (s, o, bytes(len(b))), "bin", "sentence 0"),
    "id beyond the dictionary": (lambda s, o, b: (s, o, b[:o[7] + 2] + struct.pack("<H", 60000) + b[o[7] + 4:]),
                                 "bin", "sentence 7"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_nmt_train_refuses_a_damaged_training_shard(trained, tmp_path, case):
    data, _ = trained
    damage, ext, said = DAMAGE[case]
    copy, prefix = damaged_copy(data, tmp_path, "train", "yy", damage)
    save = tmp_path / "ckpt"
    save.mkdir()
    before = snapshot(copy)
    result = run_in_process("nmt-train", [copy, *TINY, "--max-update", "2", "--save-dir", save, "--no-progress-bar"])
    line = assert_refused(result, f"{prefix}.{ext}", said)
    assert "nmt-train: error:" in line
    assert_unchanged(before, copy)
    assert not list(save.glob("*.pt"))


@pytest.mark.parametrize("case", ["zero-filled .bin", "size 0", "id beyond the dictionary"])
def test_nmt_generate_refuses_a_damaged_test_shard(trained, tmp_path, case):
    data, checkpoint = trained
    damage, ext, said = DAMAGE[case]
    copy, prefix = damaged_copy(data, tmp_path, "valid", "xx", damage)
    before = snapshot(copy, checkpoint)
    result = run_in_process("nmt-generate", [copy, "--path", checkpoint, "--gen-subset", "valid", "--beam", "2",
                                             "--max-len-b", "5"])
    assert_refused(result, f"{prefix}.{ext}", said)
    assert "D-" not in result.stdout
    assert_unchanged(before, copy, checkpoint)


# ------------------------------------------------------------------------------------ nmt-preprocess inputs

@pytest.fixture
def raw(tmp_path):
    """Six training lines per side and a data-bin made from them."""
    folder = tmp_path / "raw"
    folder.mkdir()
    (folder / "train.xx").write_text("a b c\nd e\nf\na d\nb b\nc\n")
    (folder / "train.yy").write_text("x y\nz\nw w\nx\ny z\nw\n")
    (folder / "valid.xx").write_text("a b\n")
    (folder / "valid.yy").write_text("x\n")
    return folder


def base_args(raw, dest, *extra):
    return ["--source-lang", "xx", "--target-lang", "yy", "--trainpref", raw / "train", "--destdir", dest,
            "--workers", "1", "--no-progress-bar", *extra]


def refused_unchanged(tmp_path, prog, args, *names):
    """``prog args`` is refused with one line naming ``names``, and nothing under ``tmp_path`` changes."""
    before = snapshot(tmp_path)
    line = assert_refused(run_in_process(prog, args), *names)
    assert_unchanged(before, tmp_path)
    return line


def test_a_dictionary_count_that_is_a_digit_but_not_a_number(tmp_path, raw):
    bad = tmp_path / "dict.txt"
    bad.write_text("Haus 3\nEin ²\n", encoding="utf-8")
    line = refused_unchanged(tmp_path, "nmt-preprocess", base_args(raw, tmp_path / "bin", "--srcdict", bad),
                             str(bad), "line 2")
    assert "²" in line


RECORDS = {
    "a list": ([1, 2], "a JSON object"),
    "a string": ("data", "a JSON object"),
    "no splits": ({"source_lang": "xx", "target_lang": "yy"}, "'splits'"),
    "no source_lang": ({"target_lang": "yy", "splits": {}}, "'source_lang'"),
    "splits a list": ({"source_lang": "xx", "target_lang": "yy", "splits": ["train"]}, "'splits'"),
    "a split a string": ({"source_lang": "xx", "target_lang": "yy", "splits": {"train": "yes"}}, "'splits.train'"),
    "source_lang a number": ({"source_lang": 5, "target_lang": "yy", "splits": {}}, "'source_lang'"),
    "subword a string": ({"source_lang": "xx", "target_lang": "yy", "splits": {}, "subword": "spm"}, "'subword'"),
}


@pytest.mark.parametrize("case", list(RECORDS))
def test_a_preprocess_json_of_the_wrong_shape(tmp_path, raw, case):
    record, key = RECORDS[case]
    dest = tmp_path / "bin"
    assert run_in_process("nmt-preprocess", base_args(raw, dest)).status == 0
    (dest / "preprocess.json").write_text(json.dumps(record))
    path = str(dest / "preprocess.json")
    add_valid = ["--source-lang", "xx", "--target-lang", "yy", "--srcdict", dest / "dict.xx.txt", "--tgtdict",
                 dest / "dict.yy.txt", "--validpref", raw / "valid", "--destdir", dest, "--no-progress-bar"]
    refused_unchanged(tmp_path, "nmt-preprocess", add_valid, path, key)
    save = tmp_path / "ckpt"
    save.mkdir()
    line = assert_refused(run_in_process("nmt-train", [dest, *TINY, "--max-update", "1", "--save-dir", save,
                                                       "--no-progress-bar"]), path)
    assert key in line
    assert not list(save.glob("*.pt"))


def test_more_shards_than_training_lines(tmp_path, raw):
    refused_unchanged(tmp_path, "nmt-preprocess", base_args(raw, tmp_path / "bin", "--num-shards", "7"),
                      "--num-shards 7", "6")
    assert run_in_process("nmt-preprocess", base_args(raw, tmp_path / "bin", "--num-shards", "6")).status == 0
    assert sorted(p.name for p in (tmp_path / "bin").glob("shard*")) == [f"shard{k}" for k in range(6)]


@pytest.mark.parametrize("dest", ["", " "])
def test_an_empty_destdir_is_refused(tmp_path, raw, dest, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused_unchanged(tmp_path, "nmt-preprocess", base_args(raw, dest), "--destdir")


@pytest.mark.parametrize("kind", ["sentencepiece", "subword_nmt"])
def test_a_garbage_bpe_model_is_named_as_the_user_gave_it(tmp_path, raw, kind):
    garbage = tmp_path / "model.bin"
    garbage.write_bytes(b"garbage \x00\x01 not a model\n")
    line = refused_unchanged(tmp_path, "nmt-preprocess",
                             base_args(raw, tmp_path / "bin", "--bpe", kind, "--bpe-model", garbage), str(garbage))
    assert ".tmp-" not in line


def test_zero_bpe_merges_is_refused(tmp_path, raw):
    refused_unchanged(tmp_path, "nmt-preprocess",
                      base_args(raw, tmp_path / "bin", "--bpe", "subword_nmt", "--bpe-merges", "0"), "--bpe-merges")


def test_absurd_workers_are_capped_not_forked(tmp_path, raw, monkeypatch):
    """--workers 100000 on six lines must not start 100000 processes (the output is the same for any N)."""
    from nmt_toolkit.data import binarize

    started = []

    class Recording(binarize._Runner):
        def __init__(self, workers, init_args):
            started.append(workers)
            super().__init__(1, init_args)  # never fork here, whatever was asked

    monkeypatch.setattr(binarize, "_Runner", Recording)
    result = run_in_process("nmt-preprocess", base_args(raw, tmp_path / "bin", "--workers", "100000"))
    assert result.status == 0, result.stderr
    assert started and max(started) <= (os.cpu_count() or 1), started


def test_max_source_positions_is_named_when_it_skips_every_pair(trained, tmp_path):
    data, _ = trained
    save = tmp_path / "ckpt"
    save.mkdir()
    line = assert_refused(run_in_process("nmt-train", [data, *TINY, "--max-source-positions", "3",
                                                       "--max-update", "1", "--save-dir", save, "--no-progress-bar"]))
    assert "--max-source-positions" in line and "raise --max-tokens" not in line, line


@pytest.mark.parametrize("split", ["valid", "test"])
def test_an_empty_validation_or_test_file_is_refused(tmp_path, raw, split):
    """An empty valid split validated as loss 0.000 and became the best checkpoint's score."""
    (raw / "empty.xx").write_text("")
    (raw / "empty.yy").write_text("")
    refused_unchanged(tmp_path, "nmt-preprocess", base_args(raw, tmp_path / "bin", f"--{split}pref", raw / "empty"),
                      str(raw / "empty.xx"), f"--{split}pref")


def test_an_empty_split_is_refused_when_opened(trained, tmp_path):
    """A valid split of 0 sentences (binarized before nmt-preprocess refused empty files) validated as loss 0."""
    data, _ = trained
    copy, prefix = damaged_copy(data, tmp_path, "valid", "xx", lambda s, o, b: ([], [], b""))
    write_shard(str(copy / "valid.xx-yy.yy"), [], [], b"")
    save = tmp_path / "ckpt"
    save.mkdir()
    before = snapshot(copy)
    result = run_in_process("nmt-train", [copy, *TINY, "--max-update", "2", "--save-dir", save, "--no-progress-bar"])
    assert_refused(result, f"{prefix}.idx", "no sentences")
    assert_unchanged(before, copy)
    assert not list(save.glob("*.pt"))


def test_an_absurd_padding_factor_is_refused_before_any_work(tmp_path, raw):
    """--padding-factor 100000000 appended a hundred million filler symbols (minutes of CPU, gigabytes)."""
    refused_unchanged(tmp_path, "nmt-preprocess", base_args(raw, tmp_path / "bin", "--padding-factor", "100000000"),
                      "--padding-factor")


def test_an_absurd_sentencepiece_vocabulary_is_refused_before_any_work(tmp_path, raw):
    """--bpe-vocab-size 2000000000 kept sentencepiece busy for minutes on six lines."""
    refused_unchanged(tmp_path, "nmt-preprocess", base_args(raw, tmp_path / "bin", "--bpe", "sentencepiece",
                                                            "--bpe-vocab-size", "2000000000"), "--bpe-vocab-size")


def test_subword_nmt_on_text_with_nothing_to_merge(tmp_path, raw):
    """Every word of the fixture is one character: subword-nmt's learn_bpe failed with max() of nothing."""
    refused_unchanged(tmp_path, "nmt-preprocess", base_args(raw, tmp_path / "bin", "--bpe", "subword_nmt"),
                      "--bpe subword_nmt", str(raw / "train.xx"))

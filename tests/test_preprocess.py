"""nmt-preprocess end to end through its run() function: real corpora, determinism, shards, bad input."""
import filecmp
import json
import os

import pytest

from nmt_toolkit.cli.preprocess import run
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.data.indexed_dataset import MMapIndexedDataset


def _subset(src_prefix, dst_prefix, n, langs=("en", "de")):
    for lang in langs:
        with open(f"{src_prefix}.{lang}", encoding="utf-8") as f:
            lines = [next(f) for _ in range(n)]
        with open(f"{dst_prefix}.{lang}", "w", encoding="utf-8") as f:
            f.writelines(lines)


def _tree(path):
    return {p: open(os.path.join(path, p), "rb").read() for p in sorted(os.listdir(path))
            if os.path.isfile(os.path.join(path, p))}


@pytest.mark.slow
def test_sentencepiece_roundtrip_multi30k(data_dir, tmp_path):
    import sentencepiece as spm

    m = data_dir / "multi30k"
    _subset(m / "train", tmp_path / "train", 4000)
    dest = tmp_path / "bin"
    rc = run(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(tmp_path / "train"),
              "--validpref", str(m / "val"), "--bpe", "sentencepiece", "--bpe-vocab-size", "2000",
              "--joined-dictionary", "--workers", "2", "--destdir", str(dest), "--no-progress-bar"])
    assert rc == 0
    record = json.loads((dest / "preprocess.json").read_text())
    assert record["subword"]["type"] == "sentencepiece" and record["splits"]["train"]["sentences"] == 4000
    assert record["splits"]["valid"]["en"]["unk_rate"] < 0.01
    assert (dest / "dict.en.txt").read_bytes() == (dest / "dict.de.txt").read_bytes()
    d = Dictionary.load(str(dest / "dict.en.txt"))
    assert len(d) % 8 == 0
    sp = spm.SentencePieceProcessor(model_file=str(dest / record["subword"]["model"]))
    for split, prefix in (("train", tmp_path / "train"), ("valid", m / "val")):
        for lang in ("en", "de"):
            ds = MMapIndexedDataset(str(dest / f"{split}.en-de.{lang}"))
            raw = open(f"{prefix}.{lang}", encoding="utf-8").read().split("\n")[: len(ds)]
            assert len(ds) == len(raw)
            for i, line in enumerate(raw):
                ids = ds[i]
                assert ids[-1] == d.eos()
                assert [d[t] for t in ids[:-1]] == sp.encode(line, out_type=str), (split, lang, i)


def test_workers_output_byte_identical(data_dir, tmp_path):
    w = data_dir / "wmt14-sample"
    args = ["--source-lang", "en", "--target-lang", "de", "--trainpref", str(w / "train"), "--validpref",
            str(w / "valid"), "--no-progress-bar", "--destdir"]
    assert run(args + [str(tmp_path / "w1"), "--workers", "1"]) == 0
    assert run(args + [str(tmp_path / "w2"), "--workers", "2"]) == 0
    a, b = _tree(tmp_path / "w1"), _tree(tmp_path / "w2")
    a.pop("preprocess.json"), b.pop("preprocess.json")
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a)
    ds = MMapIndexedDataset(str(tmp_path / "w2" / "train.en-de.en"))
    d = Dictionary.load(str(tmp_path / "w2" / "dict.en.txt"))
    first = open(w / "train.en", encoding="utf-8").readline()
    assert ds[0].tolist() == d.encode_line(first).tolist() and len(ds) == 10000


@pytest.mark.slow
def test_subword_nmt_and_reuse(data_dir, tmp_path):
    w = data_dir / "wmt14-sample"
    _subset(w / "train", tmp_path / "train", 1500)
    dest = tmp_path / "bin"
    assert run(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(tmp_path / "train"),
                "--bpe", "subword_nmt", "--bpe-merges", "300", "--joined-dictionary", "--destdir", str(dest),
                "--no-progress-bar"]) == 0
    from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask

    task = TranslationTask.setup_task(TranslationConfig(data=str(dest)))
    codec = task.subword()
    line = open(tmp_path / "train.en", encoding="utf-8").readline()
    assert "@@ " in codec.encode(line) and codec.decode(codec.encode(line)) == " ".join(line.split())
    ds = task.load_dataset("train")
    assert task.tgt_dict.string(ds[0]["source"], bpe_symbol=task.bpe_symbol()) == " ".join(line.split())
    # reuse the stored codes with --bpe-model: same output
    assert run(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(tmp_path / "train"),
                "--bpe", "subword_nmt", "--bpe-model", str(dest / "bpe.codes"), "--joined-dictionary",
                "--destdir", str(tmp_path / "again"), "--no-progress-bar"]) == 0
    assert filecmp.cmp(dest / "train.en-de.de.bin", tmp_path / "again" / "train.en-de.de.bin", shallow=False)


def _tiny(tmp_path, name, src_lines, tgt_lines, mode="w"):
    (tmp_path / f"{name}.en").write_bytes(src_lines if isinstance(src_lines, bytes) else src_lines.encode())
    (tmp_path / f"{name}.de").write_bytes(tgt_lines if isinstance(tgt_lines, bytes) else tgt_lines.encode())
    return str(tmp_path / name)


def _prep(prefix, dest, *extra):
    return run(["--source-lang", "en", "--target-lang", "de", "--trainpref", prefix, "--destdir", str(dest),
                "--no-progress-bar", *extra])


def test_num_shards_layout_and_epoch_reading(tmp_path):
    prefix = _tiny(tmp_path, "t", "".join(f"a b {i}\n" for i in range(10)), "".join(f"x {i}\n" for i in range(10)))
    _tiny(tmp_path, "v", "a\n", "x\n")
    dest = tmp_path / "bin"
    assert _prep(prefix, dest, "--validpref", str(tmp_path / "v"), "--num-shards", "3") == 0
    assert sorted(os.listdir(dest)) == ["dict.de.txt", "dict.en.txt", "preprocess.json", "shard0", "shard1",
                                        "shard2", "valid.en-de.de.bin", "valid.en-de.de.idx",
                                        "valid.en-de.en.bin", "valid.en-de.en.idx"]
    sizes = [len(MMapIndexedDataset(str(dest / f"shard{k}" / "train.en-de.de"))) for k in range(3)]
    assert sizes == [3, 3, 4]
    from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask

    task = TranslationTask.setup_task(TranslationConfig(data=str(dest), max_tokens=100))
    assert task.num_shards("train") == 3
    itr = task.get_batch_iterator("train", seed=1, epoch=1)
    seen = []
    for _ in range(4):
        ids = sorted(i for b in itr.next_epoch_itr() for i in b["id"].tolist())
        seen.append((itr.epoch, len(ids)))
    assert seen == [(1, 3), (2, 3), (3, 4), (4, 3)]


def _assert_error(capsys, rc, *words):
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1, err
    for w in words:
        assert w in err[0], (w, err[0])


def test_bad_inputs_leave_destdir_untouched(tmp_path, capsys):
    good = _tiny(tmp_path, "good", "a b\nc\n", "x y\nz\n")
    dest = tmp_path / "bin"
    assert _prep(good, dest) == 0
    before = _tree(dest)
    capsys.readouterr()

    rc = _prep(str(tmp_path / "missing"), dest)
    _assert_error(capsys, rc, "missing.en", "no such file")

    bad = _tiny(tmp_path, "mismatch", "a\nb\nc\n", "x\ny\n")
    rc = _prep(bad, dest)
    _assert_error(capsys, rc, "mismatch.en", "mismatch.de", "3", "2")

    bad = _tiny(tmp_path, "utf", "ok\n\xff".encode("latin-1") + b" broken\nok\n", "x\ny\nz\n")
    rc = _prep(bad, dest)
    _assert_error(capsys, rc, "utf.en", "line 2", "UTF-8")

    bad = _tiny(tmp_path, "empty", "", "")
    rc = _prep(bad, dest)
    _assert_error(capsys, rc, "empty training set")

    other = _tiny(tmp_path, "other", "p q\n", "r s\n")
    rc = _prep(other, dest)
    _assert_error(capsys, rc, "different dictionary", "--overwrite")
    assert rc == 1

    rc = run(["--trainpref", good, "--destdir", str(dest)])
    _assert_error(capsys, rc, "--source-lang")
    assert rc == 2

    assert _tree(dest) == before
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]  # no temporary folder left behind

    assert _prep(other, dest, "--overwrite") == 0
    assert Dictionary.load(str(dest / "dict.en.txt")).symbols[4:6] == ["p", "q"]


def test_help_lists_every_option(capsys):
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--source-lang", "--trainpref", "--joined-dictionary", "--srcdict", "--workers", "--bpe ",
                 "--bpe-vocab-size", "--bpe-merges", "--bpe-model", "--num-shards", "--overwrite", "--padding-factor"):
        assert flag in out


def _load(dest, split):
    from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask

    return TranslationTask.setup_task(TranslationConfig(data=str(dest))).load_dataset(split)


def test_overwrite_replaces_the_whole_set_and_stale_splits_are_refused(tmp_path):
    """--overwrite with a new vocabulary and only --trainpref replaces the folder's whole set: valid/test files
    and shard folders of the old dictionary must not stay to be validated on or decoded."""
    from nmt_toolkit.errors import DataError

    old = _tiny(tmp_path, "old", "a b c\nd e\nf\ng h i\n", "A B C\nD E\nF\nG H I\n")
    dest = tmp_path / "bin"
    assert _prep(old, dest, "--validpref", old, "--testpref", old, "--num-shards", "2") == 0
    (dest / "notes.txt").write_text("the user's own file\n")
    stale = {n: (dest / n).read_bytes() for n in os.listdir(dest) if n.startswith("test.")}
    new = _tiny(tmp_path, "new", "p q\nr\n", "P Q\nR\n")
    assert _prep(new, dest, "--overwrite") == 0
    assert sorted(os.listdir(dest)) == ["dict.de.txt", "dict.en.txt", "notes.txt", "preprocess.json",
                                        "train.en-de.de.bin", "train.en-de.de.idx", "train.en-de.en.bin",
                                        "train.en-de.en.idx"]
    assert len(_load(dest, "train")) == 2
    # the files the landed code left behind: refused, not decoded with the new dictionary
    for name, data in stale.items():
        (dest / name).write_bytes(data)
    with pytest.raises(DataError, match=r"preprocess.json does not list the split 'test'"):
        _load(dest, "test")
    # a dictionary replaced by hand after binarizing: its ids no longer mean what they meant
    record = json.loads((dest / "preprocess.json").read_text())
    assert record["splits"]["train"]["dictionaries"]["en"] == Dictionary.load(str(dest / "dict.en.txt")).checksum()
    other = Dictionary.load(str(dest / "dict.en.txt"))
    other.add_symbol("zzz")
    other.save(str(dest / "dict.en.txt"))
    with pytest.raises(DataError, match=r"'train' was encoded with another dictionary than .*dict.en.txt"):
        _load(dest, "train")


def test_adding_a_split_keeps_the_others_listed(tmp_path):
    """Without --overwrite a run adds its splits to the folder: preprocess.json lists old and new ones."""
    train = _tiny(tmp_path, "train", "a b\nc\n", "x y\nz\n")
    dest = tmp_path / "bin"
    assert _prep(train, dest, "--validpref", train) == 0
    test = _tiny(tmp_path, "test", "a c\n", "z y\n")
    assert run(["--source-lang", "en", "--target-lang", "de", "--testpref", test, "--srcdict", str(dest / "dict.en.txt"),
                "--tgtdict", str(dest / "dict.de.txt"), "--destdir", str(dest), "--no-progress-bar"]) == 0
    record = json.loads((dest / "preprocess.json").read_text())
    assert list(record["splits"]) == ["train", "valid", "test"]
    assert [len(_load(dest, s)) for s in ("train", "valid", "test")] == [2, 2, 1]


def test_unwritable_destdir_user_dir_data_file_and_disk_full(tmp_path, capsys, monkeypatch):
    """One error line, no traceback, for a --destdir inside a file or an unwritable place, for --user-dir naming
    a data file, and for a disk that fills up while binarizing (here a file size limit: EFBIG, errno 27)."""
    import resource
    import subprocess
    import sys

    from nmt_toolkit import outputs

    small = _tiny(tmp_path, "small", "a b\nc\n", "x y\nz\n")
    (tmp_path / "afile").write_text("not a folder\n")
    _assert_error(capsys, _prep(small, tmp_path / "afile" / "bin"), "afile", "not a folder")

    def denied(*a, **k):  # the tests may run as root, for whom chmod 0o500 denies nothing
        raise PermissionError(13, "Permission denied")

    with monkeypatch.context() as patch:
        patch.setattr(outputs.tempfile, "mkdtemp", denied)
        _assert_error(capsys, _prep(small, tmp_path / "ro" / "bin"), f"--destdir {tmp_path / 'ro' / 'bin'}",
                      "cannot write there (Permission denied)")
    assert not (tmp_path / "ro").exists()
    _assert_error(capsys, _prep(small, tmp_path / "bin", "--user-dir", small + ".en"), "--user-dir", "small.en",
                  "not a plugin")

    dest = tmp_path / "bin"
    assert _prep(small, dest) == 0
    before = _tree(dest)
    words = "a b c d e f g h i j".split()
    big = _tiny(tmp_path, "big", "".join(" ".join(words[(i + k) % 10] for k in range(10)) + "\n" for i in range(5000)),
                "".join(" ".join(words[(i * k) % 10] for k in range(10)) + "\n" for i in range(5000)))
    limit = 64 << 10  # the .bin files need ~110 KB each

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run([sys.executable, "-m", "nmt_toolkit.cli.preprocess", "--source-lang", "en",
                           "--target-lang", "de", "--trainpref", big, "--destdir", str(dest), "--overwrite",
                           "--no-progress-bar"], capture_output=True, text=True, preexec_fn=small_disk)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr
    assert "--destdir" in errors[0] and "File too large" in errors[0] and "left as it was" in errors[0]
    assert _tree(dest) == before
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p or ".old-" in p]


def test_lines_end_at_newlines_only(tmp_path):
    """A \\r, U+2028 or U+0085 inside a line does not end it — the
    line count is the number of \\n, as for the sacrebleu command and wc -l — and a CRLF's \\r is dropped."""
    src = "a b\rc\nd\u2028e f\r\ng\x85h\n"
    tgt = "x\ny\nz\n"
    dest = tmp_path / "bin"
    assert _prep(_tiny(tmp_path, "t", src, tgt), dest) == 0
    ds = MMapIndexedDataset(str(dest / "train.en-de.en"))
    d = Dictionary.load(str(dest / "dict.en.txt"))
    assert len(ds) == 3
    assert [[d[i] for i in ds[k][:-1]] for k in range(3)] == [line.split() for line in src.split("\n")[:3]]


def test_splits_of_a_folder_without_preprocess_json_stay_loadable(tmp_path):
    """A fairseq data-bin has no preprocess.json: a test split added by nmt-preprocess lists the old splits too."""
    train = _tiny(tmp_path, "train", "a b\nc\n", "x y\nz\n")
    dest = tmp_path / "bin"
    assert _prep(train, dest, "--validpref", train) == 0
    os.remove(dest / "preprocess.json")  # as fairseq-preprocess leaves it
    test = _tiny(tmp_path, "test", "a c\n", "z y\n")
    assert run(["--source-lang", "en", "--target-lang", "de", "--testpref", test, "--srcdict", str(dest / "dict.en.txt"),
                "--tgtdict", str(dest / "dict.de.txt"), "--destdir", str(dest), "--no-progress-bar"]) == 0
    assert sorted(json.loads((dest / "preprocess.json").read_text())["splits"]) == ["test", "train", "valid"]
    assert [len(_load(dest, s)) for s in ("train", "valid", "test")] == [2, 2, 1]


def test_a_swap_that_fails_halfway_is_undone(tmp_path, capsys, monkeypatch):
    """The new set replaces the old one by renames; if one fails (here the 4th), the moves made are undone."""
    import errno

    from nmt_toolkit.data import data_bin

    old = _tiny(tmp_path, "old", "a b\nc\n", "x y\nz\n")
    dest = tmp_path / "bin"
    assert _prep(old, dest, "--validpref", old) == 0
    before = _tree(dest)
    capsys.readouterr()
    real_rename, calls = os.rename, []

    def flaky_rename(src, dst):
        calls.append(src)
        if len(calls) == 4:
            raise OSError(errno.EIO, "Input/output error", dst)
        real_rename(src, dst)

    monkeypatch.setattr(data_bin.os, "rename", flaky_rename)
    rc = _prep(_tiny(tmp_path, "new", "p q\n", "r s\n"), dest, "--overwrite")
    _assert_error(capsys, rc, "--destdir", "writing failed: Input/output error", "left as it was")
    assert len(calls) > 4 and _tree(dest) == before  # undone, file for file
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p or ".old-" in p]


def test_an_input_that_goes_away_is_named_as_an_input(tmp_path, capsys, monkeypatch):
    """An input file removed after the scan is a read error naming it, not 'writing failed'."""
    import errno

    from nmt_toolkit.data import binarize

    prefix = _tiny(tmp_path, "t", "a b\nc\n", "x y\nz\n")

    def gone(path, start, end):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)

    monkeypatch.setattr(binarize, "_read_lines", gone)
    rc = _prep(prefix, tmp_path / "bin")
    _assert_error(capsys, rc, "t.en: cannot read (No such file or directory)", "left as it was")
    assert not (tmp_path / "bin").exists()


@pytest.mark.parametrize("flag, value", [("--source-lang", "../x"), ("--target-lang", "d\u202ee"),
                                         ("--source-lang", "en\x00")])
def test_a_language_that_is_not_a_code_is_refused_before_it_names_a_file(tmp_path, capsys, flag, value):
    """A language becomes part of file names (dict.<lang>.txt, train.<src>-<tgt>.<lang>.bin): '../x' would
    write outside --destdir, U+202E would make the names lie. Refused in one line, nothing written."""
    prefix = _tiny(tmp_path, "t", "a b\nc\n", "x y\nz\n")
    args = {"--source-lang": "en", "--target-lang": "de", flag: value}
    rc = run([*[a for k, v in args.items() for a in (k, v)], "--trainpref", prefix, "--destdir",
              str(tmp_path / "bin"), "--no-progress-bar"])
    _assert_error(capsys, rc, flag, "not a language code")
    assert rc == 2 and sorted(os.listdir(tmp_path)) == ["t.de", "t.en"]


@pytest.mark.parametrize("tag", ["</s>", "<unk>", "a"])
def test_a_target_lang_tag_must_be_a_language_tag_of_the_source_dictionary(tmp_path, capsys, tag):
    """'</s>' first in every source sentence was binarized with exit 0, and every reader of the data-bin
    then refused it: the same check as theirs, before anything is written."""
    prefix = _tiny(tmp_path, "t", "__de__ a b\n__de__ c\n", "x y\nz\n")
    rc = _prep(prefix, tmp_path / "bin", "--target-lang-tag", tag)
    _assert_error(capsys, rc, f"--target-lang-tag {tag}: not a language tag of the source dictionary")
    assert not (tmp_path / "bin").exists()
    assert _prep(prefix, tmp_path / "bin", "--target-lang-tag", "__de__") == 0

"""nmt-preprocess --lang-pairs: several directions in one data-bin, fairseq's multilingual layout, one joint
dictionary; read back by our task and by fairseq 0.12.3's translation_multi_simple_epoch (when its venv is
on this machine)."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

from nmt_toolkit.cli.preprocess import run as preprocess
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.errors import DataError
from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask

MULTI30K = pathlib.Path("/work/shared/data/multi30k")
FAIRSEQ_PY = pathlib.Path("/tmp/nmt-checks/fairseq-venv/bin/python")
PAIRS = "en-de,en-fr,de-en"


def _slice(raw, name, source, n, langs=("en", "de", "fr")):
    for lang in langs:
        lines = (MULTI30K / f"{source}.{lang}").read_text(encoding="utf-8").splitlines()[:n]
        (raw / f"{name}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    if not MULTI30K.is_dir():
        pytest.skip("the shared Multi30k copy is not on this machine")
    folder = tmp_path_factory.mktemp("multi") / "raw"
    folder.mkdir()
    _slice(folder, "train", "train", 300)
    _slice(folder, "valid", "train", 40)  # words of the training text: no <unk> to tell apart
    return folder


@pytest.fixture(scope="module")
def mbin(raw):
    dest = raw.parent / "bin"
    assert preprocess(["--lang-pairs", PAIRS, "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                       "--destdir", str(dest), "--no-progress-bar"]) == 0
    return dest


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_the_layout_is_fairseqs_and_the_dictionary_is_joint(mbin, raw):
    names = set(os.listdir(mbin))
    for pair in PAIRS.split(","):
        for lang in pair.split("-"):
            for split in ("train", "valid"):
                assert {f"{split}.{pair}.{lang}.bin", f"{split}.{pair}.{lang}.idx"} <= names
    dicts = [Dictionary.load(str(mbin / f"dict.{lang}.txt")) for lang in ("en", "de", "fr")]
    assert dicts[0] == dicts[1] == dicts[2]
    words = {w for lang in ("en", "de", "fr") for line in _lines(raw / f"train.{lang}") for w in line.split()}
    assert all(w in dicts[0] for w in words)  # every word of every language's training text
    record = json.loads((mbin / "preprocess.json").read_text())
    assert record["lang_pairs"] == ["en-de", "en-fr", "de-en"] and record["langs"] == ["en", "de", "fr"]
    assert record["pairs"]["en-fr"]["splits"]["valid"]["sentences"] == 40


@pytest.mark.parametrize("pair", PAIRS.split(","))
def test_each_direction_reads_back_as_its_text(mbin, raw, pair):
    src, tgt = pair.split("-")
    task = TranslationTask.setup_task(TranslationConfig(data=str(mbin), source_lang=src, target_lang=tgt))
    for split, name in (("train", "train"), ("valid", "valid")):
        dataset = task.load_dataset(split)
        got_src = [task.src_dict.string(dataset[i]["source"]) for i in range(len(dataset))]
        got_tgt = [task.tgt_dict.string(dataset[i]["target"]) for i in range(len(dataset))]
        assert got_src == [" ".join(l.split()) for l in _lines(raw / f"{name}.{src}")]
        assert got_tgt == [" ".join(l.split()) for l in _lines(raw / f"{name}.{tgt}")]


FAIRSEQ_READS = r"""
import json, sys
from fairseq import options, tasks
data, pairs = sys.argv[1], sys.argv[2]
parser = options.get_training_parser()
args = options.parse_args_and_arch(parser, [data, "--task", "translation_multi_simple_epoch", "--arch", "transformer",
    "--lang-pairs", pairs, "--encoder-langtok", "src", "--decoder-langtok", "--max-tokens", "4000",
    "--max-source-positions", "1024", "--max-target-positions", "1024"])
task = tasks.setup_task(args)
task.load_dataset("valid", epoch=1)
d = task.source_dictionary
out = {}
for key, dataset in zip(pairs.split(","), task.datasets["valid"].datasets):  # one per pair, in their order
    out[key] = [[d.string(dataset[i]["source"]), d.string(dataset[i]["target"])] for i in range(len(dataset))]
print(json.dumps(out))
"""


@pytest.mark.skipif(not FAIRSEQ_PY.exists(), reason="fairseq 0.12.3's venv is not on this machine")
@pytest.mark.slow
def test_fairseq_multilingual_task_reads_our_data_bin(mbin, raw, tmp_path):
    """fairseq's translation_multi_simple_epoch loads the folder with its language tokens added (__en__
    first in the source with --encoder-langtok src, __de__ first in the target with --decoder-langtok) and
    every sentence is our text."""
    script = tmp_path / "reads.py"
    script.write_text(FAIRSEQ_READS)
    done = subprocess.run([str(FAIRSEQ_PY), str(script), str(mbin), PAIRS], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    for pair in PAIRS.split(","):
        src, tgt = pair.split("-")
        want = list(zip(_lines(raw / f"valid.{src}"), _lines(raw / f"valid.{tgt}")))
        assert [(s, t) for s, t in read[pair]] == [(f"__{src}__ " + " ".join(s.split()), f"__{tgt}__ " + " ".join(t.split()))
                                                   for s, t in want]


def test_a_pair_file_of_its_own_is_preferred(raw, tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    _slice(own, "train", "train", 20)
    (own / "train.en-fr.en").write_text("only this\nand that\n")
    (own / "train.en-fr.fr").write_text("seulement ceci\net cela\n")
    dest = tmp_path / "bin"
    assert preprocess(["--lang-pairs", "en-de,en-fr", "--trainpref", str(own / "train"), "--destdir", str(dest),
                       "--no-progress-bar"]) == 0
    record = json.loads((dest / "preprocess.json").read_text())
    assert record["pairs"]["en-fr"]["splits"]["train"]["sentences"] == 2
    assert record["pairs"]["en-de"]["splits"]["train"]["sentences"] == 20
    task = TranslationTask.setup_task(TranslationConfig(data=str(dest), source_lang="en", target_lang="fr"))
    dataset = task.load_dataset("train")
    assert task.tgt_dict.string(dataset[1]["target"]) == "et cela"


def test_the_bilingual_task_asks_which_direction(mbin):
    with pytest.raises(DataError, match="a multilingual data-bin .en-de, en-fr, de-en.; give --source-lang"):
        TranslationTask.setup_task(TranslationConfig(data=str(mbin)))


@pytest.mark.parametrize("flags, message", [
    (["--lang-pairs", "en-en"], "--lang-pairs en-en: 'en-en' translates a language into itself"),
    (["--lang-pairs", "en_de"], "--lang-pairs en_de: 'en_de' is not a pair SRC-TGT such as en-de"),
    (["--lang-pairs", "en-de,en-de"], "'en-de' is given twice"),
    (["--lang-pairs", "en-de", "--source-lang", "en"], "--source-lang en: not with --lang-pairs"),
    (["--lang-pairs", "en-cs"], "train.cs: no such file"),
])
def test_bad_multilingual_options_are_one_line(raw, tmp_path, capsys, flags, message):
    code = preprocess([*flags, "--trainpref", str(raw / "train"), "--destdir", str(tmp_path / "out"),
                       "--no-progress-bar"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_folder_with_files_is_left_alone_without_overwrite(raw, tmp_path, capsys):
    dest = tmp_path / "bin"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    code = preprocess(["--lang-pairs", "en-de", "--trainpref", str(raw / "train"), "--destdir", str(dest),
                       "--no-progress-bar"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and "a non-empty folder that is not a data-bin (no preprocess.json or dict.*.txt; it holds " \
                         "notes.txt)" in err
    assert os.listdir(dest) == ["notes.txt"]


def _one_direction(raw, dest, pair, dictionary, *flags, splits=("--trainpref", "train", "--validpref", "valid")):
    """fairseq's multilingual recipe, one run of it: one direction, the shared dictionary on both sides."""
    src, tgt = pair.split("-")
    prefixes = [str(raw / item) if not item.startswith("--") else item for item in splits]
    return preprocess(["--source-lang", src, "--target-lang", tgt, *prefixes, "--srcdict", str(dictionary),
                       "--tgtdict", str(dictionary), "--destdir", str(dest), "--no-progress-bar", *flags])


@pytest.fixture(scope="module")
def per_direction_bin(raw, mbin):
    """One nmt-preprocess per direction into one folder, each given the --lang-pairs run's dictionary."""
    dest = raw.parent / "per-direction"
    for pair in PAIRS.split(","):
        assert _one_direction(raw, dest, pair, mbin / "dict.en.txt") == 0
    return dest


def test_one_run_per_direction_writes_what_one_lang_pairs_run_writes(mbin, per_direction_bin):
    assert sorted(os.listdir(per_direction_bin)) == sorted(os.listdir(mbin))
    for name in os.listdir(mbin):
        if name != "preprocess.json":
            assert (per_direction_bin / name).read_bytes() == (mbin / name).read_bytes(), name
    ours, theirs = (json.loads((folder / "preprocess.json").read_text()) for folder in (per_direction_bin, mbin))
    del ours["command"], theirs["command"]
    for pair in PAIRS.split(","):  # each direction records the run that wrote it
        command = ours["pairs"][pair].pop("command")
        assert command[command.index("--source-lang") + 1] + "-" + command[command.index("--target-lang") + 1] == pair
    assert ours == theirs


def test_the_multilingual_task_reads_every_direction_of_it(per_direction_bin, raw):
    from nmt_toolkit.tasks.multilingual import MultilingualConfig, MultilingualTranslationTask

    task = MultilingualTranslationTask.setup_task(MultilingualConfig(data=str(per_direction_bin)))
    assert task.pairs == [("en", "de"), ("en", "fr"), ("de", "en")]
    for pair in PAIRS.split(","):
        src, tgt = pair.split("-")
        dataset = task.load_dataset(f"valid.{pair}")
        assert [task.src_dict.string(dataset[i]["source"]) for i in range(len(dataset))] == \
            [" ".join(line.split()) for line in _lines(raw / f"valid.{src}")]
        assert [task.tgt_dict.string(dataset[i]["target"]) for i in range(len(dataset))] == \
            [" ".join(line.split()) for line in _lines(raw / f"valid.{tgt}")]


@pytest.mark.slow
def test_nmt_train_trains_every_direction_of_it(per_direction_bin, tmp_path, capsys):
    from nmt_toolkit.cli.train import run as train
    from tests.train_helpers import TINY

    assert train([str(per_direction_bin), *TINY, "--task", "translation_multi_simple_epoch", "--encoder-langtok",
                  "src", "--decoder-langtok", "--max-update", "1", "--cpu", "--save-dir", str(tmp_path / "ck")]) == 0
    tags = {json.loads(line).get("tag") for line in capsys.readouterr().err.splitlines() if line.startswith("{")}
    assert {"valid.en-de", "valid.en-fr", "valid.de-en"} <= tags


def test_a_run_adds_splits_to_a_direction_and_refuses_what_the_folder_cannot_hold(per_direction_bin, raw, mbin,
                                                                                   tmp_path, capsys):
    dest = tmp_path / "bin"
    shutil.copytree(per_direction_bin, dest)
    assert _one_direction(raw, dest, "en-fr", mbin / "dict.en.txt", splits=("--testpref", "valid")) == 0
    record = json.loads((dest / "preprocess.json").read_text())
    assert sorted(record["pairs"]["en-fr"]["splits"]) == ["test", "train", "valid"]
    assert record["pairs"]["en-de"] == json.loads((per_direction_bin / "preprocess.json").read_text())["pairs"]["en-de"]
    assert (dest / "test.en-fr.fr.bin").read_bytes() == (dest / "valid.en-fr.fr.bin").read_bytes()
    capsys.readouterr()
    before = {name: (dest / name).read_bytes() for name in os.listdir(dest)}
    held = f"nmt-preprocess: error: --destdir {dest} holds en-de, en-fr, de-en data"
    # its own dictionary, counted from its text: not the folder's one dictionary
    assert preprocess(["--source-lang", "de", "--target-lang", "fr", "--trainpref", str(raw / "train"),
                       "--destdir", str(dest), "--no-progress-bar"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{held}; adding a direction needs one dictionary for every "
                                               f"language, and dict.de.txt and this run's de dictionary differ (")
    assert _one_direction(raw, dest, "de-fr", mbin / "dict.en.txt", "--bpe", "sentencepiece") == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"nmt-preprocess: error: --bpe sentencepiece: --destdir {dest} holds en-de, en-fr, de-en data without a "
        f"subword model; its directions share one: add de-fr without --bpe, or binarize into another --destdir"]
    assert _one_direction(raw, dest, "de-fr", mbin / "dict.en.txt", "--num-shards", "2") == 2
    assert "--num-shards 2: a data-bin of several directions holds each in one piece" in capsys.readouterr().err
    assert {name: (dest / name).read_bytes() for name in os.listdir(dest)} == before

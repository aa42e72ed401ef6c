"""--task translation_multi_simple_epoch: language tokens and the items they make equal to fairseq 0.12.3's,
temperature sampling over directions counted from the batches, per-direction validation, the checkpoint's
record of the directions, exact resume."""
import json
import os
import subprocess

import pytest

from nmt_toolkit.cli.preprocess import run as preprocess
from nmt_toolkit.cli.train import run as train
from nmt_toolkit.data.corpora import CorpusSamplingConfig, temperature_shares
from nmt_toolkit.tasks.multilingual import MultilingualConfig, MultilingualTranslationTask, fairseq_epoch_size
from tests.test_multilingual_data import FAIRSEQ_PY, PAIRS, _slice, mbin, raw  # noqa: F401 (fixtures)
from tests.train_helpers import TINY, load, same_state

FAIRSEQ_ITEMS = r"""
import json, sys
from fairseq import options, tasks
data, pairs, *flags = sys.argv[1:]
parser = options.get_training_parser()
args = options.parse_args_and_arch(parser, [data, "--task", "translation_multi_simple_epoch", "--arch", "transformer",
    "--lang-pairs", pairs, *flags, "--max-tokens", "4000", "--max-source-positions", "1024",
    "--max-target-positions", "1024"])
task = tasks.setup_task(args)
task.load_dataset("valid", epoch=1)
out = {"dict_size": len(task.source_dictionary), "pairs": {}}
for key, dataset in zip(pairs.split(","), task.datasets["valid"].datasets):
    out["pairs"][key] = [[dataset[i]["source"].tolist(), dataset[i]["target"].tolist()] for i in range(len(dataset))]
print(json.dumps(out))
"""


def _task(data, **options):
    cfg = MultilingualConfig(data=str(data), max_tokens=400, **options)
    return MultilingualTranslationTask.setup_task(cfg)


@pytest.mark.skipif(not FAIRSEQ_PY.exists(), reason="fairseq 0.12.3's venv is not on this machine")
@pytest.mark.parametrize("flags, options", [
    (["--encoder-langtok", "src", "--decoder-langtok"], {"encoder_langtok": "src", "decoder_langtok": True}),
    (["--encoder-langtok", "tgt"], {"encoder_langtok": "tgt"}),
    ([], {}),
    (["--lang-dict", "{langs}", "--encoder-langtok", "tgt", "--decoder-langtok"],
     {"lang_dict": "{langs}", "encoder_langtok": "tgt", "decoder_langtok": True}),
])
@pytest.mark.slow
def test_items_are_fairseqs_token_for_token(mbin, tmp_path, flags, options):  # noqa: F811
    script = tmp_path / "items.py"
    script.write_text(FAIRSEQ_ITEMS)
    langs = tmp_path / "langs.txt"
    langs.write_text("fr\ncs\nen\nfr\nde\n")  # not sorted, one language no direction uses, one listed twice
    flags = [f.format(langs=langs) for f in flags]
    options = {k: v.format(langs=langs) if isinstance(v, str) else v for k, v in options.items()}
    done = subprocess.run([str(FAIRSEQ_PY), str(script), str(mbin), PAIRS, *flags], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    task = _task(mbin, **options)
    assert len(task.source_dictionary) == theirs["dict_size"]
    for pair in PAIRS.split(","):
        dataset = task.load_dataset(f"valid.{pair}")
        ours = [[dataset[i]["source"].tolist(), dataset[i]["target"].tolist()] for i in range(len(dataset))]
        assert ours == theirs["pairs"][pair], pair


@pytest.fixture(scope="module")
def uneven_bin(raw):  # noqa: F811
    """en-de with 300 training pairs, en-fr with 100 of its own (train.en-fr.*)."""
    folder = raw.parent / "uneven"
    folder.mkdir()
    _slice(folder, "train", "train", 300, ("en", "de"))
    for lang in ("en", "fr"):
        lines = (raw / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:100]
        (folder / f"train.en-fr.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _slice(folder, "valid", "train", 20, ("en", "de", "fr"))
    dest = raw.parent / "uneven-bin"
    assert preprocess(["--lang-pairs", "en-de,en-fr", "--trainpref", str(folder / "train"), "--validpref",
                       str(folder / "valid"), "--destdir", str(dest), "--no-progress-bar"]) == 0
    return dest


def _pairs_in_epoch(task, epoch_itr):
    """Pairs per direction in one epoch, told by the target-language token first in every source."""
    de, fr = (task.source_dictionary.index(t) for t in ("__de__", "__fr__"))
    counts = {"en-de": 0, "en-fr": 0}
    for batch in epoch_itr.next_epoch_itr():
        first = batch["net_input"]["src_tokens"][:, 0].tolist()
        counts["en-de"] += first.count(de)
        counts["en-fr"] += first.count(fr)
        assert first.count(de) + first.count(fr) == len(first)
    return counts


def test_temperature_sampling_over_directions_worked_by_hand(uneven_bin):
    # T = 2 over 300 and 100 pairs: shares sqrt(3) : 1; fairseq's epoch keeps the largest direction's 300
    # and scales the other by 1/sqrt(3): 300 + 173.2 -> 473 pairs, 299.9 : 173.1 -> 300 and 173
    task = _task(uneven_bin, encoder_langtok="tgt", sampling_method="temperature", sampling_temperature=2.0)
    task.sample_corpora("train", CorpusSamplingConfig(), seed=3)
    task.load_dataset("train")
    assert _pairs_in_epoch(task, task.get_batch_iterator(split="train", seed=3)) == {"en-de": 300, "en-fr": 173}
    task = _task(uneven_bin, encoder_langtok="tgt")  # concat: every pair once
    task.sample_corpora("train", CorpusSamplingConfig(), seed=3)
    task.load_dataset("train")
    assert _pairs_in_epoch(task, task.get_batch_iterator(split="train", seed=3)) == {"en-de": 300, "en-fr": 100}


def test_a_temperature_near_0_gives_the_largest_direction_the_whole_epoch(uneven_bin):
    # shares ∝ n_i^(1/T) tend to 1 : 0 over 300 and 100 pairs as T → 0, and fairseq's epoch keeps the largest
    # direction's 300 and scales the other by its share relative to the largest's, 0: 300 pairs, all en-de
    for t in (1e-300, 5e-324):
        assert fairseq_epoch_size([300, 100], temperature_shares([300, 100], t)) == 300
        assert fairseq_epoch_size([300, 300, 100], temperature_shares([300, 300, 100], t)) == 600  # 2 × 300
    task = _task(uneven_bin, encoder_langtok="tgt", sampling_method="temperature", sampling_temperature=1e-300)
    task.sample_corpora("train", CorpusSamplingConfig(), seed=3)
    task.load_dataset("train")
    assert _pairs_in_epoch(task, task.get_batch_iterator(split="train", seed=3)) == {"en-de": 300, "en-fr": 0}


MULTI = ["--task", "translation_multi_simple_epoch", "--encoder-langtok", "src", "--decoder-langtok",
         "--sampling-method", "temperature", "--sampling-temperature", "2", "--cpu", "--validate-interval-updates",
         "4"]


def test_training_logs_each_direction_and_resumes_exactly(mbin, tmp_path, capfd):  # noqa: F811
    flags = [str(mbin), *TINY, *MULTI]
    assert train([*flags, "--max-update", "8", "--save-dir", str(tmp_path / "a")]) == 0
    records = [json.loads(l) for l in capfd.readouterr().err.splitlines() if l.startswith("{")]
    tags = {r.get("tag") for r in records}
    assert {"valid", "valid.en-de", "valid.en-fr", "valid.de-en"} <= tags
    assert train([*flags, "--max-update", "4", "--save-dir", str(tmp_path / "b")]) == 0
    assert train([*flags, "--max-update", "8", "--save-dir", str(tmp_path / "b")]) == 0
    straight = load(tmp_path / "a" / "checkpoint_last.pt")
    same_state(straight, load(tmp_path / "b" / "checkpoint_last.pt"))
    task_cfg = straight["config"]["task"]
    assert task_cfg["lang_pairs"] == PAIRS and task_cfg["encoder_langtok"] == "src" and task_cfg["decoder_langtok"]
    assert straight["config"]["components"]["task"] == "translation_multi_simple_epoch"
    embed = next(v for k, v in straight["model"].items() if k.endswith("embed_tokens.weight"))
    dict_size = sum(1 for _ in open(mbin / "dict.en.txt", encoding="utf-8")) + 4  # + <s> <pad> </s> <unk>
    assert embed.shape[0] == dict_size + 3  # + __de__ __en__ __fr__


@pytest.mark.parametrize("flags, message", [
    (["--corpus-weights", "1,1"], "--corpus-weights/--corpus-sampling/--upsample-primary: not with --task"),
    (["--sampling-temperature", "0"], "--sampling-temperature 0: must be"),
    (["--lang-pairs", "en-cs"], "dict.cs.txt: no such dictionary file"),
    (["--lang-pairs", "fr-de"], "train.fr-de.fr.idx: no such split"),
    (["--lang-pairs", "en-en"], "--lang-pairs en-en: 'en-en' translates a language into itself"),
])
def test_bad_multilingual_training_options_are_one_line(mbin, tmp_path, capsys, flags, message):  # noqa: F811
    code = train([str(mbin), *TINY, "--task", "translation_multi_simple_epoch", *flags, "--max-update", "1", "--cpu",
                  "--save-dir", str(tmp_path / "ck")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and message in err[-1] and not any("Traceback" in line for line in err)


def test_a_bilingual_data_bin_is_refused_by_name(tmp_path, capsys):
    from tests.train_helpers import make_bin

    data = make_bin(tmp_path)
    code = train([data, *TINY, "--task", "translation_multi_simple_epoch", "--max-update", "1", "--cpu",
                  "--save-dir", str(tmp_path / "ck")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "not a multilingual data-bin (no lang_pairs in preprocess.json); give --lang-pairs" in err[-1]


FAIRSEQ_EPOCH_SIZES = r"""
import json, sys
from fairseq.data.multilingual.sampled_multi_dataset import default_virtual_size_func
from fairseq.data.multilingual.sampling_method import temperature_sampling
cases = json.loads(sys.argv[1])
print(json.dumps([default_virtual_size_func([range(n) for n in sizes], temperature_sampling(sizes, t))
                  for sizes, t in cases]))
"""


@pytest.mark.skipif(not FAIRSEQ_PY.exists(), reason="fairseq 0.12.3's venv is not on this machine")
def test_the_epoch_of_temperature_sampling_is_as_long_as_fairseqs():
    import numpy as np

    from nmt_toolkit.data.corpora import temperature_shares
    from nmt_toolkit.tasks.multilingual import fairseq_epoch_size

    cases = [[[300, 100], 2.0], [[29000, 29000, 1000], 1.5], [[5, 1_000_000], 5.0], [[1000, 10], 1.0],
             [[7, 7, 7], 3.0], [[100, 3000, 50, 400], 100.0]]
    done = subprocess.run([str(FAIRSEQ_PY), "-c", FAIRSEQ_EPOCH_SIZES, json.dumps(cases)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    ours = [fairseq_epoch_size(sizes, temperature_shares(sizes, t)) for sizes, t in cases]
    assert ours == theirs and len(set(ours)) > 3
    assert np.isclose(temperature_shares([300, 100], 2.0)[0], 3 ** 0.5 / (3 ** 0.5 + 1))


def test_opus_mt_style_puts_the_target_tag_first(mbin, tmp_path):  # noqa: F811
    task = _task(mbin, lang_tok_style="opus_mt", encoder_langtok="tgt")
    plain = _task(mbin)
    d = task.source_dictionary
    assert [d[len(d) - 3 + k] for k in range(3)] == [">>de<<", ">>en<<", ">>fr<<"]
    for pair in PAIRS.split(","):
        tagged, untagged = task.load_dataset(f"valid.{pair}"), plain.load_dataset(f"valid.{pair}")
        tag = d.index(f">>{pair.split('-')[1]}<<")
        for i in range(len(tagged)):
            assert tagged[i]["source"].tolist() == [tag, *untagged[i]["source"].tolist()]
            assert tagged[i]["target"].tolist() == untagged[i]["target"].tolist()


def test_a_lang_dict_without_a_used_language_is_one_line(mbin, tmp_path, capsys):  # noqa: F811
    langs = tmp_path / "langs.txt"
    langs.write_text("en\nde\n")
    code = train([str(mbin), *TINY, "--task", "translation_multi_simple_epoch", "--lang-dict", str(langs),
                  "--max-update", "1", "--cpu", "--save-dir", str(tmp_path / "ck")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and f"--lang-dict {langs}: lacks fr, which --lang-pairs uses" in err[-1]


def test_a_language_listed_twice_in_the_lang_dict_gets_one_token(mbin, tmp_path, caplog):  # noqa: F811
    # fairseq adds __en__ once (its add_symbol keeps the first id): the tokens follow the dictionary's last
    # entry in first-listed order, en de fr, and the task's languages (what a model folder records) are distinct
    langs = tmp_path / "langs.txt"
    langs.write_text("en\nde\n\nfr\nen\n")
    plain_size = len(_task(mbin).source_dictionary) - 3
    with caplog.at_level("WARNING", logger="nmt_toolkit.tasks.multilingual"):
        task = _task(mbin, lang_dict=str(langs))
    d = task.source_dictionary
    assert task.langs == ["en", "de", "fr"] and len(d) == plain_size + 3
    assert [d[plain_size + k] for k in range(3)] == ["__en__", "__de__", "__fr__"]
    assert f"--lang-dict {langs} line 5: en again (first on line 1); its token is added once" in caplog.text


def test_a_lang_dict_line_that_is_not_a_language_code_is_one_line(mbin, tmp_path, capsys):  # noqa: F811
    """Its languages become tokens (__de__) and, in a model folder, file names: '../x' or U+202E are refused
    by file and line before anything is built."""
    langs = tmp_path / "langs.txt"
    langs.write_text("en\nde\nf\u202er\n")
    code = train([str(mbin), *TINY, "--task", "translation_multi_simple_epoch", "--lang-dict", str(langs),
                  "--max-update", "1", "--cpu", "--save-dir", str(tmp_path / "ck")])
    err = [line for line in capsys.readouterr().err.splitlines() if ": error:" in line]
    assert code == 1 and len(err) == 1, err
    assert f"--lang-dict {langs} line 3 'f\\u202er': not a language code" in err[0]
    assert not (tmp_path / "ck" / "checkpoint_last.pt").exists()

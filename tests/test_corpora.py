"""Several training corpora: nmt-preprocess --trainpref a,b (fairseq's train, train1 layout), and nmt-train
drawing each epoch from them by weight, by temperature or by fairseq's --upsample-primary; resume exact.

The two corpora speak different "languages" (corpus a's words are a0…a29, corpus b's b0…b29), so the share
of each in an epoch is read from the batches' own tokens, not from the sampler's bookkeeping.
"""
import random

import numpy as np
import pytest

from nmt_toolkit.cli.preprocess import run as preprocess
from nmt_toolkit.cli.train import run as train
from nmt_toolkit.data.corpora import CorpusSamplingConfig, draw, epoch_counts, temperature_shares
from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask
from tests.train_helpers import TINY, load, same_state


def _write_corpus(folder, name, letter, n, seed):
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        words = [f"{letter}{rng.randrange(30)}" for _ in range(rng.randint(3, 10))]
        src.append(" ".join(words))
        tgt.append(" ".join(w.upper() for w in reversed(words)))
    (folder / f"{name}.xx").write_text("\n".join(src) + "\n")
    (folder / f"{name}.yy").write_text("\n".join(tgt) + "\n")
    return src


@pytest.fixture(scope="module")
def corpora_bin(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    raw = root / "raw"
    raw.mkdir()
    _write_corpus(raw, "a", "a", 200, 1)
    _write_corpus(raw, "b", "b", 200, 2)
    _write_corpus(raw, "valid", "a", 30, 3)
    assert preprocess(["--source-lang", "xx", "--target-lang", "yy", "--trainpref", f"{raw / 'a'},{raw / 'b'}",
                       "--validpref", str(raw / "valid"), "--destdir", str(root / "bin"), "--no-progress-bar"]) == 0
    return root


def _task(data, **sampling):
    task = TranslationTask.setup_task(TranslationConfig(data=str(data), max_tokens=300))
    task.sample_corpora("train", CorpusSamplingConfig(**sampling), seed=5)
    task.load_dataset("train", epoch=1)
    return task


def _share_of_a(task, epoch_itr):
    """Pairs from corpus a among the pairs of one epoch's batches, told by their source words."""
    first_a = {task.src_dict.index(f"a{i}") for i in range(30)}
    from_a = from_b = 0
    for batch in epoch_itr.next_epoch_itr(shuffle=True):
        first = batch["net_input"]["src_tokens"][:, 0].tolist()
        from_a += sum(t in first_a for t in first)
        from_b += sum(t not in first_a for t in first)
    assert task.src_dict.unk() not in first_a
    return from_a / (from_a + from_b), from_a + from_b


# ------------------------------------------------------------------------------------------ nmt-preprocess


def test_trainpref_with_two_prefixes_writes_train_and_train1(corpora_bin):
    import json

    bin_dir = corpora_bin / "bin"
    record = json.loads((bin_dir / "preprocess.json").read_text())
    assert list(record["splits"]) == ["train", "train1", "valid"]
    assert record["splits"]["train1"]["xx"]["file"] == str(corpora_bin / "raw" / "b.xx")
    task = TranslationTask.setup_task(TranslationConfig(data=str(bin_dir)))
    for split, name in (("train", "a"), ("train1", "b")):
        lines = (corpora_bin / "raw" / f"{name}.xx").read_text().splitlines()
        dataset = task.load_dataset(split)
        assert [task.src_dict.string(dataset[i]["source"]) for i in range(len(dataset))] == lines
    # the dictionary counts both corpora: every word of b is known
    assert all(f"b{i}" in task.src_dict for i in range(30)) and all(f"a{i}" in task.src_dict for i in range(30))


def test_one_training_corpus_again_drops_the_old_train1(corpora_bin, tmp_path):
    import json
    import shutil

    bin_dir = tmp_path / "bin"
    shutil.copytree(corpora_bin / "bin", bin_dir)
    raw = corpora_bin / "raw"
    assert preprocess(["--source-lang", "xx", "--target-lang", "yy", "--trainpref", str(raw / "a"),
                       "--srcdict", str(bin_dir / "dict.xx.txt"), "--tgtdict", str(bin_dir / "dict.yy.txt"),
                       "--destdir", str(bin_dir), "--no-progress-bar"]) == 0
    assert set(json.loads((bin_dir / "preprocess.json").read_text())["splits"]) == {"train", "valid"}
    assert not list(bin_dir.glob("train1.*"))


@pytest.mark.parametrize("flags, message", [
    (["--trainpref", ","], "--trainpref ',': names no file prefix"),
    (["--trainpref", "{raw}/a,{raw}/b", "--num-shards", "2"], "--num-shards 2: shards are for one training corpus"),
    (["--trainpref", "{raw}/a,{raw}/nothing"], "nothing.xx: no such file"),
])
def test_bad_trainpref_is_one_line(corpora_bin, tmp_path, capsys, flags, message):
    raw = corpora_bin / "raw"
    flags = [f.format(raw=raw) for f in flags]
    code = preprocess(["--source-lang", "xx", "--target-lang", "yy", *flags, "--destdir", str(tmp_path / "out"),
                       "--no-progress-bar"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------ counts, by hand


def test_epoch_counts_worked_by_hand():
    # weights 3:1 over 200 + 200 pairs: 400 per epoch, 300 and 100
    assert epoch_counts([200, 200], CorpusSamplingConfig(corpus_weights="3,1")) == [300, 100]
    # temperature 2 over 900 and 100 pairs: sqrt(0.9) : sqrt(0.1) = 3 : 1 of 1000
    assert epoch_counts([900, 100], CorpusSamplingConfig(corpus_sampling="temperature",
                                                         corpus_temperature=2.0)) == [750, 250]
    # temperature 1 is by size; concat is every pair once; fairseq's --upsample-primary 3 reads corpus 0 3 times
    assert epoch_counts([900, 100], CorpusSamplingConfig(corpus_sampling="temperature")) == [900, 100]
    assert epoch_counts([900, 100], CorpusSamplingConfig()) == [900, 100]
    assert epoch_counts([900, 100], CorpusSamplingConfig(upsample_primary=3)) == [2700, 100]
    # shares 1/3 each of 10: 3.33 → the largest remainders, earlier corpus first among equals: 4, 3, 3
    assert epoch_counts([5, 3, 2], CorpusSamplingConfig(corpus_weights="1,1,1")) == [4, 3, 3]


def test_a_temperature_near_0_gives_the_largest_corpus_the_whole_epoch():
    # shares ∝ n_i^(1/T): as T → 0 the largest corpus's share tends to 1, so an epoch of N = 2900 + 300 = 3200
    # pairs is 3200 of the first and 0 of the second; equally largest corpora share it, 700 → 350 + 350 + 0.
    # Each T here underflows every (n_i/N)^(1/T) (0.906^10000 ≈ e^-986), 5e-324 is the smallest T > 0.
    for t in (1e-4, 1e-300, 5e-324):
        cfg = CorpusSamplingConfig(corpus_sampling="temperature", corpus_temperature=t)
        assert epoch_counts([2900, 300], cfg) == [3200, 0], t
        assert epoch_counts([300, 300, 100], cfg) == [350, 350, 0], t
        assert epoch_counts([100, 300], cfg) == [0, 400], t
    assert temperature_shares([5], 1e-300).tolist() == [1.0]  # one corpus: all of it


def test_weights_are_relative_however_large():
    # 1e308 : 1e308 is 1 : 1 of 3200 pairs; 1.5e308 : 0.5e308 is 3 : 1 (2400 + 800), though each sum is past
    # the largest float; 1e308 : 1e-308 gives the second corpus 1e-616 of the epoch: none of 3200
    assert epoch_counts([2900, 300], CorpusSamplingConfig(corpus_weights="1e308,1e308")) == [1600, 1600]
    assert epoch_counts([2900, 300], CorpusSamplingConfig(corpus_weights="1.5e308,0.5e308")) == [2400, 800]
    assert epoch_counts([2900, 300], CorpusSamplingConfig(corpus_weights="1e308,1e-308")) == [3200, 0]
    assert epoch_counts([2900, 300], CorpusSamplingConfig(corpus_weights="5e-324,1e-323")) == [1067, 2133]


def test_draw_repeats_evenly_and_samples_without_replacement():
    picked = draw([10, 40], [25, 17], seed=1, epoch=1)
    counts = np.bincount(picked[0], minlength=10)
    assert counts.sum() == 25 and set(counts.tolist()) == {2, 3}  # every pair twice, 5 of them once more
    assert len(picked[1]) == 17 and len(set(picked[1].tolist())) == 17 and picked[1].max() < 40
    again = draw([10, 40], [25, 17], seed=1, epoch=1)
    assert all(np.array_equal(x, y) for x, y in zip(picked, again))  # a seed and an epoch fix the draw
    assert not np.array_equal(draw([10, 40], [25, 17], seed=1, epoch=2)[1], picked[1])
    assert not np.array_equal(draw([10, 40], [25, 17], seed=2, epoch=1)[1], picked[1])


# ------------------------------------------------------------------------------------------ an epoch's share


def test_weights_3_to_1_give_75_percent_of_an_epoch(corpora_bin):
    task = _task(corpora_bin / "bin", corpus_weights="3,1")
    share, total = _share_of_a(task, task.get_batch_iterator(split="train", seed=5))
    assert abs(share - 0.75) <= 0.02 and total == 400
    # without weights the same corpora are read once each: half and half
    plain = _task(corpora_bin / "bin")
    share, total = _share_of_a(plain, plain.get_batch_iterator(split="train", seed=5))
    assert share == 0.5 and total == 400


def test_upsample_primary_and_temperature_shares(corpora_bin):
    task = _task(corpora_bin / "bin", upsample_primary=3)
    share, total = _share_of_a(task, task.get_batch_iterator(split="train", seed=5))
    assert share == 0.75 and total == 800  # 3 × 200 of a, 200 of b
    task = _task(corpora_bin / "bin", corpus_sampling="temperature", corpus_temperature=5.0)
    share, total = _share_of_a(task, task.get_batch_iterator(split="train", seed=5))
    assert share == 0.5 and total == 400  # equal sizes: equal shares at any temperature


def test_each_epoch_draws_anew_and_a_resumed_iterator_draws_the_same(corpora_bin):
    task = _task(corpora_bin / "bin", corpus_weights="1,3")
    itr = task.get_batch_iterator(split="train", seed=5)
    epochs = [[b["net_input"]["src_tokens"].tolist() for b in itr.next_epoch_itr()]
              for _ in range(2)]
    assert epochs[0] != epochs[1]
    # a new task (a resumed process) at epoch 2, position 3: exactly the rest of epoch 2
    task2 = TranslationTask.setup_task(TranslationConfig(data=str(corpora_bin / "bin"), max_tokens=300))
    task2.sample_corpora("train", CorpusSamplingConfig(corpus_weights="1,3"), seed=5)
    task2.load_dataset("train", epoch=2)
    itr2 = task2.get_batch_iterator(split="train", seed=5, epoch=2)
    itr2.load_state_dict({"epoch": 2, "iterations_in_epoch": 3, "shuffle": True})
    assert [b["net_input"]["src_tokens"].tolist() for b in itr2.next_epoch_itr()] == epochs[1][3:]


# ------------------------------------------------------------------------------------------ nmt-train


def test_mid_epoch_resume_with_weights_is_bit_exact(corpora_bin, tmp_path, capfd):
    # --max-tokens 200 cuts the 400 drawn pairs into 18 batches: update 9 is mid-epoch 1, 27 mid-epoch 2
    flags = [str(corpora_bin / "bin"), *TINY, "--corpus-weights", "3,1", "--cpu", "--log-format", "simple"]
    assert train([*flags, "--max-update", "27", "--save-dir", str(tmp_path / "a")]) == 0
    err = capfd.readouterr().err
    assert "train: epoch 1 reads 400 pairs: train 300 of 200 (75.0%), train1 100 of 200 (25.0%)" in err
    assert "train: epoch 2 reads 400 pairs" in err
    assert train([*flags, "--max-update", "9", "--save-dir", str(tmp_path / "b")]) == 0
    half = load(tmp_path / "b" / "checkpoint_last.pt")["train_state"]["iterator"]
    assert half["epoch"] == 1 and half["iterations_in_epoch"] == 9
    assert train([*flags, "--max-update", "27", "--save-dir", str(tmp_path / "b")]) == 0
    assert "resumed from" in capfd.readouterr().err
    straight, resumed = load(tmp_path / "a" / "checkpoint_last.pt"), load(tmp_path / "b" / "checkpoint_last.pt")
    assert straight["train_state"]["epoch"] == 2
    same_state(straight, resumed)


@pytest.mark.parametrize("flags, message", [
    (["--corpus-weights", "3"], "--corpus-weights 3: 1 weight for 2 training corpora (train, train1)"),
    (["--corpus-weights", "3,x"], "--corpus-weights 3,x: give one number ≥ 0 per training corpus"),
    (["--corpus-weights", "0,0"], "--corpus-weights 0,0: give one number ≥ 0 per training corpus"),
    (["--corpus-temperature", "0"], "--corpus-temperature 0: must be"),
    (["--corpus-weights", "1,1", "--corpus-sampling", "temperature"], "both set the shares"),
    (["--upsample-primary", "2", "--corpus-weights", "1,1"], "--upsample-primary 2 goes with"),
])
def test_bad_sampling_options_are_one_line_exit_2(corpora_bin, tmp_path, capsys, flags, message):
    code = train([str(corpora_bin / "bin"), *TINY, *flags, "--max-update", "1", "--cpu",
                  "--save-dir", str(tmp_path / "ck")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and message in err[-1] and not any("Traceback" in line for line in err)


def test_upsample_primary_with_one_corpus_is_refused(tmp_path, capsys):
    from tests.train_helpers import make_bin

    data = make_bin(tmp_path)
    code = train([data, *TINY, "--upsample-primary", "2", "--max-update", "1", "--cpu",
                  "--save-dir", str(tmp_path / "ck")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "--upsample-primary 2: the data-bin holds one training corpus (train)" in err[-1]


FAIRSEQ_PY = "/tmp/nmt-checks/fairseq-venv/bin/python"
FAIRSEQ_TRAIN_SET = r"""
import collections, json, sys
from fairseq import options, tasks
data, upsample = sys.argv[1:]
parser = options.get_training_parser()
args = options.parse_args_and_arch(parser, [data, "--task", "translation", "--arch", "transformer", "--source-lang",
    "xx", "--target-lang", "yy", "--upsample-primary", upsample, "--max-tokens", "4000"])
task = tasks.setup_task(args)
task.load_dataset("train", epoch=1, combine=True)  # as fairseq-train loads its training split
dataset = task.datasets["train"]
d = task.source_dictionary
print(json.dumps(collections.Counter(d.string(dataset[i]["source"]) for i in range(len(dataset)))))
"""


@pytest.mark.skipif(not __import__("os").path.exists(FAIRSEQ_PY), reason="fairseq 0.12.3's venv is not here")
@pytest.mark.slow
def test_upsample_primary_reads_what_fairseqs_translation_task_reads(corpora_bin, tmp_path):
    """fairseq's translation task concatenates train and train1 of our data-bin with --upsample-primary 3:
    the same pairs, each as many times, as one epoch here."""
    import collections
    import json
    import os
    import subprocess

    done = subprocess.run([FAIRSEQ_PY, "-c", FAIRSEQ_TRAIN_SET, str(corpora_bin / "bin"), "3"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    task = _task(corpora_bin / "bin", upsample_primary=3)
    dataset = task.dataset("train")
    ours = collections.Counter(task.src_dict.string(dataset[i]["source"]) for i in range(len(dataset)))
    assert ours == collections.Counter(theirs) and sum(ours.values()) == 800

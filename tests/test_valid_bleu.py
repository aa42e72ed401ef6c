"""--eval-bleu: the BLEU nmt-train logs at a validation is sacreBLEU's corpus BLEU of what nmt-generate outputs
for the same checkpoint and search options, against the raw reference lines; and it selects checkpoint_best.pt.

A tiny model trained for a few updates translates badly, so the search forces the first two reference tokens
(``prefix_size``: nmt-generate's --prefix-size): the hypotheses then share n-grams with the references and
BLEU is a number worth comparing, not 0.
"""
import json
import pathlib

import pytest

from nmt_toolkit.cli.generate import run as generate
from nmt_toolkit.cli.train import run as train
from tests.train_helpers import TINY, load, make_bin

ARGS = '{"beam": 2, "prefix_size": 2, "max_len_b": 20}'


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_bin(tmp_path_factory.mktemp("tinyb"))


def _valid_rows(err):
    return [r for r in (json.loads(l) for l in err.splitlines() if l.startswith("{")) if r.get("tag") == "valid"]


def test_logged_bleu_is_sacrebleu_of_nmt_generate_output(tiny_bin, tmp_path, capsys):
    import sacrebleu

    assert train([tiny_bin, *TINY, "--max-update", "8", "--validate-interval-updates", "4", "--eval-bleu",
                  "--eval-bleu-args", ARGS, "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric",
                  "--save-dir", str(tmp_path)]) == 0
    rows = _valid_rows(capsys.readouterr().err)
    assert [r["num_updates"] for r in rows] == [0, 4, 8] and all("valid_bleu" in r for r in rows)
    logged = rows[-1]["valid_bleu"]
    best = load(tmp_path / "checkpoint_best.pt")["train_state"]  # the start's validation does not count
    assert round(best["best"], 2) == max(r["valid_bleu"] for r in rows[1:])
    assert round(rows[-1]["valid_best_bleu"], 2) == max(r["valid_bleu"] for r in rows[1:])

    assert generate([tiny_bin, "--path", str(tmp_path / "checkpoint_last.pt"), "--gen-subset", "valid", "--beam", "2",
                     "--prefix-size", "2", "--max-len-b", "20", "--no-cpu-packed-linear"]) == 0
    out = capsys.readouterr().out
    hyps = {int(l.split("\t")[0][2:]): l.split("\t")[2] for l in out.splitlines() if l.startswith("D-")}
    refs = (pathlib.Path(tiny_bin).parent / "raw" / "valid.yy").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == len(refs) == 40
    want = sacrebleu.corpus_bleu([hyps[i] for i in range(len(refs))], [refs]).score
    print("valid BLEU logged", logged, "sacrebleu of nmt-generate", want)
    assert want > 1.0  # a number worth comparing
    assert logged == round(want, 2)


@pytest.mark.parametrize("flags, message", [
    (["--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"],
     "--best-checkpoint-metric bleu needs --eval-bleu"),
    (["--eval-bleu", "--best-checkpoint-metric", "bleu"], "needs --maximize-best-checkpoint-metric"),
    (["--eval-bleu", "--eval-bleu-args", "{beam: 2}"], "--eval-bleu-args: not JSON"),
    (["--eval-bleu", "--eval-bleu-args", '{"beem": 2}'], "--eval-bleu-args: unknown key 'beem'; did you mean beam?"),
    (["--eval-bleu", "--eval-bleu-args", '{"beam": 0}'], "--eval-bleu-args: beam 0: must be an integer in [1, 1000]"),
    (["--eval-bleu", "--disable-validation"], "--eval-bleu needs validation"),
    (["--best-checkpoint-metric", "accuracy"], "unknown --best-checkpoint-metric 'accuracy': validation produces "
                                               "loss, nll_loss, ppl, and bleu with --eval-bleu"),
])
def test_eval_bleu_usage_errors(tiny_bin, tmp_path, capsys, flags, message):
    assert train([tiny_bin, *TINY, "--max-update", "1", *flags, "--save-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and "Traceback" not in "\n".join(err), err[-1]
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_two_ranks_sum_their_statistics(tiny_bin, tmp_path, capfd, monkeypatch):
    """Each rank decodes its shard (here 2 of the 3 batches and 1); the BLEU of the start's validation, same weights
    everywhere, must be the one-process BLEU of the whole split, not an average of two shard BLEUs."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    flags = [tiny_bin, *TINY, "--max-update", "1", "--eval-bleu", "--eval-bleu-args", ARGS, "--cpu", "--dropout", "0"]
    assert train([*flags, "--save-dir", str(tmp_path / "one")]) == 0
    one = _valid_rows(capfd.readouterr().err)[0]
    assert train([*flags, "--distributed-world-size", "2", "--save-dir", str(tmp_path / "two")]) == 0
    two = _valid_rows(capfd.readouterr().err)[0]
    assert one["num_updates"] == two["num_updates"] == 0
    assert one["valid_bleu"] > 0.5 and two["valid_bleu"] == one["valid_bleu"]
    assert two["valid_loss"] == one["valid_loss"]

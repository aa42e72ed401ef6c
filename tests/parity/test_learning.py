"""The same short recipe learns as well here as in fairseq (real Multi30k, a CI-sized run).

4,000 Multi30k training pairs, 500 validation pairs, one joint sentencepiece BPE model of 2,000 pieces;
2+2 layers, d_model 128, d_ff 512, 4 heads, shared embeddings, post-norm, dropout 0.1; Adam (0.9,
0.98), inverse_sqrt lr 2e-3 with 100 warm-up updates, label smoothing 0.1, --max-tokens 2048, seed 1,
300 updates. fairseq-fixed 0.12.3.1 on the same encoded text (``fairseq_learning.sh``; README.md) reaches
the validation nll in ``FAIRSEQ_VALID_NLL``; we must come within 2 % of their mean.

Before fairseq's initialisation was adopted this run ended at 5.129 (seed 1; our seeds 1-3 now: 4.813,
4.907, 4.896): the bar (1.02 x 4.841 = 4.938) catches that regression.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics

import pytest

from nmt_toolkit.cli.preprocess import run as preprocess
from nmt_toolkit.cli.train import run as train

#: fairseq-fixed 0.12.3.1, seeds 1, 2, 3: validation nll (base 2) after update 300 (README.md has the command)
FAIRSEQ_VALID_NLL = (4.830, 4.846, 4.848)
#: the joint dictionary nmt-preprocess builds for this sample; fairseq's numbers were made on its encoding
DICT_SHA256 = "056c8bc71b2afe77279ae2bbafbcca577331c9fde9fb73fdfde6a8b6c9837e05"

RECIPE = ["--arch", "transformer_tiny", "--encoder-layers", "2", "--decoder-layers", "2", "--embed-dim", "128",
          "--ffn-embed-dim", "512", "--attention-heads", "4", "--share-all-embeddings", "--dropout", "0.1",
          "--optimizer", "adam", "--adam-betas", "0.9,0.98", "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt",
          "--warmup-updates", "100", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
          "--max-tokens", "2048", "--max-update", "300", "--seed", "1", "--no-save", "--log-format", "json",
          "--log-interval", "100"]


def _sample(data_dir, raw):
    raw.mkdir()
    for split, name, n in (("train", "train", 4000), ("valid", "val", 500)):
        for lang in ("en", "de"):
            text = (data_dir / "multi30k" / f"{name}.{lang}").read_text(encoding="utf-8")
            (raw / f"{split}.{lang}").write_text("\n".join(text.split("\n")[:n]) + "\n", encoding="utf-8")


@pytest.mark.slow
def test_multi30k_recipe_reaches_fairseqs_validation_nll(data_dir, tmp_path, capfd):
    raw, dest = tmp_path / "raw", tmp_path / "bin"
    _sample(data_dir, raw)
    assert preprocess(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(raw / "train"),
                       "--validpref", str(raw / "valid"), "--bpe", "sentencepiece", "--bpe-vocab-size", "2000",
                       "--joined-dictionary", "--workers", "1", "--destdir", str(dest), "--no-progress-bar"]) == 0
    digest = hashlib.sha256((dest / "dict.en.txt").read_bytes()).hexdigest()
    assert digest == DICT_SHA256, ("the sentencepiece model differs from the one fairseq's numbers were made with "
                                   "(a new sentencepiece?): regenerate them with tests/parity/fairseq_learning.sh")
    if os.environ.get("NMT_TOOLKIT_KEEP_LEARNING_BIN"):
        shutil.copytree(tmp_path, os.environ["NMT_TOOLKIT_KEEP_LEARNING_BIN"], dirs_exist_ok=True)
    capfd.readouterr()
    assert train([str(dest), *RECIPE, "--save-dir", str(tmp_path / "ck")]) == 0
    rows = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    valid = [r for r in rows if "valid_nll_loss" in r]
    assert valid and valid[-1].get("num_updates", 300) == 300, valid[-1:]
    ours = valid[-1]["valid_nll_loss"]
    theirs = statistics.mean(FAIRSEQ_VALID_NLL)
    print(f"valid nll after 300 updates: ours {ours:.3f}, fairseq {FAIRSEQ_VALID_NLL} (mean {theirs:.3f})")
    assert ours <= 1.02 * theirs, f"validation nll {ours:.3f} is more than 2 % above fairseq's {theirs:.3f}"

"""The CI-sized Multi30k run that tests/parity/test_learning.py holds against fairseq's validation nll,
trained once a session: the CTranslate2 agreement test decodes the same checkpoint instead of training a
second model of the same size.

4,000 Multi30k training pairs, 500 validation pairs, 1,000 test pairs (test_2016_flickr), one joint
sentencepiece BPE model of 2,000 pieces learned on the training text only; 2+2 layers, d_model 128, d_ff
512, 4 heads, shared embeddings, post-norm, dropout 0.1; Adam (0.9, 0.98), inverse_sqrt lr 2e-3 with 100
warm-up updates, label smoothing 0.1, --max-tokens 2048, seed 1, 300 updates.
"""
from __future__ import annotations

import contextlib
import io
import json
import pathlib
from dataclasses import dataclass

RECIPE = ["--arch", "transformer_tiny", "--encoder-layers", "2", "--decoder-layers", "2", "--embed-dim", "128",
          "--ffn-embed-dim", "512", "--attention-heads", "4", "--share-all-embeddings", "--dropout", "0.1",
          "--optimizer", "adam", "--adam-betas", "0.9,0.98", "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt",
          "--warmup-updates", "100", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
          "--max-tokens", "2048", "--max-update", "300", "--seed", "1", "--log-format", "json",
          "--log-interval", "100"]

SAMPLE = (("train", "train", 4000), ("valid", "val", 500), ("test", "test_2016_flickr", 1000))


@dataclass
class LearningRun:
    raw: pathlib.Path          # train/valid/test .en/.de as plain text
    data: pathlib.Path         # the data-bin
    checkpoint: pathlib.Path   # checkpoint_last.pt after update 300
    log_rows: list             # the JSON rows nmt-train logged


def write_sample(data_dir: pathlib.Path, raw: pathlib.Path) -> None:
    raw.mkdir(parents=True)
    for split, name, n in SAMPLE:
        for lang in ("en", "de"):
            text = (data_dir / "multi30k" / f"{name}.{lang}").read_text(encoding="utf-8")
            (raw / f"{split}.{lang}").write_text("\n".join(text.split("\n")[:n]) + "\n", encoding="utf-8")


def train_learning_run(data_dir: pathlib.Path, root: pathlib.Path) -> LearningRun:
    from nmt_toolkit.cli.preprocess import run as preprocess
    from nmt_toolkit.cli.train import run as train

    raw, data, ck = root / "raw", root / "bin", root / "ck"
    write_sample(data_dir, raw)
    assert preprocess(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(raw / "train"),
                       "--validpref", str(raw / "valid"), "--testpref", str(raw / "test"), "--bpe", "sentencepiece",
                       "--bpe-vocab-size", "2000", "--joined-dictionary", "--workers", "1", "--destdir", str(data),
                       "--no-progress-bar"]) == 0
    log = io.StringIO()
    with contextlib.redirect_stderr(log):
        status = train([str(data), *RECIPE, "--save-dir", str(ck), "--no-epoch-checkpoints",
                        "--save-interval", "1000"])
    assert status == 0, log.getvalue()[-2000:]
    rows = [json.loads(line) for line in log.getvalue().splitlines() if line.startswith("{")]
    return LearningRun(raw, data, ck / "checkpoint_last.pt", rows)

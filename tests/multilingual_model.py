"""A tiny multilingual model (en→de and en→fr, 1+1 layers, d=32, sentencepiece) trained once a test session on
Multi30k, for the tests of multilingual model folders and CTranslate2 exports, which read it and never write
into it."""
from __future__ import annotations

import pathlib
from dataclasses import dataclass

import pytest

from nmt_toolkit.cli.preprocess import run as preprocess
from nmt_toolkit.cli.train import run as train
from tests.test_multilingual_data import MULTI30K, _slice
from tests.train_helpers import TINY

PAIRS = "en-de,en-fr"
#: every direction the tests decode: two trained ones and a zero-shot one
DIRECTIONS = (("en", "de"), ("en", "fr"), ("de", "fr"))


@dataclass(frozen=True)
class TinyMultilingual:
    raw: pathlib.Path  # train.{en,de,fr}, valid.{en,de,fr}
    data: pathlib.Path  # the multilingual data-bin
    checkpoint: pathlib.Path  # checkpoint_best.pt
    saved_folder: pathlib.Path  # what nmt-train --save-model-folder wrote from it

    def lines(self, lang: str, n: int = 40) -> list[str]:
        return (self.raw / f"valid.{lang}").read_text(encoding="utf-8").splitlines()[:n]


_BUILT: dict = {}


def tiny_multilingual_model(tmp_path_factory) -> TinyMultilingual:
    """The model, trained on first use in this session (about 15 s on one core)."""
    key = str(tmp_path_factory.getbasetemp())
    if key not in _BUILT:
        if not MULTI30K.is_dir():
            pytest.skip("the shared Multi30k copy is not on this machine")
        root = tmp_path_factory.mktemp("tiny-multilingual")
        raw = root / "raw"
        raw.mkdir()
        _slice(raw, "train", "train", 300)
        _slice(raw, "valid", "train", 40)  # words of the training text: hypotheses of some substance
        data = root / "bin"
        assert preprocess(["--lang-pairs", PAIRS, "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                           "--bpe", "sentencepiece", "--bpe-vocab-size", "400", "--destdir", str(data),
                           "--no-progress-bar"]) == 0
        ck = root / "ck"
        assert train([str(data), *TINY, "--task", "translation_multi_simple_epoch", "--encoder-langtok", "src",
                      "--decoder-langtok", "--lr", "1e-2", "--max-update", "300", "--cpu", "--save-dir",
                      str(ck), "--save-model-folder", str(root / "saved.nmt")]) == 0
        _BUILT[key] = TinyMultilingual(raw, data, ck / "checkpoint_best.pt", root / "saved.nmt")
    return _BUILT[key]

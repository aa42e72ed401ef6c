"""Tiny synthetic data-bin and tiny-model flags shared by the training tests."""
from __future__ import annotations

import random

import torch

TINY = ["--arch", "transformer_tiny", "--embed-dim", "32", "--ffn-embed-dim", "64", "--encoder-layers", "1",
        "--decoder-layers", "1", "--attention-heads", "2", "--max-tokens", "200", "--optimizer", "adam",
        "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "5",
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--seed", "3",
        "--log-format", "json", "--log-interval", "1", "--no-epoch-checkpoints"]


def make_bin(root) -> str:
    """300 synthetic sentence pairs (a word-substitution 'language'), binarized by nmt-preprocess."""
    from nmt_toolkit.cli.preprocess import run as preprocess

    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    raw = root / "raw"
    raw.mkdir()
    for split, n in (("train", 300), ("valid", 40)):
        src, tgt = [], []
        for _ in range(n):
            s = [rng.choice(words) for _ in range(rng.randint(3, 12))]
            src.append(" ".join(s))
            tgt.append(" ".join(w.replace("w", "v") for w in reversed(s)))
        (raw / f"{split}.xx").write_text("\n".join(src) + "\n")
        (raw / f"{split}.yy").write_text("\n".join(tgt) + "\n")
    dest = root / "bin"
    rc = preprocess(["--source-lang", "xx", "--target-lang", "yy", "--trainpref", str(raw / "train"),
                     "--validpref", str(raw / "valid"), "--destdir", str(dest), "--workers", "1",
                     "--no-progress-bar"])
    assert rc == 0
    return str(dest)


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def max_diff(a: dict, b: dict) -> float:
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def same_state(a: dict, b: dict, train_keys=("num_updates", "iterator")) -> None:
    """Assert two checkpoints hold the same training state, bit for bit: model, optimizer, scheduler, data position."""
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for i in sa:
        for k in sa[i]:
            assert torch.equal(torch.as_tensor(sa[i][k]), torch.as_tensor(sb[i][k])), (i, k)
    assert a["lr_scheduler"] == b["lr_scheduler"]
    for k in train_keys:
        assert a["train_state"][k] == b["train_state"][k], k


def random_pairs(n: int = 300, seed: int = 0, max_len: int = 40):
    """``n`` random sentence pairs (1 to ``max_len`` - 1 tokens of a 20-word dictionary, then EOS) as a
    :class:`LanguagePairDataset` sharing one dictionary."""
    import numpy as np

    from nmt_toolkit.data.dictionary import Dictionary
    from nmt_toolkit.data.pair_dataset import LanguagePairDataset

    rng = np.random.RandomState(seed)
    d = Dictionary()
    for i in range(20):
        d.add_symbol(f"w{i}")
    src = [np.append(rng.randint(4, 24, rng.randint(1, max_len)), 2) for _ in range(n)]
    tgt = [np.append(rng.randint(4, 24, rng.randint(1, max_len)), 2) for _ in range(n)]
    return LanguagePairDataset(src, [len(s) for s in src], d, tgt, [len(t) for t in tgt], d)

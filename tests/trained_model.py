"""Two small translation models that really learned something, for the nmt-generate tests.

A random-weight checkpoint decodes every sentence to the same few tokens ("▁BIG ▁BIG …"), on which input order,
n-best lists, ensembles and decode workers can go wrong unseen. These two learned a small task: English-like
sentences of 2 to 8 words over 18 words, to be upper-cased ("A dog runs." → "A DOG RUNS."), sentencepiece
100 joined. nmt-preprocess and nmt-train build them through their Python entry points (1000 pairs,
transformer_tiny cut to 1+1 layers, d_model 32, d_ff 64, 400 updates, seeds 1 and 2: a few seconds of one
core each). They reach BLEU about 75 on the 23 test sentences and copy about two thirds of them exactly; a
random-weight model reaches about 0. The two seeds disagree on several sentences, so that an ensemble of them
is not one model twice. conftest.py trains them once per test session (``trained_translation``).
"""
from __future__ import annotations

import pathlib
import random
from dataclasses import dataclass

import torch

WORDS = "a man woman dog cat rides runs sits on the red blue big small house street ball park".split()
SEEDS = (1, 2)


def sentences(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8))).capitalize() + "." for _ in range(n)]


@dataclass(frozen=True)
class TrainedModels:
    root: pathlib.Path  # raw text: {train,valid,test}.{en,de}
    data: pathlib.Path  # the data-bin (sentencepiece model, dictionaries, binarized splits)
    first: pathlib.Path  # checkpoint of seed 1
    second: pathlib.Path  # checkpoint of seed 2


def train_models(root: pathlib.Path) -> TrainedModels:
    """Write the raw splits (train 1000, valid 20, test 23 pairs), binarize them and train the two models."""
    from nmt_toolkit.cli.preprocess import run as preprocess
    from nmt_toolkit.cli.train import run as train

    rng = random.Random(0)
    for split, n in (("train", 1000), ("valid", 20), ("test", 23)):
        src = sentences(rng, n)
        (root / f"{split}.en").write_text("\n".join(src) + "\n")
        (root / f"{split}.de").write_text("\n".join(s.upper() for s in src) + "\n")
    data = root / "bin"
    assert preprocess(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(root / "train"),
                       "--validpref", str(root / "valid"), "--testpref", str(root / "test"), "--bpe", "sentencepiece",
                       "--bpe-vocab-size", "100", "--joined-dictionary", "--workers", "1", "--destdir", str(data),
                       "--no-progress-bar"]) == 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny products: more threads only wait for each other
    try:
        paths = []
        for seed in SEEDS:
            save = root / f"seed{seed}"
            assert train([str(data), "--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1",
                          "--embed-dim", "32", "--ffn-embed-dim", "64", "--attention-heads", "4",
                          "--share-all-embeddings", "--dropout", "0", "--optimizer", "adam", "--lr", "5e-3",
                          "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "30", "--criterion", "cross_entropy",
                          "--max-tokens", "1000", "--max-update", "400", "--seed", str(seed),
                          "--disable-validation", "--no-epoch-checkpoints", "--save-interval", "1000",
                          "--save-dir", str(save), "--log-format", "json", "--log-interval", "100"]) == 0
            paths.append(save / "checkpoint_last.pt")
    finally:
        torch.set_num_threads(threads)
    return TrainedModels(root, data, *paths)

"""A checkpoint knows the dictionaries and language pair it was trained with, and every program that pairs it
with a data-bin refuses a mismatch by name; averaging refuses to overwrite or to mix; training never keeps a
non-finite checkpoint.

The mismatches are the hard cases: two data-bins whose dictionaries have the same size but other symbols (the
shape check cannot see them), and one data-bin with the same joined dictionary but the other direction.
"""
from __future__ import annotations

import hashlib
import math
import os
import random

import pytest
import torch

from nmt_toolkit.cli.preprocess import run as preprocess
from nmt_toolkit.cli.train import run as train
from tests.reliability.harness import assert_refused, assert_unchanged, run_in_process, snapshot
from tests.train_helpers import TINY


def make_data(root, name: str, src_word: str = "w", tgt_word: str = "v", langs=("xx", "yy"), train_pairs: int = 300,
              joined: bool = False, dicts_of: str = "") -> str:
    """A synthetic data-bin; other ``src_word``/``tgt_word`` give dictionaries of the same size, other symbols."""
    rng = random.Random(0)
    raw = root / f"raw-{name}"
    raw.mkdir()
    for split, n in (("train", train_pairs), ("valid", 20)):
        src, tgt = [], []
        for _ in range(n):
            s = [rng.randrange(40) for _ in range(rng.randint(3, 12))]
            src.append(" ".join(f"{src_word}{i}" for i in s))
            tgt.append(" ".join(f"{tgt_word}{i}" for i in reversed(s)))
        (raw / f"{split}.{langs[0]}").write_text("\n".join(src) + "\n")
        (raw / f"{split}.{langs[1]}").write_text("\n".join(tgt) + "\n")
    dest = root / name
    argv = ["--source-lang", langs[0], "--target-lang", langs[1], "--trainpref", str(raw / "train"),
            "--validpref", str(raw / "valid"), "--destdir", str(dest), "--workers", "1", "--no-progress-bar"]
    if dicts_of:
        argv += ["--srcdict", os.path.join(dicts_of, f"dict.{langs[0]}.txt"),
                 "--tgtdict", os.path.join(dicts_of, f"dict.{langs[1]}.txt")]
    assert preprocess(argv + (["--joined-dictionary"] if joined else [])) == 0
    return str(dest)


def train_tiny(data: str, save_dir, *extra: str) -> int:
    return train([data, *TINY, "--save-dir", str(save_dir), "--max-update", "3", "--no-progress-bar", *extra])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity")
    w = {"root": root,
         "A": make_data(root, "A"), "B": make_data(root, "B", "a", "b"),
         "joined": make_data(root, "joined", joined=True),
         "joined-reversed": make_data(root, "joined-reversed", "v", "w", langs=("yy", "xx"), joined=True)}
    for name in ("A", "joined"):
        assert train_tiny(w[name], root / f"ck-{name}") == 0
        w[f"ck-{name}"] = str(root / f"ck-{name}" / "checkpoint_last.pt")
    return w


def _symbols_sha256(dict_file: str) -> tuple[int, str]:
    """The reference fingerprint, from the dictionary file itself: fairseq's four specials, then each line's
    first field, hashed newline-joined."""
    with open(dict_file, encoding="utf-8") as handle:
        symbols = ["<s>", "<pad>", "</s>", "<unk>"] + [line.rsplit(" ", 1)[0] for line in handle if line.strip()]
    return len(symbols), hashlib.sha256("\n".join(symbols).encode("utf-8")).hexdigest()


def test_a_checkpoint_records_its_dictionaries_and_language_pair(world):
    state = torch.load(world["ck-A"], weights_only=True)
    record = state["dictionaries"]
    for side, lang in (("source", "xx"), ("target", "yy")):
        size, sha = _symbols_sha256(os.path.join(world["A"], f"dict.{lang}.txt"))
        assert record[side] == {"lang": lang, "size": size, "sha256": sha}


def test_generate_refuses_a_data_bin_with_other_symbols_of_the_same_size(world):
    assert _symbols_sha256(os.path.join(world["A"], "dict.xx.txt"))[0] == \
        _symbols_sha256(os.path.join(world["B"], "dict.xx.txt"))[0]
    result = run_in_process("nmt-generate", [world["B"], "--path", world["ck-A"], "--gen-subset", "valid"])
    assert_refused(result, world["ck-A"], "dict.xx.txt", "wrong dictionary")
    assert "S-" not in result.stdout


def test_interactive_refuses_a_data_bin_with_other_symbols(world):
    result = run_in_process("nmt-interactive", [world["B"], "--path", world["ck-A"]], stdin="a1 a2\n")
    assert_refused(result, world["ck-A"], "dict.xx.txt")


def test_generate_refuses_the_other_direction_of_a_joined_dictionary(world):
    """Same dictionary on both sides: only the language pair tells an xx→yy model from a yy→xx data-bin."""
    result = run_in_process("nmt-generate", [world["joined-reversed"], "--path", world["ck-joined"],
                                             "--gen-subset", "valid"])
    assert_refused(result, world["ck-joined"], "xx", "yy")


def test_training_refuses_to_resume_on_other_dictionaries_and_keeps_the_checkpoints(world, tmp_path):
    save_dir = world["root"] / "ck-A"
    before = snapshot(save_dir)
    result = run_in_process("nmt-train", [world["B"], *TINY, "--save-dir", save_dir, "--max-update", "6"])
    assert_refused(result, "checkpoint_last.pt", "dict.xx.txt")
    assert_unchanged(before, save_dir)


@pytest.mark.parametrize("fmt", ["fairseq", "ctranslate2"])
def test_export_refuses_another_data_bins_dictionaries(world, tmp_path, fmt):
    out = tmp_path / "export"
    result = run_in_process("nmt-export", [world["B"], "--path", world["ck-A"], "--format", fmt,
                                           "--output-dir", out])
    assert_refused(result, world["ck-A"], "dict.xx.txt")
    assert not out.exists()


def test_averaging_refuses_checkpoints_of_other_dictionaries(world, tmp_path):
    other = tmp_path / "ck-B"
    assert train_tiny(world["B"], other) == 0
    result = run_in_process("nmt-average-checkpoints", ["--inputs", f"{world['ck-A']},{other / 'checkpoint_last.pt'}",
                                                        "--output", tmp_path / "avg.pt"])
    assert_refused(result, "checkpoint_last.pt", "dictionar")
    assert not (tmp_path / "avg.pt").exists()


def test_an_averaged_checkpoint_keeps_the_record(world, tmp_path):
    out = tmp_path / "avg.pt"
    assert run_in_process("nmt-average-checkpoints", ["--inputs", f"{world['ck-A']},{world['ck-A']}",
                                                      "--output", out]).status == 0
    assert torch.load(out, weights_only=True)["dictionaries"] == \
        torch.load(world["ck-A"], weights_only=True)["dictionaries"]


def test_a_checkpoint_without_the_record_still_decodes_on_its_data_bin(world, tmp_path):
    state = torch.load(world["ck-A"], weights_only=True)
    del state["dictionaries"]
    old = tmp_path / "old.pt"
    torch.save(state, old)
    result = run_in_process("nmt-generate", [world["A"], "--path", old, "--gen-subset", "valid", "--beam", "1"])
    assert result.status == 0, result.stderr[-2000:]
    assert sum(line.startswith("H-") for line in result.stdout.splitlines()) == 20


def test_resuming_mid_epoch_on_a_smaller_data_bin_is_refused_by_name(world, tmp_path):
    """A position past the end of the new data's epoch would train nothing and exit 0."""
    save_dir = tmp_path / "ck"
    assert train_tiny(world["A"], save_dir, "--save-interval-updates", "10", "--max-update", "10",
                      "--disable-validation") == 0
    iterator = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)["train_state"]["iterator"]
    assert iterator["iterations_in_epoch"] == 10  # saved mid-epoch
    small = make_data(tmp_path, "small", train_pairs=30, dicts_of=world["A"])
    before = snapshot(save_dir)
    result = run_in_process("nmt-train", [small, *TINY, "--save-dir", save_dir, "--max-update", "20"])
    assert_refused(result, "checkpoint_last.pt", small, "--reset-dataloader")
    assert_unchanged(before, save_dir)


def test_resuming_adam_state_into_sgd_names_both_and_the_way_out(world, tmp_path):
    save_dir = tmp_path / "ck"
    assert train_tiny(world["A"], save_dir) == 0  # TINY trains with adam
    before = snapshot(save_dir)
    result = run_in_process("nmt-train", [world["A"], *TINY, "--save-dir", save_dir, "--max-update", "6",
                                          "--optimizer", "sgd", "--momentum", "0.9"])
    assert_refused(result, "--optimizer sgd", "adam", "--reset-optimizer")
    assert_unchanged(before, save_dir)
    assert run_in_process("nmt-train", [world["A"], *TINY, "--save-dir", save_dir, "--max-update", "6",
                                        "--optimizer", "sgd", "--momentum", "0.9", "--reset-optimizer"]).status == 0


def test_a_diverged_run_stops_without_saving_nan_and_keeps_earlier_checkpoints(world, tmp_path, monkeypatch):
    """The weights turn NaN after update 3 (as a diverged run's do); the saves at update 4 must not happen."""
    from nmt_toolkit.training.trainer import Trainer

    original = Trainer.train_step

    def diverging(self, samples):
        original(self, samples)
        if self.num_updates >= 3:
            with torch.no_grad():
                next(self.model.parameters()).fill_(float("nan"))

    monkeypatch.setattr(Trainer, "train_step", diverging)
    save_dir = tmp_path / "ck"
    result = run_in_process("nmt-train", [world["A"], *TINY, "--save-dir", save_dir, "--max-update", "8",
                                          "--save-interval-updates", "2", "--validate-interval-updates", "2"])
    assert_refused(result, str(save_dir), "update 4")
    assert sorted(os.listdir(save_dir)) == ["checkpoint_1_2.pt", "checkpoint_best.pt", "checkpoint_last.pt",
                                            "config.yaml"]
    for name in ("checkpoint_1_2.pt", "checkpoint_best.pt", "checkpoint_last.pt"):
        state = torch.load(save_dir / name, weights_only=True)
        assert state["train_state"]["num_updates"] == 2
        assert math.isfinite(state["train_state"]["best"])
        assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())

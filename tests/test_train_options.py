"""nmt-train's checkpoint options against outcomes worked out by hand: --patience (also across a resume),
--keep-best-checkpoints, --save-interval-minutes, --reset-*, and a second run from the saved config.yaml.

Validation losses are scripted (``Trainer.valid_step`` returns a chosen loss for each update count), so which
validation is the best and when patience runs out is known in advance; the clock of --save-interval-minutes is
a fake that moves 40 s per update.
"""
import json
import math
import os
import shutil
import types

import pytest

from nmt_toolkit.cli.train import run as train
from nmt_toolkit.training import train_loop
from nmt_toolkit.training.trainer import Trainer
from tests.train_helpers import TINY, load, make_bin, same_state

# validation loss (bits) after each number of updates; 9.0 elsewhere (the start, never the best)
SCRIPT = {2: 5.0, 4: 4.0, 6: 4.5, 8: 4.2, 10: 3.0, 12: 3.5}


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_bin(tmp_path_factory.mktemp("tinyo"))


@pytest.fixture
def scripted_validation(monkeypatch):
    def valid_step(self, sample):
        loss = SCRIPT.get(self.num_updates, 9.0) * 10.0 * math.log(2)  # 10 tokens per batch: derived loss = SCRIPT
        return {"sample_size": 10.0, "loss": loss, "nll_loss": loss, "ntokens": 10.0, "nsentences": 1.0}

    monkeypatch.setattr(Trainer, "valid_step", valid_step)


def _files(folder, prefix="checkpoint"):
    return sorted(f for f in os.listdir(folder) if f.startswith(prefix))


def test_patience_stops_after_n_validations_without_improvement_across_a_resume(tiny_bin, tmp_path, capsys,
                                                                                scripted_validation):
    flags = [tiny_bin, *TINY, "--validate-interval-updates", "2", "--patience", "2", "--keep-best-checkpoints", "2",
             "--save-dir", str(tmp_path)]
    # validations at 2 (5.0 best), 4 (4.0 best), 6 (4.5: 1 without improvement); stops at --max-update 6
    assert train([*flags, "--max-update", "6"]) == 0
    assert load(tmp_path / "checkpoint_last.pt")["train_state"]["patience_counter"] == 1
    capsys.readouterr()
    # resumed: 8 (4.2) is the second validation without improvement: early stop at 8, not at --max-update 20
    assert train([*flags, "--max-update", "20"]) == 0
    err = capsys.readouterr().err
    assert "early stop: loss did not improve for 2 validations (--patience)" in err
    last = load(tmp_path / "checkpoint_last.pt")["train_state"]
    assert (last["num_updates"], last["best"], last["patience_counter"]) == (8, 4.0, 2)
    best = load(tmp_path / "checkpoint_best.pt")["train_state"]
    assert (best["num_updates"], best["best"]) == (4, 4.0)
    assert _files(tmp_path, "checkpoint.best_") == ["checkpoint.best_loss_4.0000.pt", "checkpoint.best_loss_5.0000.pt"]
    assert load(tmp_path / "checkpoint.best_loss_5.0000.pt")["train_state"]["num_updates"] == 2


def test_keep_best_checkpoints_keeps_the_n_best(tiny_bin, tmp_path, scripted_validation):
    common = [tiny_bin, *TINY, "--validate-interval-updates", "2", "--keep-best-checkpoints", "2", "--max-update", "12"]
    assert train([*common, "--save-dir", str(tmp_path / "min")]) == 0
    # bests in order 5.0 (2), 4.0 (4), 3.0 (10); the two smallest stay
    assert _files(tmp_path / "min", "checkpoint.best_") == ["checkpoint.best_loss_3.0000.pt",
                                                           "checkpoint.best_loss_4.0000.pt"]
    assert load(tmp_path / "min" / "checkpoint.best_loss_3.0000.pt")["train_state"]["num_updates"] == 10
    assert load(tmp_path / "min" / "checkpoint_best.pt")["train_state"]["num_updates"] == 10
    assert train([*common, "--maximize-best-checkpoint-metric", "--save-dir", str(tmp_path / "max")]) == 0
    # maximised, only 5.0 at update 2 was ever a new best
    assert _files(tmp_path / "max", "checkpoint.best_") == ["checkpoint.best_loss_5.0000.pt"]
    assert load(tmp_path / "max" / "checkpoint_best.pt")["train_state"]["num_updates"] == 2


def test_save_interval_minutes(tiny_bin, tmp_path, monkeypatch):
    clock = {"offset": 0.0}
    real = train_loop.time.perf_counter
    monkeypatch.setattr(train_loop, "time", types.SimpleNamespace(perf_counter=lambda: real() + clock["offset"]))
    orig = Trainer.train_step

    def step_40s(self, samples):
        clock["offset"] += 40.0
        return orig(self, samples)

    monkeypatch.setattr(Trainer, "train_step", step_40s)
    assert train([tiny_bin, *TINY, "--save-interval-minutes", "1", "--max-update", "7", "--save-dir", str(tmp_path)]) == 0
    # 40 s per update, a save once 60 s have passed since the last: after updates 2, 4, 6; 7 ends the run
    assert _files(tmp_path, "checkpoint_1_") == ["checkpoint_1_2.pt", "checkpoint_1_4.pt", "checkpoint_1_6.pt"]
    assert load(tmp_path / "checkpoint_1_4.pt")["train_state"]["num_updates"] == 4


@pytest.fixture(scope="module")
def four_updates(tiny_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("base")
    assert train([tiny_bin, *TINY, "--max-update", "4", "--save-dir", str(out)]) == 0
    return out


@pytest.mark.parametrize("flag", [None, "--reset-optimizer", "--reset-dataloader", "--reset-meters"])
def test_reset_options(tiny_bin, four_updates, tmp_path, flag):
    shutil.copy(four_updates / "checkpoint_last.pt", tmp_path / "checkpoint_last.pt")
    assert train([tiny_bin, *TINY, "--max-update", "5", "--save-dir", str(tmp_path), *([flag] if flag else [])]) == 0
    state = load(tmp_path / "checkpoint_last.pt")
    ts = state["train_state"]
    assert ts["num_updates"] == 5  # every reset keeps the update count (and so the LR schedule's position)
    adam_steps = {float(s["step"]) for s in state["optimizer"]["state"].values()}
    assert adam_steps == ({1.0} if flag == "--reset-optimizer" else {5.0})
    assert ts["iterator"]["iterations_in_epoch"] == (1 if flag == "--reset-dataloader" else 5)
    assert ts["meters"]["epoch"]["count"] == (1 if flag == "--reset-meters" else 5)


def test_rerun_from_saved_config_yaml_is_the_same_run(tiny_bin, tmp_path):
    assert train([tiny_bin, *TINY, "--cpu", "--seed", "7", "--dropout", "0.3", "--max-update", "3",
                  "--save-dir", str(tmp_path / "a")]) == 0
    assert train(["--config", str(tmp_path / "a" / "config.yaml"), "--save-dir", str(tmp_path / "b")]) == 0
    a, b = load(tmp_path / "a" / "checkpoint_last.pt"), load(tmp_path / "b" / "checkpoint_last.pt")
    same_state(a, b)  # bit for bit: the seed (initialisation, dropout, data order) is in config.yaml too
    skip = ("common", "checkpoint")  # the --config path and the --save-dir
    assert {k: v for k, v in a["config"].items() if k not in skip} == \
        {k: v for k, v in b["config"].items() if k not in skip}


def test_reset_lr_scheduler(tiny_bin, tmp_path, capsys):
    """reduce_lr_on_plateau keeps its shrunk LR and its best loss in the checkpoint; --reset-lr-scheduler drops
    them and starts again at --lr (set here by editing the saved state: the plateau needs epochs to shrink)."""
    import torch

    at = TINY.index("--warmup-updates")  # an inverse_sqrt option
    flags = [tiny_bin, *TINY[:at], *TINY[at + 2:], "--lr-scheduler", "reduce_lr_on_plateau", "--lr", "1e-3"]
    assert train([*flags, "--max-update", "2", "--save-dir", str(tmp_path / "a")]) == 0
    state = load(tmp_path / "a" / "checkpoint_last.pt")
    state["lr_scheduler"] = {**state["lr_scheduler"], "lr": 2.5e-4, "best": 3.0, "bad_epochs": 1}
    torch.save(state, tmp_path / "a" / "checkpoint_last.pt")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    capsys.readouterr()
    for folder, reset, lr, best in (("a", [], 2.5e-4, 3.0), ("b", ["--reset-lr-scheduler"], 1e-3, None)):
        assert train([*flags, "--max-update", "3", "--save-dir", str(tmp_path / folder), *reset]) == 0
        rows = [json.loads(l) for l in capsys.readouterr().err.splitlines() if l.startswith('{"tag": "train_inner"')]
        assert [r["train_inner_lr"] for r in rows] == [lr]  # the one update after the resume
        saved = load(tmp_path / folder / "checkpoint_last.pt")["lr_scheduler"]
        assert (saved["lr"], saved["best"]) == (lr, best)


def test_plateau_scheduler_reads_the_epoch_end_validation_loss(tiny_bin, tmp_path, monkeypatch):
    """Was passed the best metric: 3.0 from update 8 instead of the epoch end's 4.0, or a BLEU as a loss."""
    from nmt_toolkit.optim.lr_schedulers import PlateauSchedule

    script = {8: 3.0, 16: 4.0}  # the epoch (16 batches) ends at update 16

    def valid_step(self, sample):
        loss = script.get(self.num_updates, 9.0) * 10.0 * math.log(2)
        return {"sample_size": 10.0, "loss": loss, "nll_loss": loss, "ntokens": 10.0, "nsentences": 1.0}

    seen = []
    orig = PlateauSchedule.step
    monkeypatch.setattr(Trainer, "valid_step", valid_step)
    monkeypatch.setattr(PlateauSchedule, "step", lambda self, epoch, loss=None: seen.append((epoch, loss)) or
                        orig(self, epoch, loss))
    at = TINY.index("--warmup-updates")
    assert train([tiny_bin, *TINY[:at], *TINY[at + 2:], "--lr-scheduler", "reduce_lr_on_plateau",
                  "--validate-interval-updates", "8", "--max-update", "17", "--save-dir", str(tmp_path)]) == 0
    assert seen == [(1, pytest.approx(4.0))]

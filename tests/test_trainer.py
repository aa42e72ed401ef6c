"""Exact resume (also after SIGTERM mid-epoch), skipping of non-finite updates, update-freq semantics."""
import json
import os
import signal

import pytest

from nmt_toolkit.cli.train import run as train
from nmt_toolkit.training.trainer import Trainer
from tests.train_helpers import TINY, load, make_bin, same_state


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_bin(tmp_path_factory.mktemp("tiny"))


def _losses(capfd_text):
    out = []
    for line in capfd_text.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("tag") == "train_inner":
                out.append((r["num_updates"], r["train_inner_loss"]))
    return out


def test_exact_resume_10_plus_10_equals_20(tiny_bin, tmp_path, capfd):
    assert train([tiny_bin, *TINY, "--max-update", "20", "--save-dir", str(tmp_path / "a")]) == 0
    full = _losses(capfd.readouterr().err)
    assert train([tiny_bin, *TINY, "--max-update", "10", "--save-dir", str(tmp_path / "b")]) == 0
    first = _losses(capfd.readouterr().err)
    assert train([tiny_bin, *TINY, "--max-update", "20", "--save-dir", str(tmp_path / "b")]) == 0
    err = capfd.readouterr().err
    assert "resumed from" in err
    assert first + _losses(err) == full  # identical logged losses
    same_state(load(tmp_path / "a" / "checkpoint_last.pt"), load(tmp_path / "b" / "checkpoint_last.pt"))
    ckpt = load(tmp_path / "a" / "checkpoint_last.pt")
    assert ckpt["config"]["components"]["model"] == "transformer"
    assert ckpt["config"]["model"]["embed_dim"] == 32 and ckpt["config"]["task"]["source_lang"] == "xx"
    assert (tmp_path / "a" / "config.yaml").exists() and (tmp_path / "a" / "checkpoint_best.pt").exists()


def test_sigterm_mid_epoch_then_resume_is_exact(tiny_bin, tmp_path, monkeypatch, capfd):
    assert train([tiny_bin, *TINY, "--max-update", "20", "--save-dir", str(tmp_path / "a")]) == 0
    orig = Trainer.train_step

    def step_then_signal(self, samples):
        out = orig(self, samples)
        if self.num_updates == 7:
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    monkeypatch.setattr(Trainer, "train_step", step_then_signal)
    assert train([tiny_bin, *TINY, "--max-update", "20", "--save-dir", str(tmp_path / "b")]) == 0
    err = capfd.readouterr().err
    assert "SIGTERM" in err and "resume" in err
    state = load(tmp_path / "b" / "checkpoint_last.pt")
    assert state["train_state"]["num_updates"] == 7 and state["train_state"]["iterator"]["iterations_in_epoch"] > 0
    monkeypatch.setattr(Trainer, "train_step", orig)
    assert train([tiny_bin, *TINY, "--max-update", "20", "--save-dir", str(tmp_path / "b")]) == 0
    same_state(load(tmp_path / "a" / "checkpoint_last.pt"), load(tmp_path / "b" / "checkpoint_last.pt"))


def test_non_finite_updates_are_skipped_then_stop(tiny_bin, tmp_path, monkeypatch, capfd):
    from nmt_toolkit.criterions import label_smoothed_cross_entropy as ls

    orig = ls.LabelSmoothedCrossEntropyCriterion.__call__

    def nan_loss(self, model, sample):
        loss, n, log = orig(self, model, sample)
        return loss * float("nan"), n, log

    monkeypatch.setattr(ls.LabelSmoothedCrossEntropyCriterion, "__call__", nan_loss)
    rc = train([tiny_bin, *TINY, "--max-update", "20", "--max-skipped-updates", "3",
                "--save-dir", str(tmp_path / "c")])
    err = capfd.readouterr().err
    assert rc == 1 and "3 non-finite updates in a row" in err


def test_bf16_runs_on_cpu(tiny_bin, tmp_path):
    assert train([tiny_bin, *TINY, "--bf16", "--max-update", "2", "--save-dir", str(tmp_path / "d")]) == 0


def test_dry_run_and_help(capsys):
    assert train(["--arch", "transformer_base", "--vocab-size", "37000", "--share-all-embeddings", "--dry-run"]) == 0
    assert "total parameters: 63,082,496" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        pass_ = train(["--arch", "transformer_tiny", "--lr-scheduler", "noam", "--help"])
        raise SystemExit(pass_)
    out = capsys.readouterr().out
    assert "--warmup-updates" in out and "--label-smoothing" in out and "--embed-dim" in out

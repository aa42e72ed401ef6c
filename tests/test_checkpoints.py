"""Atomic checkpoint writes, one-line errors for bad files, cleanup rules, RNG state round trip."""
import os
import random

import numpy as np
import pytest
import torch

from nmt_toolkit.errors import DataError
from nmt_toolkit.training import checkpoints as C
from nmt_toolkit.training.state import get_rng_state, set_rng_state


def _state(v=0.0):
    return {"model": {"w": torch.full((3,), v)}, "config": {"components": {"model": "x"}}, "version": 1,
            "train_state": {"rng": get_rng_state()}}


def test_round_trip_weights_only(tmp_path):
    p = tmp_path / "checkpoint_last.pt"
    C.save_checkpoint(_state(1.0), str(p))
    s = torch.load(p, weights_only=True)
    assert torch.equal(s["model"]["w"], torch.ones(3))
    assert C.load_checkpoint(str(p))["version"] == 1


def test_crash_while_writing_keeps_previous(tmp_path, monkeypatch):
    p = tmp_path / "checkpoint_last.pt"
    C.save_checkpoint(_state(1.0), str(p))

    def boom(obj, f, *a, **k):
        f.write(b"partial garbage")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(C.torch, "save", boom)
    with pytest.raises(OSError):
        C.save_checkpoint(_state(2.0), str(p))
    monkeypatch.undo()
    assert torch.equal(C.load_checkpoint(str(p))["model"]["w"], torch.ones(3))
    assert [f for f in os.listdir(tmp_path)] == ["checkpoint_last.pt"]  # no stray temp file


def test_truncated_and_foreign_files_are_one_line_errors(tmp_path):
    p = tmp_path / "c.pt"
    C.save_checkpoint(_state(), str(p))
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as e:
        C.load_checkpoint(str(p))
    assert str(p) in str(e.value) and "\n" not in str(e.value)
    q = tmp_path / "foreign.pt"
    q.write_text("hello")
    with pytest.raises(DataError, match="foreign.pt"):
        C.load_checkpoint(str(q))
    r = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(1)}, r)
    with pytest.raises(DataError, match="not an nmt_toolkit checkpoint"):
        C.load_checkpoint(str(r))


def test_cleanup_keeps_the_last(tmp_path):
    for e in range(1, 6):
        (tmp_path / C.epoch_name(e)).write_bytes(b"x")
        (tmp_path / C.update_name(e, e * 100)).write_bytes(b"x")
    (tmp_path / "checkpoint_last.pt").write_bytes(b"x")
    C.cleanup(str(tmp_path), keep_last_epochs=2, keep_interval_updates=1)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint4.pt", "checkpoint5.pt", "checkpoint_5_500.pt",
                                           "checkpoint_last.pt"]


def test_rng_state_round_trip(tmp_path):
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    p = tmp_path / "c.pt"
    C.save_checkpoint(_state(), str(p))
    want = (torch.rand(3), np.random.rand(2), random.random())
    set_rng_state(C.load_checkpoint(str(p))["train_state"]["rng"])
    got = (torch.rand(3), np.random.rand(2), random.random())
    assert torch.equal(want[0], got[0]) and np.array_equal(want[1], got[1]) and want[2] == got[2]

"""nmt-train --save-model-folder: the folder holds checkpoint_best.pt's weights (checkpoint_last.pt's when
there is no best), taken from the run's memory, not read back from the file it just wrote; a best that an
earlier run wrote, and a resumed run never beat, is read from its file.

The reference is the checkpoint files themselves, read here with torch.load: --maximize-best-checkpoint-metric
on the validation loss makes the best the first validation (the loss falls as the tiny model learns), so the
best and the last checkpoint hold different weights."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from nmt_toolkit import checkpoints
from nmt_toolkit.cli.train import run as train
from tests.train_helpers import TINY, load, make_bin

BEST_FIRST = [*TINY, "--validate-interval-updates", "1", "--maximize-best-checkpoint-metric"]


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_bin(tmp_path_factory.mktemp("final-folder"))


def _folder_holds(folder, checkpoint) -> bool:
    weights, state = load_file(str(folder / "model.safetensors")), load(checkpoint)["model"]
    return set(weights) == set(state) and all(torch.equal(weights[k], state[k].float()) for k in state)


def test_the_folder_is_the_best_checkpoint_written_from_memory(tiny_bin, tmp_path, monkeypatch):
    reads = []
    real = checkpoints.load_checkpoint
    monkeypatch.setattr(checkpoints, "load_checkpoint", lambda path, *a, **k: reads.append(path) or real(path, *a, **k))
    ck, out = tmp_path / "ck", tmp_path / "model"
    assert train([tiny_bin, *BEST_FIRST, "--max-update", "3", "--save-dir", str(ck), "--save-model-folder",
                  str(out)]) == 0
    assert reads == []  # a fresh run resumes nothing, and the folder needs no file read back
    assert load(ck / "checkpoint_best.pt")["train_state"]["num_updates"] == 1
    assert load(ck / "checkpoint_last.pt")["train_state"]["num_updates"] == 3
    assert _folder_holds(out, ck / "checkpoint_best.pt") and not _folder_holds(out, ck / "checkpoint_last.pt")


def test_without_a_best_the_folder_is_the_last_checkpoint(tiny_bin, tmp_path):
    ck, out = tmp_path / "ck", tmp_path / "model"
    assert train([tiny_bin, *TINY, "--max-update", "2", "--disable-validation", "--save-dir", str(ck),
                  "--save-model-folder", str(out)]) == 0
    assert not (ck / "checkpoint_best.pt").exists()
    assert _folder_holds(out, ck / "checkpoint_last.pt")


def test_a_resumed_run_that_never_beats_the_earlier_best_writes_that_best(tiny_bin, tmp_path):
    ck, out = tmp_path / "ck", tmp_path / "model"
    assert train([tiny_bin, *BEST_FIRST, "--max-update", "2", "--save-dir", str(ck)]) == 0
    best = (ck / "checkpoint_best.pt").read_bytes()
    assert train([tiny_bin, *BEST_FIRST, "--max-update", "4", "--save-dir", str(ck), "--save-model-folder",
                  str(out)]) == 0
    assert (ck / "checkpoint_best.pt").read_bytes() == best  # the resumed run wrote no best of its own
    assert load(ck / "checkpoint_last.pt")["train_state"]["num_updates"] == 4
    assert _folder_holds(out, ck / "checkpoint_best.pt")

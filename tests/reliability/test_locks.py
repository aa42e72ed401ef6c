"""One writer per output folder: a second nmt-train on a --save-dir, or a second nmt-preprocess on a --destdir,
is refused while the first runs, and a first run killed with SIGKILL does not block the next one.

Every holder is a real, separate process: a real nmt-train, or a child that takes the lock through
nmt_toolkit.locking and waits on its stdin (cheap: no training on a shared machine).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.reliability.harness import assert_refused, assert_unchanged, run_in_process, run_process, snapshot
from tests.train_helpers import TINY, make_bin

HOLDER = r"""
import sys
from nmt_toolkit.locking import exclusive
with exclusive(sys.argv[1], "test", "test"):
    print("locked", flush=True)
    sys.stdin.read()
"""


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_bin(tmp_path_factory.mktemp("locks"))


def hold(lock_path) -> subprocess.Popen:
    """A separate process holding ``lock_path`` until its stdin closes or it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def kill9(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def train_args(tiny_bin, save_dir, updates: int):
    return [tiny_bin, *TINY, "--max-update", str(updates), "--save-dir", str(save_dir), "--no-progress-bar"]


@pytest.mark.slow
def test_second_nmt_train_on_a_save_dir_is_refused_and_a_killed_one_does_not_block(tiny_bin, tmp_path):
    save = tmp_path / "ckpt"
    first = subprocess.Popen([sys.executable, "-m", "nmt_toolkit.cli.train", *train_args(tiny_bin, save, 100000)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lock = save / ".nmt-train.lock"
        deadline = time.time() + 120
        while not (lock.exists() and f"pid {first.pid} " in lock.read_text()):
            assert first.poll() is None, first.stderr.read()
            assert time.time() < deadline, "the first nmt-train never took its lock"
            time.sleep(0.2)
        second = run_in_process("nmt-train", train_args(tiny_bin, save, 2))
        line = assert_refused(second, "--save-dir", str(save), f"pid {first.pid}")
        assert "nmt-train" in line
    finally:
        kill9(first)
    third = run_in_process("nmt-train", train_args(tiny_bin, save, 2))
    assert third.status == 0, third.stderr[-2000:]
    assert (save / "checkpoint_last.pt").exists()
    assert not (save / ".nmt-train.lock").exists()  # released and removed at exit


def test_a_locked_save_dir_is_left_as_it_was(tiny_bin, tmp_path):
    save = tmp_path / "ckpt"
    assert run_in_process("nmt-train", train_args(tiny_bin, save, 2)).status == 0
    holder = hold(save / ".nmt-train.lock")
    try:
        before = snapshot(save)
        result = run_in_process("nmt-train", train_args(tiny_bin, save, 4))
        assert_refused(result, "--save-dir", f"pid {holder.pid}")
        assert_unchanged(before, save)
    finally:
        kill9(holder)
    again = run_in_process("nmt-train", train_args(tiny_bin, save, 4))
    assert again.status == 0, again.stderr[-2000:]


@pytest.mark.slow
def test_spawned_ranks_share_their_parents_lock(tiny_bin, tmp_path):
    save = tmp_path / "ddp"
    result = run_process("nmt-train", [*train_args(tiny_bin, save, 2), "--distributed-world-size", "2"])
    assert result.status == 0, result.stderr[-2000:]
    assert (save / "checkpoint_last.pt").exists() and not (save / ".nmt-train.lock").exists()


def test_torchrun_ranks_other_than_0_take_no_lock(tiny_bin, tmp_path, monkeypatch):
    """Under torchrun only rank 0 writes; the other ranks must not be refused by rank 0's lock."""
    import contextlib

    from nmt_toolkit.training.save_dir import save_dir_lock
    from nmt_toolkit.checkpoints import prepare_save_dir
    from nmt_toolkit.training.distributed import DistInfo
    from nmt_toolkit.training.options import CheckpointConfig

    save = tmp_path / "ckpt"
    prepare_save_dir(str(save))
    holder = hold(save / ".nmt-train.lock")
    try:
        ck = CheckpointConfig(save_dir=str(save))
        with save_dir_lock(ck, DistInfo(1, 2, 1)):
            pass
        with pytest.raises(Exception, match="in use by another nmt-train"), contextlib.ExitStack() as stack:
            stack.enter_context(save_dir_lock(ck, DistInfo(0, 2, 0)))
    finally:
        kill9(holder)


def add_valid_args(tiny_bin, dest):
    """nmt-preprocess adding a valid split to ``dest`` with its own dictionaries."""
    raw = os.path.join(os.path.dirname(tiny_bin), "raw")
    return ["--source-lang", "xx", "--target-lang", "yy", "--srcdict", os.path.join(tiny_bin, "dict.xx.txt"),
            "--tgtdict", os.path.join(tiny_bin, "dict.yy.txt"), "--validpref", os.path.join(raw, "valid"),
            "--destdir", str(dest), "--no-progress-bar"]


def test_second_nmt_preprocess_on_a_destdir_is_refused_and_a_killed_one_does_not_block(tiny_bin, tmp_path):
    raw = os.path.join(os.path.dirname(tiny_bin), "raw")
    dest = tmp_path / "bin"
    first = ["--source-lang", "xx", "--target-lang", "yy", "--trainpref", os.path.join(raw, "train"),
             "--destdir", str(dest), "--no-progress-bar"]
    assert run_in_process("nmt-preprocess", first).status == 0
    lock = tmp_path / ".bin.lock"
    holder = hold(lock)
    try:
        before = snapshot(tmp_path)
        result = run_in_process("nmt-preprocess", add_valid_args(tiny_bin, dest))
        assert_refused(result, "--destdir", str(dest), f"pid {holder.pid}", "nmt-preprocess")
        assert_unchanged(before, tmp_path)
    finally:
        kill9(holder)
    result = run_in_process("nmt-preprocess", add_valid_args(tiny_bin, dest))
    assert result.status == 0, result.stderr[-2000:]
    record = json.loads((dest / "preprocess.json").read_text())
    assert sorted(record["splits"]) == ["train", "valid"]
    assert not lock.exists()

"""Atomic checkpoint writes, one-line errors for bad files, cleanup rules, RNG state round trip."""
import os
import random

import numpy as np
import pytest
import torch

from nmt_toolkit import outputs
from nmt_toolkit.errors import DataError
from nmt_toolkit import checkpoints as C
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
    with pytest.raises(DataError) as e:  # one line naming the file and the OS's reason
        C.save_checkpoint(_state(2.0), str(p))
    monkeypatch.undo()
    assert str(e.value) == f"{p}: writing the checkpoint failed: disk full (simulated) (the previous file is intact)"
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


def test_checkpoint_names_are_independent_files(tmp_path):
    """last/best/update names are files of their own, not hard links of one inode: restoring checkpoint_last.pt
    by hand (cp over it) or damaging it leaves checkpoint_best.pt and checkpoint_E_U.pt as they were."""
    C.save_checkpoint(_state(1.0), str(tmp_path / "checkpoint_1_10.pt"))
    for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
        C.copy_checkpoint(str(tmp_path / "checkpoint_1_10.pt"), str(tmp_path / name))
    inodes = {os.stat(tmp_path / n).st_ino for n in ("checkpoint_1_10.pt", "checkpoint_best.pt", "checkpoint_last.pt")}
    assert len(inodes) == 3
    C.save_checkpoint(_state(7.0), str(tmp_path / "other.pt"))
    # what `cp other.pt checkpoint_last.pt` does: open the existing file for writing, truncate, write
    with open(tmp_path / "checkpoint_last.pt", "r+b") as handle:
        handle.truncate(0)
        handle.write((tmp_path / "other.pt").read_bytes())
    assert torch.equal(C.load_checkpoint(str(tmp_path / "checkpoint_last.pt"))["model"]["w"], torch.full((3,), 7.0))
    for name in ("checkpoint_best.pt", "checkpoint_1_10.pt"):
        assert torch.equal(C.load_checkpoint(str(tmp_path / name))["model"]["w"], torch.ones(3)), name
    with open(tmp_path / "checkpoint_best.pt", "r+b") as handle:  # a truncation of one name
        handle.truncate(100)
    assert torch.equal(C.load_checkpoint(str(tmp_path / "checkpoint_1_10.pt"))["model"]["w"], torch.ones(3))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_1_10.pt", "checkpoint_best.pt", "checkpoint_last.pt",
                                            "other.pt"]  # no temp files left by the copies


def test_bare_restore_file_is_in_save_dir_not_the_working_directory(tmp_path, monkeypatch):
    """A checkpoint_last.pt in the current directory is not resumed when --save-dir is elsewhere."""
    old_run, new_dir = tmp_path / "old_run", tmp_path / "new"
    old_run.mkdir()
    new_dir.mkdir()
    C.save_checkpoint(_state(1.0), str(old_run / "checkpoint_last.pt"))
    C.save_checkpoint(_state(2.0), str(old_run / "checkpoint_1_5.pt"))
    monkeypatch.chdir(old_run)
    assert C.last_checkpoint(str(new_dir)) is None
    assert C.last_checkpoint(str(new_dir), "checkpoint_last.pt") is None
    with pytest.raises(DataError, match="checkpoint_1_5.pt"):  # a named file is looked for in --save-dir
        C.last_checkpoint(str(new_dir), "checkpoint_1_5.pt")
    assert C.last_checkpoint(str(new_dir), "./checkpoint_1_5.pt") == "./checkpoint_1_5.pt"  # a folder part: as given
    assert C.last_checkpoint(str(new_dir), str(old_run / "checkpoint_1_5.pt")) == str(old_run / "checkpoint_1_5.pt")
    assert C.last_checkpoint(str(old_run)) == str(old_run / "checkpoint_last.pt")


def test_stale_temp_files_are_removed(tmp_path):
    C.save_checkpoint(_state(1.0), str(tmp_path / "checkpoint_last.pt"))
    stray = [tmp_path / "checkpoint_last.pt.k2j4_x.tmp", tmp_path / "checkpoint_3_30.pt.abc.tmp",
             tmp_path / ".checkpoint_best.pt.123.link"]
    for p in stray:
        p.write_bytes(b"half a checkpoint")
    (tmp_path / "notes.tmp").write_text("the user's")  # not ours: kept
    removed = C.remove_stale_temp_files(str(tmp_path))
    assert sorted(removed) == sorted(map(str, stray))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_last.pt", "notes.tmp"]


def test_unusable_save_dir_is_a_one_line_error(tmp_path, monkeypatch):
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(DataError, match=r"--save-dir .*a_file: exists and is not a folder$"):
        C.prepare_save_dir(str(f))
    with pytest.raises(DataError, match=r"a_file/sub: .*a_file is a file, not a folder$"):
        C.prepare_save_dir(str(f / "sub"))

    def denied(*a, **k):  # the tests may run as root, for whom chmod 0o500 does not deny anything
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(outputs.tempfile, "mkstemp", denied)
    with pytest.raises(DataError, match=r"ro: cannot write there \(Permission denied\)$"):
        C.prepare_save_dir(str(tmp_path / "ro"))
    monkeypatch.undo()
    C.prepare_save_dir(str(tmp_path / "new" / "deep"))
    assert os.listdir(tmp_path / "new" / "deep") == []  # the write test leaves nothing


def test_a_newer_checkpoint_format_is_refused_by_name(tmp_path):
    p = tmp_path / "future.pt"
    C.save_checkpoint({**_state(), "version": 999}, str(p))
    with pytest.raises(DataError, match=r"future\.pt: checkpoint format version 999 .*newer"):
        C.load_checkpoint(str(p))
    C.save_checkpoint({**_state(), "version": "one"}, str(p))
    with pytest.raises(DataError, match=r"future\.pt: checkpoint format version 'one'"):
        C.load_checkpoint(str(p))


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_written_files_follow_the_umask_like_open(tmp_path, umask):
    """The reference: the mode open() gives a new file under the same umask."""
    from nmt_toolkit.outputs import ReplacingFile

    old = os.umask(umask)
    try:
        with open(tmp_path / "reference", "w"):
            pass
        C.save_checkpoint(_state(), str(tmp_path / "ck.pt"))
        C.write_text_atomically(str(tmp_path / "config.yaml"), "a: 1\n")
        C.copy_checkpoint(str(tmp_path / "ck.pt"), str(tmp_path / "copy.pt"))
        out = ReplacingFile(str(tmp_path / "out.txt"))
        out.write("x\n")
        out.close()
    finally:
        os.umask(old)
    want = os.stat(tmp_path / "reference").st_mode & 0o777
    for name in ("ck.pt", "config.yaml", "copy.pt", "out.txt"):
        assert os.stat(tmp_path / name).st_mode & 0o777 == want, name


def test_a_full_disk_under_torchs_writer_says_no_space_left(tmp_path, monkeypatch):
    """torch's zip writer turns the OS's ENOSPC into '[enforce fail at inline_container.cc…] unexpected pos';
    the free space of the folder (here reported as none, as on a full disk) tells what happened."""
    import collections

    def failing_save(obj, handle):
        handle.write(b"PK" * 100)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    Statvfs = collections.namedtuple("Statvfs", "f_bavail f_frsize f_bsize")
    monkeypatch.setattr(C.torch, "save", failing_save)
    monkeypatch.setattr(C.os, "statvfs", lambda path: Statvfs(0, 4096, 4096))
    with pytest.raises(DataError) as info:
        C.save_checkpoint(_state(), str(tmp_path / "ck.pt"))
    assert "No space left on device" in str(info.value) and "enforce fail" not in str(info.value)
    assert os.listdir(tmp_path) == []

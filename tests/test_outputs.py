"""nmt_toolkit/outputs.py, the one service that writes outputs: what it replaces, what it refuses, what it leaves.

Everything runs inside the test's temporary folder; the "home folder" and "mount point" cases are pointed at
folders in it (``HOME`` set, ``os.path.ismount`` answered), never at real ones.
"""
from __future__ import annotations

import os
import stat

import pytest

from nmt_toolkit import outputs
from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.outputs import FolderOutput, OutputKind

KIND = OutputKind("a test model", markers=("model.bin",), required=("model.bin",), members=("vocab.txt", "*.json"))


def _earlier(folder, extra=()):
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"old weights")
    (folder / "vocab.txt").write_text("old\n")
    (folder / "old-only.json").write_text("{}\n")
    for name in extra:
        (folder / name).write_text("the user's\n")
    return folder


def _write(output, files=None):
    with output.staged() as folder:
        for name, text in (files or {"model.bin": "new weights", "vocab.txt": "new\n"}).items():
            with open(os.path.join(folder, name), "w") as handle:
                handle.write(text)


def test_a_new_folder_is_written_whole(tmp_path):
    _write(FolderOutput(tmp_path / "a" / "b", KIND, False))
    assert sorted(os.listdir(tmp_path / "a" / "b")) == ["model.bin", "vocab.txt"]
    assert os.listdir(tmp_path / "a") == ["b"]  # no staging folder left


def test_an_earlier_output_is_replaced_only_with_overwrite_and_its_old_files_go(tmp_path):
    out = _earlier(tmp_path / "m")
    with pytest.raises(DataError, match=r"m: holds a test model already; add --overwrite"):
        FolderOutput(out, KIND, False)
    _write(FolderOutput(out, KIND, True))
    assert sorted(os.listdir(out)) == ["model.bin", "vocab.txt"]  # old-only.json: the earlier output's, gone
    assert (out / "model.bin").read_text() == "new weights"
    assert os.listdir(tmp_path) == ["m"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_of_the_users_is_never_replaced(tmp_path, overwrite):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("x\n")
    with pytest.raises(DataError, match=r"mine: a non-empty folder that is not a test model \(it holds thesis.tex\)"):
        FolderOutput(mine, KIND, overwrite)
    mixed = _earlier(tmp_path / "mixed", extra=["notes.txt"])
    with pytest.raises(DataError, match=r"mixed: holds notes.txt, which is not part of a test model; nothing was "
                                        r"replaced"):
        FolderOutput(mixed, KIND, overwrite)
    assert (mixed / "notes.txt").read_text() == "the user's\n" and (mixed / "model.bin").exists()


def test_a_file_that_appears_during_the_work_stops_the_swap(tmp_path):
    out = _earlier(tmp_path / "m")
    output = FolderOutput(out, KIND, True)
    with pytest.raises(DataError, match="notes.txt"):
        with output.staged() as folder:
            (out / "notes.txt").write_text("written while the export ran\n")
            open(os.path.join(folder, "model.bin"), "w").close()
    assert (out / "notes.txt").exists() and (out / "model.bin").read_bytes() == b"old weights"
    assert sorted(os.listdir(tmp_path)) == ["m"]


def test_a_failure_during_the_work_leaves_the_earlier_output_and_no_staging(tmp_path):
    out = _earlier(tmp_path / "m")
    with pytest.raises(DataError, match=r"m: writing failed: No space left on device"):
        with FolderOutput(out, KIND, True).staged():
            raise OSError(28, "No space left on device")
    assert (out / "model.bin").read_bytes() == b"old weights" and sorted(os.listdir(tmp_path)) == ["m"]


def test_protected_places_are_refused_with_or_without_overwrite(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "inner").mkdir(parents=True)
    monkeypatch.chdir(work / "inner")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    mount = tmp_path / "mnt"
    mount.mkdir()
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: os.path.realpath(p) == str(mount) or real_ismount(p))
    for path, reason in ((".", "the working folder"), ("..", "a parent of the working folder"),
                         (str(tmp_path), "a parent of the working folder"), (str(home), "your home folder"),
                         (str(mount), "a mount point")):
        for overwrite in (False, True):
            with pytest.raises(UsageError, match=f"--out {path}: is {reason}"):
                FolderOutput(path, KIND, overwrite, f"--out {path}")
            with pytest.raises(UsageError, match=f"is {reason}"):
                outputs.claim_folder(path, KIND, f"--out {path}")


def test_a_symbolic_link_is_followed_and_checked_as_its_folder(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("x\n")
    (tmp_path / "link").symlink_to(mine)
    with pytest.raises(DataError, match="thesis.tex"):
        FolderOutput(tmp_path / "link", KIND, True)
    earlier = _earlier(tmp_path / "earlier")
    (tmp_path / "current").symlink_to(earlier)
    _write(FolderOutput(tmp_path / "current", KIND, True))
    assert (tmp_path / "current").is_symlink() and (earlier / "model.bin").read_text() == "new weights"


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_what_is_written_has_the_modes_open_and_mkdir_give(tmp_path, umask):
    """The reference: a folder and a file made by mkdir and open under the same umask (tempfile's are private)."""
    old = os.umask(umask)
    try:
        os.mkdir(tmp_path / "ref-dir")
        open(tmp_path / "ref-file", "w").close()
        _write(FolderOutput(tmp_path / "out", KIND, False))
        outputs.replace_file(str(tmp_path / "file.bin"), lambda handle: handle.write(b"x"))
    finally:
        os.umask(old)

    def mode(p):
        return stat.S_IMODE(os.stat(p).st_mode)

    assert mode(tmp_path / "out") == mode(tmp_path / "ref-dir")
    assert {mode(tmp_path / "out" / n) for n in os.listdir(tmp_path / "out")} == {mode(tmp_path / "ref-file")}
    assert mode(tmp_path / "file.bin") == mode(tmp_path / "ref-file")


def test_a_file_output_replaces_only_its_own_kind(tmp_path):
    own = tmp_path / "avg.pt"
    own.write_bytes(b"an earlier average")
    mine = tmp_path / "notes.txt"
    mine.write_text("x\n")

    def is_own(path):
        return path.endswith(".pt")

    with pytest.raises(UsageError, match=r"--output .*avg.pt: exists; add --overwrite"):
        outputs.claim_file(str(own), False, f"--output {own}", is_own, "a checkpoint")
    outputs.claim_file(str(own), True, f"--output {own}", is_own, "a checkpoint")
    with pytest.raises(DataError, match=r"notes.txt: exists and is not a checkpoint; refusing to replace it"):
        outputs.claim_file(str(mine), True, f"--output {mine}", is_own, "a checkpoint")
    with pytest.raises(DataError, match=r"is a folder"):
        outputs.claim_file(str(tmp_path), True, f"--output {tmp_path}", is_own, "a checkpoint")


def test_staging_folders_of_a_killed_run_are_removed_by_the_next(tmp_path):
    """A process that no longer runs left ``.NAME.tmp-PID-…``; one that runs (this one) keeps its own."""
    dead = 2 ** 22 + 12345  # above the kernel's pid limit: no process has it
    left = tmp_path / f".m.tmp-{dead}-abc"
    left.mkdir()
    alive = tmp_path / f".m.tmp-{os.getpid()}-abc"
    alive.mkdir()
    user = tmp_path / ".m.tmp-notes"
    user.mkdir()
    _write(FolderOutput(tmp_path / "m", KIND, False))
    assert sorted(os.listdir(tmp_path)) == sorted([alive.name, user.name, "m"])


def test_a_save_dir_holding_the_log_the_shell_made_is_accepted(tmp_path):
    """`nmt-train … --save-dir ck > ck/train.log` (fairseq users' habit, and examples/multilingual/run.sh):
    the shell creates the log before nmt-train checks the folder, which is then the run's, not a stranger's."""
    from nmt_toolkit.checkpoints import SAVE_DIR

    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "train.log").write_text("")
    outputs.check_folder(str(ck), SAVE_DIR, f"--save-dir {ck}")
    (ck / "notes.txt").write_text("x\n")
    outputs.check_folder(str(ck), SAVE_DIR, f"--save-dir {ck}")  # an earlier save dir keeps the user's files
    (ck / "train.log").unlink()
    with pytest.raises(DataError, match="it holds notes.txt"):
        outputs.check_folder(str(ck), SAVE_DIR, f"--save-dir {ck}")

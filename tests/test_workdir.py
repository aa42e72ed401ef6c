"""The example scripts' work folder (``python3 -m nmt_toolkit.cli.workdir``), in this process: a script makes a
new or empty folder its own, reuses a folder it marked before (removing only the entries it writes), and
refuses anyone else's non-empty folder in one line, leaving it as it was. Every folder is inside tmp_path."""
from __future__ import annotations

from nmt_toolkit.cli.workdir import run as workdir


def _claim(folder, capsys, *extra) -> tuple[int, list[str]]:
    code = workdir([str(folder), "--owner", "run.sh", "--entries", "bin,test.*", *extra])
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_new_folder_becomes_the_scripts_and_a_second_run_removes_only_its_entries(tmp_path, capsys):
    folder = tmp_path / "work"
    assert _claim(folder, capsys) == (0, [])
    (folder / "bin").mkdir()
    (folder / "bin" / "dict.en.txt").write_text("a 1\n")
    (folder / "test.de").write_text("x\n")
    (folder / "notes.txt").write_text("the user's\n")
    assert _claim(folder, capsys) == (0, [])
    assert sorted(p.name for p in folder.iterdir()) == [".nmt-workdir", "notes.txt"]
    assert (folder / "notes.txt").read_text() == "the user's\n"


def test_keep_leaves_an_earlier_runs_entries(tmp_path, capsys):
    folder = tmp_path / "work"
    assert _claim(folder, capsys)[0] == 0
    (folder / "test.de").write_text("x\n")
    assert _claim(folder, capsys, "--keep") == (0, [])
    assert (folder / "test.de").read_text() == "x\n"


def test_a_foreign_folder_is_refused_in_one_line_and_left_as_it_was(tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "test.de").write_text("the user's\n")
    code, err = _claim(folder, capsys, "--flag", "--workdir")
    assert code != 0 and len(err) == 1
    assert err[0].startswith(f"run.sh: error: --workdir {folder}: a non-empty folder that run.sh did not make")
    assert [p.name for p in folder.iterdir()] == ["test.de"] and (folder / "test.de").read_text() == "the user's\n"


def test_a_script_of_another_name_does_not_reuse_the_folder(tmp_path, capsys):
    folder = tmp_path / "work"
    assert _claim(folder, capsys)[0] == 0
    (folder / "test.de").write_text("x\n")
    assert workdir([str(folder), "--owner", "other.sh", "--entries", "test.*"]) != 0
    assert (folder / "test.de").exists()

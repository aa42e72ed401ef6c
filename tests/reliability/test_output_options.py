"""Every option that names an output, and every example script's work folder, against the places a careless user
names: the working folder holding a file of theirs (``.``), a parent of the working folder (``..``), a non-empty
folder of theirs, and a symbolic link to one. Each must end with exit status != 0, one error line naming the
option and the path, and every file exactly as it was, with ``--overwrite`` too.

The options are found from the option dataclasses (``option(output=…)``) through the same command builder the
programs run, so an output option added to any program joins the matrix by itself (and fails it until it has a
base command below). The programs run in this process; the example scripts as real processes. Everything
happens inside the test's temporary folder: the working folder is a folder in it, never a real one.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from nmt_toolkit import config
from tests.reliability.harness import (PROGRAMS, assert_refused, assert_unchanged, run_in_process, snapshot,
                                       tiny_trained_model)
from tests.reliability.test_option_ranges import built_groups
from tests.train_helpers import TINY

REPO = pathlib.Path(__file__).resolve().parents[2]
MARIAN = REPO / "tests" / "fixtures" / "marian" / "en-de"
PLACES = ("dot", "parent", "foreign", "link")


def output_fields() -> list[tuple[str, str]]:
    """(program, flag) of every option marked as an output, in every program."""
    found = []
    for prog in PROGRAMS:
        for group in built_groups(prog, []):
            for f in config.cli_fields(group.cls):
                if f.metadata.get("output") and (prog, config.flag_name(f)) not in found:
                    found.append((prog, config.flag_name(f)))
    return found


def base_commands(prog: str, flag: str, world, tmp) -> list[list]:
    """Commands of ``prog`` that would run but for the output named after ``flag`` (one per format where the
    output's kind depends on it)."""
    root, data, ck = world
    train = [data, *TINY, "--max-update", "1"]
    table = {
        ("nmt-preprocess", "--destdir"): [["--source-lang", "xx", "--target-lang", "yy", "--trainpref",
                                           root / "raw" / "train", "--no-progress-bar"]],
        ("nmt-train", "--save-dir"): [train],
        ("nmt-train", "--save-model-folder"): [train + ["--save-dir", tmp / "new-ck"]],
        ("nmt-train", "--tensorboard-logdir"): [train + ["--save-dir", tmp / "new-ck"]],
        ("nmt-generate", "--results-path"): [[data, "--path", ck]],
        ("nmt-generate", "--attention-plot"): [[data, "--path", ck]],
        ("nmt-average-checkpoints", "--output"): [["--inputs", ck]],
        ("nmt-export", "--output-dir"): [[data, "--path", ck, "--format", fmt]
                                         for fmt in ("ctranslate2", "fairseq", "folder", "marian")],
        ("nmt-convert", "--output"): [["--from", "fairseq", "--path", ck], ["--from", "marian", "--path", MARIAN],
                                      ["--from", "m2m100", "--path", MARIAN]],
        ("nmt-translate-file", "--output"): [[data, "--path", ck, _document(tmp)]],
    }
    assert (prog, flag) in table, f"{prog} {flag} names an output: give it a base command here"
    return table[(prog, flag)]


def _document(tmp: pathlib.Path) -> pathlib.Path:
    (tmp / "in.txt").write_text("a b c\n")
    return tmp / "in.txt"


def has_overwrite(prog: str) -> bool:
    return any(f.name == "overwrite" for group in built_groups(prog, []) for f in config.cli_fields(group.cls))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return tiny_trained_model(tmp_path_factory.mktemp("outputs"))


def lay_out(tmp: pathlib.Path, place: str) -> tuple[pathlib.Path, str]:
    """The user's files and the working folder for ``place``; returns (working folder, the path to name)."""
    work, foreign = tmp / "work", tmp / "foreign"
    (work / "inner").mkdir(parents=True)
    (work / "notes.txt").write_text("the user's notes\n")
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("\\documentclass{article}\n")
    (tmp / "link").symlink_to(foreign, target_is_directory=True)
    if place == "parent":
        return work / "inner", ".."
    return work, {"dot": ".", "foreign": str(foreign), "link": str(tmp / "link")}[place]


CASES = [pytest.param(prog, flag, place, overwrite, id=f"{prog}{flag}-{place}{'-overwrite' if overwrite else ''}")
         for prog, flag in output_fields() for place in PLACES
         for overwrite in ((False, True) if has_overwrite(prog) else (False,))]


def test_the_matrix_covers_every_program_that_writes():
    assert {prog for prog, _ in output_fields()} == {"nmt-preprocess", "nmt-train", "nmt-generate",
                                                     "nmt-average-checkpoints", "nmt-export", "nmt-convert",
                                                     "nmt-translate-file"}


@pytest.mark.parametrize("prog, flag, place, overwrite", CASES)
def test_an_output_option_never_replaces_what_the_user_has(world, tmp_path, monkeypatch, prog, flag, place,
                                                             overwrite):
    cwd, value = lay_out(tmp_path, place)
    monkeypatch.chdir(cwd)
    for base in base_commands(prog, flag, world, tmp_path):
        before = snapshot(tmp_path, world[0])
        result = run_in_process(prog, [*base, flag, value, *(["--overwrite"] if overwrite else [])])
        assert_refused(result, f"{flag} {value}:")
        assert_unchanged(before, tmp_path, world[0])


# --------------------------------------------------------------------------- the example scripts

SCRIPTS = {  # script → (arguments before the work folder, how it is named, arguments after)
    "quickstart/run.sh": ([], "--workdir", ["--max-update", "1"]),
    "opus-mt/run.sh": ([str(MARIAN)], "--workdir", []),
    "wmt14/ci.sh": ([], "", []),
    "ptb_parsing/ci.sh": ([], "", []),
    "multilingual/run.sh": (["--ci"], "", []),
}


def _script(name: str, args: list, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", str(REPO / "examples" / name), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_an_example_script_never_wipes_a_folder_it_did_not_make(tmp_path, name, place):
    cwd, value = lay_out(tmp_path, place)
    before_args, flag, after_args = SCRIPTS[name]
    named = [flag, value] if flag else [value]
    before = snapshot(tmp_path)
    proc = _script(name, [*before_args, *named, *after_args], cwd)
    errors = [line for line in proc.stderr.splitlines() if ": error:" in line]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr[-2000:]
    assert f"{flag or 'WORKDIR'} {value}:" in errors[0], errors[0]
    assert_unchanged(before, tmp_path)


def test_the_quickstart_checks_its_data_before_it_touches_the_work_folder(tmp_path):
    """``--workdir`` holding the user's file and ``--data`` naming no folder: refused, and the file is kept
    (the quickstart used to wipe the work folder first)."""
    work = tmp_path / "qs4"
    work.mkdir()
    (work / "important.txt").write_text("keep me\n")
    before = snapshot(tmp_path)
    proc = _script("quickstart/run.sh", ["--workdir", str(work), "--data", str(tmp_path / "nonexistent")], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--data {tmp_path / 'nonexistent'}: no such folder" in proc.stderr
    assert_unchanged(before, tmp_path)


def test_a_work_folder_the_script_made_is_reused_and_only_its_own_entries_go(tmp_path):
    """The same claim the scripts make: a new folder is marked; a second run removes what the script writes
    there and nothing else; another script's folder is refused."""
    work = tmp_path / "w"
    claim = [sys.executable, "-m", "nmt_toolkit.cli.workdir", str(work), "--owner", "examples/x.sh",
             "--entries", "raw,test.*"]
    assert subprocess.run(claim, capture_output=True).returncode == 0
    (work / "raw").mkdir()
    (work / "raw" / "train.en").write_text("a\n")
    (work / "test.en").write_text("b\n")
    (work / "notes.txt").write_text("the user's\n")
    assert subprocess.run(claim, capture_output=True).returncode == 0
    assert sorted(os.listdir(work)) == [".nmt-workdir", "notes.txt"]
    other = subprocess.run([*claim[:5], "examples/y.sh"], capture_output=True, text=True)
    assert other.returncode == 1 and "examples/y.sh did not make" in other.stderr


@pytest.mark.parametrize("fmt", ["ctranslate2", "marian"])
@pytest.mark.slow
def test_export_overwrite_into_the_working_folder_deletes_nothing(world, tmp_path, fmt):
    """The finding as a user met it, a real process: ``nmt-export --overwrite --output-dir .`` in a folder of
    theirs used to delete every file there (and, named ``/`` as root, a machine's /etc)."""
    from tests.reliability.harness import run_process

    root, data, ck = world
    work, _ = lay_out(tmp_path, "dot")
    before = snapshot(tmp_path, root)
    result = run_process("nmt-export", [data, "--path", ck, "--format", fmt, "--output-dir", ".", "--overwrite"],
                         cwd=work)
    line = assert_refused(result, "--output-dir .: is the working folder", status=2)
    assert line.startswith("nmt-export: error: ")
    assert_unchanged(before, tmp_path, root)

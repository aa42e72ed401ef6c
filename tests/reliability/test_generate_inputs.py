"""nmt-generate and nmt-interactive on inputs they cannot translate as given, and output they cannot write.

A source line longer than the model can take is refused by both programs with its line number (never
dropped or truncated in silence); a run that translated nothing of a non-empty input does not exit 0; a
full disk under --results-path is one line and leaves no temporary file; control characters in what is
printed are escaped, so a crafted input cannot drive the terminal or split an output line.
"""
from __future__ import annotations

import os
import resource
import subprocess

import pytest

from tests.reliability.harness import (assert_refused, assert_unchanged, program_path, run_in_process, snapshot,
                                       tiny_trained_model)

PROGRAMS = ("nmt-generate", "nmt-interactive")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return tiny_trained_model(tmp_path_factory.mktemp("inputs"))


def _args(prog, data, ck, text_file):
    return [data, "--path", ck, "--beam", "2", "--max-len-b", "3", "--input", text_file]


@pytest.mark.parametrize("prog", PROGRAMS)
@pytest.mark.parametrize("limit_flags, limit", [((), "1024 of --max-source-positions"),  # sinusoidal: no model limit
                                                (("--max-source-positions", "20"), "20 of --max-source-positions"),
                                                (("--max-tokens", "30"), "30 of --max-tokens")])
def test_a_line_longer_than_the_model_takes_is_refused_with_its_line_number(world, tmp_path, prog, limit_flags,
                                                                              limit):
    """--max-tokens bounds nmt-generate's batches only: nmt-interactive batches --buffer-size lines."""
    root, data, ck = world
    if prog == "nmt-interactive" and limit_flags[:1] == ("--max-tokens",):
        limit = "1024 of --max-source-positions"
    text = tmp_path / "in.txt"
    text.write_text("w1 w2\n" + " ".join(["w3"] * 5000) + "\nw4\n")
    results = tmp_path / "res"
    extra = ["--results-path", results] if prog == "nmt-generate" else []
    before = snapshot(root)
    result = run_in_process(prog, [*_args(prog, data, ck, text), *limit_flags, *extra])
    assert_refused(result, f"--input {text} line 2: 5001 tokens", limit, status=1)
    assert "truncat" not in result.stderr
    assert_unchanged(before, root)
    if prog == "nmt-generate":  # it checks every line before translating any
        assert not result.stdout and not list(results.glob("*"))


def test_generate_does_not_exit_0_when_it_translated_nothing(world):
    root, data, ck = world
    result = run_in_process("nmt-generate", [data, "--path", ck, "--gen-subset", "valid", "--max-source-positions",
                                             "2", "--skip-invalid-size-inputs-valid-test"])
    assert_refused(result, "valid", "40", status=1)
    assert "Generate valid" not in result.stdout


def _limit_file_size(limit):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


@pytest.mark.slow
def test_a_full_disk_under_results_path_is_one_line_and_leaves_no_temporary_file(world, tmp_path):
    root, data, ck = world
    results = tmp_path / "res"
    results.mkdir()
    (results / "generate-valid.txt").write_text("an earlier run\n")
    proc = subprocess.run([program_path("nmt-generate"), data, "--path", ck, "--gen-subset", "valid", "--beam", "2",
                           "--max-len-b", "3", "--results-path", results], preexec_fn=_limit_file_size(3000),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "--results-path" in errors[0] and errors[0].endswith(os.strerror(27)), proc.stderr
    assert sorted(os.listdir(results)) == ["generate-valid.txt"]
    assert (results / "generate-valid.txt").read_text() == "an earlier run\n"


@pytest.mark.parametrize("prog", PROGRAMS)
def test_control_characters_are_escaped_in_printed_lines(world, tmp_path, prog):
    root, data, ck = world
    text = tmp_path / "in.txt"
    text.write_text("w1 \x1b[31mred\x1b[0m w2\x07\x0b\x85w3\tw4\n", encoding="utf-8")
    result = run_in_process(prog, _args(prog, data, ck, text))
    assert result.status == 0, result.stderr[-2000:]
    s_lines = [line for line in result.stdout.split("\n") if line.startswith("S-")]
    assert s_lines == ["S-0\tw1 \\x1b[31mred\\x1b[0m w2\\x07\\x0b\\x85w3\tw4"], result.stdout
    assert not any(c in result.stdout for c in "\x1b\x07\x0b\x85")

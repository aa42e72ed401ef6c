"""Files the user names that are not what the program needs: a --config that is not UTF-8 text or not a
file, an existing file as nmt-export's --output-dir, and a disk that fills up while nmt-export writes.
Each is one error line, no traceback, and nothing created or changed."""
from __future__ import annotations

import os
import resource
import subprocess

import pytest

from tests.reliability.harness import (assert_refused, assert_unchanged, program_path, run_in_process, snapshot,
                                       tiny_trained_model)
from tests.train_helpers import TINY


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return tiny_trained_model(tmp_path_factory.mktemp("places"))


def _commands(root, data, ck):
    return {"nmt-train": [data, *TINY, "--save-dir", root / "new"],
            "nmt-generate": [data, "--path", ck],
            "nmt-score": ["--sys", root / "raw" / "valid.yy", "--ref", root / "raw" / "valid.yy"]}


@pytest.mark.parametrize("prog", ["nmt-train", "nmt-generate", "nmt-score"])
@pytest.mark.parametrize("kind", ["latin-1", "folder"])
def test_a_config_that_is_not_utf8_text_is_one_line(world, tmp_path, prog, kind):
    root, data, ck = world
    if kind == "folder":
        config = tmp_path
    else:
        config = tmp_path / "opts.yaml"
        config.write_bytes("# Übersetzung\nseed: 3\n".encode("latin-1"))
    before = snapshot(root)
    result = run_in_process(prog, [*_commands(root, data, ck)[prog], "--config", config])
    assert_refused(result, f"--config {config}", status=2)
    assert_unchanged(before, root)


@pytest.mark.parametrize("fmt", ["fairseq", "ctranslate2"])
@pytest.mark.parametrize("overwrite", [(), ("--overwrite",)])
def test_an_existing_file_as_output_dir_is_refused_and_kept(world, tmp_path, fmt, overwrite):
    root, data, ck = world
    if fmt == "ctranslate2":
        pytest.importorskip("ctranslate2")
    target = tmp_path / "notes.txt"
    target.write_text("keep me\n")
    before = snapshot(tmp_path, root)
    result = run_in_process("nmt-export", [data, "--path", ck, "--format", fmt, "--output-dir", target, *overwrite])
    assert_refused(result, f"--output-dir {target}", "not a folder", status=1)
    assert_unchanged(before, tmp_path, root)


@pytest.mark.parametrize("fmt", ["fairseq", "ctranslate2"])
@pytest.mark.slow
def test_a_full_disk_during_export_is_one_line_and_leaves_nothing(world, tmp_path, fmt):
    root, data, ck = world
    if fmt == "ctranslate2":
        pytest.importorskip("ctranslate2")
    out = tmp_path / "exported"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    proc = subprocess.run([program_path("nmt-export"), data, "--path", ck, "--format", fmt, "--output-dir", out],
                          preexec_fn=limit, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if ": error:" in line]
    assert len(errors) == 1 and str(out) in errors[0], proc.stderr[-2000:]
    if fmt == "ctranslate2":  # EFBIG, what RLIMIT_FSIZE gives (a full disk: ENOSPC); torch's zip writer hides it
        assert errors[0].endswith(f"--output-dir {out}: writing failed: {os.strerror(27)}"), errors[0]
    assert os.listdir(tmp_path) == []  # neither the folder nor a staging copy

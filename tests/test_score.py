"""nmt-score against the sacrebleu command on the same files (every printed digit), the compound split of
tensor2tensor's get_ende_bleu.sh, stdin input and the line-count mismatch error."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys

import pytest

from nmt_toolkit.cli import score as score_cli
from nmt_toolkit.scoring.bleu import split_compounds


@pytest.fixture()
def files(tmp_path, data_dir):
    ref = (data_dir / "multi30k" / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[:300]
    hyp = (data_dir / "multi30k" / "val.de").read_text(encoding="utf-8").splitlines()[:300]
    hyp = [r if i % 3 else h for i, (r, h) in enumerate(zip(ref, hyp))]  # a system with a real BLEU
    (tmp_path / "ref.de").write_text("\n".join(ref) + "\n", encoding="utf-8")
    (tmp_path / "hyp.de").write_text("\n".join(hyp) + "\n", encoding="utf-8")
    return tmp_path / "hyp.de", tmp_path / "ref.de"


def test_same_numbers_as_the_sacrebleu_command(files, capsys):
    hyp, ref = files
    sacrebleu = shutil.which("sacrebleu") or pytest.skip("the sacrebleu command is not installed")
    for width in ("1", "2", "4"):
        theirs = subprocess.run([sacrebleu, str(ref), "-i", str(hyp), "-m", "bleu", "chrf", "-f", "text", "-w", width],
                                capture_output=True, text=True, check=True).stdout.splitlines()
        assert score_cli.run(["--sys", str(hyp), "--ref", str(ref), "--width", width]) == 0
        ours = capsys.readouterr().out.splitlines()
        assert ours == theirs
    theirs = json.loads(subprocess.run([sacrebleu, str(ref), "-i", str(hyp), "-m", "bleu"], capture_output=True,
                                       text=True, check=True).stdout)
    assert score_cli.run(["--sys", str(hyp), "--ref", str(ref), "--metric", "bleu", "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    assert ours["score"] == theirs["score"] and ours["signature"] == theirs["signature"]


def test_stdin_and_line_count_mismatch(files, capsys, monkeypatch, tmp_path):
    hyp, ref = files
    monkeypatch.setattr(sys, "stdin", io.StringIO(hyp.read_text(encoding="utf-8")))
    assert score_cli.run(["--sys", "-", "--ref", str(ref), "--metric", "bleu", "--score-only"]) == 0
    from_stdin = capsys.readouterr().out
    assert score_cli.run(["--sys", str(hyp), "--ref", str(ref), "--metric", "bleu", "--score-only"]) == 0
    assert capsys.readouterr().out == from_stdin
    short = tmp_path / "short.de"
    short.write_text("eins\nzwei\n")
    assert score_cli.run(["--sys", str(short), "--ref", str(ref)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "short.de" in err[0] and "ref.de" in err[0] and "300" in err[0] and " 2 " in err[0] + " "


def test_compound_split_like_get_ende_bleu():
    assert split_compounds("rich-text format") == "rich ##AT##-##AT## text format"
    assert split_compounds("a-b-c - d") == "a ##AT##-##AT## b-c - d"  # non-overlapping, as perl's s///g


def test_paired_bootstrap_and_tokenized(files, capsys):
    hyp, ref = files
    assert score_cli.run(["--sys", str(ref), "--sys", str(hyp), "--ref", str(ref), "--paired-bootstrap",
                          "--bootstrap-samples", "50", "--metric", "bleu", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["baseline"] and rows[0]["score"] == 100.0 and rows[1]["p_value"] is not None
    assert score_cli.run(["--sys", str(hyp), "--ref", str(ref), "--tokenized-bleu", "--compound-split"]) == 0
    assert "BLEU = " in capsys.readouterr().out

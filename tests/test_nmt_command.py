"""``nmt <program>``: the one command forwards to each program, under its own name in messages."""
from __future__ import annotations

import re

import sacrebleu

from nmt_toolkit.cli.main import PROGRAMS, run


def test_nmt_score_is_nmt_score(tmp_path, capsys):
    """The forwarded program prints the BLEU sacreBLEU's API gives for the same files (one decimal, as the
    sacrebleu command prints it)."""
    hyps = ["the cat sat on the mat", "a dog runs in the park", "two men are talking"]
    refs = ["the cat sat on a mat", "a dog is running in the park", "two men talk"]
    (tmp_path / "hyp.txt").write_text("\n".join(hyps) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    assert run(["score", "--sys", str(tmp_path / "hyp.txt"), "--ref", str(tmp_path / "ref.txt"),
                "--metric", "bleu"]) == 0
    printed = re.search(r"BLEU[^=]*= ([0-9.]+)", capsys.readouterr().out)
    assert printed and float(printed.group(1)) == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 1)


def test_help_lists_every_program_and_an_unknown_one_is_refused(capsys):
    assert run(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in PROGRAMS)
    assert run(["trian"]) == 2
    assert "trian" in capsys.readouterr().err


def test_a_programs_failure_is_the_exit_status_and_its_errors_carry_the_forwarded_name(tmp_path, capsys):
    assert run(["score", "--sys", str(tmp_path / "missing.txt"), "--ref", str(tmp_path / "missing.txt")]) != 0
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("nmt score: error: ")

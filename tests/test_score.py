"""nmt-score against the sacrebleu command on the same files (every printed digit), lines split as sacrebleu
splits them, the paper's tokenized BLEU against numbers worked by hand (and by multi-bleu.perl), the compound
split of tensor2tensor's get_ende_bleu.sh, stdin input and one-line errors for bad input."""
from __future__ import annotations

import io
import json
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


SACREBLEU = [sys.executable, "-m", "sacrebleu"]  # the command, from the package we depend on: never skipped


@pytest.mark.slow
def test_same_numbers_as_the_sacrebleu_command(files, capsys):
    hyp, ref = files
    for width in ("1", "2", "4"):
        theirs = subprocess.run([*SACREBLEU, str(ref), "-i", str(hyp), "-m", "bleu", "chrf", "-f", "text", "-w", width],
                                capture_output=True, text=True, check=True).stdout.splitlines()
        assert score_cli.run(["--sys", str(hyp), "--ref", str(ref), "--width", width]) == 0
        ours = capsys.readouterr().out.splitlines()
        assert ours == theirs
    theirs = json.loads(subprocess.run([*SACREBLEU, str(ref), "-i", str(hyp), "-m", "bleu"], capture_output=True,
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


def test_lines_split_at_newlines_only_as_sacrebleu_does(tmp_path, capsys):
    """A stray \\r (or U+2028, U+0085, a form feed) inside a line is part of the line, as for the sacrebleu
    command: cutting there (str.splitlines, text mode) misaligns the files (BLEU 43.0 where sacrebleu says 100)."""
    lines = ["a man rides a red bike down the street .", "two dogs play in the green park today .",
             "a woman sits on a bench with a book .", "children run along the beach", "trailing spaces"]
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    odd = list(lines)
    odd[0] = odd[0].replace("man ", "man\r")
    odd[2] = odd[2].replace(" bench", "\x85bench").replace(" with", "\x0cwith")
    odd[4] += "  \t"
    hyp.write_bytes(("\n".join(odd) + "\r\n").encode("utf-8"))  # and a CRLF at the end
    refs = list(lines)
    refs[1] = refs[1].replace(" the", "\u2028the")
    refs[3] = refs[3].replace(" along", "\ralong")
    ref.write_bytes(("\n".join(refs) + "\n").encode("utf-8"))
    theirs = subprocess.run([*SACREBLEU, str(ref), "-i", str(hyp), "-m", "bleu", "-b", "-w", "2"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert theirs == "100.00"  # 13a splits words at any whitespace: the same words, line for line
    assert score_cli.run(["--sys", str(hyp), "--ref", str(ref), "--metric", "bleu", "--score-only", "--width", "2"]) == 0
    assert capsys.readouterr().out.strip() == theirs


def test_tokenized_bleu_equals_numbers_worked_by_hand():
    """The paper's BLEU (multi-bleu.perl on Moses-tokenized, compound-split text) on two sentences, counted by
    hand; multi-bleu.perl prints the same: 'BLEU = 63.35, 100.0/77.8/71.4/60.0 (BP=0.834, ratio=0.846,
    hyp_len=11, ref_len=13)' and 'BLEU = 58.54, 100.0/71.4/60.0/66.7 (BP=0.801, ratio=0.818, hyp_len=9,
    ref_len=11)'."""
    import math

    from nmt_toolkit.scoring.bleu import tokenized_bleu

    hyps = ["the cat sat on the mat", "a rich-text format"]
    refs = [["the cat sat on the red mat", "a rich-text file format"]]
    # compound split: 'a rich ##AT##-##AT## text format' (5 tokens) against 6; n-gram matches 11/11, 7/9, 5/7,
    # 3/5; 11 hypothesis tokens against 13 reference tokens
    res = tokenized_bleu(hyps, refs, "en", compound_split=True)
    assert (res.counts, res.totals, res.sys_len, res.ref_len) == ([11, 7, 5, 3], [11, 9, 7, 5], 11, 13)
    assert res.score == pytest.approx(100 * math.exp(1 - 13 / 11) * (7 / 9 * 5 / 7 * 3 / 5) ** 0.25, abs=1e-9)
    assert round(res.score, 2) == 63.35
    # without the split 'rich-text' is one token: 9/9, 5/7, 3/5, 2/3; 9 against 11
    res = tokenized_bleu(hyps, refs, "en")
    assert (res.counts, res.totals, res.sys_len, res.ref_len) == ([9, 5, 3, 2], [9, 7, 5, 3], 9, 11)
    assert round(res.score, 2) == 58.54 == round(100 * math.exp(1 - 11 / 9) * (5 / 7 * 3 / 5 * 2 / 3) ** 0.25, 2)
    # Moses tokenization: punctuation split off on both sides, so these are identical token for token
    assert tokenized_bleu(["Der Hund, der läuft."], [["Der Hund , der läuft ."]], "de").score == pytest.approx(100)
    # no 4-gram in common: multi-bleu.perl's log floor makes the score 0, not a smoothed value
    assert tokenized_bleu(["a b c d e"], [["a b c x e"]], "en").score == 0.0


def test_empty_files_and_user_dir_are_one_line_errors(tmp_path, capsys):
    """Two empty files are one error line (not an IndexError inside sacrebleu), and --user-dir is imported
    as in every program: a plugin with a syntax error is an error, never ignored."""
    empty_sys, empty_ref = tmp_path / "sys.txt", tmp_path / "ref.txt"
    empty_sys.write_text("")
    empty_ref.write_text("")
    for extra in ([], ["--tokenized-bleu"]):
        assert score_cli.run(["--sys", str(empty_sys), "--ref", str(empty_ref), *extra]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "nothing to score" in err[0] and "sys.txt" in err[0] and "ref.txt" in err[0]
    broken = tmp_path / "plugin.py"
    broken.write_text("def oops(:\n")
    (tmp_path / "ok.txt").write_text("a b c d\n")
    assert score_cli.run(["--user-dir", str(broken), "--sys", str(tmp_path / "ok.txt"), "--ref", str(tmp_path / "ok.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plugin.py" in err[0] and "SyntaxError" in err[0]
    plugin = tmp_path / "fine.py"
    plugin.write_text("import sys\nsys.modules[__name__].IMPORTED = True\n")
    assert score_cli.run(["--user-dir", str(plugin), "--sys", str(tmp_path / "ok.txt"), "--ref", str(tmp_path / "ok.txt"),
                          "--metric", "bleu", "--score-only"]) == 0
    assert sys.modules["fine"].IMPORTED and capsys.readouterr().out.strip() == "100.0"


def test_invalid_utf8_names_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nbroken \xff here\n")
    assert score_cli.run(["--sys", str(bad), "--ref", str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.txt line 2: invalid UTF-8" in err[0]

"""nmt-generate and nmt-interactive with --format html: tags placed by hand-checked rules on the upper-casing
model (tests/trained_model.py), A- lines worked out by hand, the text of the output (read back by the standard
library's HTML parser, tests/html_check.py) equal to the plain --format text translation of the same sentences
on Multi30k, and one-line errors."""
from __future__ import annotations

import io
import random
import sys

import pytest

import numpy as np

from nmt_toolkit.cli import generate as gen_cli
from nmt_toolkit.cli import generate_html  # noqa: F401  (the fast loop imports every module)
from nmt_toolkit.cli import interactive as inter_cli
from nmt_toolkit.generation.html_lines import HtmlLines
from nmt_toolkit.markup.placement import Aligned, word_pairs


def _run(capsys, argv, program=gen_cli):
    rc = program.run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _lines(out: str, tag: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(f"{tag}-")]


def test_word_pairs_count_each_sides_words_across_the_sentences():
    """Worked by hand: sentence 1 has 4 source words (A big dog .) and 4 target words (Der große Hund .);
    sentence 2 starts at source word 4 and target word 4, and its target has a word more than its source."""
    first = Aligned("Der große Hund.", ["▁Der", "▁groß", "e", "▁Hund", "."], [0, 1, 1, 2, 3],
                    ["▁A", "▁big", "▁dog", ".", None])
    second = Aligned("Er läuft schnell.", ["▁Er", "▁läuft", "▁schnell", "."], [0, 1, 1, 2],
                     ["▁It", "▁runs", ".", None])
    assert word_pairs(["A big dog.", "It runs."], [first, second]) == \
        [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (5, 6), (6, 7)]
    # a target word whose pieces attend to no source word has no pair; the words after it keep their numbers
    unaligned = Aligned("Der große Hund.", ["▁Der", "▁groß", "e", "▁Hund", "."], [0, 4, 4, 2, 3],
                        ["▁A", "▁big", "▁dog", ".", None])
    assert word_pairs(["A big dog."], [unaligned]) == [(0, 0), (2, 2), (3, 3)]


class _Pieces:
    """A target dictionary whose ids are the pieces themselves, and the task around it."""

    def string(self, tokens) -> str:
        return " ".join(tokens)


class _Translator:
    task = type("Task", (), {"cfg": type("Cfg", (), {"source_lang": "en"})(), "tgt_dict": _Pieces()})()

    @staticmethod
    def detokenize(pieces: str) -> str:
        return pieces.replace(" ", "").replace("\u2581", " ").strip()


def _hyp(pieces: list[str], score: float, alignment: list[int]) -> dict:
    return {"tokens": pieces, "score": score, "positional_scores": np.full(len(pieces) + 1, score / (len(pieces) + 1)),
            "alignment": np.array(alignment)}


def test_a_lines_ranks_take_each_sentences_hypothesis_of_that_rank_or_its_best():
    """Worked by hand: two sentences, the first with two hypotheses, the second with one. Rank 1 renders the
    first sentence's second hypothesis beside the second sentence's best; scores add up, per-token scores
    follow each other, the tag wraps the word its word became."""
    read = HtmlLines(_Translator(), ["<p>A <b>dog</b> runs. A cat.</p>", ""], "--input x")
    assert read.sentences == ["A dog runs.", "A cat."]
    read.tokens = [["\u2581A", "\u2581dog", "\u2581runs", ".", None], ["\u2581A", "\u2581cat", ".", None]]
    found = {0: [_hyp(["\u2581EIN", "\u2581HUND", "\u2581LÄUFT", "."], -1.0, [0, 1, 2, 3]),
                 _hyp(["\u2581ES", "\u2581LÄUFT", "\u2581EIN", "\u2581HUND", "."], -3.0, [2, 2, 0, 1, 3])],
             1: [_hyp(["\u2581EINE", "\u2581KATZE", "."], -0.5, [0, 1, 2])]}
    line, empty = read.hypotheses(found)
    assert [h.html for h in line] == ["<p>EIN <b>HUND</b> LÄUFT. EINE KATZE.</p>",
                                      "<p>ES LÄUFT EIN <b>HUND</b>. EINE KATZE.</p>"]
    assert [h.score for h in line] == [-1.5, -3.5]
    assert line[1].positional_scores == pytest.approx([-0.5] * 6 + [-0.125] * 4)
    # words: "A dog runs ." are 0-3, "A cat ." 4-6; "ES LÄUFT EIN HUND ." 0-4, "EINE KATZE ." 5-7
    assert line[1].pairs == ((2, 0), (2, 1), (0, 2), (1, 3), (3, 4), (4, 5), (5, 6), (6, 7))
    assert [(h.html, h.score, h.pairs) for h in empty] == [("", 0, ())]


@pytest.mark.slow
def test_html_lines_through_nmt_generate_and_nmt_interactive(trained_translation, capsys, tmp_path, monkeypatch):
    """The model upper-cases, so each tag must wrap the upper-cased words it wrapped (hand-checked), the title
    is translated as a sentence of its own, and the A- lines count words over the line's sentences: the title
    ("A cat sits." = words 0-3) before the paragraph's text (words 4-7)."""
    t = trained_translation
    lines = ['<p title="A cat sits.">A <b>dog</b> runs.</p>', "A <b>small <i>cat</i></b> runs.", "", "<br>"]
    source = tmp_path / "in.html"
    source.write_text("\n".join(lines) + "\n")
    base = [t.data, "--path", t.first, "--cpu", "--format", "html"]
    rc, out, err = _run(capsys, [*base, "--input", source, "--print-alignment"])
    assert rc == 0, err
    assert _lines(out, "S") == [f"S-{i}\t{line}" for i, line in enumerate(lines)]
    want = ['<p title="A CAT SITS.">A <b>DOG</b> RUNS.</p>', "A <b>SMALL <i>CAT</i></b> RUNS.", "", "<br>"]
    assert [h.split("\t")[2] for h in _lines(out, "H")] == want
    assert [d.split("\t")[2] for d in _lines(out, "D")] == want
    assert _lines(out, "A") == ["A-0\t0-0 1-1 2-2 3-3 4-4 5-5 6-6 7-7", "A-1\t0-0 1-1 2-2 3-3 4-4", "A-2\t",
                                "A-3\t"]
    # P-: the per-token scores of the line's sentences one after another, as --format text prints them
    plain = tmp_path / "in.txt"
    plain.write_text("A cat sits.\nA dog runs.\nA small cat runs.\n")
    rc, text_out, err = _run(capsys, [t.data, "--path", t.first, "--cpu", "--input", plain])
    assert rc == 0, err
    # (batched with other sentences than here: equal up to float rounding, padding changes the sums' order)
    p_text = [[float(x) for x in line.split("\t")[1].split()] for line in _lines(text_out, "P")]
    p_html = [[float(x) for x in line.split("\t")[1].split()] for line in _lines(out, "P")]
    assert p_html == [pytest.approx(p_text[0] + p_text[1], abs=2e-4), pytest.approx(p_text[2], abs=2e-4), [], []]
    scores = [float(line.split("\t")[1]) for line in _lines(text_out, "H")]
    assert float(_lines(out, "H")[0].split("\t")[1]) == pytest.approx(scores[0] + scores[1], rel=1e-5, abs=1e-6)
    # --nbest: one block per rank; --plain: the rendered HTML alone
    rc, out, err = _run(capsys, [*base, "--input", source, "--nbest", "2", "--beam", "2"])
    assert rc == 0 and [line[:2] for line in out.splitlines() if line[:2] in ("H-", "S-")][:3] == ["S-", "H-", "H-"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    rc, out, err = _run(capsys, [*base, "--plain", "--buffer-size", "3"], inter_cli)
    assert rc == 0, err
    assert out.split("\n") == [*want, ""]


@pytest.mark.slow
def test_html_output_is_the_plain_translation_of_its_sentences_on_multi30k(multi30k_learning_run, capsys,
                                                                            tmp_path):
    """20 Multi30k sentences with inline tags around words: each output is well-formed, holds the same elements,
    and its text is the --format text translation of the untagged sentence; every A- pair names words that
    exist on both sides."""
    from html_check import first_difference, parse_strict, tagged

    from nmt_toolkit.markup.placement import words_of

    run = multi30k_learning_run
    sentences = (run.raw / "test.en").read_text(encoding="utf-8").splitlines()[:20]
    rng, counter = random.Random(3), [0]
    sources = [tagged(s, rng, counter) for s in sentences]
    (tmp_path / "in.html").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "in.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    base = [run.data, "--path", run.checkpoint, "--cpu"]
    rc, out, err = _run(capsys, [*base, "--input", tmp_path / "in.html", "--format", "html", "--print-alignment"])
    assert rc == 0, err
    rc, text_out, err = _run(capsys, [*base, "--input", tmp_path / "in.txt"])
    assert rc == 0, err
    html_lines = [line.split("\t")[2] for line in _lines(out, "D")]
    text_lines = [line.split("\t")[2] for line in _lines(text_out, "D")]
    assert len(html_lines) == len(text_lines) == 20
    for source, got, want in zip(sources, html_lines, text_lines):
        assert first_difference(source, got) is None, (source, got)
        assert parse_strict(got).text == want
    for sentence, translation, a_line in zip(sentences, text_lines, _lines(out, "A")):
        pairs = [tuple(map(int, p.split("-"))) for p in a_line.split("\t")[1].split()]
        assert pairs and all(s < len(words_of(sentence)) and t < len(words_of(translation)) for s, t in pairs)
        assert [t for _, t in pairs] == sorted(set(t for _, t in pairs))  # one pair per target word, in order


@pytest.mark.slow
def test_html_errors_are_one_line(trained_translation, capsys, tmp_path):
    t = trained_translation
    base = [t.data, "--path", t.first, "--cpu", "--format", "html"]
    good, bad = tmp_path / "good.html", tmp_path / "bad.html"
    good.write_text("A <b>dog</b>.\n")
    bad.write_text("A dog.\n<!DOCTYPE html>\n")
    for argv, status, words in (
            ([], 2, "--format html translates the HTML lines of --input FILE"),
            (["--input", good, "--glossary", good], 2, "--format html takes no --constraints, --glossary or --keep"),
            (["--input", bad], 1, f"--input {bad} line 2: not HTML the parser can read")):
        rc, out, err = _run(capsys, [*base, *argv])
        assert rc == status and out == "", (argv, err)
        errors = [line for line in err.splitlines() if not line[:4].isdigit()]  # but the log's dated lines
        assert len(errors) == 1 and errors[0].startswith("nmt-generate: error: ") and words in errors[0], err


@pytest.mark.slow
def test_the_ctranslate2_engine_places_tags_as_the_torch_engine(trained_translation, trained_ct2_export, capsys,
                                                                tmp_path):
    """An export's alignments are the torch engine's (the mean of the last layer's heads): the same hand-checked
    HTML and A- lines; an export whose record names no alignment heads is refused in one line."""
    import json
    import shutil

    lines = ['<p title="A cat sits.">A <b>dog</b> runs.</p>', "A <b>small <i>cat</i></b> runs."]
    source = tmp_path / "in.html"
    source.write_text("\n".join(lines) + "\n")
    argv = ["--path", trained_ct2_export, "--engine", "ctranslate2", "--input", source, "--format", "html",
            "--print-alignment"]
    rc, out, err = _run(capsys, argv)
    assert rc == 0, err
    assert [h.split("\t")[2] for h in _lines(out, "H")] == ['<p title="A CAT SITS.">A <b>DOG</b> RUNS.</p>',
                                                           "A <b>SMALL <i>CAT</i></b> RUNS."]
    assert _lines(out, "A") == ["A-0\t0-0 1-1 2-2 3-3 4-4 5-5 6-6 7-7", "A-1\t0-0 1-1 2-2 3-3 4-4"]
    older = tmp_path / "older"
    shutil.copytree(trained_ct2_export, older)
    record = json.loads((older / "nmt_export.json").read_text())
    del record["alignment_heads"]
    (older / "nmt_export.json").write_text(json.dumps(record))
    rc, out, err = _run(capsys, [*argv[:1], older, *argv[2:]])
    errors = [line for line in err.splitlines() if not line[:4].isdigit()]
    assert rc == 2 and out == "" and len(errors) == 1 and "records no alignment_heads" in errors[0], err


def test_without_the_html_libraries_the_program_says_which_to_install(tmp_path, capsys, monkeypatch):
    """Before any model is read: one line naming the missing module and the extra that brings it."""
    source = tmp_path / "in.html"
    source.write_text("A <b>dog</b>.\n")
    monkeypatch.setitem(sys.modules, "sentencex", None)  # import sentencex raises ImportError
    rc, out, err = _run(capsys, [tmp_path / "no-data", "--path", tmp_path / "no.pt", "--input", source, "--format",
                                 "html"])
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == ["nmt-generate: error: --format html needs lxml and sentencex (sentencex is "
                                        "not installed): pip install 'nmt_toolkit[serve]'"]

"""nmt-translate-file on documents written by their formats' own libraries, read back by the same libraries: every
paragraph's text (its runs joined) is the Translator's own plain translation of the source paragraph (so each
sentence was translated whole, across its runs), every run keeps its formatting in its place, the structure
(paragraphs, tables, slides, shapes, subtitles and their timings) is the same. Bad input (an unknown extension,
a .docx that is no zip or is cut short, a zip over the limit) is one error line and nothing written."""
from __future__ import annotations

import pytest

pytest.importorskip("docx", reason="the document formats need the [documents] extra")
pytest.importorskip("odf", reason="the document formats need the [documents] extra")
pytest.importorskip("pptx", reason="the document formats need the [documents] extra")
pytest.importorskip("srt", reason="the document formats need the [documents] extra")

import document_files as files  # noqa: E402

from nmt_toolkit.cli.translate_file import run  # noqa: E402
from nmt_toolkit.markup.placement import Aligned  # noqa: E402
from nmt_toolkit.markup.runs import RunsText, run_texts  # noqa: E402
from nmt_toolkit.markup.sentences import PlainText  # noqa: E402


@pytest.fixture(scope="module")
def model(trained_translation):
    from nmt_toolkit import Translator

    t = trained_translation
    return t, Translator.load(str(t.first), data=str(t.data), device="cpu")


def plain(translator):
    """A paragraph's plain translation as the Translator gives it: its sentences, each translated, re-joined."""
    def translate(text: str) -> str:
        read = PlainText(text, "en")
        return read.render(translator.translate(read.sentences)) if read.sentences else text
    return translate


def translate_file(model, tmp_path, name: str, data: bytes, *extra: str):
    t, _ = model
    source, target = tmp_path / name, tmp_path / f"out-{name}"
    source.write_bytes(data)
    status = run([str(t.data), "--path", str(t.first), "--cpu", str(source), "-o", str(target), *extra])
    return status, target


@pytest.mark.parametrize("extension", [".docx", ".pptx", ".odt"])
def test_runs_keep_their_formatting_and_paragraphs_their_context(model, tmp_path, extension):
    make, view = files.MAKERS[extension]
    source = make()
    status, target = translate_file(model, tmp_path, "doc" + extension, source)
    assert status == 0
    checked = files.check_runs(view(source), view(target.read_bytes()), plain(model[1]))
    assert checked >= 4
    after = view(target.read_bytes())["body"]
    assert any(len([t for t, _ in runs if t.strip()]) >= 3 for runs in after)  # several runs kept words


def test_a_ctranslate2_export_places_runs_as_the_torch_engine_does(model, trained_ct2_export, tmp_path):
    """CTranslate2 returns the torch engine's alignments, so the same document comes back run for run."""
    make, view = files.MAKERS[".docx"]
    status, by_torch = translate_file(model, tmp_path, "doc.docx", make())
    assert status == 0
    source, target = tmp_path / "doc.docx", tmp_path / "ct2.docx"
    assert run(["--path", str(trained_ct2_export), "--engine", "ctranslate2", "--cpu", str(source), "-o",
                str(target)]) == 0
    assert view(target.read_bytes()) == view(by_torch.read_bytes())


def test_subtitles_keep_indices_and_timings(model, tmp_path):
    source = files.make_srt()
    status, target = translate_file(model, tmp_path, "film.srt", source)
    assert status == 0
    before, after = files.srt_view(source), files.srt_view(target.read_bytes())
    assert [s[:3] for s in after] == [s[:3] for s in before]
    translate = plain(model[1])
    for (*_, old), (*_, new) in zip(before, after):
        assert " ".join(new.split("\n")) == translate(" ".join(old.split("\n")))
        assert new.count("\n") <= old.count("\n")
    assert after[1][3].count("\n") == 1  # the two-line subtitle is two lines again


def test_text_and_html(model, tmp_path):
    text = "A man rides the red ball. A dog runs.\r\n\r\nThe cat sits.\r\n"
    status, target = translate_file(model, tmp_path, "notes.txt", text.encode())
    assert status == 0
    translate = plain(model[1])
    assert target.read_bytes().decode() == "\r\n".join(translate(line) for line in text.split("\r\n"))
    status, target = translate_file(model, tmp_path, "page.html", b"<p>A man <b>rides</b> the ball.</p>")
    assert status == 0
    import lxml.html

    page = lxml.html.fragment_fromstring(target.read_text(), create_parent="div")
    assert page.text_content() == translate("A man rides the ball.")
    assert [e.tag for e in page.iter()] == ["div", "p", "b"]


def test_runs_placed_by_the_alignment_worked_by_hand():
    """Runs "A man " | bold "rides" | " the ball." and a translation "THE BALL A MAN RIDES ." whose alignment
    is given: the spans come back in another order than the runs, so the longest in-order sequence of spans
    keeps its words (the first run's "A MAN" and the bold run's "RIDES"), and the words of the third run,
    which the translation put first, go before the first kept span into the first run."""
    read = RunsText(["A man ", "rides", " the ball."], "en")
    assert read.sentences == ["A man rides the ball."]
    source = ["▁A", "▁man", "▁rides", "▁the", "▁ball", ".", None]
    hyp = Aligned("THE BALL A MAN RIDES .", ["▁THE", "▁BALL", "▁A", "▁MAN", "▁RIDES", "▁."], (3, 4, 0, 1, 2, 5),
                  source)
    # the third run's span wraps its longest stretch of words ("THE BALL"; the period stands apart)
    assert read.html.render([hyp]) == ('<span data-r="2">THE BALL</span> <span data-r="0">A MAN</span> '
                                       '<span data-r="1">RIDES</span> .')
    texts = read.render([hyp])
    assert "".join(texts) == "THE BALL A MAN RIDES ."
    assert texts == ["THE BALL A MAN ", "RIDES .", ""]
    # in order, each run keeps its own words, and the space before a span stays with the run before it
    in_order = Aligned("A MAN RIDES THE BALL.", ["▁A", "▁MAN", "▁RIDES", "▁THE", "▁BALL", "."], (0, 1, 2, 3, 4, 5),
                       source)
    assert read.render([in_order]) == ["A MAN ", "RIDES ", "THE BALL."]
    assert run_texts('x <span data-r="1">b</span> y', 2) == ["", "x b y"]


def test_one_positional_argument_is_the_input_and_nmt_forwards(model, tmp_path):
    from nmt_toolkit.cli.main import run as nmt

    from nmt_toolkit.cli.export import run as export

    t, translator = model
    folder, source, target = tmp_path / "model", tmp_path / "a.txt", tmp_path / "b.txt"
    assert export([str(t.data), "--path", str(t.first), "--format", "folder", "--output-dir", str(folder)]) == 0
    source.write_text("A dog runs.\n")
    # a model folder needs no DATA: the one positional argument is INPUT
    assert nmt(["translate-file", "--path", str(folder), "--cpu", str(source), "--output", str(target)]) == 0
    assert target.read_text() == translator.translate(["A dog runs."])[0].text + "\n"


@pytest.mark.parametrize("case", ["no zip", "cut short", "too big", "unknown extension"])
def test_bad_documents_are_one_line_and_nothing_written(model, tmp_path, capsys, case):
    good = files.make_docx()
    name, data, extra, status = {
        "no zip": ("doc.docx", b"PK\x03\x04 this is no zip archive", (), 1),
        "cut short": ("doc.docx", good[: len(good) // 2], (), 1),
        "too big": ("doc.docx", good, ("--max-unzipped-bytes", "1000"), 1),
        "unknown extension": ("doc.pdf", good, (), 2),
    }[case]
    got, target = translate_file(model, tmp_path, name, data, *extra)
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert got == status and len(errors) == 1, errors
    assert ("INPUT" in errors[0] and name in errors[0]), errors
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_an_existing_output_is_replaced_only_with_overwrite_and_only_a_document(model, tmp_path, capsys):
    status, target = translate_file(model, tmp_path, "a.txt", b"A dog runs.\n")
    assert status == 0
    earlier = target.read_bytes()
    status, _ = translate_file(model, tmp_path, "a.txt", b"The cat sits.\n")
    assert status == 2 and target.read_bytes() == earlier
    status, _ = translate_file(model, tmp_path, "a.txt", b"The cat sits.\n", "--overwrite")
    assert status == 0 and target.read_bytes() != earlier
    theirs = tmp_path / "out-b.docx"
    theirs.write_bytes(b"the user's own file, no document")
    status, _ = translate_file(model, tmp_path, "b.docx", files.make_docx(), "--overwrite")
    assert status == 1 and theirs.read_bytes() == b"the user's own file, no document"
    assert "refusing to replace it" in capsys.readouterr().err

"""A folder written by nmt-export --format ctranslate2 holds what decoding needs beside the model (both
dictionaries, the subword model, the languages and tags in nmt_export.json), so nmt-generate, nmt-interactive,
nmt-serve's loader and the Translator run it with no data-bin: what they print equals what the same export
prints with the data-bin it was exported from. Bilingual (the session's small model) and multilingual (the
tiny en→de/en→fr model, both directions)."""
from __future__ import annotations

import pytest

pytest.importorskip("ctranslate2", reason="the [ct2] extra is not installed")

from nmt_toolkit import Translator  # noqa: E402
from nmt_toolkit.cli.export import run as export  # noqa: E402
from nmt_toolkit.cli.generate import run as generate  # noqa: E402
from nmt_toolkit.cli.interactive import run as interactive  # noqa: E402
from tests.multilingual_model import tiny_multilingual_model  # noqa: E402


@pytest.fixture(scope="module")
def bilingual(trained_translation, trained_ct2_export, tmp_path_factory):
    lines = tmp_path_factory.mktemp("ct2-lines") / "in.en"
    lines.write_text("".join((trained_translation.root / "test.en").read_text().splitlines(True)[:12]))
    return trained_translation.data, trained_ct2_export, lines


def _printed(capsys, run, argv, stdin=None, monkeypatch=None) -> str:
    if stdin is not None:
        import io
        import sys

        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert run(argv) == 0, capsys.readouterr().err[-2000:]
    return capsys.readouterr().out


def test_nmt_generate_and_interactive_need_no_data_bin(bilingual, capsys, monkeypatch):
    data, ct2, lines = bilingual
    common = ["--path", str(ct2), "--engine", "ctranslate2", "--beam", "3"]
    alone = _printed(capsys, generate, [*common, "--input", str(lines)])
    assert alone == _printed(capsys, generate, [str(data), *common, "--input", str(lines)])
    assert alone.count("\nH-") + alone.startswith("H-") == 12
    text = lines.read_text()
    assert _printed(capsys, interactive, common, text, monkeypatch) == \
        _printed(capsys, interactive, [str(data), *common], text, monkeypatch)


def test_translator_load_needs_no_data_bin(bilingual):
    data, ct2, lines = bilingual
    sentences = lines.read_text().splitlines()
    alone = Translator.load(str(ct2), engine="ctranslate2", device="cpu").translate(sentences)
    given = Translator.load(str(ct2), str(data), engine="ctranslate2", device="cpu").translate(sentences)
    assert [t.hypotheses[0].text for t in alone] == [t.hypotheses[0].text for t in given]
    assert [t.hypotheses[0].score for t in alone] == [t.hypotheses[0].score for t in given]


def test_a_language_the_export_does_not_translate_is_refused_by_name(bilingual, capsys):
    _, ct2, lines = bilingual
    assert generate(["--path", str(ct2), "--engine", "ctranslate2", "--input", str(lines), "--source-lang", "fr"]) == 2
    assert f"--source-lang fr: the export {ct2} translates en→de" in capsys.readouterr().err


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory):
    model = tiny_multilingual_model(tmp_path_factory)
    out = tmp_path_factory.mktemp("ct2-multi") / "ct2"
    assert export([str(model.data), "--path", str(model.checkpoint), "--output-dir", str(out)]) == 0
    lines = out.parent / "in.en"
    lines.write_text("\n".join(model.lines("en", 10)) + "\n")
    return model, out, lines


@pytest.mark.parametrize("target", ["de", "fr"])
def test_a_multilingual_export_needs_no_data_bin(multilingual, target, capsys):
    model, ct2, lines = multilingual
    common = ["--path", str(ct2), "--engine", "ctranslate2", "--source-lang", "en", "--target-lang", target,
              "--input", str(lines)]
    alone = _printed(capsys, generate, common)
    assert alone == _printed(capsys, generate, [str(model.data), *common])
    assert alone.count("\nH-") + alone.startswith("H-") == 10


def test_options_asked_later_are_refused_as_at_load(bilingual):
    """with_options (what a server's request goes through) refuses a rule CTranslate2 lacks, as loading does:
    it was taken and then searched under CTranslate2's own rule instead."""
    from nmt_toolkit.errors import UsageError

    _, ct2, lines = bilingual
    translator = Translator.load(str(ct2), engine="ctranslate2", device="cpu")
    for options, named in (({"lenpen_style": "gnmt"}, "--lenpen-style gnmt"), ({"early_stop": "never"},
                                                                                "--early-stop never")):
        with pytest.raises(UsageError, match=f"^--engine ctranslate2 has no {named} "):
            translator.with_options(**options)
    assert translator.with_options(beam=2).translate(lines.read_text().splitlines()[:2])

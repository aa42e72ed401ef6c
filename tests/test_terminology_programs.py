"""Terminology through the programs: constraints, glossaries and kept spans in nmt-generate, nmt-interactive,
the Translator and nmt-serve (LibreTranslate's client and httpx), on the small trained model that learned to
upper-case English (tests/trained_model.py). The search itself is checked against fairseq's in
tests/test_constraints_fairseq.py; here, that every program hands it the same phrases, that the phrases appear,
and that bad input is one line."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from nmt_toolkit import Translator
from nmt_toolkit.generation.terminology import Glossary

GLOSSARY = "# the model writes DOG for dog: the glossary says otherwise\ndog\tCAT\nred ball\tBLUE HOUSE\n"


@pytest.fixture(scope="module")
def translator(trained_translation):
    return Translator.load(str(trained_translation.first), data=str(trained_translation.data), device="cpu")


@pytest.fixture(scope="module")
def sources(trained_translation) -> list[str]:
    test = (trained_translation.root / "test.en").read_text().splitlines()
    return test + ["The dog sits on the red ball.", "A small dog rides the red ball on the street."]


def _program(name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    code = f"import sys; sys.argv[0] = {name!r}; from nmt_toolkit.cli.{name[4:]} import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], input=stdin, capture_output=True, text=True,
                          timeout=300)


def _holds(text: str, phrases: list[str], ordered: bool = False) -> bool:
    if ordered:
        return re.search(".*".join(map(re.escape, phrases)), text) is not None
    return all(phrase in text for phrase in phrases)


def test_a_glossary_puts_its_terms_in_nmt_generate_and_the_translator_alike(trained_translation, translator,
                                                                            sources, tmp_path):
    (tmp_path / "g.tsv").write_text(GLOSSARY)
    (tmp_path / "in.en").write_text("\n".join(sources) + "\n")
    t = trained_translation
    done = _program("nmt-generate", str(t.data), "--path", str(t.first), "--input", str(tmp_path / "in.en"),
                    "--glossary", str(tmp_path / "g.tsv"), "--plain", "--cpu")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    glossary = Glossary.load(str(tmp_path / "g.tsv"))
    expected = [r.text for r in translator.translate(sources, glossary=glossary)]
    assert lines == expected
    plain = [r.text for r in translator.translate(sources)]
    wanted = [glossary.constraints_for(s) for s in sources]
    assert sum(bool(w) for w in wanted) >= 4  # the test sentences do mention the terms
    for source, line, terms, before in zip(sources, lines, wanted, plain):
        assert _holds(line, terms), (source, line, terms)
        if not terms:
            assert line == before  # a sentence without terms is translated as before
    assert "CAT" in lines[-2] and "BLUE HOUSE" in lines[-2] and "CAT" not in plain[-2]


def test_constraints_after_tabs_in_nmt_interactive_equal_the_translators(trained_translation, translator, sources):
    t = trained_translation
    wanted = [["BIG PARK"], ["SMALL", "RED CAT"], ["WOMAN RIDES"]]
    lines = [f"{s}\t" + "\t".join(w) for s, w in zip(sources, wanted)]
    done = _program("nmt-interactive", str(t.data), "--path", str(t.first), "--constraints", "ordered", "--cpu",
                    "--buffer-size", "3", stdin="\n".join(lines) + "\n")
    assert done.returncode == 0, done.stderr
    shown = [line.split("\t") for line in done.stdout.splitlines()]
    assert [row[1] for row in shown if row[0].startswith("C-")] == [p for w in wanted for p in w]
    answers = [row[2] for row in shown if row[0].startswith("D-")]
    expected = translator.translate(sources[:3], phrases=wanted)
    assert answers == [r.text for r in expected]
    for text, phrases in zip(answers, wanted):
        assert _holds(text, phrases, ordered=True), (text, phrases)


def test_kept_spans_are_copied_verbatim(trained_translation, translator, tmp_path):
    t = trained_translation
    sources = ["A man sits in the house.", "The big house on the street."]
    (tmp_path / "in.en").write_text("\n".join(sources) + "\n")
    done = _program("nmt-generate", str(t.data), "--path", str(t.first), "--input", str(tmp_path / "in.en"),
                    "--keep", "house", "--plain", "--cpu")
    assert done.returncode == 0, done.stderr
    assert all("house" in line for line in done.stdout.splitlines()), done.stdout
    assert not any("house" in r.text for r in translator.translate(sources))  # the model upper-cases it
    assert done.stdout.splitlines() == [r.text for r in translator.translate(sources, keep=["house"])]


@pytest.mark.parametrize("lines, extra, message", [
    (["A dog runs.\t\tCAT"], ["--constraints", "ordered"], "stdin line 1: constraint 1 is empty"),
    (["A dog.", "A dog runs.\tBIG RED DOG SITS ON THE BALL"], ["--constraints", "ordered", "--max-len-a", "0",
                                                            "--max-len-b", "4"],
     "stdin line 2: its constraints take"),
    (["A dog runs.\tKATZE"], ["--constraints", "unordered"], "stdin line 1: constraint 1 'KATZE' has pieces the "
                                                            "target dictionary lacks"),
    (["A dog runs.\t\u200b"], ["--constraints", "ordered"],  # a zero-width space: sentencepiece drops it
     "stdin line 1: constraint 1 '\\u200b' encodes to no target token"),
])
def test_bad_constraints_are_one_line_naming_the_line(trained_translation, lines, extra, message):
    t = trained_translation
    done = _program("nmt-interactive", str(t.data), "--path", str(t.first), "--cpu", *extra,
                    stdin="\n".join(lines) + "\n")
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert done.returncode != 0 and len(errors) == 1 and message in errors[0], done.stderr


@pytest.mark.parametrize("glossary, message", [
    ("dog\tCAT\nred ball\n", "g.tsv:2: expected 'source<TAB>target', found 1 field"),
    ("dog\tKATZE\n", "g.tsv:1: target term 'KATZE' has pieces the target dictionary lacks"),
    ("dog\tCAT\ndog\tHOUSE\n", "g.tsv:2: source term"),
    ("dog\t\u200b\n", "g.tsv:1: target term '\\u200b' encodes to no target token"),
])
def test_a_bad_glossary_is_one_line_before_anything_is_translated(trained_translation, tmp_path, glossary, message):
    t = trained_translation
    (tmp_path / "g.tsv").write_text(glossary)
    done = _program("nmt-interactive", str(t.data), "--path", str(t.first), "--cpu", "--glossary",
                    str(tmp_path / "g.tsv"), stdin="A dog runs.\n")
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert done.returncode != 0 and done.stdout == "" and len(errors) == 1 and message in errors[0], done.stderr


@pytest.mark.slow
def test_the_server_applies_its_glossary_and_a_requests_own(trained_translation, translator, sources, tmp_path):
    pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra")
    httpx = pytest.importorskip("httpx")
    from libretranslatepy import LibreTranslateAPI
    from serve_process import ServerProcess, post_json

    (tmp_path / "g.tsv").write_text(GLOSSARY)
    glossary = Glossary.load(str(tmp_path / "g.tsv"))
    t = trained_translation
    server = ServerProcess(t.data, t.first, "--glossary", str(tmp_path / "g.tsv"))
    try:
        client = LibreTranslateAPI(server.url)
        expected = [r.text for r in translator.translate(sources, glossary=glossary)]
        answers = [client.translate(s, "en", "de") for s in sources]
        assert answers == expected and "CAT" in answers[-1] and "BLUE HOUSE" in answers[-1]

        own = {"street": "PARK", "small dog": "BIG CAT"}
        body = post_json(server.url + "/v1/translate", {"sentences": sources[-2:], "glossary": own}).json()
        texts = [x["text"] for x in body["translations"]]
        assert texts == [r.text for r in translator.translate(sources[-2:], glossary=own)]
        assert "PARK" in texts[1] and "BIG CAT" in texts[1] and "CAT" not in texts[0]  # its own replaces the served
        none = post_json(server.url + "/v1/translate", {"sentences": sources[-1:], "glossary": {}}).json()
        assert none["translations"][0]["text"] == translator.translate(sources[-1:])[0].text

        for bad, words in (({"dog": "KATZE"}, "glossary entry 1: target term 'KATZE' has pieces"),
                           ([["dog"]], "glossary entry 1: expected a [source, target] pair")):
            answer = post_json(server.url + "/v1/translate", {"sentences": ["A dog."], "glossary": bad})
            assert answer.status_code == 400 and words in answer.json()["error"], answer.text
        assert httpx.get(server.url + "/health").status_code == 200  # and it goes on serving
    finally:
        assert server.terminate() == 0


def test_a_batch_without_phrases_takes_the_plain_search(translator, sources, monkeypatch):
    from nmt_toolkit.generation.beam_search import SequenceGenerator

    seen = []
    generate = SequenceGenerator.generate

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("constraints"))
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(SequenceGenerator, "generate", spy)
    plain = [r.text for r in translator.translate(sources[:4], phrases=[[], [], [], []])]
    assert seen and all(c is None for c in seen)
    assert plain == [r.text for r in translator.translate(sources[:4])]
    seen.clear()
    translator.translate(sources[:2], phrases=[["CAT"], []])
    assert seen[0] is not None and sorted(len(c) for c in seen[0]) == [0, 1]

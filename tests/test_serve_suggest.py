"""Suggestions as data: LibreTranslate's ``/suggest`` against a real nmt-serve process stores rows in the
--suggestions SQLite database (read back here with sqlite3 itself), and nmt-preprocess --trainpref sqlite:DB
binarizes exactly the stored (text, suggestion) pairs."""
from __future__ import annotations

import sqlite3

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")
httpx = pytest.importorskip("httpx", reason="the server tests need httpx (the [test] extra)")

from serve_process import ServerProcess, post_json  # noqa: E402

PAIRS = [("A dog runs.", "A DOG RUNS ON THE STREET."), ("The man sits.", "THE MAN SITS ON THE BIG BALL."),
         ("A red cat rides on the ball.", "A RED CAT RIDES ON THE BALL.")]


def _rows(db) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return list(con.execute("SELECT model, source_lang, target_lang, source_text, suggestion, created_utc "
                                "FROM suggestions ORDER BY id"))


@pytest.fixture(scope="module")
def stored(trained_translation, tmp_path_factory):
    """A server with --suggestions over a database that already holds a row of another direction (which must
    survive); the pairs of :data:`PAIRS` suggested to it, the first two as a form, the third as JSON."""
    db = tmp_path_factory.mktemp("suggest") / "suggestions.db"
    with sqlite3.connect(db) as con:  # an earlier row, en-fr: kept, and left out of an en-de corpus
        con.execute("CREATE TABLE suggestions (id INTEGER PRIMARY KEY, model TEXT NOT NULL, source_lang TEXT "
                    "NOT NULL, target_lang TEXT NOT NULL, source_text TEXT NOT NULL, suggestion TEXT NOT NULL, "
                    "created_utc TEXT NOT NULL)")
        con.execute("INSERT INTO suggestions VALUES (1, 'en-fr', 'en', 'fr', 'A dog.', 'Un chien.', "
                    "'2026-01-01T00:00:00Z')")
    con.close()
    t = trained_translation
    process = ServerProcess(t.data, t.first, "--suggestions", db, "--max-chars", "100")
    try:
        answers = [httpx.post(process.url + "/suggest", data={"q": q, "s": s, "source": "en", "target": "de"},
                              timeout=30) for q, s in PAIRS[:2]]
        answers.append(post_json(process.url + "/suggest", {"q": PAIRS[2][0], "s": PAIRS[2][1], "source": "en",
                                                            "target": "de"}))
        yield process, db, answers
    finally:
        assert process.terminate() == 0


def test_suggestions_are_stored_with_their_fields(stored):
    process, db, answers = stored
    assert [(a.status_code, a.json()) for a in answers] == [(200, {"success": True})] * 3
    rows = _rows(db)
    assert rows[0][:5] == ("en-fr", "en", "fr", "A dog.", "Un chien.")
    assert [r[:5] for r in rows[1:]] == [("en-de", "en", "de", q, s) for q, s in PAIRS]
    for row in rows[1:]:
        assert len(row[5]) == 20 and row[5][10] == "T" and row[5].endswith("Z")
    assert httpx.get(process.url + "/frontend/settings", timeout=10).json()["suggestions"] is True
    schema = httpx.get(process.url + "/openapi.json", timeout=10).json()["paths"]["/suggest"]["post"][
        "requestBody"]["content"]["application/json"]["schema"]
    assert {"q", "s", "source", "target"} <= set(schema["required"])
    assert process.metrics()['nmt_serve_requests_total{endpoint="/suggest",status="200"}'] == 3


@pytest.mark.parametrize("body, words", [
    ({"s": "X", "source": "en", "target": "de"}, "missing q parameter"),
    ({"q": "A dog.", "source": "en", "target": "de"}, "missing s parameter"),
    ({"q": "A dog.", "s": "  ", "source": "en", "target": "de"}, "missing s parameter"),
    ({"q": "A dog.", "s": "X", "source": "de", "target": "en"}, "de is not supported"),
    ({"q": "A dog.", "s": "X", "source": "xx", "target": "de"}, "not supported"),
    ({"q": "a" * 60, "s": "b" * 60, "source": "en", "target": "de"}, "exceeds text limit"),
])
def test_bad_suggestions_are_one_line_400s_and_store_nothing(stored, body, words):
    process, db, _ = stored
    before = _rows(db)
    answer = post_json(process.url + "/suggest", body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert words in error and "\n" not in error
    assert _rows(db) == before


def test_without_the_option_suggestions_are_refused_as_libretranslate_does(trained_translation, tmp_path):
    t = trained_translation
    process = ServerProcess(t.data, t.first)
    try:
        answer = post_json(process.url + "/suggest", {"q": "A dog.", "s": "EIN HUND.", "source": "en",
                                                      "target": "de"})
        assert answer.status_code == 403
        assert answer.json() == {"error": "Suggestions are disabled on this server."}
        assert httpx.get(process.url + "/frontend/settings", timeout=10).json()["suggestions"] is False
    finally:
        assert process.terminate() == 0
    assert list(tmp_path.iterdir()) == []


def test_preprocess_binarizes_exactly_the_suggested_pairs(stored, trained_translation, tmp_path):
    from nmt_toolkit.cli.preprocess import run as preprocess
    from nmt_toolkit.data.subword import load_codec
    from nmt_toolkit.data.dictionary import Dictionary
    from nmt_toolkit.data.indexed_dataset import MMapIndexedDataset

    _, db, _ = stored
    data = trained_translation.data
    dest = tmp_path / "bin"
    assert preprocess(["--source-lang", "en", "--target-lang", "de", "--trainpref", f"sqlite:{db}",
                       "--srcdict", str(data / "dict.en.txt"), "--tgtdict", str(data / "dict.de.txt"),
                       "--bpe", "sentencepiece", "--bpe-model", str(data / "spm.model"), "--workers", "1",
                       "--destdir", str(dest), "--no-progress-bar"]) == 0
    codec = load_codec("sentencepiece", str(data / "spm.model"))
    for lang, side in (("en", 0), ("de", 1)):
        dictionary = Dictionary.load(str(dest / f"dict.{lang}.txt"))
        split = MMapIndexedDataset(str(dest / f"train.en-de.{lang}"))
        decoded = [[dictionary[int(i)] for i in split[k]] for k in range(len(split))]
        assert decoded == [codec.encode(pair[side]).split() + ["</s>"] for pair in PAIRS]
    assert len(_rows(db)) == 1 + len(PAIRS)  # read, not changed


def test_a_file_that_is_not_a_database_is_refused_at_start_and_kept(trained_translation, tmp_path, capsys):
    from nmt_toolkit.cli.serve import run

    notes = tmp_path / "notes.txt"
    notes.write_text("the user's notes\n" * 100)
    t = trained_translation
    assert run([str(t.data), "--path", str(t.first), "--cpu", "--port", "0", "--suggestions", str(notes)]) != 0
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--suggestions" in error and str(notes) in error
    assert notes.read_text() == "the user's notes\n" * 100

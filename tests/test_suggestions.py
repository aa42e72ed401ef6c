"""The suggestions database on its own: appends from many threads at once, keeps what it held, reads back one
direction's pairs, and refuses a file of the user's without touching it."""
from __future__ import annotations

import sqlite3
import threading

import pytest

from nmt_toolkit.data.suggestions import SuggestionStore, one_line, read_pairs
from nmt_toolkit.errors import DataError


def test_writes_from_many_threads_all_land_and_reopening_keeps_them(tmp_path):
    db = tmp_path / "s.db"
    store = SuggestionStore(str(db))

    def write(k):
        for i in range(20):
            store.add("en-de", "en", "de", f"text {k} {i}", f"suggestion {k} {i}")

    threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    SuggestionStore(str(db)).add("de-en", "de", "en", "Ein Hund.", "A dog.")  # opened again: appended to
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM suggestions").fetchone() == (161,)
    con.close()
    pairs = read_pairs(str(db), "en", "de", "--trainpref sqlite:s.db")
    assert sorted(pairs) == sorted((f"text {k} {i}", f"suggestion {k} {i}") for k in range(8) for i in range(20))
    assert read_pairs(str(db), "de", "en", "x") == [("Ein Hund.", "A dog.")]


def test_a_file_of_the_users_is_refused_and_left_as_it_was(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's notes\n" * 50)
    with pytest.raises(DataError, match="--suggestions"):
        SuggestionStore(str(notes))
    with pytest.raises(DataError, match="sqlite:notes"):
        read_pairs(str(notes), "en", "de", "--trainpref sqlite:notes.txt")
    assert notes.read_text() == "the user's notes\n" * 50
    with pytest.raises(DataError, match="folder"):
        SuggestionStore(str(tmp_path))


def test_a_suggestion_of_several_lines_is_one_corpus_line():
    assert one_line("A dog.\nA cat.\r\n") == "A dog. A cat."
    assert one_line("A dog.") == "A dog."


def test_preprocess_refuses_a_database_without_the_runs_direction(tmp_path, capsys):
    from nmt_toolkit.cli.preprocess import run

    db = tmp_path / "s.db"
    SuggestionStore(str(db)).add("de-en", "de", "en", "Ein Hund.", "A dog.")
    assert run(["--source-lang", "en", "--target-lang", "de", "--trainpref", f"sqlite:{db}",
                "--destdir", str(tmp_path / "bin"), "--no-progress-bar"]) != 0
    assert f"--trainpref sqlite:{db}: no suggestions of en-de in it" in capsys.readouterr().err
    assert not (tmp_path / "bin").exists()

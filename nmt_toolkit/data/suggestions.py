"""Users' corrections as data: the SQLite database nmt-serve's ``/suggest`` appends to (``--suggestions DB``)
and nmt-preprocess reads as a training corpus (``--trainpref sqlite:DB``), so that the corrections a server
collected become fine-tuning pairs.

One table, ``suggestions``, one row per suggestion::

    id           INTEGER PRIMARY KEY   in the order they arrived
    model        TEXT                  the served direction that took it (its name, e.g. en-de)
    source_lang  TEXT                  the request's source language
    target_lang  TEXT                  the request's target language
    source_text  TEXT                  q: the text that was translated
    suggestion   TEXT                  s: the translation the user suggests for it
    created_utc  TEXT                  when it was stored, ISO 8601 in UTC (2026-11-28T01:36:10Z)

The database is only ever appended to: an existing one keeps its rows (the table is created when missing),
and a file that is not an SQLite database is refused, never replaced. Only the standard library's
``sqlite3`` is used; every write opens its own connection, so writes from several threads need no shared
state beyond the lock that serialises them within one process (SQLite's own locking covers other processes).
"""
from __future__ import annotations

import datetime
import os
import sqlite3
import threading
from typing import Iterator

from nmt_toolkit.errors import DataError

#: the prefix of a ``--trainpref`` entry that names a suggestions database instead of text files
SCHEME = "sqlite:"

_TABLE = """CREATE TABLE IF NOT EXISTS suggestions (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    source_lang TEXT NOT NULL,
    target_lang TEXT NOT NULL,
    source_text TEXT NOT NULL,
    suggestion TEXT NOT NULL,
    created_utc TEXT NOT NULL
)"""

#: seconds a write waits for another process's write to the same database before it fails
BUSY_TIMEOUT = 10.0


def _connect(path: str, shown: str) -> sqlite3.Connection:
    """A connection to ``path``; anything SQLite refuses (not a database, no permission) is one DataError."""
    if os.path.isdir(path):
        raise DataError(f"{shown}: is a folder; give the database file")
    try:
        return sqlite3.connect(path, timeout=BUSY_TIMEOUT)
    except sqlite3.Error as exc:
        raise DataError(f"{shown}: cannot open it as an SQLite database ({exc})") from None


class SuggestionStore:
    """Appends suggestions to the database at ``path``. Opening checks (before a server starts) that the
    file is, or can become, a suggestions database; each :meth:`add` is one short transaction on its own
    connection, under a lock, so it is safe from any thread (the server calls it off the event loop)."""

    def __init__(self, path: str, shown: str = "--suggestions"):
        self.path, self.shown = path, f"{shown} {path}"
        self._lock = threading.Lock()
        self._run(lambda db: db.execute(_TABLE))

    def add(self, model: str, source_lang: str, target_lang: str, source_text: str, suggestion: str) -> None:
        created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._run(lambda db: db.execute(
            "INSERT INTO suggestions (model, source_lang, target_lang, source_text, suggestion, created_utc) "
            "VALUES (?, ?, ?, ?, ?, ?)", (model, source_lang, target_lang, source_text, suggestion, created)))

    def _run(self, work) -> None:
        with self._lock:
            db = _connect(self.path, self.shown)
            try:
                with db:  # one transaction: committed, or rolled back on an error
                    work(db)
            except sqlite3.Error as exc:
                raise DataError(f"{self.shown}: cannot write to it ({exc})") from None
            finally:
                db.close()


def read_pairs(path: str, source_lang: str, target_lang: str, shown: str) -> list[tuple[str, str]]:
    """The ``(source_text, suggestion)`` pairs of ``source_lang`` → ``target_lang`` in the order they were
    stored. The database is opened read-only: reading it for training never changes it."""
    if not os.path.isfile(path):
        raise DataError(f"{shown}: " + ("a folder, not a database" if os.path.isdir(path) else "no such file"))
    try:
        db = sqlite3.connect(f"file:{_uri_path(path)}?mode=ro", uri=True, timeout=BUSY_TIMEOUT)
    except sqlite3.Error as exc:
        raise DataError(f"{shown}: cannot open it as an SQLite database ({exc})") from None
    try:
        return list(db.execute("SELECT source_text, suggestion FROM suggestions WHERE source_lang = ? AND "
                               "target_lang = ? ORDER BY id", (source_lang, target_lang)))
    except sqlite3.Error as exc:
        raise DataError(f"{shown}: not a suggestions database of nmt-serve ({exc})") from None
    finally:
        db.close()


def _uri_path(path: str) -> str:
    from urllib.parse import quote

    return quote(os.path.abspath(path))


def one_line(text: str) -> str:
    """``text`` as one line of a corpus file: a suggestion may span lines (a paragraph), while a corpus pairs
    line ``i`` with line ``i``; its line breaks become single spaces."""
    parts = text.splitlines()
    return text if parts == [text] else " ".join(part.strip() for part in parts if part.strip())


def write_corpus(path: str, source_lang: str, target_lang: str, prefix: str, shown: str) -> int:
    """Write the database's pairs of the direction as ``PREFIX.<source_lang>`` and ``PREFIX.<target_lang>``,
    one pair a line; returns how many."""
    pairs = read_pairs(path, source_lang, target_lang, shown)
    for lang, side in ((source_lang, 0), (target_lang, 1)):
        with open(f"{prefix}.{lang}", "w", encoding="utf-8", newline="\n") as f:
            f.writelines(one_line(pair[side]) + "\n" for pair in pairs)
    return len(pairs)


def database_prefixes(prefixes: str) -> Iterator[tuple[int, str]]:
    """The positions and paths of the ``sqlite:DB`` entries of a comma-separated prefix list."""
    for k, entry in enumerate(p for p in prefixes.split(",") if p):
        if entry.startswith(SCHEME):
            yield k, entry[len(SCHEME):]


def names_database(prefixes) -> bool:
    """Whether a comma-separated prefix list (or None) names a suggestions database."""
    return any(database_prefixes(prefixes or ""))

"""Text read line by line as the ``sacrebleu`` command reads its files: one line per ``\\n``.

Python's text mode ends a line at a bare ``\\r`` too, and ``str.splitlines`` also at U+2028, U+0085, form
feeds…; a stray ``\\r`` inside a sentence then shifts every later line against its reference (BLEU 43
where sacreBLEU says 100). sacreBLEU opens its files with ``newline="\\n"`` and takes ``line.rstrip()``;
every program here reads text that way — nmt-score, nmt-generate ``--input``, nmt-interactive,
nmt-preprocess (which cuts its chunks at ``\\n`` bytes) — so a line count never depends on the tool.

One difference, on purpose: the ``sacrebleu`` command reads *stdin* through a second text wrapper with
universal newlines (a ``\\r`` ends a line there); we read stdin exactly like a file.
"""
from __future__ import annotations

import sys
from typing import Iterator, Optional

from nmt_toolkit.errors import DataError


def iter_lines(path: str, what: Optional[str] = None) -> Iterator[str]:
    """The lines of ``path`` (``-``: stdin), split at ``\\n`` only, trailing whitespace removed.

    Lines are yielded as they arrive (nmt-interactive answers each line at once). Undecodable UTF-8 is a
    :class:`DataError` naming ``what`` (default: the path) and the line number; so is an unreadable file.
    """
    name = what or ("<stdin>" if path == "-" else path)
    if path == "-":
        binary = getattr(sys.stdin, "buffer", None)
        if binary is None:  # a text stream without bytes underneath (io.StringIO): it splits at \n already
            yield from (line.rstrip() for line in sys.stdin)
            return
        yield from _decoded(binary, name)
        return
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise DataError(f"{name}: cannot read ({exc.strerror})") from None
    with handle:
        yield from _decoded(handle, name)


def read_lines(path: str, what: Optional[str] = None) -> list[str]:
    """All lines of ``path`` (see :func:`iter_lines`)."""
    return list(iter_lines(path, what))


def _decoded(binary, name: str) -> Iterator[str]:
    for number, raw in enumerate(binary, start=1):  # binary files iterate at b"\n" only
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{name} line {number}: invalid UTF-8 ({exc.reason} at byte {exc.start + 1})") from None
        yield line.rstrip()

"""Texts as sentences and back: a LibreTranslate ``q`` may be a paragraph, a page, several lines.

A text is cut into lines, each line into sentences by sentencex (Wikimedia's rule-based segmenter: pure
Python, no dependencies, maintained, ~300 languages with their abbreviation lists — "z.B." or "Dr." do not end
a sentence, which a regex on ". " gets wrong). Every piece keeps the whitespace around it, so the translation
is re-joined with the same line breaks and spaces between sentences as the source.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    """A sentence of a text with the whitespace before and after it (``sentence`` is stripped, maybe empty)."""

    before: str
    sentence: str
    after: str


def split_text(text: str, language: str) -> list[list[Piece]]:
    """``text`` as its lines (``\\r\\n`` and ``\\r`` count as line breaks, and come back as ``\\n``), each a
    list of sentence pieces; an empty or blank line is one piece with an empty sentence."""
    from sentencex import segment

    lines = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        pieces = []
        for chunk in segment(language, line) if line.strip() else [line]:
            stripped = chunk.strip()
            if not stripped:
                if pieces:
                    pieces[-1] = Piece(pieces[-1].before, pieces[-1].sentence, pieces[-1].after + chunk)
                else:
                    pieces.append(Piece(chunk, "", ""))
                continue
            start = chunk.index(stripped)
            pieces.append(Piece(chunk[:start], stripped, chunk[start + len(stripped):]))
        lines.append(_keep_outer_whitespace(line, pieces))
    return lines


def _keep_outer_whitespace(line: str, pieces: list[Piece]) -> list[Piece]:
    """The segmenter may drop whitespace at a line's ends: put back what the pieces lack."""
    joined = "".join(p.before + p.sentence + p.after for p in pieces)
    if joined == line or not pieces:
        return pieces or [Piece(line, "", "")]
    lead = line[: len(line) - len(line.lstrip())]
    trail = line[len(line.rstrip()):]
    first, last = pieces[0], pieces[-1]
    if not first.before and lead:
        pieces[0] = first = Piece(lead, first.sentence, first.after)
    if not last.after.endswith(trail):
        pieces[-1] = Piece(last.before if len(pieces) > 1 else first.before, last.sentence, last.after + trail)
    return pieces


def sentences_of(lines: list[list[Piece]]) -> list[str]:
    """The non-empty sentences of a split text, in order: what is translated."""
    return [p.sentence for line in lines for p in line if p.sentence]


def join_text(lines: list[list[Piece]], translations: list[str]) -> str:
    """The split text with each non-empty sentence replaced by its translation (in :func:`sentences_of` order)."""
    it = iter(translations)
    return "\n".join("".join(p.before + (next(it) if p.sentence else "") + p.after for p in line) for line in lines)


class PlainText:
    """A text read for translation: its :attr:`sentences`, then :meth:`render` with a hypothesis for each
    (anything with a ``text``; None: no translation, an empty one)."""

    def __init__(self, text: str, language: str):
        self.lines = split_text(text, language)
        self.sentences = sentences_of(self.lines)

    def render(self, hypotheses) -> str:
        return join_text(self.lines, [h.text if h is not None else "" for h in hypotheses])

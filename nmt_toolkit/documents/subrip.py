"""SubRip subtitles (.srt, UTF-8) through the ``srt`` package: each subtitle's text translated as one text
(its lines joined by spaces, so a sentence that runs over two lines is read whole) and written back over as
many lines as it had, at word boundaries; indices and timings are kept as they were."""
from __future__ import annotations

from typing import Optional, Sequence

from nmt_toolkit.documents.formats import Document, library, one_line
from nmt_toolkit.documents.limits import DocumentConfig
from nmt_toolkit.documents.text import decode
from nmt_toolkit.errors import DataError
from nmt_toolkit.markup.placement import Aligned
from nmt_toolkit.markup.sentences import PlainText


def wrap(text: str, lines: int) -> str:
    """``text`` over at most ``lines`` lines of about equal length, broken between words."""
    words = text.split()
    if lines <= 1 or len(words) <= 1:
        return text
    width = len(" ".join(words)) / min(lines, len(words))
    out, current = [], []
    for word in words:
        if current and len(" ".join(current)) >= width and len(out) < lines - 1:
            out.append(" ".join(current))
            current = []
        current.append(word)
    return "\n".join(out + [" ".join(current)])


class SubtitlesDocument(Document):
    def __init__(self, subtitles: list, language: str, srt):
        self.subtitles, self.srt = subtitles, srt
        self.texts = [PlainText(" ".join(s.content.split("\n")), language) for s in subtitles]
        self.sentences = [s for t in self.texts for s in t.sentences]

    def render(self, translations: Sequence[Optional[Aligned]]) -> bytes:
        done = 0
        for subtitle, text in zip(self.subtitles, self.texts):
            mine = translations[done: done + len(text.sentences)]
            done += len(text.sentences)
            if text.sentences:
                subtitle.content = wrap(text.render(mine), subtitle.content.count("\n") + 1)
        return self.srt.compose(self.subtitles, reindex=False).encode("utf-8")


def read(data: bytes, language: str, limits: DocumentConfig, what: str) -> SubtitlesDocument:
    srt = library("srt", "srt", ".srt")
    text = decode(data, what).lstrip("\ufeff")
    try:
        subtitles = list(srt.parse(text))
    except Exception as exc:  # SRTParseError, and what a crafted file makes the parser raise
        raise DataError(f"{what}: not SubRip subtitles the srt package can read ({one_line(exc)})") from None
    return SubtitlesDocument(subtitles, language, srt)

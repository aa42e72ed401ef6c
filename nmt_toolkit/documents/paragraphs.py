"""Documents made of paragraphs of formatted runs (Word, OpenDocument, PowerPoint): each paragraph translated
whole, its runs given their share of the translation (:mod:`nmt_toolkit.markup.runs`), the run objects and
their formatting left as they are."""
from __future__ import annotations

import contextlib
import io
from typing import Any, Iterable, Iterator, Optional, Sequence

from nmt_toolkit.documents.formats import Document, one_line
from nmt_toolkit.errors import DataError
from nmt_toolkit.markup.placement import Aligned
from nmt_toolkit.markup.runs import RunsText


@contextlib.contextmanager
def read_by(library: str, what: str, kind: str) -> Iterator[None]:
    """Whatever the format's library raises on a file (its own errors, and what a crafted file makes it
    raise) as one DataError naming ``what``."""
    try:
        yield
    except Exception as exc:
        raise DataError(f"{what}: not {kind} {library} can read ({one_line(exc)})") from None


class ParagraphsDocument(Document):
    """``paragraphs``: each a list of runs, objects whose ``text`` the format's library reads and sets;
    ``document``: the library's document, which ``save(stream)`` writes. Paragraphs without text are left
    out."""

    needs_alignment = True

    def __init__(self, paragraphs: Iterable[Sequence[Any]], language: str, document: Any):
        self.document = document
        self.paragraphs: list[tuple[Sequence[Any], RunsText]] = []
        for runs in paragraphs:
            texts = [run.text or "" for run in runs]
            if any(t.strip() for t in texts):
                read = RunsText(texts, language)
                if read.sentences:
                    self.paragraphs.append((runs, read))
        self.sentences = [s for _, read in self.paragraphs for s in read.sentences]

    def render(self, translations: Sequence[Optional[Aligned]]) -> bytes:
        """Every run of every paragraph given its text in the translation; the document's bytes."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        done = 0
        for runs, read in self.paragraphs:
            texts = read.render(translations[done: done + len(read.sentences)])
            done += len(read.sentences)
            for run, old, new in zip(runs, read.runs, texts):
                if old and new != old:
                    run.text = new
        out = io.BytesIO()
        self.document.save(out)
        return out.getvalue()

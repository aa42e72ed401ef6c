"""Documents translated with their formatting kept: plain text, HTML, Word (.docx), OpenDocument text and
presentations (.odt, .odp), PowerPoint (.pptx) and SubRip subtitles (.srt), each read and written through its
format's own maintained library (the ``documents`` extra), loaded when a document of its format is read.

A document is read into its *texts* (a paragraph, a table cell's paragraph, a subtitle), their sentences
are translated by the caller's function (``sentences -> one Aligned each``: nmt-translate-file's Translator,
nmt-serve's batching service), and the document is written back with each text replaced. A paragraph made of
several formatted runs is translated whole and its runs given their share of the translation by word
alignment (:mod:`nmt_toolkit.markup.runs`); everything else in the file (styles, images, tables, timings) is
left as the library read it. See docs/serving.md, "Documents"."""
from __future__ import annotations

from nmt_toolkit.documents.formats import (FORMATS, Document, read_document, supported_formats,
                                           translate_document)
from nmt_toolkit.documents.limits import DocumentConfig

__all__ = ["FORMATS", "Document", "DocumentConfig", "read_document", "supported_formats", "translate_document"]

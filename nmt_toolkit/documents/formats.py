"""Which formats a document may be in (by its file name's extension), reading one, and translating one."""
from __future__ import annotations

import importlib
import os
from typing import Callable, Optional, Sequence

from nmt_toolkit.documents.limits import DocumentConfig
from nmt_toolkit.errors import UsageError
from nmt_toolkit.markup.placement import Aligned

#: extension → (module of nmt_toolkit.documents that reads it, the media type of the file written, the
#: library it needs)
FORMATS = {
    ".txt": ("text", "text/plain; charset=utf-8", "sentencex"),
    ".html": ("html", "text/html; charset=utf-8", "lxml"),
    ".htm": ("html", "text/html; charset=utf-8", "lxml"),
    ".docx": ("word", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "docx"),
    ".odt": ("opendocument", "application/vnd.oasis.opendocument.text", "odf"),
    ".odp": ("opendocument", "application/vnd.oasis.opendocument.presentation", "odf"),
    ".pptx": ("powerpoint", "application/vnd.openxmlformats-officedocument.presentationml.presentation", "pptx"),
    ".srt": ("subrip", "application/x-subrip", "srt"),
}


class Document:
    """A document read for translation: :attr:`sentences` (what the model reads, in order), then
    :meth:`render` once with a translation of each, which gives the translated file's bytes.
    ``needs_alignment``: its runs or inline tags are placed by the translations' word alignments."""

    sentences: list[str]
    needs_alignment: bool = False
    content_type: str = "application/octet-stream"

    def render(self, translations: Sequence[Optional[Aligned]]) -> bytes:
        raise NotImplementedError


class UnsupportedFormat(UsageError):
    """A file name whose extension is none of :data:`FORMATS`."""


def supported_formats() -> list[str]:
    """The extensions of the formats whose library is installed, as LibreTranslate's ``supportedFilesFormat``
    lists them (the libraries are found, not imported)."""
    import importlib.util

    return [extension for extension, (_, _, needs) in FORMATS.items() if importlib.util.find_spec(needs) is not None]


def format_of(name: str, what: str) -> str:
    """``name``'s extension, lower-cased, when it is a format of :data:`FORMATS`; else one error naming ``what``
    and the formats there are."""
    extension = os.path.splitext(name)[1].lower()
    if extension not in FORMATS:
        shown = f"{extension} files are" if extension else "a file without an extension is"
        raise UnsupportedFormat(f"{what}: {shown} not supported (the formats are {', '.join(FORMATS)})")
    return extension


def read_document(name: str, data: bytes, language: str, limits: Optional[DocumentConfig] = None,
                  what: Optional[str] = None) -> Document:
    """The document ``data`` in the format of ``name``'s extension, its text in ``language``. A file its
    format's library cannot read, or over ``limits``, is one DataError naming ``what`` (default: ``name``)."""
    what = what or name
    extension = format_of(name, what)
    module, content_type, _ = FORMATS[extension]
    reader = importlib.import_module(f"nmt_toolkit.documents.{module}")
    document = reader.read(data, language, limits or DocumentConfig(), f"{what}")
    document.content_type = content_type
    return document


def translate_document(name: str, data: bytes, language: str,
                       translate: Callable[[list[str]], Sequence[Optional[Aligned]]],
                       limits: Optional[DocumentConfig] = None, what: Optional[str] = None) -> bytes:
    """The translated file's bytes: ``data`` read as :func:`read_document` reads it, its sentences given to
    ``translate`` all at once (one translation each, carrying its alignment where the document needs it)."""
    document = read_document(name, data, language, limits, what)
    return document.render(list(translate(document.sentences)) if document.sentences else [])


def library(module: str, package: str, extension: str):
    """A format's library, imported when a document of the format is read; missing, one line naming the
    extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{extension} documents need {package}, which is not installed "
                         f"(pip install -e '.[documents]')") from None


def one_line(exc: BaseException) -> str:
    """An exception of a format's library as a short line (its type when it says nothing)."""
    text = " ".join(str(exc).split())
    return (text[:200] + "…" if len(text) > 200 else text) or type(exc).__name__

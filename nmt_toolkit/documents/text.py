"""Plain text (.txt, UTF-8): lines and sentences with their whitespace kept (:mod:`nmt_toolkit.markup.sentences`);
``\\r\\n`` line ends and a byte-order mark come back as they were."""
from __future__ import annotations

from typing import Optional, Sequence

from nmt_toolkit.documents.formats import Document
from nmt_toolkit.documents.limits import DocumentConfig
from nmt_toolkit.errors import DataError
from nmt_toolkit.markup.placement import Aligned
from nmt_toolkit.markup.sentences import PlainText

BOM = "\ufeff"


def decode(data: bytes, what: str) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark kept), else one DataError naming ``what``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{what}: not UTF-8 text (byte {exc.start})") from None


class TextDocument(Document):
    def __init__(self, text: str, language: str):
        self.bom = text.startswith(BOM)
        text = text[1:] if self.bom else text
        self.crlf = "\r\n" in text
        self.text = PlainText(text, language)
        self.sentences = self.text.sentences

    def render(self, translations: Sequence[Optional[Aligned]]) -> bytes:
        out = self.text.render(translations)
        out = out.replace("\n", "\r\n") if self.crlf else out
        return ((BOM if self.bom else "") + out).encode("utf-8")


def read(data: bytes, language: str, limits: DocumentConfig, what: str) -> TextDocument:
    return TextDocument(decode(data, what), language)

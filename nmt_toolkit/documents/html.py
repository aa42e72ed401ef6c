"""HTML documents (.html, .htm, UTF-8): translated as nmt-serve's ``format: html`` is
(:mod:`nmt_toolkit.markup.html`): the markup kept, inline tags placed by word alignment."""
from __future__ import annotations

from typing import Optional, Sequence

from nmt_toolkit.documents.formats import Document
from nmt_toolkit.documents.limits import DocumentConfig
from nmt_toolkit.documents.text import decode
from nmt_toolkit.markup.html import HtmlText
from nmt_toolkit.markup.placement import Aligned


class HtmlDocument(Document):
    needs_alignment = True

    def __init__(self, text: str, language: str):
        self.html = HtmlText(text, language)
        self.sentences = self.html.sentences

    def render(self, translations: Sequence[Optional[Aligned]]) -> bytes:
        return self.html.render(translations).encode("utf-8")


def read(data: bytes, language: str, limits: DocumentConfig, what: str) -> HtmlDocument:
    from nmt_toolkit.markup.html import UnreadableHtml

    try:
        return HtmlDocument(decode(data, what).lstrip("\ufeff"), language)
    except UnreadableHtml as exc:
        raise UnreadableHtml(f"{what}: {exc}") from None

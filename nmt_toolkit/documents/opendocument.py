"""OpenDocument text and presentations (.odt, .odp) through odfpy: every ``text:p`` and ``text:h`` (in frames,
tables and notes too), whose runs are its text nodes, inside ``text:span`` and ``text:a`` elements or not.
Notes and frames inside a paragraph are paragraphs of their own, not part of its text."""
from __future__ import annotations

import io

from nmt_toolkit.documents.formats import library
from nmt_toolkit.documents.limits import DocumentConfig, check_archive
from nmt_toolkit.documents.paragraphs import ParagraphsDocument, read_by

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
DRAW = "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
PARAGRAPHS = {(TEXT, "p"), (TEXT, "h")}
#: elements inside a paragraph whose text is not the paragraph's
APART = PARAGRAPHS | {(TEXT, "note"), (DRAW, "frame"), (TEXT, "tracked-changes")}


class TextNode:
    """An odfpy text node as a run: its ``text``."""

    def __init__(self, node):
        self.node = node

    @property
    def text(self) -> str:
        return self.node.data

    @text.setter
    def text(self, value: str) -> None:
        self.node.data = value


def _paragraphs(root) -> list:
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        if getattr(node, "qname", None) in PARAGRAPHS:
            found.append(node)
        stack.extend(reversed(getattr(node, "childNodes", [])))
    return found


def _runs(paragraph) -> list[TextNode]:
    runs, stack = [], list(reversed(paragraph.childNodes))
    while stack:
        node = stack.pop()
        if node.nodeType == node.TEXT_NODE:
            runs.append(TextNode(node))
        elif node.nodeType == node.ELEMENT_NODE and node.qname not in APART:
            stack.extend(reversed(node.childNodes))
    return runs


def read(data: bytes, language: str, limits: DocumentConfig, what: str) -> ParagraphsDocument:
    check_archive(data, what, limits)
    library("odf", "odfpy", ".odt and .odp")
    from odf.opendocument import load

    with read_by("odfpy", what, "an OpenDocument file"):
        document = load(io.BytesIO(data))
        paragraphs = [_runs(p) for p in _paragraphs(document.topnode)]
    return ParagraphsDocument(paragraphs, language, document)

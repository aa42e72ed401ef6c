"""PowerPoint presentations (.pptx) through python-pptx: every paragraph of every slide (text frames of
shapes, groups' shapes, tables' cells) and of its notes, with its runs."""
from __future__ import annotations

import io

from nmt_toolkit.documents.formats import library
from nmt_toolkit.documents.limits import DocumentConfig, check_archive
from nmt_toolkit.documents.paragraphs import ParagraphsDocument, read_by


def read(data: bytes, language: str, limits: DocumentConfig, what: str) -> ParagraphsDocument:
    check_archive(data, what, limits)
    pptx = library("pptx", "python-pptx", ".pptx")
    from pptx.oxml.ns import qn
    from pptx.text.text import _Run

    with read_by("python-pptx", what, "a .pptx"):
        presentation = pptx.Presentation(io.BytesIO(data))
        trees = []
        for slide in presentation.slides:
            trees.append(slide.element)
            if slide.has_notes_slide:
                trees.append(slide.notes_slide.element)
        paragraphs = [[_Run(r, None) for r in p.findall(qn("a:r"))] for tree in trees for p in tree.iter(qn("a:p"))]
    return ParagraphsDocument(paragraphs, language, presentation)

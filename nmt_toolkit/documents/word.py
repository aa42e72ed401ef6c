"""Word documents (.docx) through python-docx: every paragraph of the body (tables' cells, nested tables and
text boxes included), of the headers and of the footers, with its runs (those inside hyperlinks, tracked
insertions and content controls too)."""
from __future__ import annotations

import io

from nmt_toolkit.documents.formats import library
from nmt_toolkit.documents.limits import DocumentConfig, check_archive
from nmt_toolkit.documents.paragraphs import ParagraphsDocument, read_by

#: a paragraph's runs: its own, and those of the elements that wrap runs inside it
RUNS = "./w:r | ./w:hyperlink/w:r | ./w:ins/w:r | ./w:smartTag/w:r | ./w:sdt/w:sdtContent/w:r"


def read(data: bytes, language: str, limits: DocumentConfig, what: str) -> ParagraphsDocument:
    check_archive(data, what, limits)
    docx = library("docx", "python-docx", ".docx")
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml.ns import qn
    from docx.text.run import Run

    with read_by("python-docx", what, "a .docx"):
        document = docx.Document(io.BytesIO(data))
        parts = [document.part] + [rel.target_part for rel in document.part.rels.values()
                                   if not rel.is_external and rel.reltype in (RELATIONSHIP_TYPE.HEADER,
                                                                              RELATIONSHIP_TYPE.FOOTER)]
        paragraphs = [[Run(r, None) for r in p.xpath(RUNS)] for part in parts for p in part.element.iter(qn("w:p"))]
    return ParagraphsDocument(paragraphs, language, document)

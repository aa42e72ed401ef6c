"""Documents written by their formats' own libraries (python-docx, odfpy, python-pptx, srt), and the same libraries
reading a document back as its paragraphs of runs with each run's formatting: what nmt-translate-file and
/translate_file are checked with (tests/test_documents.py, tests/test_serve_files.py).

The texts use the words of tests/trained_model.py's upper-casing model, several sentences to a paragraph, and
paragraphs of several runs (bold, italic, a hyperlink) whose sentences cross run boundaries."""
from __future__ import annotations

import datetime
import io

URL = "https://example.org/park"

#: a paragraph: its runs as (text, bold, italic, hyperlinked)
RUNS = [
    [("A man ", False, False, False), ("rides", True, False, False), (" the red ball. A dog ", False, True, False),
     ("runs", False, False, True), (" on the street.", False, False, False)],
    [("The cat sits. ", False, False, False), ("A small woman runs in the park.", True, True, False)],
    [("A big dog sits on the house.", False, False, False)],
]
CELLS = ["A man sits.", "The blue ball.", "A cat rides on the dog.", "The street."]
HEADER = "A red house."
NOTES = "The woman runs. The dog sits."
SUBTITLES = [("A man rides the ball.", 1.0, 2.5), ("A dog runs\non the street. The cat sits.", 3.0, 5.25),
             ("The small house.", 6.0, 7.0)]


# ----------------------------------------------------------------------------------------------- Word

def make_docx() -> bytes:
    import docx

    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = HEADER
    for runs in RUNS:
        paragraph = document.add_paragraph()
        for text, bold, italic, link in runs:
            if link:
                _hyperlink(paragraph, text)
            else:
                run = paragraph.add_run(text)
                run.bold, run.italic = bold or None, italic or None
    table = document.add_table(rows=2, cols=2)
    for cell, text in zip([c for row in table.rows for c in row.cells], CELLS):
        cell.text = text
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _hyperlink(paragraph, text: str) -> None:
    """A ``w:hyperlink`` holding one underlined run (python-docx reads hyperlinks but has no call that adds one)."""
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), paragraph.part.relate_to(URL, RELATIONSHIP_TYPE.HYPERLINK, is_external=True))
    run = paragraph.add_run(text)
    run.underline = True
    link.append(run._r)
    paragraph._p.append(link)


def docx_view(data: bytes) -> dict:
    """The document as python-docx reads it: each part's paragraphs, each a list of (text, formatting) runs."""
    import docx
    from docx.text.hyperlink import Hyperlink

    document = docx.Document(io.BytesIO(data))

    def runs(paragraph):
        found = []
        for item in paragraph.iter_inner_content():
            inner, url = (item.runs, item.url) if isinstance(item, Hyperlink) else ([item], None)
            found += [(r.text, (bool(r.bold), bool(r.italic), bool(r.underline), url)) for r in inner]
        return found

    cells = [c for table in document.tables for row in table.rows for c in row.cells]
    return {"body": [runs(p) for p in document.paragraphs],
            "cells": [runs(p) for c in cells for p in c.paragraphs],
            "header": [runs(p) for p in document.sections[0].header.paragraphs],
            "shape": [len(document.tables)] + [(len(t.rows), len(t.columns)) for t in document.tables]}


# ----------------------------------------------------------------------------------------------- PowerPoint

def make_pptx() -> bytes:
    import pptx
    from pptx.util import Inches

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])  # title only
    slide.shapes.title.text = HEADER
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(2))
    for k, runs in enumerate(RUNS):
        paragraph = box.text_frame.paragraphs[0] if k == 0 else box.text_frame.add_paragraph()
        for text, bold, italic, link in runs:
            run = paragraph.add_run()
            run.text, run.font.bold, run.font.italic = text, bold or None, italic or None
            if link:
                run.hyperlink.address = URL
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    for cell, text in zip([table.cell(r, c) for r in range(2) for c in range(2)], CELLS):
        cell.text = text
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(6), Inches(3), Inches(1)).text_frame.text = CELLS[2]
    slide.notes_slide.notes_text_frame.text = NOTES
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def pptx_view(data: bytes) -> dict:
    """The presentation as python-pptx reads it: every shape's paragraphs (groups' and tables' too) and the notes."""
    import pptx

    presentation = pptx.Presentation(io.BytesIO(data))

    def runs(paragraph):
        return [(r.text, (bool(r.font.bold), bool(r.font.italic), r.hyperlink.address)) for r in paragraph.runs]

    def frames(shapes):
        for shape in shapes:
            if shape.shape_type == pptx.enum.shapes.MSO_SHAPE_TYPE.GROUP:
                yield from frames(shape.shapes)
            elif shape.has_table:
                yield from (cell.text_frame for row in shape.table.rows for cell in row.cells)
            elif shape.has_text_frame:
                yield shape.text_frame

    slides = list(presentation.slides)
    return {"body": [runs(p) for s in slides for f in frames(s.shapes) for p in f.paragraphs],
            "notes": [runs(p) for s in slides for p in s.notes_slide.notes_text_frame.paragraphs],
            "shape": [len(slides)] + [[shape.shape_type for shape in s.shapes] for s in slides]}


# ----------------------------------------------------------------------------------------------- OpenDocument

def make_odt() -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.style import Style, TextProperties
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import A, H, P, Span

    document = OpenDocumentText()
    styles = {}
    for name, props in (("Bold", {"fontweight": "bold"}), ("Italic", {"fontstyle": "italic"}),
                        ("BoldItalic", {"fontweight": "bold", "fontstyle": "italic"})):
        styles[name] = Style(name=name, family="text")
        styles[name].addElement(TextProperties(**props))
        document.automaticstyles.addElement(styles[name])
    document.text.addElement(H(outlinelevel=1, text=HEADER))
    for runs in RUNS:
        paragraph = P()
        for text, bold, italic, link in runs:
            style = "BoldItalic" if bold and italic else "Bold" if bold else "Italic" if italic else None
            if link:
                paragraph.addElement(A(href=URL, type="simple", text=text))
            elif style:
                paragraph.addElement(Span(stylename=styles[style], text=text))
            else:
                paragraph.addText(text)
        document.text.addElement(paragraph)
    table = Table(name="Cells")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for r in range(2):
        row = TableRow()
        for c in range(2):
            cell = TableCell()
            cell.addElement(P(text=CELLS[2 * r + c]))
            row.addElement(cell)
        table.addElement(row)
    document.text.addElement(table)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def odt_view(data: bytes) -> dict:
    """The document as odfpy reads it: every heading and paragraph, each a list of (text, the span's style or
    the link's address around it) runs."""
    from odf import table, text
    from odf.opendocument import load

    document = load(io.BytesIO(data))

    def runs(node, around=None):
        found = []
        for child in node.childNodes:
            if child.nodeType == child.TEXT_NODE:
                found.append((str(child), around))
            elif child.qname[1] in ("span", "a"):
                kind = ("span", child.getAttribute("stylename")) if child.qname[1] == "span" else \
                    ("a", child.getAttribute("href"))
                found += runs(child, kind) or [("", kind)]  # an element whose text was emptied: no text node
        return found

    return {"body": [runs(p) for p in document.getElementsByType(text.H) + document.getElementsByType(text.P)],
            "shape": [len(document.getElementsByType(table.Table)), len(document.getElementsByType(table.TableCell)),
                      len(document.getElementsByType(text.Span)), len(document.getElementsByType(text.A))]}


# ----------------------------------------------------------------------------------------------- SubRip

def make_srt() -> bytes:
    import srt

    seconds = datetime.timedelta(seconds=1)
    return srt.compose([srt.Subtitle(k + 1, start * seconds, end * seconds, content)
                        for k, (content, start, end) in enumerate(SUBTITLES)]).encode("utf-8")


def srt_view(data: bytes) -> list[tuple]:
    import srt

    return [(s.index, s.start, s.end, s.content) for s in srt.parse(data.decode("utf-8"))]


MAKERS = {".docx": (make_docx, docx_view), ".pptx": (make_pptx, pptx_view), ".odt": (make_odt, odt_view)}


def joined(runs) -> str:
    return "".join(text for text, _ in runs)


def check_runs(before: dict, after: dict, translate) -> int:
    """Every paragraph of ``after`` is ``before``'s with the same runs, each with its formatting, in the same
    order, and its text (the runs joined) is ``translate(the source paragraph's text)``; the structure is the
    same. The number of paragraphs with text."""
    assert after["shape"] == before["shape"]
    checked = 0
    for part in before:
        if part == "shape":
            continue
        assert len(after[part]) == len(before[part]), part
        for source, target in zip(before[part], after[part]):
            assert [f for _, f in target] == [f for _, f in source], (part, source, target)
            assert joined(target) == translate(joined(source)), (part, source, target)
            checked += bool(joined(source).strip())
    return checked

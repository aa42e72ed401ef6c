"""HTML translated with its markup kept (LibreTranslate's ``format: "html"``).

The HTML is read by lxml's HTML parser (libxml2: it repairs what browsers repair, unclosed ``<p>`` and
``<li>``, misnested inline tags) into a tree, the tree's text is translated in place, and lxml writes the tree
back, so the answer is well-formed and holds the same elements with the same attributes (``alt`` and
``title`` translated) in the same nesting.

- **Runs.** A block (``p``, ``div``, ``li``, ``td``, ``h1``…: every element that is not inline) holds runs:
  its text and inline children between two block children. A run's text (HTML whitespace read as spaces,
  ``<br>`` as a line break) is split into sentences as plain text is (:mod:`~nmt_toolkit.markup.sentences`), and
  each sentence is translated whole, its inline tags taken out, so the model reads it in context.
- **Inline tags** (``a``, ``b``, ``i``, ``em``, ``strong``, ``span``, ``u``, ``sub``…) are put back around the
  target words aligned to the source words they wrapped, through the model's cross-attention, nested as they
  were: :mod:`~nmt_toolkit.markup.placement` gives the method and its fallbacks (an element whose words align
  nowhere is kept, empty, at the nearest position; spans that would cross are shrunk). Sibling tags follow the
  translation's word order. With the tags taken out, the answer's text is the plain translation of the same
  sentences; the whitespace between sentences is the source's.
- **Verbatim.** ``script``, ``style``, ``template``, ``textarea``, ``iframe``, ``svg`` and ``math`` are kept as
  they are and their text is not translated; ``pre`` and any element with ``translate="no"`` that holds blocks
  too. ``code``, ``kbd``, ``samp`` and an inline element with ``translate="no"`` are kept as they are, but
  their words stay in the sentence the model reads (it translates the words around them in context): each is
  put where its words' translation is aligned, replacing that translation. A sentence made only of such
  elements is not translated.
- **Attributes.** ``alt`` and ``title`` are translated as plain text, outside verbatim elements; no other
  attribute changes (``lang`` included).

A text that starts with ``<!DOCTYPE`` or ``<html>`` is a document (its ``<title>`` translated); any other is a
fragment, answered as a fragment. Entities come back as the characters they stand for (``&amp;``, ``&lt;``,
``&gt;`` and ``&quot;`` escaped where needed); comments are kept.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.markup.placement import (INLINE, POINT, VERBATIM, Aligned, Node, RunTranslation, ordered, place,
                                           words_of)
from nmt_toolkit.markup.sentences import join_text, sentences_of, split_text

#: inline elements: their words are translated within the sentence and the tag put back around the translation
INLINE_TAGS = frozenset("a abbr acronym b bdi bdo big cite data del dfn em font i ins label mark q s small span "
                        "strike strong sub sup time tt u".split())
#: kept as they are, their words read within the sentence (their translation replaced by them)
VERBATIM_WORDS = frozenset({"code", "kbd", "samp"})
#: kept as they are, their text never read
OPAQUE = frozenset({"script", "style", "template", "textarea", "iframe", "svg", "math"})
#: elements without content
VOID = frozenset({"area", "br", "embed", "img", "input", "link", "meta", "param", "source", "track", "wbr"})
#: blocks kept as they are
KEPT_BLOCKS = frozenset({"pre"})
#: the attributes translated
TRANSLATED_ATTRIBUTES = ("alt", "title")

# what an element is in the walk: part of a run (inline, words, point), or a block (recursed into, or kept)
_INLINE, _WORDS, _POINT, _BLOCK, _KEPT = "inline", "words", "point", "block", "kept"
_PLACEMENT = {_INLINE: INLINE, _WORDS: VERBATIM, _POINT: POINT}
_DOCUMENT = re.compile(r"\s*(?:<!--.*?-->\s*)*<(?:!doctype|html[\s>])", re.IGNORECASE | re.DOTALL)
# characters an XML tree cannot hold (C0 controls but tab, line feed and carriage return; U+FFFE, U+FFFF):
# HTML forbids them too, and lxml refuses to store them
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _no(el) -> bool:
    return (el.get("translate") or "").strip().lower() == "no"


def _own_kind(el) -> str:
    """What an element is by its tag and ``translate`` attribute alone."""
    if not isinstance(el.tag, str):  # a comment or a processing instruction
        return _POINT
    tag = el.tag.lower()
    if tag in VOID or tag in OPAQUE:
        return _POINT
    if tag in KEPT_BLOCKS:
        return _KEPT
    if tag in VERBATIM_WORDS or _no(el):
        return _WORDS if tag in VERBATIM_WORDS or tag in INLINE_TAGS else _KEPT
    return _INLINE if tag in INLINE_TAGS else _BLOCK


def _kinds(root) -> dict[Any, str]:
    """Every element's kind; an inline or verbatim element holding a block is a block itself (kept, when it
    is verbatim), so a run never holds a block. Bottom-up: each element after its descendants."""
    kinds: dict[Any, str] = {}
    for el in reversed(list(root.iter())):
        kind = _own_kind(el)
        if kind in (_INLINE, _WORDS) and any(kinds[child] in (_BLOCK, _KEPT) for child in el):
            kind = _BLOCK if kind == _INLINE else _KEPT
        kinds[el] = kind
    return kinds


@dataclass
class _RunText:
    """A run's source text as it is collected: the characters, line breaks (``<br>``) and element order."""

    parts: list[str] = field(default_factory=list)
    length: int = 0
    breaks: list[int] = field(default_factory=list)
    order: int = 0

    def add(self, text: Optional[str]) -> None:
        if text:
            self.parts.append(text)
            self.length += len(text)


@dataclass
class _Run:
    """A run: the text of ``parent`` (``after`` None) or the tail of its child ``after``, then ``nodes``
    (the run's elements, which are ``parent``'s children from ``index`` on)."""

    parent: Any
    after: Any
    index: int
    nodes: list[Node] = field(default_factory=list)
    source: str = ""
    sentences: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _Attribute:
    element: Any
    name: str
    lines: list


class UnreadableHtml(DataError):
    """A text lxml's parser gives up on (it repairs most of what browsers repair; what it cannot is this)."""


class HtmlText:
    """An HTML text to translate: :attr:`sentences` (what the model reads, in order), then :meth:`render`
    with their translations. Each render reads the text again, so it may be called for several n-best
    ranks."""

    def __init__(self, html: str, language: str):
        self.html, self.language = _NOT_XML.sub("", html), language
        self.sentences = _Document(self.html, language).sentences

    def render(self, translations: Sequence[Optional[Aligned]]) -> str:
        """The HTML with each sentence replaced by its translation (None: no translation, an empty one)."""
        document = _Document(self.html, self.language)
        if len(translations) != len(document.sentences):
            raise ValueError(f"{len(translations)} translations for {len(document.sentences)} sentences")
        document.apply([t if t is not None else Aligned("") for t in translations])
        return document.serialize()


def text_of(html: str) -> str:
    """The text of ``html`` that would be translated, its sentences joined by spaces: what identifies its
    language (tags, attribute names and URLs would pull any text towards English)."""
    return " ".join(HtmlText(html, "en").sentences)


class AlignedHtml:
    """An HTML text read for one served direction (``model``: its ``source`` language and
    ``source_tokens``): :attr:`sentences`, then :meth:`render` with a hypothesis for each (``text``,
    ``pieces``, ``alignment``; None: no translation)."""

    def __init__(self, text: str, model):
        self.html = HtmlText(text, model.source)
        self.sentences = self.html.sentences
        self.tokens = model.source_tokens(self.sentences) if self.sentences else []

    def render(self, hypotheses) -> str:
        return self.html.render([Aligned.of(h, tokens) for h, tokens in zip(hypotheses, self.tokens)])


class _Document:
    """The parsed tree and what is translated in it, in order: runs and attribute values."""

    def __init__(self, html: str, language: str):
        self.language = language
        self.whole = _DOCUMENT.match(html) is not None
        self.trail = html[len(html.rstrip()):]
        self.root = _parse(html, self.whole)
        self.kinds = _kinds(self.root)
        self.items: list[Any] = []
        self.sentences: list[str] = []
        self._container(self.root)

    def _container(self, el) -> None:
        """A block's runs and the blocks between them, in order."""
        self._attributes(el)
        run = _Run(el, None, 0)
        for index, child in enumerate(el):
            kind = self.kinds[child]
            if kind in (_BLOCK, _KEPT):
                self._close(run)
                if kind == _BLOCK:
                    self._container(child)
                run = _Run(el, child, index + 1)
            else:
                run.nodes.append(child)
        self._close(run)

    def _close(self, run: _Run) -> None:
        """Collect a run's text and elements; keep it when it has a sentence to translate."""
        text = _RunText()
        text.add(run.parent.text if run.after is None else run.after.tail)
        elements, run.nodes = run.nodes, []
        for el in elements:
            run.nodes.append(self._node(el, text))
            text.add(el.tail)
        run.source = "".join(text.parts)
        if not run.source.strip():
            return
        verbatim = [(n.start, n.end) for n in _all_nodes(run.nodes) if n.kind == VERBATIM]
        run.sentences = [span for span in _sentence_spans(run.source, text.breaks, self.language)
                         if _translatable(run.source, span, verbatim)]
        if run.sentences:
            self.items.append(run)
            self.sentences += [" ".join(run.source[s:e].split()) for s, e in run.sentences]

    def _node(self, el, text: _RunText) -> Node:
        """An element of a run and, for an inline one, its children, with their places in the run's text."""
        kind = self.kinds[el]
        node = Node(_PLACEMENT[kind], text.length, text.length, text.order, payload=el)
        text.order += 1
        if kind == _INLINE:
            self._attributes(el)
            text.add(el.text)
            for child in el:
                node.children.append(self._node(child, text))
                text.add(child.tail)
        elif kind == _WORDS:
            text.add("".join(el.itertext()))
        elif isinstance(el.tag, str):
            if el.tag.lower() == "br":
                text.breaks.append(text.length)
            if el.tag.lower() in VOID and not _no(el):
                self._attributes(el)
        node.end = text.length
        return node

    def _attributes(self, el) -> None:
        for name in TRANSLATED_ATTRIBUTES:
            value = el.get(name)
            if value and value.strip():
                lines = split_text(value, self.language)
                self.items.append(_Attribute(el, name, lines))
                self.sentences += sentences_of(lines)

    def apply(self, translations: Sequence[Aligned]) -> None:
        """Put the translations (one per sentence, in order) into the tree."""
        found = iter(translations)
        for item in self.items:
            if isinstance(item, _Attribute):
                texts = [next(found).text for _ in sentences_of(item.lines)]
                item.element.set(item.name, _NOT_XML.sub("", join_text(item.lines, texts)))
                continue
            run = RunTranslation(item.source, item.sentences, [_xml_safe(next(found)) for _ in item.sentences])
            place(item.nodes, run)
            _write_run(item, run.text)

    def serialize(self) -> str:
        from lxml import etree

        if self.whole:  # the parser drops what follows </html>: its trailing whitespace is put back
            tree = self.root.getroottree()
            text = etree.tostring(tree, encoding="unicode", method="html", doctype=tree.docinfo.doctype or None)
            return text + self.trail if not text.endswith(self.trail) else text
        inner = etree.tostring(self.root, encoding="unicode", method="html")
        return inner[len("<div>"): -len("</div>")]


def _parse(html: str, whole: bool):
    """The tree of ``html``: a document, or a fragment under a ``div`` of our own (which is not written back);
    the fragment's leading whitespace, which the parser drops before an element, is put back."""
    try:
        import lxml.html
        from lxml import etree
    except ImportError:
        raise UsageError("html format needs lxml, which is not installed (pip install -e '.[serve]')") from None
    try:
        if whole:
            return lxml.html.document_fromstring(html)
        root = lxml.html.fragment_fromstring(html, create_parent="div")
    except (etree.ParserError, ValueError) as exc:
        raise UnreadableHtml(f"not HTML the parser can read ({' '.join(str(exc).split())})") from None
    lead = html[: len(html) - len(html.lstrip())]
    if lead:
        root.text = lead + (root.text or "").lstrip()
    return root


def _all_nodes(nodes: Sequence[Node]) -> list[Node]:
    found, stack = [], list(nodes)
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(node.children)
    return found


def _sentence_spans(source: str, breaks: Sequence[int], language: str) -> list[tuple[int, int]]:
    """The sentences of a run's text as ``[start, end)`` offsets: each stretch between line breaks split as a
    line of plain text is (HTML whitespace, line feeds included, is a space there)."""
    spans = []
    for start, end in zip([0, *breaks], [*breaks, len(source)]):
        line = "".join(" " if ch.isspace() else ch for ch in source[start:end])
        if line.strip():
            spans += [(start + s, start + e) for s, e in _line_sentences(line, language)]
    return spans


def _line_sentences(line: str, language: str) -> list[tuple[int, int]]:
    """The sentences of one line, found in it in order (where the segmenter changed a sentence's text, the
    line is one sentence)."""
    found, cursor = [], 0
    for piece in split_text(line, language)[0]:
        if piece.sentence:
            at = line.find(piece.sentence, cursor)
            if at < 0:
                return [(len(line) - len(line.lstrip()), len(line.rstrip()))]
            found.append((at, at + len(piece.sentence)))
            cursor = at + len(piece.sentence)
    return found


def _translatable(source: str, span: tuple[int, int], verbatim: Sequence[tuple[int, int]]) -> bool:
    """Whether a sentence has a word outside verbatim elements (one made of them alone is kept as it is)."""
    start = span[0]
    return any(not any(s <= start + a and start + b <= e for s, e in verbatim)
               for a, b in words_of(source[span[0]:span[1]]))


def _xml_safe(translation: Aligned) -> Aligned:
    text = _NOT_XML.sub("", translation.text)
    return translation if text == translation.text else Aligned(text, translation.pieces, translation.alignment,
                                                                translation.source_tokens)


def _write_run(run: _Run, text: str) -> None:
    """Write a placed run back into the tree: the slot's text, then its elements in their new order."""
    top = ordered(run.nodes)
    for node in run.nodes:
        run.parent.remove(node.payload)
    lead = text[: top[0].a] if top else text
    if run.after is None:
        run.parent.text = lead
    else:
        run.after.tail = lead
    for k, node in enumerate(top):
        run.parent.insert(run.index + k, node.payload)
        _write_node(node, text)
        node.payload.tail = text[node.b: top[k + 1].a if k + 1 < len(top) else len(text)]


def _write_node(node: Node, text: str) -> None:
    """An inline element's text and children from its span; a verbatim element or a point is left as it is
    (a verbatim element's span, the translation of its words, is not written)."""
    if node.kind != INLINE:
        return
    el, children = node.payload, ordered(node.children)
    for child in children:
        el.remove(child.payload)
    el.text = text[node.a: children[0].a if children else node.b]
    for k, child in enumerate(children):
        el.append(child.payload)
        _write_node(child, text)
        child.payload.tail = text[child.b: children[k + 1].a if k + 1 < len(children) else node.b]

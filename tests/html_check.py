"""HTML read back by a parser independent of the server's (the standard library's tokenizer, not lxml), strictly:
every element that is not void closed by its own end tag, in nesting order. For the markup tests and
benchmarks/html_agreement.py, with the sentences they tag."""
from __future__ import annotations

import html
import random
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Optional

VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
RAW = frozenset({"script", "style"})
#: the inline tags tagged() puts around words
TAGS = ("b", "i", "em", "strong", "u", "span", "a")


@dataclass(frozen=True)
class Element:
    tag: str
    attrs: tuple[tuple[str, str], ...]
    ancestors: tuple[int, ...]  # indices of the enclosing elements, outermost first


@dataclass
class Parsed:
    elements: list[Element] = field(default_factory=list)
    text: str = ""  # the character data outside script and style, entities resolved
    empty: set[int] = field(default_factory=set)  # the elements that hold neither text nor an element


class _Strict(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parsed = Parsed()
        self.open: list[int] = []
        self.filled: set[int] = set()
        self.chunks: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.filled.update(self.open)
        self.parsed.elements.append(Element(tag, tuple(attrs), tuple(self.open)))
        if tag not in VOID:
            self.open.append(len(self.parsed.elements) - 1)

    def handle_startendtag(self, tag, attrs):
        if tag not in VOID:
            raise AssertionError(f"<{tag}/> is not a void element")
        self.filled.update(self.open)
        self.parsed.elements.append(Element(tag, tuple(attrs), tuple(self.open)))

    def handle_endtag(self, tag):
        if tag in VOID:
            raise AssertionError(f"</{tag}> closes a void element")
        if not self.open or self.parsed.elements[self.open[-1]].tag != tag:
            expected = self.parsed.elements[self.open[-1]].tag if self.open else "nothing"
            raise AssertionError(f"</{tag}> where {expected} is open")
        if self.open[-1] not in self.filled:
            self.parsed.empty.add(self.open[-1])
        self.open.pop()

    def handle_data(self, data):
        if data:
            self.filled.update(self.open)
        if not (self.open and self.parsed.elements[self.open[-1]].tag in RAW):
            self.chunks.append(data)


def parse_strict(html: str) -> Parsed:
    """The elements and text of ``html``; an AssertionError where it is not well-formed."""
    parser = _Strict()
    parser.feed(html)
    parser.close()
    if parser.open:
        raise AssertionError(f"<{parser.parsed.elements[parser.open[-1]].tag}> is never closed")
    parser.parsed.text = "".join(parser.chunks)
    return parser.parsed


def shape(parsed: Parsed, ignore: tuple[str, ...] = ("alt", "title")) -> Counter:
    """Each element as its tag, its attributes (but ``ignore``) and its ancestors' tags and attributes: equal
    shapes are the same elements in the same nesting, whatever the order of siblings."""
    def own(e: Element) -> tuple:
        return e.tag, tuple(sorted((k, v or "") for k, v in e.attrs if k not in ignore))

    return Counter((own(e), tuple(own(parsed.elements[i]) for i in e.ancestors)) for e in parsed.elements)


def first_difference(source: str, output: str) -> Optional[str]:
    """None when ``output`` is well-formed with the same elements as ``source``; else what differs."""
    try:
        got = parse_strict(output)
    except AssertionError as exc:
        return f"not well-formed: {exc}"
    want = shape(parse_strict(source))
    if shape(got) != want:
        return f"elements differ: missing {dict(want - shape(got))}, added {dict(shape(got) - want)}"
    return None


def tagged(sentence: str, rng: random.Random, counter: list[int]) -> str:
    """``sentence`` with one to three non-overlapping inline elements around runs of words (a third of them
    with one more nested inside), its text escaped."""
    words = sentence.split()
    spans: list[tuple[int, int]] = []
    for _ in range(rng.randint(1, 3)):
        length = rng.randint(1, min(3, len(words)))
        start = rng.randrange(0, len(words) - length + 1)
        if all(start + length <= s or e <= start for s, e in spans):
            spans.append((start, start + length))
    opens: dict[int, list[str]] = {}
    closes: dict[int, list[str]] = {}
    for start, end in sorted(spans):
        outer = None
        for s, e in [(start, end)] + ([(start + rng.randrange(end - start), end)] if rng.random() < 1 / 3 else []):
            tag = outer = rng.choice([t for t in TAGS if not (t == "a" == outer)])  # HTML nests no link in a link
            counter[0] += 1
            extra = f' href="#l{counter[0]}"' if tag == "a" else ""
            opens.setdefault(s, []).append(f'<{tag} data-k="{counter[0]}"{extra}>')
            closes.setdefault(e - 1, []).insert(0, f"</{tag}>")
    out = []
    for k, word in enumerate(words):
        out.append("".join(opens.get(k, [])) + html.escape(word, quote=False) + "".join(closes.get(k, [])))
    return " ".join(out)

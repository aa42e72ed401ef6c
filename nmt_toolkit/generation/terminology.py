"""Terminology control as text: a glossary and "keep verbatim" patterns → each source sentence's target
constraints (the phrases its translation must contain), for the constrained search to enforce.

Glossary file (``--glossary FILE``): UTF-8 text (a byte-order mark is allowed), lines split on ``\\n`` (a
``\\r`` before it is dropped), one entry a line (``<TAB>``: one tab character)::

    # source term<TAB>target term
    neural network<TAB>neuronales Netz
    Straße<TAB>street

A blank line (whitespace only) and a line whose first non-blank character is ``#`` are skipped. Every other
line holds exactly two tab-separated fields, each non-empty once stripped; a term's inner runs of whitespace
count as one space (and match any run of whitespace in a sentence). A source term is at most
:data:`MAX_TERM_CHARS` characters. A source term listed twice with different targets is an error naming both
lines; listed twice with the same target, once. Every problem is one :class:`UsageError` naming ``FILE:LINE``.

Matching (:meth:`Glossary.constraints_for`): sentences and terms are compared in Unicode NFC. Terms are found
left to right; where several start at the same place the longest wins, and the text it covers is not searched
again (so a term inside a longer matched term does not fire). With ``whole_words`` a match may be neither
preceded nor followed by a word character: a Unicode letter, digit or ``_``, what Python's ``\\w`` matches in
``str`` patterns. For a term that begins and ends with a word character this is exactly ``\\b…\\b``; a term
such as ``C++`` matches before a space too. ``ignore_case`` uses Python's simple case folding
(``re.IGNORECASE``): ``straße`` matches ``STRAẞE``, but not ``STRASSE`` (ß → SS is a full case folding that
changes a word's length); list ``Strasse`` as its own source term for that spelling.

Keep patterns (:class:`KeepPatterns`): regular expressions whose matches are copied verbatim into the
translation; :data:`DEFAULT_KEEP` holds the documented ones for URLs, e-mail addresses and numbers.
"""
from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence, Union

from nmt_toolkit.config import option, shown_value
from nmt_toolkit.errors import UsageError

#: the longest source term, in characters: the compiled pattern nests one group per character of a term in the
#: worst case (terms that are prefixes of each other), and Python's regex parser recurses once per group (about
#: 500 nested groups exhaust its recursion limit)
MAX_TERM_CHARS = 200

#: what --keep-defaults keeps verbatim (\w: a Unicode letter, digit or _).
#: url: http://, https:// or www. (any case) up to the next space, '"', '<' or '>', with parentheses only in
#: pairs (…/Foo_(bar)) and no punctuation at its end (a sentence's full stop, a closing bracket or quote stay out).
#: email: local@domain.tld, the local part of \w . % + -, the domain's labels of \w and hyphens.
#: number: digits, then optionally more groups of digits each after one "." or "," (1,234.56; 1.234,56; 3,5);
#: never part of a word or of a longer number (v1.2, 1st, 3D); a sign, a unit or a percent sign stays outside.
DEFAULT_KEEP = {
    "url": r"(?i:\b(?:https?://|www\.))(?:[^\s<>\"()]|\([^\s<>\"()]*\))+(?<![.,;:!?'’”»\]}])",
    "email": r"(?<![\w.%+-])[\w.%+-]+@\w[\w-]*(?:\.\w[\w-]*)+",
    "number": r"(?<![\w.,])\d+(?:[.,]\d+)*(?!\w)(?![.,]\d)",
}


@dataclass
class TerminologyConfig:
    """Target phrases a translation must contain: glossary terms and source spans kept verbatim."""

    glossary: Optional[str] = option(None, "TSV file of 'source term<TAB>target term' lines ('#' comments): the "
                                           "target term of each source term found in a sentence must appear in "
                                           "its translation", metavar="FILE")
    glossary_ignore_case: bool = option(False, "find glossary source terms in any letter case (simple case "
                                               "folding: straße matches STRAẞE, not STRASSE)")
    glossary_whole_words: bool = option(True, "a glossary source term matches only where it is neither preceded "
                                              "nor followed by a letter, digit or '_' ('cat' not in 'category')")
    keep: list[str] = option([], "a regular expression (Python's re) whose matches in a source sentence are "
                                 "copied verbatim into its translation (repeat for more; in YAML a list)",
                             multiple=True, metavar="REGEX")
    keep_defaults: bool = option(False, "also keep URLs, e-mail addresses and numbers verbatim (the patterns of "
                                        "generation/terminology.py: DEFAULT_KEEP)")

    def validate(self) -> None:
        KeepPatterns(self.keep)  # an invalid pattern is refused by name before any model is loaded


class Span(NamedTuple):
    """A match in a sentence: where it is, and the constraint it gives (a target term or the kept text)."""

    start: int
    end: int
    text: str


def _nfc(text: str) -> str:
    """One spelling of each character: an NFD sentence (macOS input) finds an NFC term, and back."""
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def _simple_fold(text: str) -> str:
    """Each character lowered by itself, as ``re.IGNORECASE`` compares characters (``str.lower`` would turn
    ``İ`` into two characters, which the pattern could then no longer match)."""
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


# --------------------------------------------------------------------------- glossary entries


class _Entry(NamedTuple):
    source: str
    target: str
    label: str  # where it was given: "line 4" or "entry 4"
    where: str  # the same for an error of its own: "FILE:4" or "glossary entry 4"


def _quoted(term: str) -> str:
    return f"'{shown_value(term)}'"


def _check_terms(source: Any, target: Any, where: str) -> tuple[str, str]:
    """A source and a target term, whitespace-normalised, or an error saying which is wrong."""
    if not isinstance(source, str) or not isinstance(target, str):
        raise UsageError(f"{where}: expected a pair of strings, got {type(source).__name__} and "
                         f"{type(target).__name__}")
    source, target = " ".join(_nfc(source).split()), " ".join(_nfc(target).split())
    for name, term in (("source", source), ("target", target)):
        if not term:
            raise UsageError(f"{where}: empty {name} term")
    if len(source) > MAX_TERM_CHARS:
        raise UsageError(f"{where}: source term of {len(source)} characters, more than {MAX_TERM_CHARS}")
    return source, target


def _parse_line(line: str, where: str) -> Optional[tuple[str, str]]:
    """One line of a glossary file: None for a blank or comment line, else its two terms."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    fields = line.split("\t")
    if len(fields) != 2:
        raise UsageError(f"{where}: expected 'source<TAB>target', found {len(fields)} field"
                         f"{'s' if len(fields) != 1 else ''}")
    return _check_terms(fields[0], fields[1], where)


def _file_rows(path: str) -> Iterable[tuple[int, str]]:
    """The numbered lines of a UTF-8 file without its BOM, each refused by number if not UTF-8 (a CRLF's
    ``\\r`` is whitespace, stripped with the fields)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such glossary file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the glossary ({exc.strerror or exc})") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{path}:{number}: not UTF-8 text (byte {exc.start + 1} of the line); save the "
                             f"glossary as UTF-8") from None


def _file_entries(path: str) -> Iterable[tuple[str, str, str, str]]:
    """(where, label, source, target) of each entry of a glossary file."""
    for number, line in _file_rows(path):
        terms = _parse_line(line, f"{path}:{number}")
        if terms is not None:
            yield (f"{path}:{number}", f"line {number}", *terms)


def _pair_entries(pairs: Union[Mapping[str, str], Iterable[Sequence[str]]]) -> Iterable[tuple[str, str, str, str]]:
    """(where, label, source, target) of each pair of a mapping or list, as a request sends them."""
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    for number, item in enumerate(items, start=1):
        where = f"glossary entry {number}"
        if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) != 2:
            raise UsageError(f"{where}: expected a [source, target] pair, got {shown_value(item)}")
        yield (where, f"entry {number}", *_check_terms(item[0], item[1], where))


# --------------------------------------------------------------------------- glossary


def _trie_pattern(node: dict) -> str:
    """The regex of a character trie: shared prefixes written once, so that matching costs one path through
    the trie per position instead of one try per term (on 1,000 sentences, 0.03 s against 1.2 s for a plain
    alternation of the same 10,000 terms); a longer branch is tried before the term that ends at a node (``?`` is greedy), so the first
    match at a position is its longest that the boundary check after the pattern accepts."""
    branches = [(r"\s+" if char == " " else re.escape(char)) + _trie_pattern(child)
                for char, child in sorted(node.items()) if char]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    if "" not in node:
        return body
    return body + "?" if len(branches) > 1 else "(?:" + body + ")?"


class Glossary:
    """Source terms → target terms, and where a sentence mentions them (see the module docstring)."""

    def __init__(self, entries: Iterable[tuple[str, str, str, str]], ignore_case: bool = False,
                 whole_words: bool = True):
        """``entries``: (where, label, source, target), already checked; duplicates are refused here."""
        self.ignore_case, self.whole_words = ignore_case, whole_words
        self._entries: dict[str, _Entry] = {}
        for where, label, source, target in entries:
            key = self._key(source)
            first = self._entries.setdefault(key, _Entry(source, target, label, where))
            if first.target != target:
                alias = f" (as {_quoted(first.source)})" if first.source != source else ""
                raise UsageError(f"{where}: source term {_quoted(source)} has target {_quoted(target)} here but "
                                 f"{_quoted(first.target)} at {first.label}{alias}")
        self._regex = self._compile() if self._entries else None

    @classmethod
    def load(cls, path: str, ignore_case: bool = False, whole_words: bool = True) -> "Glossary":
        """The glossary of a TSV file (format in the module docstring)."""
        return cls(_file_entries(path), ignore_case, whole_words)

    @classmethod
    def from_pairs(cls, pairs: Union[Mapping[str, str], Iterable[Sequence[str]]], ignore_case: bool = False,
                   whole_words: bool = True) -> "Glossary":
        """A glossary given as data (a request's ``{"source": "target"}`` or ``[["source", "target"], …]``);
        errors name the entry by its position, from 1."""
        return cls(_pair_entries(pairs), ignore_case, whole_words)

    def __len__(self) -> int:
        return len(self._entries)

    def targets(self) -> list[tuple[str, str]]:
        """``(where, target term)`` of every entry: the programs check each once against the target side's
        subword model and dictionary, before any sentence is translated."""
        return [(entry.where, entry.target) for entry in self._entries.values()]

    def _key(self, term: str) -> str:
        """What two spellings of one term share: runs of whitespace as one space; the case folded if ignored."""
        term = " ".join(term.split())
        return _simple_fold(term) if self.ignore_case else term

    def _compile(self) -> re.Pattern:
        """One pattern for all the terms, so that a sentence is scanned once however long the glossary."""
        trie: dict = {}
        for key in self._entries:
            node = trie
            for char in key:
                node = node.setdefault(char, {})
            node[""] = {}
        body = _trie_pattern(trie)
        pattern = rf"(?<!\w)(?:{body})(?!\w)" if self.whole_words else body
        return re.compile(pattern, re.IGNORECASE if self.ignore_case else 0)

    def _target_of(self, found: str) -> str:
        """The target of the term whose pattern matched ``found``. A few characters are equal to
        ``re.IGNORECASE`` but lower differently (σ/ς, ſ/s); their terms are found by trying each pattern."""
        entry = self._entries.get(self._key(found))
        if entry is None:
            flags = re.IGNORECASE if self.ignore_case else 0
            entry = next(e for e in self._entries.values()
                         if re.fullmatch(r"\s+".join(map(re.escape, e.source.split())), found, flags))
        return entry.target

    def matches(self, text: str) -> list[Span]:
        """Each source term found in ``text`` (NFC), left to right, longest first, none overlapping."""
        if self._regex is None:
            return []
        return [Span(m.start(), m.end(), self._target_of(m.group())) for m in self._regex.finditer(_nfc(text))]

    def constraints_for(self, text: str) -> list[str]:
        """The target terms of the source terms in ``text``, in source order, each once."""
        return list(dict.fromkeys(span.text for span in self.matches(text)))


# --------------------------------------------------------------------------- keep patterns


class KeepPatterns:
    """Regular expressions whose matches in a source sentence its translation must repeat verbatim."""

    def __init__(self, patterns: Iterable[str], what: str = "--keep"):
        """``what`` names the patterns' origin in errors (``--keep``, or a request's field)."""
        self.patterns = list(patterns)
        self._compiled = [self._compile(p, what) for p in self.patterns]

    @classmethod
    def defaults(cls, extra: Iterable[str] = ()) -> "KeepPatterns":
        """:data:`DEFAULT_KEEP` and then ``extra``."""
        return cls([*DEFAULT_KEEP.values(), *extra])

    @staticmethod
    def _compile(pattern: Any, what: str) -> re.Pattern:
        """A pattern compiled, or one line naming it (a request may send any value: deep nesting included)."""
        if not isinstance(pattern, str):
            raise UsageError(f"{what} {shown_value(pattern)}: expected a regular expression as a string")
        try:
            return re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"{what} '{shown_value(pattern)}': not a valid regular expression ({exc.msg} at "
                             f"position {exc.pos})") from None
        except RecursionError:
            raise UsageError(f"{what} '{shown_value(pattern)}': nested too deeply") from None

    def matches(self, text: str) -> list[Span]:
        """Every pattern's matches in ``text`` (NFC), left to right; where two overlap, the one that starts
        first wins, then the longer; empty matches are no constraint and are skipped."""
        text = _nfc(text)
        found = sorted(((m.start(), -m.end()) for rx in self._compiled for m in rx.finditer(text)
                        if m.end() > m.start()))
        spans: list[Span] = []
        for start, negative_end in found:
            if not spans or start >= spans[-1].end:
                spans.append(Span(start, -negative_end, text[start:-negative_end]))
        return spans

    def spans(self, text: str) -> list[str]:
        """The matched substrings of ``text``, in source order, each once."""
        return list(dict.fromkeys(span.text for span in self.matches(text)))


# --------------------------------------------------------------------------- a sentence's constraints


def sentence_constraints(text: str, glossary: Optional[Glossary], keep: Optional[KeepPatterns]) -> list[str]:
    """The target constraints of one source sentence: glossary targets and kept spans in the order they occur
    in the source, each once. A kept span that overlaps a glossary match is left out: the glossary, which the
    user wrote for this term, says how to translate that text."""
    text = _nfc(text)
    terms = glossary.matches(text) if glossary is not None else []
    kept = keep.matches(text) if keep is not None else []
    ends = [span.end for span in terms]
    free = []
    for span in kept:
        i = bisect.bisect_right(ends, span.start)  # the first glossary match ending after the span starts
        if i == len(terms) or terms[i].start >= span.end:
            free.append(span)
    ordered = sorted(terms + free, key=lambda span: span.start)
    return list(dict.fromkeys(span.text for span in ordered))


def with_terms(sources: Sequence[str], phrases: Optional[Sequence[Sequence[str]]], glossary: Optional[Glossary],
               keep: Optional[KeepPatterns]) -> list[list[str]]:
    """Each sentence's ``phrases`` (None: none) followed by its glossary terms and kept spans not among them."""
    given = phrases if phrases is not None else [[] for _ in sources]
    return [list(wanted) + [p for p in sentence_constraints(source, glossary, keep) if p not in wanted]
            for source, wanted in zip(sources, given)]


def load_terminology(cfg: TerminologyConfig) -> tuple[Optional[Glossary], Optional[KeepPatterns]]:
    """The glossary and the keep patterns ``cfg`` asks for (None for each it does not)."""
    glossary = Glossary.load(cfg.glossary, cfg.glossary_ignore_case, cfg.glossary_whole_words) if cfg.glossary \
        else None
    patterns = [*(DEFAULT_KEEP.values() if cfg.keep_defaults else ()), *cfg.keep]
    return glossary, (KeepPatterns(patterns) if patterns else None)


class InputConstraints:
    """What a program's input constrains: each line's TAB-separated phrases (``constraints`` ordered or
    unordered: the line is the source, then its phrases), and the glossary terms and kept spans found in its
    source. ``kind`` is how the search treats them: as ``constraints`` says, or ``unordered`` when they come
    from the glossary and keep patterns alone (a term's place in a translation is the translation's)."""

    def __init__(self, constraints: str, glossary: Optional[Glossary] = None, keep: Optional[KeepPatterns] = None):
        self.explicit = constraints != "off"
        self.glossary, self.keep = glossary, keep
        self.active = self.explicit or glossary is not None or keep is not None
        self.kind = constraints if self.explicit else ("unordered" if self.active else "off")

    @classmethod
    def of(cls, constraints: str, cfg: TerminologyConfig) -> "InputConstraints":
        return cls(constraints, *load_terminology(cfg))

    def split(self, lines: Sequence[str], what: str, first: int = 1,
              unit: str = "line") -> tuple[list[str], Optional[list[list[str]]]]:
        """``(sources, each line's phrases)``; the phrases are None when nothing constrains the input."""
        from nmt_toolkit.generation.source_text import split_constraints

        if not self.active:
            return list(lines), None
        sources, phrases = split_constraints(lines, what, first, unit) if self.explicit else (list(lines), None)
        if self.glossary is not None or self.keep is not None:
            phrases = with_terms(sources, phrases, self.glossary, self.keep)
        return sources, phrases

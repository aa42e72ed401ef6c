"""Where inline markup goes in a translation: source words → target words through the model's attention, and
each inline element's target span, nested as in the source.

The unit is the *word*: a run of letters, digits and combining marks, or one punctuation mark, or one CJK
character (those scripts write words without spaces). Subword pieces are mapped onto words by their
characters, on both sides; the hypothesis' alignment (for each target piece, the source position the last
decoder layer's encoder–decoder attention weighs most, averaged over heads) then gives each target word the
source word most of its pieces attend to (the first of them on a tie). A target word made only of
punctuation takes the same mark in the source when the source has it (the occurrence nearest in relative
position): end-of-sentence marks are where attention is least reliable, and a tag around a sentence's last
words would otherwise often swallow its period.

An element that wraps source words wraps the target words aligned to them: the longest stretch of them that
no target word aligned to a source word outside the element interrupts (unaligned words may sit inside it;
the first stretch on a tie). A translation can break a phrase apart (German's separable verbs) and an
alignment can stray; an element is written once, so it keeps its main stretch rather than wrapping the words
in between that belong elsewhere. Elements are placed top-down, so they nest as the source elements nest:

- a child's stretch is chosen among its words inside its parent's span;
- siblings may not overlap (their words are foreign to each other, so they seldom would): the one with the
  tightest span is placed first, and a later one's stretch stops at a placed sibling;
- an element left with no word (none of its words is aligned, or none is left inside its parent) becomes a
  *point*: it is kept, empty, at the start of its aligned words (with none, where its source position maps
  to), brought inside its parent and out of any sibling it would fall inside;
- an element without words of its own (an image, a line break, a comment, a script) is a point too: placed
  after the target words aligned to the source word before it, or before those aligned to the word after it
  when it is written against that word, or else beside the nearest source word that is aligned anywhere.
  Between sentences (in the whitespace the translation keeps as it is) it stays where it was.

Everything here is positions: :mod:`nmt_toolkit.markup.html` reads the HTML and writes it back.
"""
from __future__ import annotations

import bisect
import difflib
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

#: what the placement of a node is: it wraps translated words (inline), it wraps target words whose text it
#: replaces by its own, kept as it is (verbatim: code, translate="no"), or it wraps nothing (point)
INLINE, VERBATIM, POINT = "inline", "verbatim", "point"


@dataclass(frozen=True)
class Aligned:
    """A sentence's translation with what placement needs: the target ``pieces`` (subword pieces as the
    dictionary writes them), ``alignment`` (for each piece, a source position; None when the engine gave
    none) and ``source_tokens`` (the source as the model read it, one entry per position: the piece, or None
    for a language tag and the end token)."""

    text: str
    pieces: Sequence[str] = ()
    alignment: Optional[Sequence[int]] = None
    source_tokens: Sequence[Optional[str]] = ()

    @classmethod
    def of(cls, hypothesis: Any, source_tokens: Sequence[Optional[str]]) -> Optional["Aligned"]:
        """A translator's hypothesis (``text``, ``pieces`` as one string, ``alignment``) with the source it
        was read from; None for no hypothesis."""
        if hypothesis is None:
            return None
        return cls(hypothesis.text, hypothesis.pieces.split(), hypothesis.alignment, source_tokens)


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (0x3040 <= code <= 0x30FF or 0x3400 <= code <= 0x4DBF or 0x4E00 <= code <= 0x9FFF
            or 0xF900 <= code <= 0xFAFF or 0x20000 <= code <= 0x2FFFF)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_" or unicodedata.category(ch).startswith("M")


def words_of(text: str) -> list[tuple[int, int]]:
    """The words of ``text`` as ``(start, end)`` character offsets (see the module docstring)."""
    found: list[tuple[int, int]] = []
    start = None
    for i, ch in enumerate(text):
        joins = _is_word_char(ch) and not _is_cjk(ch)
        if start is not None and not joins:
            found.append((start, i))
            start = None
        if ch.isspace():
            continue
        if joins:
            if start is None:
                start = i
        else:
            found.append((i, i + 1))
    if start is not None:
        found.append((start, len(text)))
    return found


def surface(piece: str) -> str:
    """A subword piece's characters: without sentencepiece's ``▁`` and subword-nmt's ``@@`` marker."""
    piece = piece.replace("\u2581", "")
    return piece[:-2] if piece.endswith("@@") else piece


def piece_spans(surfaces: Sequence[str], text: str) -> list[Optional[tuple[int, int]]]:
    """Each piece's character span in ``text``, matched on the characters that are not whitespace (a piece
    holds no whitespace). Where normalisation or an unknown piece (``<unk>``) makes them differ, the longest
    common matches decide, and a piece with no matched character has no span (None)."""
    where = [i for i, ch in enumerate(text) if not ch.isspace()]
    flat = "".join(text[i] for i in where)
    joined = "".join("".join(s.split()) for s in surfaces)
    owner = [k for k, s in enumerate(surfaces) for _ in "".join(s.split())]
    if joined == flat:
        mapped = list(range(len(flat)))
    else:
        mapped = [-1] * len(joined)
        for block in difflib.SequenceMatcher(None, joined, flat, autojunk=False).get_matching_blocks():
            for k in range(block.size):
                mapped[block.a + k] = block.b + k
    spans: list[Optional[tuple[int, int]]] = [None] * len(surfaces)
    for k, m in zip(owner, mapped):
        if m < 0:
            continue
        start, end = where[m], where[m] + 1
        old = spans[k]
        spans[k] = (start, end) if old is None else (min(old[0], start), max(old[1], end))
    return spans


class _Spans:
    """Sorted, disjoint ``(start, end)`` spans, searched by bisection."""

    def __init__(self, spans: Sequence[tuple[int, int]]):
        self.spans = list(spans)
        self.starts = [s for s, _ in self.spans]
        self.ends = [e for _, e in self.spans]

    def overlapping(self, start: int, end: int) -> range:
        """The indices of the spans that overlap ``[start, end)``."""
        first = bisect.bisect_right(self.ends, start)
        return range(first, max(first, bisect.bisect_left(self.starts, end)))


def word_alignment(source: str, target: Aligned) -> list[Optional[int]]:
    """For each word of ``target.text``, the index of the word of ``source`` (the text the model read) it is
    aligned to, or None (it attends to no source word, or no alignment was given)."""
    src_words, tgt_words = _Spans(words_of(source)), _Spans(words_of(target.text))
    found: list[Optional[int]] = [None] * len(tgt_words.spans)
    if target.alignment is not None and len(target.alignment) == len(target.pieces):
        positions = [i for i, token in enumerate(target.source_tokens) if token is not None]
        src_spans = piece_spans([surface(target.source_tokens[i]) for i in positions], source)
        word_at: dict[int, int] = {}
        for position, span in zip(positions, src_spans):
            if span is not None:
                covered = src_words.overlapping(*span)
                if len(covered):
                    word_at[position] = max(covered, key=lambda w: _overlap(src_words.spans[w], span))
        votes: list[list[int]] = [[] for _ in tgt_words.spans]
        for span, position in zip(piece_spans([surface(p) for p in target.pieces], target.text), target.alignment):
            if span is not None and int(position) in word_at:
                for t in tgt_words.overlapping(*span):
                    votes[t].append(word_at[int(position)])
        found = [max(v, key=lambda w: (v.count(w), -v.index(w))) if v else None for v in votes]
    _punctuation_by_identity(source, src_words.spans, target.text, tgt_words.spans, found)
    return found


def word_pairs(sources: Sequence[str], targets: Sequence[Aligned]) -> list[tuple[int, int]]:
    """The word alignment placement uses for sentences read one after another (``sources``, each as the model
    read it, and their translations): ``(source word, target word)`` pairs in target order, each side's
    words (:func:`words_of`) counted from 0 across all the sentences in order, one pair per target word that
    :func:`word_alignment` aligns (an unaligned word has none)."""
    pairs: list[tuple[int, int]] = []
    src_base = tgt_base = 0
    for source, target in zip(sources, targets):
        pairs += [(src_base + s, tgt_base + t) for t, s in enumerate(word_alignment(source, target)) if s is not None]
        src_base += len(words_of(source))
        tgt_base += len(words_of(target.text))
    return pairs


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return min(a[1], b[1]) - max(a[0], b[0])


def _punctuation_by_identity(source: str, src_words, target: str, tgt_words, found: list[Optional[int]]) -> None:
    """A target word of punctuation only takes the same mark in the source, the occurrence nearest in relative
    position (its attention is kept when it already points at one of them)."""
    if not src_words or not tgt_words:
        return
    marks: dict[str, list[int]] = {}
    for w, (s, e) in enumerate(src_words):
        if not any(ch.isalnum() for ch in source[s:e]):
            marks.setdefault(source[s:e], []).append(w)
    for t, (s, e) in enumerate(tgt_words):
        same = marks.get(target[s:e])
        if same and found[t] not in same:
            where = (t + 0.5) / len(tgt_words)
            found[t] = min(same, key=lambda w: abs((w + 0.5) / len(src_words) - where))


@dataclass
class Node:
    """An element of a run of inline content, in the run's source text: ``[start, end)`` (a point: start ==
    end), its children, its order in the source; ``a``, ``b``: its span in the translated text once placed."""

    kind: str
    start: int
    end: int
    order: int
    payload: Any = None
    children: list["Node"] = field(default_factory=list)
    a: int = 0
    b: int = 0
    own: list[int] = field(default_factory=list)  # the target words aligned to its source words
    fixed: bool = False  # whitespace between sentences: its span is kept as it is


class RunTranslation:
    """A run's source text with its sentences (``[start, end)`` offsets, not overlapping, in order) and their
    translations: the translated run (``text``: each sentence replaced by its translation, the whitespace
    between them kept) and the target words with the source words they are aligned to."""

    def __init__(self, source: str, sentences: Sequence[tuple[int, int]], translations: Sequence[Aligned]):
        self.source, self.sentences = source, list(sentences)
        self.src_words: list[tuple[int, int]] = []
        self.tgt_words: list[tuple[int, int]] = []
        self.tgt_source: list[Optional[int]] = []
        self.first_word: list[int] = []  # each sentence's first source word
        self.targets: list[tuple[int, int]] = []  # each sentence's translation in ``text``
        parts, length, previous = [], 0, 0
        for (start, end), translation in zip(self.sentences, translations):
            gap = source[previous:start]
            parts.append(gap)
            length += len(gap)
            self._add_sentence(start, end, translation, length)
            parts.append(translation.text)
            length += len(translation.text)
            previous = end
        parts.append(source[previous:])
        self.text = "".join(parts)
        self._words = _Spans(self.src_words)
        self.tgt_starts = [s for s, _ in self.tgt_words]
        self._sentences = _Spans(self.sentences)
        self.aligned: list[list[int]] = [[] for _ in self.src_words]
        for t, w in enumerate(self.tgt_source):
            if w is not None:
                self.aligned[w].append(t)

    def _add_sentence(self, start: int, end: int, translation: Aligned, offset: int) -> None:
        read = " ".join(self.source[start:end].split())
        first = len(self.src_words)
        self.first_word.append(first)
        self.src_words += [(start + s, start + e) for s, e in words_of(self.source[start:end])]
        self.targets.append((offset, offset + len(translation.text)))
        for (s, e), w in zip(words_of(translation.text), word_alignment(read, translation)):
            self.tgt_words.append((offset + s, offset + e))
            self.tgt_source.append(None if w is None else first + w)

    def _inside(self, position: int) -> Optional[int]:
        """The sentence ``position`` falls strictly inside, or None (it is in the whitespace between them)."""
        k = bisect.bisect_right(self._sentences.starts, position) - 1
        return k if k >= 0 and self.sentences[k][0] < position < self.sentences[k][1] else None

    def point(self, position: int) -> int:
        """Where a source position (an element without words) goes in the translated text."""
        k = self._inside(position)
        if k is not None:
            return self._anchor(k, position)
        before = bisect.bisect_right(self._sentences.ends, position)
        source_gap = self.sentences[before - 1][1] if before else 0
        target_gap = self.targets[before - 1][1] if before else 0
        return target_gap + position - source_gap

    def _anchor(self, k: int, position: int) -> int:
        """A position inside sentence ``k``: after the target words of the source word before it, or before
        those of the word after it when it touches that word, or beside the nearest source word aligned
        anywhere; at the translation's nearer end when no word of the sentence is aligned."""
        last = self.first_word[k + 1] if k + 1 < len(self.first_word) else len(self.src_words)
        before = [w for w in range(self.first_word[k], last) if self.src_words[w][0] < position][::-1]
        after = [w for w in range(self.first_word[k], last) if self.src_words[w][0] >= position]
        touches_next = after and self.src_words[after[0]][0] == position and (
            not before or self.src_words[before[0]][1] < position)
        first, second = (after, before) if touches_next else (before, after)
        order = [w for pair in zip(first, second) for w in pair] + first[len(second):] + second[len(first):]
        for w in order:
            found = self.aligned[w]
            if found:
                return self.tgt_words[found[-1]][1] if w in before else self.tgt_words[found[0]][0]
        start, end = self.sentences[k]
        return self.targets[k][0] if position - start <= end - position else self.targets[k][1]

    def targets_of(self, start: int, end: int) -> list[int]:
        """The target words aligned to the source words overlapping ``[start, end)``, in order."""
        return sorted(t for w in self._words.overlapping(start, end) for t in self.aligned[w])

    def in_gap(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` lies in the whitespace between sentences (kept as it is)."""
        return not len(self._sentences.overlapping(start, end))


def place(nodes: Sequence[Node], run: RunTranslation) -> None:
    """Set every node's span ``(a, b)`` in ``run.text``, nested as the nodes nest (see the module docstring)."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        _wanted(node, run)
        stack.extend(node.children)
    _resolve(list(nodes), 0, len(run.text), run)


def _wanted(node: Node, run: RunTranslation) -> None:
    """A node's target words, and its span from the alignment alone (their first to their last), before the
    stretches and the nesting are chosen."""
    node.own, node.fixed = [], False
    if node.kind != POINT and node.end > node.start:
        node.own = run.targets_of(node.start, node.end)
        if node.own:
            node.a, node.b = run.tgt_words[node.own[0]][0], run.tgt_words[node.own[-1]][1]
            return
        if run.in_gap(node.start, node.end):  # whitespace between sentences
            node.a, node.b, node.fixed = run.point(node.start), run.point(node.end), True
            return
    node.a = node.b = run.point(node.start)


def _resolve(children: list[Node], low: int, high: int, run: RunTranslation) -> None:
    """Children within their parent's span ``[low, high]`` and clear of each other; then their own children."""
    points = [c for c in children if c.a >= c.b]
    taken = _Taken()
    for child in sorted((c for c in children if c.a < c.b), key=lambda c: (c.b - c.a, c.order)):
        span = (child.a, child.b) if child.fixed else _stretch(child, low, high, taken, run)
        if span is None or span[0] < low or span[1] > high or taken.covering(*span) is not None:
            points.append(child)
        else:
            child.a, child.b = span
            taken.add(span)
    for child in points:
        spot = min(max(child.a, low), high)
        around = taken.covering(spot, spot)
        if around is not None:
            spot = around[0] if spot - around[0] <= around[1] - spot else around[1]
        child.a = child.b = spot
    for child in children:
        _resolve(child.children, child.a, child.b, run)


class _Taken:
    """The disjoint spans of the siblings placed so far, sorted."""

    def __init__(self):
        self.spans: list[tuple[int, int]] = []

    def add(self, span: tuple[int, int]) -> None:
        bisect.insort(self.spans, span)

    def covering(self, start: int, end: int) -> Optional[tuple[int, int]]:
        """The span overlapping ``[start, end)``, or None (a position, ``start == end``: the span it is strictly
        inside)."""
        i = bisect.bisect_left(self.spans, (end,)) - 1  # the last span starting before ``end``
        return self.spans[i] if i >= 0 and self.spans[i][1] > start else None

    def between(self, left: int, right: int) -> bool:
        """Whether a span lies within ``[left, right]``."""
        i = bisect.bisect_left(self.spans, (left,))
        return i < len(self.spans) and self.spans[i][1] <= right


def _stretch(node: Node, low: int, high: int, taken: _Taken, run: RunTranslation) -> Optional[tuple[int, int]]:
    """The span of the longest stretch of ``node``'s target words within ``[low, high]`` that no word aligned
    to a source word outside the node interrupts (unaligned words do not), clear of the spans ``taken`` by
    its siblings; the first on a tie; None when no word of the node is left."""
    mine = set(node.own)
    best: list[int] = []
    group: list[int] = []
    for t in range(max(bisect.bisect_left(run.tgt_starts, low), node.own[0]), node.own[-1] + 1):
        start, end = run.tgt_words[t]
        if end > high:
            break
        if taken.covering(start, end) is not None:
            group = []
            continue
        if group and taken.between(run.tgt_words[group[-1]][1], start):
            group = []
        if t in mine:
            group.append(t)
            if len(group) > len(best):
                best = list(group)
        elif run.tgt_source[t] is not None:
            group = []
    return (run.tgt_words[best[0]][0], run.tgt_words[best[-1]][1]) if best else None


def ordered(nodes: Sequence[Node]) -> list[Node]:
    """Sibling nodes in the order they are written: by place, a point before a span that starts there, and
    the source order where they tie."""
    return sorted(nodes, key=lambda n: (n.a, n.b, n.order))

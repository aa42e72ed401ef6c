"""PARSEVAL labelled bracketing scores, computed exactly the way EVALB computes them.

Parsing papers (the Transformer paper's section 6.3 among them) report the F1 of EVALB
(Sekine & Collins 1997) run with ``COLLINS.prm``. Small differences in what is counted move
that number by tenths of a point, so this module re-implements EVALB's rules rather than a
textbook PARSEVAL. The rules, from EVALB's README and ``evalb.c``:

* A preterminal ``(TAG word)`` whose TAG is a ``DELETE_LABEL`` (punctuation, ``-NONE-``) is
  removed with its word: the word is not counted in spans, words or tags. TAGs are compared
  as written (no function-tag stripping).
* Every other bracket spans the words that remain. A bracket left spanning nothing is
  dropped; so is one whose label, after function tags are cut (``NP-SBJ-1`` and ``NP=2`` ->
  ``NP``), is a ``DELETE_LABEL`` (``TOP``). Unary chains count once per level.
* Brackets are a multiset: each gold bracket takes the first unused test bracket with the
  same span and an equal label (``EQ_LABEL`` pairs are equal), so n gold copies against m
  test copies match min(n, m) times.
* Crossing: the number of test brackets that cross at least one gold bracket.
* The sentence length for the ``len<=40`` block is the gold count of words whose tag is not
  a ``DELETE_LABEL_FOR_LENGTH`` (punctuation counts here, traces do not).
* A test tree with no words is a *skip* sentence; gold and test with a different number of
  words, or different words, make an *error* sentence. Both are left out of every figure but
  the sentence counts. EVALB gives up after more than ``MAX_ERROR`` errors, and so do we.

Two departures, both deliberate: an unlabelled outer root ``( (S ...) )`` (the Penn Treebank
wrapper) is unwrapped when reading, where EVALB would score it as a bracket labelled ``""``;
and a line we cannot read raises :class:`ParsevalError` instead of silently counting as an
error sentence. An F-measure with precision and recall both 0 is reported as 0, not ``nan``.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional, Sequence, Union

from nmt_toolkit.data.lines import read_lines
from nmt_toolkit.errors import DataError


class ParsevalError(DataError, ValueError):
    """A tree, tree file or parameter file we cannot use; the message names the line."""


_WS = " \t\n\v\f\r"  # C's isspace(), evalb.c's whitespace: str.split() and \s would also split at U+2028


# --------------------------------------------------------------------------- trees


@dataclass
class Tree:
    """A constituency tree node. Preterminals carry ``word`` and no children."""

    label: str
    children: list[Tree] = field(default_factory=list)
    word: Optional[str] = None

    @property
    def is_preterminal(self) -> bool:
        return self.word is not None

    def preterminals(self) -> Iterator[Tree]:
        """The preterminal nodes left to right (iterative: PTB trees can be deep)."""
        stack = [self]
        while stack:
            node = stack.pop()
            if node.is_preterminal:
                yield node
            else:
                stack.extend(reversed(node.children))

    def leaves(self) -> list[str]:
        return [node.word for node in self.preterminals()]

    def pos(self) -> list[tuple[str, str]]:
        """(word, tag) pairs left to right."""
        return [(node.word, node.label) for node in self.preterminals()]

    def __str__(self) -> str:
        parts: list[str] = []
        stack: list[Union[Tree, str]] = [self]
        while stack:  # iterative, so a degenerate model output nested 1000 deep still prints
            item = stack.pop()
            if isinstance(item, str):
                parts.append(item)
            elif item.is_preterminal:
                parts.append(f" ({item.label} {item.word})")
            else:
                parts.append(f" ({item.label}")
                stack.append(")")
                stack.extend(reversed(item.children))
        return "".join(parts)[1:]


# "(" with the label glued to it, ")", or a word.
_TOKEN = re.compile(rf"\(([^{_WS}()]*)|\)|[^{_WS}()]+")


def parse_tree(text: str, line: Optional[int] = None, unwrap_root: bool = True) -> Optional[Tree]:
    """Parse one bracketed tree; ``None`` for blank text.

    Words must sit alone in their bracket, ``(TAG word)``, as EVALB requires. With
    ``unwrap_root`` an unlabelled outer bracket around a single tree, ``( (S ...) )``, is removed.
    """
    where = f"line {line}: " if line is not None else ""
    stack: list[Tree] = []
    root: Optional[Tree] = None

    def fail(why: str) -> ParsevalError:
        shown = text.strip(_WS)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return ParsevalError(f"{where}malformed tree: {why}: {shown}")

    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if root is not None:
            raise fail("text after the end of the tree (one tree per line expected)")
        if token[0] == "(":
            if stack and stack[-1].is_preterminal:
                raise fail(f"bracket ({stack[-1].label} {stack[-1].word} ...) mixes a word and subtrees")
            stack.append(Tree(match.group(1)))
        elif token == ")":
            if not stack:
                raise fail("too many ')'")
            node = stack.pop()
            if not node.is_preterminal and not node.children:
                raise fail(f"empty bracket ({node.label})")
            if stack:
                stack[-1].children.append(node)
            else:
                root = node
        else:
            if not stack:
                raise fail(f"word {token!r} outside any bracket")
            top = stack[-1]
            if top.is_preterminal or top.children:
                raise fail(f"more than one element in bracket ({top.label} ...); words go in (TAG word)")
            top.word = token
    if stack:
        raise fail(f"{len(stack)} bracket(s) left open (a multi-line tree? use tasks.parsing.read_treebank)")
    if unwrap_root and root is not None and root.label == "" and len(root.children) == 1:
        root = root.children[0]
    return root


def read_trees(path_or_lines: Union[str, os.PathLike, Iterable[str]]) -> list[Optional[Tree]]:
    """Read one tree per line, as EVALB does; a blank line gives ``None`` (a skip sentence in a test file).

    A path (or ``sys.stdin``) is read one line per ``\\n`` (``nmt_toolkit.data.lines``), as evalb.c's
    ``fgets`` reads it: a ``\\r`` or U+2028 inside a line does not end it. Blank lines at the end of the
    input are dropped, so a trailing newline does not add a sentence.
    """
    if isinstance(path_or_lines, (str, os.PathLike)) or path_or_lines is sys.stdin:
        name = "<stdin>" if path_or_lines is sys.stdin else os.fspath(path_or_lines)
        try:
            lines = read_lines("-" if path_or_lines is sys.stdin else name, f"tree file {name}")
        except DataError as err:
            raise ParsevalError(str(err)) from None
        prefix = f"{name}: "
    else:
        lines, prefix = list(path_or_lines), ""
    while lines and not lines[-1].strip(_WS):
        lines.pop()
    trees = []
    for number, line in enumerate(lines, start=1):
        try:
            trees.append(parse_tree(line, line=number))
        except ParsevalError as err:
            raise ParsevalError(prefix + str(err)) from None
    return trees


def strip_function_tags(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``; labels starting with '-' (``-NONE-``, ``-LRB-``) stay."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB ``.prm`` file (see :func:`load_params`)."""

    labeled: bool = True
    delete_labels: frozenset = frozenset()
    delete_labels_for_length: frozenset = frozenset()
    eq_labels: tuple = ()
    eq_words: tuple = ()
    quote_labels: frozenset = frozenset()
    cutoff_len: int = 40
    max_error: int = 10
    debug: int = 0

    def label_eq(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_labels or (b, a) in self.eq_labels

    def word_eq(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_words or (b, a) in self.eq_words


COLLINS = EvalbParams(
    labeled=True,
    delete_labels=frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."}),
    delete_labels_for_length=frozenset({"-NONE-"}),
    eq_labels=(("ADVP", "PRT"),),
)


def load_params(path: Union[str, os.PathLike]) -> EvalbParams:
    """Read an EVALB parameter file: ``KEY value`` lines, ``#`` comments, repeatable list keys.

    Lines end at ``\\n`` and the key ends at C whitespace, as in evalb.c's ``read_parameter_file``.
    """
    ints = {"DEBUG": "debug", "MAX_ERROR": "max_error", "CUTOFF_LEN": "cutoff_len", "LABELED": "labeled"}
    sets = {"DELETE_LABEL": "delete_labels", "DELETE_LABEL_FOR_LENGTH": "delete_labels_for_length",
            "QUOTE_LABEL": "quote_labels"}
    pairs = {"EQ_LABEL": "eq_labels", "EQ_WORD": "eq_words"}
    values: dict = {name: [] for name in (*sets.values(), *pairs.values())}
    try:
        lines = read_lines(os.fspath(path), f"EVALB parameter file {os.fspath(path)}")
    except DataError as err:
        raise ParsevalError(str(err)) from None
    for number, line in enumerate(lines, start=1):
        if line.startswith("#") or len(line) < 3:  # EVALB's own rule for skipping lines
            continue
        key, value = (re.split(f"[{_WS}]+", line.strip(_WS), maxsplit=1) + [""])[:2]
        where = f"{os.fspath(path)}:{number}"
        if not value:
            raise ParsevalError(f"{where}: {key} has no value")
        if key in ints:
            try:
                values[ints[key]] = int(value)
            except ValueError:
                raise ParsevalError(f"{where}: {key} needs a whole number, got {value!r}") from None
        elif key in sets:
            values[sets[key]].append(value)
        elif key in pairs:
            parts = re.split(f"[{_WS}]+", value)
            if len(parts) != 2:
                raise ParsevalError(f"{where}: {key} needs two values, got {value!r}")
            values[pairs[key]].append(tuple(parts))
        else:  # EVALB warns and goes on; so do we
            warnings.warn(f"{where}: unknown EVALB parameter {key!r} ignored", stacklevel=2)
    for name in sets.values():
        values[name] = frozenset(values[name])
    for name in pairs.values():
        values[name] = tuple(values[name])
    values["labeled"] = bool(values.get("labeled", 1))
    return EvalbParams(**values)


# --------------------------------------------------------------------------- scoring

OK, ERROR, SKIP = 0, 1, 2  # EVALB's sentence status codes
_QUOTE_WORDS = ("'", '"', "/")


@dataclass
class SentenceResult:
    """One line of EVALB's sentence table."""

    id: int
    length: int
    status: int = OK
    matched: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0
    message: str = ""

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold_brackets if self.gold_brackets else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test_brackets if self.test_brackets else 0.0

    @property
    def tagging_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words else 0.0

    def line(self) -> str:
        return (f"{self.id:4d}  {self.length:3d}    {self.status:d}  "
                f"{self.recall:6.2f} {self.precision:6.2f}   {self.matched:3d}    "
                f"{self.gold_brackets:3d}  {self.test_brackets:3d}    {self.crossing:3d}"
                f"   {self.words:4d}  {self.correct_tags:4d}   {self.tagging_accuracy:6.2f}")


@dataclass
class Summary:
    """Totals over a set of sentences; percentages are 0-100 like EVALB's."""

    sentences: int = 0
    error_sentences: int = 0
    skip_sentences: int = 0
    matched: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    complete_match_sentences: int = 0
    crossing_brackets: int = 0
    no_crossing_sentences: int = 0
    two_or_less_crossing_sentences: int = 0
    words: int = 0
    correct_tags: int = 0

    def add(self, sent: SentenceResult) -> None:
        self.sentences += 1
        if sent.status == ERROR:
            self.error_sentences += 1
            return
        if sent.status == SKIP:
            self.skip_sentences += 1
            return
        self.matched += sent.matched
        self.gold_brackets += sent.gold_brackets
        self.test_brackets += sent.test_brackets
        self.complete_match_sentences += sent.gold_brackets == sent.test_brackets == sent.matched
        self.crossing_brackets += sent.crossing
        self.no_crossing_sentences += sent.crossing == 0
        self.two_or_less_crossing_sentences += sent.crossing <= 2
        self.words += sent.words
        self.correct_tags += sent.correct_tags

    @property
    def valid_sentences(self) -> int:
        return self.sentences - self.error_sentences - self.skip_sentences

    def _per_sentence(self, count: float, scale: float = 100.0) -> float:
        return scale * count / self.valid_sentences if self.valid_sentences > 0 else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold_brackets if self.gold_brackets > 0 else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test_brackets if self.test_brackets > 0 else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r > 0 else 0.0

    @property
    def complete_match(self) -> float:
        return self._per_sentence(self.complete_match_sentences)

    @property
    def average_crossing(self) -> float:
        return self._per_sentence(self.crossing_brackets, scale=1.0)

    @property
    def no_crossing(self) -> float:
        return self._per_sentence(self.no_crossing_sentences)

    @property
    def two_or_less_crossing(self) -> float:
        return self._per_sentence(self.two_or_less_crossing_sentences)

    @property
    def tagging_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words > 0 else 0.0

    def block(self, title: str) -> str:
        return "\n".join([
            f"-- {title} --",
            f"Number of sentence        = {self.sentences:6d}",
            f"Number of Error sentence  = {self.error_sentences:6d}",
            f"Number of Skip  sentence  = {self.skip_sentences:6d}",
            f"Number of Valid sentence  = {self.valid_sentences:6d}",
            f"Bracketing Recall         = {self.recall:6.2f}",
            f"Bracketing Precision      = {self.precision:6.2f}",
            f"Bracketing FMeasure       = {self.f1:6.2f}",
            f"Complete match            = {self.complete_match:6.2f}",
            f"Average crossing          = {self.average_crossing:6.2f}",
            f"No crossing               = {self.no_crossing:6.2f}",
            f"2 or less crossing        = {self.two_or_less_crossing:6.2f}",
            f"Tagging accuracy          = {self.tagging_accuracy:6.2f}",
        ])


_HEADER = ("  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
           " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
           + "=" * 76)


@dataclass
class ParsevalResult:
    """EVALB's output as data: per-sentence rows, ``overall`` totals and ``short`` (len <= cutoff)."""

    sentences: list[SentenceResult]
    overall: Summary
    short: Summary
    cutoff_len: int = 40

    recall = property(lambda self: self.overall.recall)
    precision = property(lambda self: self.overall.precision)
    f1 = property(lambda self: self.overall.f1)
    complete_match = property(lambda self: self.overall.complete_match)
    average_crossing = property(lambda self: self.overall.average_crossing)
    no_crossing = property(lambda self: self.overall.no_crossing)
    two_or_less_crossing = property(lambda self: self.overall.two_or_less_crossing)
    tagging_accuracy = property(lambda self: self.overall.tagging_accuracy)

    @property
    def errors(self) -> list[str]:
        """``"sentence N: why"`` for every error sentence, the messages EVALB prints on stderr."""
        return [f"sentence {s.id}: {s.message}" for s in self.sentences if s.status == ERROR]

    def summary_text(self) -> str:
        """The ``=== Summary ===`` section of EVALB's output, character for character."""
        return "\n".join(["=== Summary ===", "", self.overall.block("All"), "",
                          self.short.block(f"len<={self.cutoff_len}")]) + "\n"

    def full_text(self) -> str:
        """Everything EVALB prints on stdout: sentence table, totals line and summary."""
        total = self.overall
        totals = ""
        if total.gold_brackets > 0 and total.test_brackets > 0:
            totals = (f"                {total.recall:6.2f} {total.precision:6.2f} {total.matched:6d} "
                      f"{total.gold_brackets:5d} {total.test_brackets:5d}  {total.crossing_brackets:5d}")
        totals += f"  {total.words:5d} {total.correct_tags:5d}   {total.tagging_accuracy:6.2f}"
        rows = [sent.line() for sent in self.sentences]
        return "\n".join([_HEADER, *rows, "=" * 76, totals, self.summary_text()])


class _Prepared:
    """A tree flattened the way EVALB's ``read_line`` sees it: terminals and raw-index brackets."""

    def __init__(self, tree: Optional[Tree], params: EvalbParams):
        self.words: list[str] = []
        self.tags: list[str] = []
        self.brackets: list[tuple[str, int, int]] = []  # (label, first terminal, end terminal), pre-order
        if tree is not None:
            self._walk(tree)
        self.deleted = [tag in params.delete_labels for tag in self.tags]
        self.length = sum(tag not in params.delete_labels_for_length for tag in self.tags)

    def _walk(self, root: Tree) -> None:
        # Iterative pre-order walk; a bracket's end is filled in when its subtree is done.
        stack: list[tuple[Tree, int]] = [(root, -1)]
        while stack:
            node, slot = stack.pop()
            if slot >= 0:  # closing marker
                label, start, _ = self.brackets[slot]
                self.brackets[slot] = (label, start, len(self.words))
            elif node.is_preterminal:
                self.words.append(node.word)
                self.tags.append(node.label)
            else:
                self.brackets.append((strip_function_tags(node.label), len(self.words), -1))
                stack.append((node, len(self.brackets) - 1))
                stack.extend((child, -1) for child in reversed(node.children))

    def kept_words(self) -> list[str]:
        return [w for w, gone in zip(self.words, self.deleted) if not gone]

    def scored_brackets(self, params: EvalbParams) -> list[tuple[str, int, int]]:
        """Brackets over kept-word positions, minus empty and DELETE_LABEL ones."""
        prefix = [0]
        for gone in self.deleted:
            prefix.append(prefix[-1] + (not gone))
        kept = []
        for label, start, end in self.brackets:
            s, e = prefix[start], prefix[end]
            if s == e or any(params.label_eq(label, d) for d in params.delete_labels):
                continue
            kept.append((label, s, e))
        return kept

    def quote_terminals(self, params: EvalbParams) -> list[int]:
        return [i for i, (w, t) in enumerate(zip(self.words, self.tags))
                if t in params.quote_labels and w in _QUOTE_WORDS]

    def position(self, index: int) -> int:
        return sum(not gone for gone in self.deleted[:index])


def _fix_quotes(gold: _Prepared, test: _Prepared, params: EvalbParams) -> None:
    """EVALB's 2006 fix (QUOTE_LABEL): a quote deleted in one tree but tagged as a word in the other is put back.

    Positions are recomputed after each reinsertion. evalb.c keeps the positions it read, so with
    several quote marks side by side its numbers can differ from ours; with one they agree.
    """
    for t in test.quote_terminals(params):
        for g in gold.quote_terminals(params):
            if gold.position(g) != test.position(t) or gold.tags[g] == test.tags[t]:
                continue
            if gold.deleted[g] and not test.deleted[t]:
                gold.deleted[g] = False
            elif test.deleted[t] and not gold.deleted[g]:
                test.deleted[t] = False


def _score_sentence(ident: int, gold_tree, test_tree, params: EvalbParams) -> SentenceResult:
    gold, test = _Prepared(gold_tree, params), _Prepared(test_tree, params)
    result = SentenceResult(id=ident, length=gold.length)
    gold_words, test_words = gold.kept_words(), test.kept_words()
    if not test_words:
        result.status = SKIP
        return result
    if len(gold_words) != len(test_words) and params.quote_labels:
        _fix_quotes(gold, test, params)
        gold_words, test_words = gold.kept_words(), test.kept_words()
    if len(gold_words) != len(test_words):
        result.status, result.message = ERROR, f"Length unmatch ({len(gold_words)}|{len(test_words)})"
        return result
    for g, t in zip(gold_words, test_words):
        if not params.word_eq(g, t):
            result.status, result.message = ERROR, f"Words unmatch ({g}|{t})"
            return result

    gold_br, test_br = gold.scored_brackets(params), test.scored_brackets(params)
    by_span: dict[tuple[int, int], list[int]] = {}
    for j, (_, s, e) in enumerate(test_br):
        by_span.setdefault((s, e), []).append(j)
    used = [False] * len(test_br)
    for label, s, e in gold_br:  # first unused test bracket with the same span and an equal label
        for j in by_span.get((s, e), ()):
            if not used[j] and (not params.labeled or params.label_eq(label, test_br[j][0])):
                used[j] = True
                result.matched += 1
                break

    gold_spans = {(s, e) for _, s, e in gold_br}
    result.crossing = sum(
        any(gs < ts < ge < te or ts < gs < te < ge for gs, ge in gold_spans) for _, ts, te in test_br)

    kept_gold_tags = [t for t, gone in zip(gold.tags, gold.deleted) if not gone]
    kept_test_tags = [t for t, gone in zip(test.tags, test.deleted) if not gone]
    result.words = len(gold_words)
    result.correct_tags = sum(params.label_eq(g, t) for g, t in zip(kept_gold_tags, kept_test_tags))
    result.gold_brackets, result.test_brackets = len(gold_br), len(test_br)
    return result


TreeLike = Union[Tree, str, None]


def _as_tree(item: TreeLike, ident: int, side: str) -> Optional[Tree]:
    if item is None or isinstance(item, Tree):
        return item
    try:
        return parse_tree(item)
    except ParsevalError as err:
        raise ParsevalError(f"{side} tree {ident}: {err}") from None


def evaluate(gold_trees: Sequence[TreeLike], test_trees: Sequence[TreeLike],
             params: EvalbParams = COLLINS) -> ParsevalResult:
    """Score test trees against gold trees, sentence by sentence, as ``evalb -p`` would.

    Trees may be :class:`Tree` objects, bracketed strings or ``None`` (no parse: a skip
    sentence when it is the test side).
    """
    gold_trees, test_trees = list(gold_trees), list(test_trees)
    if len(gold_trees) != len(test_trees):
        raise ParsevalError(f"gold has {len(gold_trees)} trees but test has {len(test_trees)}; "
                            "EVALB compares them line by line, so the files must align")
    overall, short = Summary(), Summary()
    sentences, errors = [], 0
    for ident, (gold, test) in enumerate(zip(gold_trees, test_trees), start=1):
        sent = _score_sentence(ident, _as_tree(gold, ident, "gold"), _as_tree(test, ident, "test"), params)
        if sent.status == ERROR:
            if errors > params.max_error:  # EVALB's Error(): it exits once the count passes MAX_ERROR
                raise ParsevalError(f"too many error sentences (more than MAX_ERROR={params.max_error}); "
                                    f"latest: sentence {ident}: {sent.message}. Are gold and test aligned?")
            errors += 1
        sentences.append(sent)
        overall.add(sent)
        if sent.length <= params.cutoff_len:
            short.add(sent)
    return ParsevalResult(sentences, overall, short, params.cutoff_len)

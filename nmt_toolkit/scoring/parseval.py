"""PARSEVAL labelled bracketing scores, computed exactly the way EVALB computes them.

Parsing papers (the Transformer paper's section 6.3 among them) report the F1 of EVALB
(Sekine & Collins 1997) run with ``COLLINS.prm``. Small differences in what is counted move
that number by tenths of a point, so this module re-implements ``evalb.c`` rather than a
textbook PARSEVAL; ``tests/fixtures/evalb`` holds evalb.c's own output for hand-made files,
malformed ones included, and the tests compare every number with it. The rules:

* Reading (``read_line``): a sentence per ``\n``-ended line; C whitespace (``\r`` is, U+2028 is
  not); ``(TAG word)`` is a terminal, any other ``(LABEL`` opens a bracket. Several trees on a
  line, empty brackets ``(X)`` and an unlabelled root ``( (S ...) )`` (a bracket labelled ``""``:
  strip it from both files or neither) are read without complaint.
* A terminal tagged with a ``DELETE_LABEL`` (punctuation, ``-NONE-``) goes with its word. Other
  brackets span the words left; dropped if they span none or if their label, cut at its first
  ``-``/``=`` (``NP-SBJ-1`` -> ``NP``, ``-X-`` -> ``""``), is a ``DELETE_LABEL`` (``TOP``).
* Brackets are a multiset: each gold bracket takes the first unused test bracket with its span
  and an equal label (``EQ_LABEL``). Crossing: test brackets crossing at least one gold one.
  The ``len<=40`` length is the gold words not tagged ``DELETE_LABEL_FOR_LENGTH`` (traces).
* *Skip* (status 2): a test line with no words left. *Error* (status 1): unbalanced brackets on
  either side, or words that differ in number or spelling. Both count in the sentence totals
  only. Each complaint is a call of ``Error()``: the one after more than ``MAX_ERROR`` earlier
  ones stops evalb.c with no summary, and raises :class:`ParsevalError` here; so does a line
  evalb.c cannot read at all (a word outside ``(TAG word)``, a space before its ``)``).

Departures (docs/generation-and-scoring.md): files with different numbers of non-blank lines
are an error (evalb.c scores the common lines only); F of 0/0 is 0, not ``nan``; where evalb.c's
behaviour is undefined (a ``)`` with nothing open followed by ``(``, a label ending the line,
its buffer limits) we read the line as it stands.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, Union

from nmt_toolkit.data.trees import WHITESPACE as _WS
from nmt_toolkit.data.trees import Tree
from nmt_toolkit.scoring.evalb_params import COLLINS, EvalbParams, load_params
from nmt_toolkit.scoring.evalb_reading import ParsevalError, Reading, evalb_label, read_line, read_trees

# the scorer's whole interface: what nmt-score and the parsing recipe call
__all__ = ["COLLINS", "ERROR", "OK", "SKIP", "EvalbParams", "ParsevalError", "ParsevalResult", "evaluate",
           "load_params", "read_trees"]

# --------------------------------------------------------------------------- scoring

OK, ERROR, SKIP = 0, 1, 2  # EVALB's sentence status codes
_QUOTE_WORDS = ("'", '"', "/")


def _percent(count: int, total: int, scale: float = 100.0) -> float:
    return scale * count / total if total > 0 else 0.0


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
    messages: list[str] = field(default_factory=list)  # one per Error() call evalb.c makes here

    message = property(lambda self: "; ".join(self.messages))
    recall = property(lambda self: _percent(self.matched, self.gold_brackets))
    precision = property(lambda self: _percent(self.matched, self.test_brackets))
    tagging_accuracy = property(lambda self: _percent(self.correct_tags, self.words))


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

    valid_sentences = property(lambda self: self.sentences - self.error_sentences - self.skip_sentences)
    recall = property(lambda self: _percent(self.matched, self.gold_brackets))
    precision = property(lambda self: _percent(self.matched, self.test_brackets))
    complete_match = property(lambda self: _percent(self.complete_match_sentences, self.valid_sentences))
    average_crossing = property(lambda self: _percent(self.crossing_brackets, self.valid_sentences, 1.0))
    no_crossing = property(lambda self: _percent(self.no_crossing_sentences, self.valid_sentences))
    two_or_less_crossing = property(lambda self: _percent(self.two_or_less_crossing_sentences, self.valid_sentences))
    tagging_accuracy = property(lambda self: _percent(self.correct_tags, self.words))

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r > 0 else 0.0  # evalb.c prints nan for 0/0

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
        """``"sentence N: why"`` for every complaint, the messages EVALB prints on stderr."""
        return [f"sentence {s.id}: {m}" for s in self.sentences for m in s.messages]

    def summary_text(self) -> str:
        """The ``=== Summary ===`` section of EVALB's output, character for character."""
        return "\n".join(["=== Summary ===", "", self.overall.block("All"), "",
                          self.short.block(f"len<={self.cutoff_len}")]) + "\n"


class _Prepared:
    """One side of a sentence as evalb.c holds it once the parameters apply: which terminals are deleted."""

    def __init__(self, reading: Reading, params: EvalbParams):
        self.words, self.tags, self.brackets = reading.words, reading.tags, reading.brackets
        self.deleted = [tag in params.delete_labels for tag in self.tags]
        self.length = sum(tag not in params.delete_labels_for_length for tag in self.tags)

    def kept_words(self) -> list[str]:
        return [w for w, gone in zip(self.words, self.deleted) if not gone]

    def scored_brackets(self, params: EvalbParams) -> list[tuple[str, int, int]]:
        """Brackets over kept-word positions, minus empty and DELETE_LABEL ones."""
        prefix = [0]
        for gone in self.deleted:
            prefix.append(prefix[-1] + (not gone))
        kept = []
        for label, start, end in self.brackets:
            label, s, e = evalb_label(label), prefix[start], prefix[end] if end >= 0 else -1
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


def _score_sentence(ident: int, gold_reading: Reading, test_reading: Reading,
                    params: EvalbParams) -> SentenceResult:
    """evalb.c's ``calc_result``: status, complaints and counts of one sentence."""
    gold, test = _Prepared(gold_reading, params), _Prepared(test_reading, params)
    result = SentenceResult(id=ident, length=gold.length)
    result.messages = [f"gold: {m}" for m in gold_reading.errors] + [f"test: {m}" for m in test_reading.errors]
    if result.messages:  # evalb.c's Error() marks the sentence, and scores it all the same
        result.status = ERROR
    gold_words, test_words = gold.kept_words(), test.kept_words()
    if not test_words:
        result.status = SKIP
        return result
    if len(gold_words) != len(test_words) and params.quote_labels:
        _fix_quotes(gold, test, params)
        gold_words, test_words = gold.kept_words(), test.kept_words()
    if len(gold_words) != len(test_words):
        result.status = ERROR
        result.messages.append(f"Length unmatch ({len(gold_words)}|{len(test_words)})")
        return result
    for g, t in zip(gold_words, test_words):
        if not params.word_eq(g, t):
            result.status = ERROR
            result.messages.append(f"Words unmatch ({g}|{t})")
            return result
    _count_brackets(result, gold, test, params)
    return result


def _count_brackets(result: SentenceResult, gold: _Prepared, test: _Prepared, params: EvalbParams) -> None:
    """Matched, crossing and tag counts of a sentence whose words agree."""
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
    result.words = len(kept_gold_tags)
    result.correct_tags = sum(params.label_eq(g, t) for g, t in zip(kept_gold_tags, kept_test_tags))
    result.gold_brackets, result.test_brackets = len(gold_br), len(test_br)


TreeLike = Union[Tree, str, None]


def _reading(item: TreeLike, ident: int, side: str) -> Reading:
    if item is None:
        return Reading()
    try:
        return read_line(str(item))  # a Tree prints as the line it was read from
    except ParsevalError as err:
        raise ParsevalError(f"{side} tree {ident}: {err}") from None


def _common_length(gold: list, test: list) -> int:
    """How many sentences evalb.c scores: the common lines, when the longer file has only blank lines more."""
    common = min(len(gold), len(test))
    if any(item is not None and str(item).strip(_WS) for item in gold[common:] + test[common:]):
        raise ParsevalError(f"gold has {len(gold)} trees but test has {len(test)}; EVALB compares them line by "
                            f"line, so the files must align (evalb.c would score the first {common} only)")
    return common


def _complain(earlier: int, params: EvalbParams, what: str) -> int:
    """evalb.c's ``Error()``: the complaint that comes after more than ``MAX_ERROR`` earlier ones stops the run."""
    if earlier > params.max_error:
        raise ParsevalError(f"too many errors (more than MAX_ERROR={params.max_error}), as EVALB stops; latest: "
                            f"{what}. Are gold and test aligned?")
    return earlier + 1


def evaluate(gold_trees: Sequence[TreeLike], test_trees: Sequence[TreeLike],
             params: EvalbParams = COLLINS) -> ParsevalResult:
    """Score test trees against gold trees, sentence by sentence, as ``evalb -p`` would.

    Trees may be :class:`Tree` objects, lines of bracketed text (read as evalb.c reads them,
    malformed ones included) or ``None`` (an empty line: a skip sentence when it is the test side).
    """
    gold_trees, test_trees = list(gold_trees), list(test_trees)
    common = _common_length(gold_trees, test_trees)
    overall, short, sentences, complaints = Summary(), Summary(), [], 0
    for ident, (gold, test) in enumerate(zip(gold_trees[:common], test_trees[:common]), start=1):
        sent = _score_sentence(ident, _reading(gold, ident, "gold"), _reading(test, ident, "test"), params)
        for message in sent.messages:
            complaints = _complain(complaints, params, f"sentence {ident}: {message}")
        sentences.append(sent)
        overall.add(sent)
        if sent.length <= params.cutoff_len:
            short.add(sent)
    if len(gold_trees) != len(test_trees):  # blank lines only (see _common_length); evalb.c complains once
        _complain(complaints, params, "Number of lines unmatch")
    return ParsevalResult(sentences, overall, short, params.cutoff_len)

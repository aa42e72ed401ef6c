"""The constrained search's pieces against hand-worked expectations, and its guarantees on a tiny random model
(tests/test_beam_search.py's): every phrase in every output, in order when ordered; sentences without phrases
decoded as plain beam search decodes them; a sentence whose phrases cannot be met translated without them.
Agreement with fairseq's own search is tests/test_constraints_fairseq.py's."""
from __future__ import annotations

import logging

import pytest

from nmt_toolkit.errors import UsageError
from nmt_toolkit.generation.beam_search import SequenceGenerator
from nmt_toolkit.generation.config import GenerationConfig
from nmt_toolkit.generation.constrained import OrderedState, UnorderedState, stripes
from test_beam_search import make_batch, make_dict, make_model


def _walk(state, tokens):
    banks = []
    for t in tokens:
        state = state.advance(t)
        banks.append((state.bank, state.finished))
    return banks


def test_ordered_progress_restarts_inside_a_phrase_and_waits_between_phrases():
    start = OrderedState.create([[5, 6], [7]])
    assert start.next_tokens() == {5} and not start.finished and start.distinct_tokens() == 3
    # 5 6 completes the first phrase; 9 between phrases keeps it; 7 completes all; anything after is accepted
    assert _walk(start, [5, 6, 9, 7, 9]) == [(1, False), (2, False), (2, False), (3, True), (3, True)]
    # 5 then 9 breaks the phrase: back to nothing; 5 5: the second 5 starts it again
    assert _walk(start, [5, 9]) == [(1, False), (0, False)]
    assert _walk(start, [5, 5, 6]) == [(1, False), (1, False), (2, False)]
    assert start.advance(5).advance(6).next_tokens() == {5, 7}  # the next phrase, or the first one anew


def test_unordered_progress_through_the_trie():
    start = UnorderedState.create([[5, 6], [5, 7], [8]])
    assert start.next_tokens() == {5, 8} and start.distinct_tokens() == 4
    assert _walk(start, [8, 5, 7, 5, 6]) == [(1, False), (2, False), (3, False), (4, False), (5, True)]
    # 5 6 then 5 6 again: the branch 5-6 is spent, so the second 6 falls off the trie and 5 is undone
    assert _walk(start, [5, 6, 5, 6]) == [(1, False), (2, False), (3, False), (2, False)]
    # a phrase counted twice must appear twice
    twice = UnorderedState.create([[4], [4]])
    assert _walk(twice, [4, 9, 4]) == [(1, False), (1, False), (2, True)]


def test_stripes_deal_the_beam_round_robin_over_banks():
    # banks sorted fullest first: 3 3 3 2 2 2 2 1 1 1 0 0 (fairseq's own example): ranks 0 5 10 1 6 11 13 2 7 12 3 8
    banks = [3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 0, 0]
    assert stripes(banks, 3).tolist() == [0, 13, 26, 1, 14, 27, 40, 2, 15, 28, 3, 16]
    order = stripes(banks, 3).sort().indices.tolist()
    assert [banks[i] for i in order][:8] == [3, 2, 1, 0, 3, 2, 1, 0]


def _contains(tokens: list[int], phrase: list[int], start: int = 0) -> int:
    for i in range(start, len(tokens) - len(phrase) + 1):
        if tokens[i: i + len(phrase)] == phrase:
            return i + len(phrase)
    return -1


@pytest.mark.parametrize("kind", ["ordered", "unordered"])
def test_every_phrase_appears_and_unconstrained_sentences_are_unchanged(kind):
    d = make_dict(40)
    model = make_model(d, seed=3)
    src, lengths = make_batch(d, [7, 5, 9, 6], seed=1)
    w = lambda i: d.index(f"w{i}")  # noqa: E731
    phrases = [[[w(3), w(4)], [w(10)]], [], [[w(7)], [w(7)]], [[w(20), w(21), w(22)]]]
    cfg = GenerationConfig(beam=4, constraints=kind, lenpen_style="fairseq", early_stop="beam", max_len_a=0,
                           max_len_b=30)
    found = SequenceGenerator(model, d, cfg).generate(src, lengths, constraints=phrases)
    plain = SequenceGenerator(model, d, GenerationConfig(beam=4, lenpen_style="fairseq", early_stop="beam",
                                                         max_len_a=0, max_len_b=30)).generate(src, lengths)
    for hyps, wanted in zip(found, phrases):
        tokens = hyps[0]["tokens"].tolist()
        at = 0
        for phrase in wanted:
            end = _contains(tokens, phrase, at if kind == "ordered" else 0)
            assert end >= 0, (tokens, wanted)
            at = end
        if kind == "unordered":
            assert sum(t == w(7) for t in tokens) >= (2 if [w(7)] in wanted else 0)
    assert found[1][0]["tokens"].tolist() == plain[1][0]["tokens"].tolist()
    assert found[0][0]["tokens"].tolist() != plain[0][0]["tokens"].tolist()  # the phrases did change something


def test_a_sentence_whose_phrases_cannot_be_met_is_translated_without_them(caplog):
    d = make_dict(30)
    model = make_model(d, seed=5)
    src, lengths = make_batch(d, [6, 6], seed=2)
    twice = d.index("w5")
    # no n-gram of one token may repeat: "w5 w5" can never be written, so no hypothesis ever may end
    cfg = dict(beam=4, no_repeat_ngram_size=1, max_len_a=0, max_len_b=8)
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.generation"):
        found = SequenceGenerator(model, d, GenerationConfig(constraints="ordered", **cfg)).generate(
            src, lengths, constraints=[[[twice, twice]], [[d.index("w9")]]])
    plain = SequenceGenerator(model, d, GenerationConfig(**cfg)).generate(src, lengths)
    assert found[0][0]["tokens"].tolist() == plain[0][0]["tokens"].tolist()
    assert d.index("w9") in found[1][0]["tokens"].tolist()
    assert "1 sentence(s) met their constraints within no output-length limit" in caplog.text


def test_sampling_and_the_static_search_refuse_constraints():
    d = make_dict(20)
    model = make_model(d, seed=1)
    src, lengths = make_batch(d, [5], seed=0)
    with pytest.raises(UsageError, match="--constraints: constrained decoding is a beam search"):
        SequenceGenerator(model, d, GenerationConfig(sampling=True, beam=2)).generate(src, lengths,
                                                                                       constraints=[[[5]]])
    generator = SequenceGenerator(model, d, GenerationConfig(static_search="on"))
    with pytest.raises(UsageError, match="does not support --constraints"):
        generator.generate(src, lengths, constraints=[[[5]]])

"""Terminology constraints as text (generation/terminology.py): the glossary file, the matching rules (whole
words, case, longest match, Unicode), the keep patterns, and a sentence's constraints, each against
expectations worked out by hand or against a brute-force matcher written out below."""
from __future__ import annotations

import random

import pytest
import yaml

from nmt_toolkit.cli.common import run_cli
from nmt_toolkit.config import CommonConfig, Group, build_command
from nmt_toolkit.errors import UsageError
from nmt_toolkit.generation.terminology import (
    DEFAULT_KEEP,
    MAX_TERM_CHARS,
    Glossary,
    KeepPatterns,
    TerminologyConfig,
    load_terminology,
    sentence_constraints,
)


def write(tmp_path, data, name="glossary.tsv"):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return str(path)


def refusal(call) -> str:
    with pytest.raises(UsageError) as info:
        call()
    return str(info.value)


# --------------------------------------------------------------------------- the file


def test_comments_blank_lines_crlf_and_bom_are_read_as_documented(tmp_path):
    text = ("# glossary for the test\r\n"
            "\r\n"
            "neural  network\tneuronales Netz\r\n"
            "   # an indented comment\r\n"
            " \t \r\n"
            "  cat \t Katze  \r\n"
            "#dog\tHund\r\n")
    glossary = Glossary.load(write(tmp_path, b"\xef\xbb\xbf" + text.encode("utf-8")))
    assert len(glossary) == 2  # the commented-out dog is no entry
    assert glossary.constraints_for("a neural network and a cat, no dog") == ["neuronales Netz", "Katze"]


def test_a_bom_is_not_part_of_the_first_term(tmp_path):
    glossary = Glossary.load(write(tmp_path, b"\xef\xbb\xbfcat\tKatze\n"))
    assert glossary.constraints_for("cat") == ["Katze"]


@pytest.mark.parametrize("line, problem", [
    ("cat", "expected 'source<TAB>target', found 1 field"),
    ("cat Katze", "expected 'source<TAB>target', found 1 field"),
    ("cat\tKatze\tchat", "expected 'source<TAB>target', found 3 fields"),
    ("cat\tKatze\t", "expected 'source<TAB>target', found 3 fields"),
    ("cat\t  ", "empty target term"),
    (" \tKatze", "empty source term"),
])
def test_a_malformed_line_is_refused_with_file_line_and_problem(tmp_path, line, problem):
    path = write(tmp_path, f"# comment\n\n{line}\ndog\tHund\n")
    assert refusal(lambda: Glossary.load(path)) == f"{path}:3: {problem}"


def test_a_source_term_with_two_targets_names_both_lines(tmp_path):
    path = write(tmp_path, "cat\tKatze\ndog\tHund\n#\ncat\tKater\n")
    assert refusal(lambda: Glossary.load(path)) == \
        f"{path}:4: source term 'cat' has target 'Kater' here but 'Katze' at line 1"


def test_a_source_term_repeated_with_the_same_target_is_one_entry(tmp_path):
    glossary = Glossary.load(write(tmp_path, "cat\tKatze\ncat\t Katze\n"))
    assert len(glossary) == 1


def test_case_variants_are_one_term_only_when_case_is_ignored(tmp_path):
    path = write(tmp_path, "cat\tKatze\nCat\tKater\n")
    assert Glossary.load(path).constraints_for("Cat and cat") == ["Kater", "Katze"]
    assert refusal(lambda: Glossary.load(path, ignore_case=True)) == \
        f"{path}:2: source term 'Cat' has target 'Kater' here but 'Katze' at line 1 (as 'cat')"


def test_a_missing_unreadable_or_non_utf8_file_is_one_line_naming_it(tmp_path):
    missing = str(tmp_path / "nope.tsv")
    assert refusal(lambda: Glossary.load(missing)) == f"{missing}: no such glossary file"
    assert refusal(lambda: Glossary.load(str(tmp_path))).startswith(f"{tmp_path}: cannot read the glossary (")
    latin1 = write(tmp_path, "cat\tKatze\nStra\xdfe\tstreet\n".encode("latin-1"), "latin1.tsv")
    assert refusal(lambda: Glossary.load(latin1)) == \
        f"{latin1}:2: not UTF-8 text (byte 5 of the line); save the glossary as UTF-8"


def test_a_source_term_longer_than_the_limit_is_refused(tmp_path):
    path = write(tmp_path, "x" * (MAX_TERM_CHARS + 1) + "\ty\n")
    assert refusal(lambda: Glossary.load(path)) == \
        f"{path}:1: source term of {MAX_TERM_CHARS + 1} characters, more than {MAX_TERM_CHARS}"


def test_terms_up_to_the_limit_that_nest_deepest_still_compile():
    # each term a prefix of the next: the compiled pattern nests one group per character
    longest = "a" * MAX_TERM_CHARS
    glossary = Glossary.from_pairs([("a" * n, str(n)) for n in range(1, MAX_TERM_CHARS + 1)])
    assert glossary.constraints_for(f"{longest} {'a' * 7}") == [str(MAX_TERM_CHARS), "7"]


# --------------------------------------------------------------------------- pairs (a request's glossary)


def test_pairs_as_a_mapping_or_a_list_give_the_same_glossary():
    as_dict = Glossary.from_pairs({"cat": "Katze", "dog": "Hund"})
    as_list = Glossary.from_pairs([["cat", "Katze"], ("dog", "Hund")])
    sentence = "the dog chased the cat"
    assert as_dict.constraints_for(sentence) == as_list.constraints_for(sentence) == ["Hund", "Katze"]


@pytest.mark.parametrize("pairs, message", [
    ([("cat", "Katze"), ["dog"]], "glossary entry 2: expected a [source, target] pair, got ['dog']"),
    ([("cat", "Katze"), "dog"], "glossary entry 2: expected a [source, target] pair, got dog"),
    ([("cat", 3)], "glossary entry 1: expected a pair of strings, got str and int"),
    ([("cat", "")], "glossary entry 1: empty target term"),
    ([("cat", "Katze"), ("dog", "Hund"), ("cat", "Kater")],
     "glossary entry 3: source term 'cat' has target 'Kater' here but 'Katze' at entry 1"),
])
def test_bad_pairs_are_refused_by_entry_number(pairs, message):
    assert refusal(lambda: Glossary.from_pairs(pairs)) == message


def test_an_empty_glossary_finds_nothing():
    assert Glossary.from_pairs({}).constraints_for("anything at all") == []


# --------------------------------------------------------------------------- matching rules


def test_whole_words_keep_a_term_out_of_longer_words():
    pairs = {"cat": "Katze"}
    whole = Glossary.from_pairs(pairs)
    assert whole.matches("category concatenate cats") == []
    assert [s.start for s in whole.matches("cat. (cat) cat,cat_x")] == [0, 6, 11]
    anywhere = Glossary.from_pairs(pairs, whole_words=False)
    assert [s.start for s in anywhere.matches("category concatenate cats")] == [0, 12, 21]


def test_terms_of_punctuation_match_at_a_space_or_an_end():
    glossary = Glossary.from_pairs({"C++": "C++", "e.g.": "z. B."})
    assert glossary.constraints_for("C++ code, e.g. this") == ["C++", "z. B."]
    assert glossary.constraints_for("in C++.") == ["C++"]
    assert glossary.constraints_for("C++x or xe.g.") == []


def test_case_is_kept_unless_ignored():
    pairs = {"machine translation": "maschinelle Übersetzung"}
    assert Glossary.from_pairs(pairs).constraints_for("Machine Translation works") == []
    assert Glossary.from_pairs(pairs, ignore_case=True).constraints_for("MACHINE TRANSLATION works") == \
        ["maschinelle Übersetzung"]


def test_sharp_s_folds_simply_not_to_ss():
    # re.IGNORECASE's simple case folding: ß ~ ẞ (capital sharp s), never ß ~ SS (a change of length)
    sensitive = Glossary.from_pairs({"Straße": "street"})
    folded = Glossary.from_pairs({"Straße": "street"}, ignore_case=True)
    assert [len(g.matches("Straße STRAẞE straße STRASSE")) for g in (sensitive, folded)] == [1, 3]
    with_ss = Glossary.from_pairs({"Straße": "street", "Strasse": "street (Swiss)"}, ignore_case=True)
    assert with_ss.constraints_for("STRASSE und STRAẞE") == ["street (Swiss)", "street"]


def test_greek_final_sigma_under_ignore_case_finds_its_term():
    # σ and ς are equal to re.IGNORECASE but lower to themselves: the term is found by trying patterns
    glossary = Glossary.from_pairs({"λόγος": "word", "ήλιος": "sun"}, ignore_case=True)
    assert glossary.constraints_for("ΛΌΓΟΣ και ΉΛΙΟΣ") == ["word", "sun"]


def test_dotted_capital_i_under_ignore_case():
    # "İ".lower() is two characters (i and a combining dot); re.IGNORECASE folds it to "i" alone
    glossary = Glossary.from_pairs({"İstanbul": "Istanbul"}, ignore_case=True)
    assert [(s.start, s.end) for s in glossary.matches("İSTANBUL, istanbul")] == [(0, 8), (10, 18)]


def test_the_longest_term_wins_and_terms_inside_it_do_not_fire():
    glossary = Glossary.from_pairs({"New York": "New York", "New York City": "NYC", "York": "Jork",
                                    "City": "Stadt"})
    assert glossary.constraints_for("New York City is big") == ["NYC"]
    assert glossary.constraints_for("York, a city, not New York") == ["Jork", "New York"]
    # with whole words, the longest term that ends at a word boundary
    assert glossary.constraints_for("New York Citys") == ["New York"]
    anywhere = Glossary.from_pairs({"New York": "New York", "New York City": "NYC"}, whole_words=False)
    assert anywhere.constraints_for("New York Citys") == ["NYC"]


def test_the_leftmost_term_wins_over_a_longer_one_starting_inside_it():
    glossary = Glossary.from_pairs({"machine learning": "maschinelles Lernen", "learning rate": "Lernrate"})
    assert glossary.constraints_for("a machine learning rate") == ["maschinelles Lernen"]
    assert glossary.constraints_for("the learning rate of machine learning") == ["Lernrate", "maschinelles Lernen"]


def test_targets_come_in_source_order_each_once():
    glossary = Glossary.from_pairs({"dog": "Hund", "cat": "Katze", "kitten": "Katze", "mouse": "Maus"})
    assert glossary.constraints_for("cat, dog, cat, kitten and mouse; dog") == ["Katze", "Hund", "Maus"]
    assert [s.text for s in glossary.matches("cat dog cat")] == ["Katze", "Hund", "Katze"]


def test_a_term_matches_any_run_of_whitespace():
    glossary = Glossary.from_pairs({"New   York": "New  York"})
    assert glossary.constraints_for("in New\u00a0York and New \t York") == ["New York"]


def test_german_czech_and_french_words_have_unicode_boundaries():
    glossary = Glossary.from_pairs({"Straße": "street", "čaj": "tea", "eau": "water", "élève": "pupil"},
                                   ignore_case=True)
    assert glossary.constraints_for("Die Straßenbahn fährt") == []  # ß and n are letters: no boundary
    assert glossary.constraints_for("Auf der Straße.") == ["street"]
    assert glossary.constraints_for("Dám si čaj v čajovně.") == ["tea"]
    assert [(s.start, s.end) for s in glossary.matches("Dám si čaj v čajovně.")] == [(7, 10)]
    # the elided article's apostrophe is no word character: "eau" is found in "l'eau", not in "eaux"
    assert glossary.constraints_for("L'eau des eaux. Un ÉLÈVE") == ["water", "pupil"]


def test_a_decomposed_sentence_finds_a_composed_term():
    glossary = Glossary.from_pairs({"café": "coffee"})
    assert glossary.constraints_for("un cafe\u0301 noir") == ["coffee"]
    assert glossary.constraints_for("un cafe noir") == []


def reference_matches(pairs, text, ignore_case, whole_words):
    """Leftmost-longest matching written out: at each position the longest term that fits, then past it."""
    def word_char(i):
        return 0 <= i < len(text) and (text[i].isalnum() or text[i] == "_")

    def same(a, b):
        return a.lower() == b.lower() if ignore_case else a == b

    found, i = [], 0
    while i < len(text):
        fits = [(source, target) for source, target in pairs.items()
                if same(text[i:i + len(source)], source)
                and not (whole_words and (word_char(i - 1) or word_char(i + len(source))))]
        if fits:
            source, target = max(fits, key=lambda fit: len(fit[0]))
            found.append((i, i + len(source), target))
            i += len(source)
        else:
            i += 1
    return found


@pytest.mark.parametrize("ignore_case", [False, True])
@pytest.mark.parametrize("whole_words", [True, False])
def test_matches_agree_with_the_written_out_rule_on_random_text(ignore_case, whole_words):
    rng = random.Random(7)
    sources = {"".join(rng.choice("ab") for _ in range(rng.randint(1, 4))) for _ in range(12)}
    sources |= {"ab ba", "a-b", "b a b"}
    pairs = {source: f"T{n}" for n, source in enumerate(sorted(sources))}
    glossary = Glossary.from_pairs(pairs, ignore_case=ignore_case, whole_words=whole_words)
    hits = 0
    for _ in range(300):
        text = " ".join("".join(rng.choice("aAbB-_") for _ in range(rng.randint(1, 6)))
                        for _ in range(rng.randint(1, 6)))
        expected = reference_matches(pairs, text, ignore_case, whole_words)
        assert [tuple(span) for span in glossary.matches(text)] == expected, text
        hits += len(expected)
    assert hits > 100  # the comparison exercised matches, not only their absence


# --------------------------------------------------------------------------- keep patterns


@pytest.mark.parametrize("sentence, spans", [
    ("See https://example.com/a/b?x=1&y=2.", ["https://example.com/a/b?x=1&y=2"]),
    ("(docs: http://docs.example.org/v2/), or WWW.Example.de!", ["http://docs.example.org/v2/", "WWW.Example.de"]),
    ("Read https://en.wikipedia.org/wiki/Mercury_(planet).", ["https://en.wikipedia.org/wiki/Mercury_(planet)"]),
    ("«www.example.fr/été», 'https://x.cz/čaj'", ["www.example.fr/été", "https://x.cz/čaj"]),
    ("no scheme: example.com, nor awww.example.com", []),
])
def test_default_urls(sentence, spans):
    assert KeepPatterns([DEFAULT_KEEP["url"]]).spans(sentence) == spans


@pytest.mark.parametrize("sentence, spans", [
    ("Write to jan.novak+nmt@mail.example.cz.", ["jan.novak+nmt@mail.example.cz"]),
    ("<anne-marie@exemple.fr>, françois@société.fr", ["anne-marie@exemple.fr", "françois@société.fr"]),
    ("not an address: user@localhost or @handle", []),
])
def test_default_emails(sentence, spans):
    assert KeepPatterns([DEFAULT_KEEP["email"]]).spans(sentence) == spans


@pytest.mark.parametrize("sentence, spans", [
    ("It costs 1,234.56 dollars or 1.234,56 euros.", ["1,234.56", "1.234,56"]),
    ("Es sind 3,5 Grad, am 10.", ["3,5", "10"]),
    ("1, 2 and 3; 10,000 people", ["1", "2", "3", "10,000"]),
    ("-5 °C, 20% and $7", ["5", "20", "7"]),
    ("v1.2, the 1st, 3D and 1,234.56abc", []),
    ("page 7 and page 7", ["7"]),
])
def test_default_numbers(sentence, spans):
    assert KeepPatterns([DEFAULT_KEEP["number"]]).spans(sentence) == spans


def test_defaults_together_keep_the_longest_of_overlapping_matches():
    keep = KeepPatterns.defaults()
    sentence = "Mail info@www.example.com or see www.example.com/2024/05 on 12.05."
    assert keep.spans(sentence) == ["info@www.example.com", "www.example.com/2024/05", "12.05"]


def test_custom_patterns_with_the_defaults_and_alone():
    ticket = r"\b[A-Z]{2,}-\d+\b"
    sentence = "Ticket NMT-42 is due in 3 days, see https://x.org/NMT-42"
    assert KeepPatterns([ticket]).spans(sentence) == ["NMT-42"]
    assert KeepPatterns.defaults([ticket]).spans(sentence) == ["NMT-42", "3", "https://x.org/NMT-42"]


def test_overlapping_custom_patterns_keep_the_leftmost_then_longest():
    keep = KeepPatterns([r"\bAB\w*", r"\w+CD", r"ABCDEF"])
    assert keep.spans("xxCD ABCDEF ABxCD") == ["xxCD", "ABCDEF", "ABxCD"]
    assert [(s.start, s.end) for s in keep.matches("ABxCDEF")] == [(0, 7)]


def test_a_pattern_that_can_match_nothing_gives_only_its_nonempty_matches():
    assert KeepPatterns([r"\d*"]).spans("a 12 b 3") == ["12", "3"]


def test_an_invalid_pattern_is_one_line_naming_it():
    assert refusal(lambda: KeepPatterns(["ok", "(unclosed"])) == \
        "--keep '(unclosed': not a valid regular expression (missing ), unterminated subpattern at position 0)"
    assert refusal(lambda: KeepPatterns(["a{2,1}"], what="keep")) == \
        "keep 'a{2,1}': not a valid regular expression (min repeat greater than max repeat at position 2)"
    assert refusal(lambda: KeepPatterns([3], what="keep")) == "keep 3: expected a regular expression as a string"
    deep = "(" * 2000 + "a" + ")" * 2000
    assert refusal(lambda: KeepPatterns([deep], what="keep")) == f"keep '{deep[:40]}… (4001 characters)': nested too deeply"


# --------------------------------------------------------------------------- a sentence's constraints


def test_sentence_constraints_merge_in_source_order_without_repeats():
    glossary = Glossary.from_pairs({"Windows 10": "Windows 10", "price": "Preis", "version 2": "Version 2"})
    keep = KeepPatterns.defaults()
    sentence = "The price of Windows 10 is 10 dollars (version 2,5) at www.ms.com, price 10."
    # the 10 inside "Windows 10" is the glossary's; the second 10 is its own span, kept once; "2,5" overlaps
    # the glossary's "version 2" and is left to it
    assert sentence_constraints(sentence, glossary, keep) == ["Preis", "Windows 10", "10", "Version 2",
                                                              "www.ms.com"]


def test_a_glossary_target_equal_to_a_kept_span_is_listed_once():
    glossary = Glossary.from_pairs({"ten": "10"})
    assert sentence_constraints("ten or 10", glossary, KeepPatterns.defaults()) == ["10"]
    assert sentence_constraints("10 or ten", glossary, KeepPatterns.defaults()) == ["10"]


def test_sentence_constraints_with_either_part_alone():
    glossary = Glossary.from_pairs({"cat": "Katze"})
    assert sentence_constraints("a cat for 5 euros", glossary, None) == ["Katze"]
    assert sentence_constraints("a cat for 5 euros", None, KeepPatterns.defaults()) == ["5"]
    assert sentence_constraints("a cat for 5 euros", None, None) == []


# --------------------------------------------------------------------------- options


def program(got):
    groups = [Group("common", CommonConfig), Group("terminology", TerminologyConfig)]
    return lambda argv: build_command("toy", groups, lambda configs: got.update(configs) or 0, "toy program")


def test_options_from_flags_repeatable_keep(tmp_path):
    got = {}
    argv = ["--glossary", "g.tsv", "--glossary-ignore-case", "--no-glossary-whole-words", "--keep", r"\d{1,3}",
            "--keep", "[A-Z]+", "--keep-defaults"]
    assert run_cli("toy", program(got), argv) == 0
    cfg = got["terminology"]
    assert (cfg.glossary, cfg.glossary_ignore_case, cfg.glossary_whole_words, cfg.keep, cfg.keep_defaults) == \
        ("g.tsv", True, False, [r"\d{1,3}", "[A-Z]+"], True)
    assert run_cli("toy", program(got), []) == 0
    cfg = got["terminology"]
    assert (cfg.glossary, cfg.glossary_ignore_case, cfg.glossary_whole_words, cfg.keep, cfg.keep_defaults) == \
        (None, False, True, [], False)


def test_options_from_yaml_keep_as_a_list(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"terminology": {"keep": [r"\d{1,3}", "x"], "glossary_whole_words": False}}))
    got = {}
    assert run_cli("toy", program(got), ["--config", str(config)]) == 0
    assert (got["terminology"].keep, got["terminology"].glossary_whole_words) == ([r"\d{1,3}", "x"], False)


def test_an_invalid_keep_flag_stops_the_program_naming_it(capsys):
    assert run_cli("toy", program({}), ["--keep", "a(b"]) == 2
    assert capsys.readouterr().err.strip() == \
        "toy: error: --keep 'a(b': not a valid regular expression (missing ), unterminated subpattern at position 1)"


def test_load_terminology_builds_what_the_options_ask_for(tmp_path):
    path = write(tmp_path, "Cat\tKatze\n")
    cfg = TerminologyConfig(glossary=path, glossary_ignore_case=True, keep=[r"#\w+"], keep_defaults=True)
    glossary, keep = load_terminology(cfg)
    assert sentence_constraints("CAT #tag 5 categories", glossary, keep) == ["Katze", "#tag", "5"]
    glossary, keep = load_terminology(TerminologyConfig(keep=[r"#\w+"]))
    assert glossary is None and keep.patterns == [r"#\w+"]
    assert load_terminology(TerminologyConfig()) == (None, None)

"""EVALB semantics, case by case. Expected numbers are worked out by hand from EVALB's README
and evalb.c (each case says how), never copied from this implementation's output."""

import dataclasses
import pathlib
from collections import Counter

import pytest

from nmt_toolkit.data.trees import Tree, TreeError, parse_tree, strip_function_tags
from nmt_toolkit.scoring.parseval import (
    COLLINS, ERROR, OK, SKIP, EvalbParams, ParsevalError, evaluate, load_params, read_trees,
)


def sentence_line(sent) -> str:
    """One row of EVALB's sentence table, as evalb.c prints it."""
    return (f"{sent.id:4d}  {sent.length:3d}    {sent.status:d}  "
            f"{sent.recall:6.2f} {sent.precision:6.2f}   {sent.matched:3d}    "
            f"{sent.gold_brackets:3d}  {sent.test_brackets:3d}    {sent.crossing:3d}"
            f"   {sent.words:4d}  {sent.correct_tags:4d}   {sent.tagging_accuracy:6.2f}")


def evalb_stdout(result) -> str:
    """Everything EVALB prints on stdout for ``result``: the sentence table, the totals line and the summary
    (every number of the result, laid out as evalb.c lays it out, to compare with its real output)."""
    header = ("  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
              " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n" + "=" * 76)
    total = result.overall
    totals = ""
    if total.gold_brackets > 0 and total.test_brackets > 0:
        totals = (f"                {total.recall:6.2f} {total.precision:6.2f} {total.matched:6d} "
                  f"{total.gold_brackets:5d} {total.test_brackets:5d}  {total.crossing_brackets:5d}")
    totals += f"  {total.words:5d} {total.correct_tags:5d}   {total.tagging_accuracy:6.2f}"
    rows = [sentence_line(sent) for sent in result.sentences]
    return "\n".join([header, *rows, "=" * 76, totals, result.summary_text()])


def one(gold: str, test: str, params: EvalbParams = COLLINS):
    result = evaluate([gold], [test], params)
    return result, result.sentences[0]


# ----------------------------------------------------------------------------- reading


def test_parse_unwraps_the_ptb_root_and_keeps_tags():
    tree = parse_tree("( (S (NP-SBJ (-LRB- -LRB-) (NNP John)) (VP (VBD ran))) )")
    assert tree.label == "S"
    assert tree.pos() == [("-LRB-", "-LRB-"), ("John", "NNP"), ("ran", "VBD")]
    assert str(tree) == "(S (NP-SBJ (-LRB- -LRB-) (NNP John)) (VP (VBD ran)))"


@pytest.mark.parametrize("bad", ["(S (NN a b))", "(S (NN a) b)", "(S (NN a ) (NN b))", "word"])
def test_a_line_evalb_cannot_read_raises_naming_the_line(bad, tmp_path):
    # evalb.c loops on "Reading sentence" until MAX_ERROR kills it (fixtures fatal_*): no score exists.
    with pytest.raises(ParsevalError, match="line 2") as info:
        read_trees(["(S (NN ok))", bad])
    assert isinstance(info.value, ValueError)
    path = tmp_path / "test.trees"
    path.write_text(f"(S (NN ok))\n{bad}\n")
    with pytest.raises(ParsevalError, match=r"test\.trees: line 2: .*Reading sentence"):
        read_trees(path)


@pytest.mark.parametrize("odd,status", [("(S (NP (NN a)) (NN b)", ERROR), ("(S (NN a) (NN b)))", ERROR),
                                        ("(S (NN a)) (S (NN b))", OK), ("(S (NP) (NN a) (NN b))", OK)])
def test_lines_evalb_reads_come_back_as_text_and_score(odd, status):
    # Unbalanced brackets are an error sentence in evalb.c; two trees or an empty bracket are read as they are.
    assert read_trees(["(S (NN ok))", odd])[1] == odd
    with pytest.raises(TreeError):  # the strict tree parser (treebank cleaning) still refuses them
        parse_tree(odd)
    result = evaluate(["(S (NN ok))", "(S (NP (NN a)) (NN b))"], ["(S (NN ok))", odd])
    assert [s.status for s in result.sentences] == [OK, status]
    assert result.overall.valid_sentences == (2 if status == OK else 1)


def test_blank_lines_are_no_parse_and_trailing_ones_count_when_both_files_have_them():
    # evalb.c pairs every line (fixtures trailing_blank_lines, extra_blank_test_lines).
    assert read_trees(["(S (NN a))", "", "(S (NN b))", "", ""]) == [parse_tree("(S (NN a))"), None,
                                                                    parse_tree("(S (NN b))"), None, None]
    result = evaluate(["(S (NN a))", None], ["(S (NN a))", None])
    assert (result.overall.sentences, result.overall.skip_sentences, result.f1) == (2, 1, 100)
    result = evaluate(["(S (NN a))"], ["(S (NN a))", None, " "])  # blank lines more: scored as evalb.c does
    assert (result.overall.sentences, result.f1) == (1, 100)


def test_a_carriage_return_inside_a_line_is_a_space(tmp_path):
    # evalb.c reads one line per \n (fgets) and takes \r for a space; str.splitlines() made two broken lines.
    gold, test = tmp_path / "gold.trees", tmp_path / "test.trees"
    gold.write_bytes(b"(S (NP (NN a))\r(VP (VB b)))\n(S (NN c\xc2\x85d))\n")
    test.write_bytes(b"(S (NP (NN a)) (VP\r(VB b)))\r\n(S (NN c\xc2\x85d))\n")
    trees = read_trees(gold)
    assert len(trees) == 2 and trees[1].leaves() == ["c\x85d"]  # U+0085 is no space for evalb.c either
    result = evaluate(trees, read_trees(test))
    assert (result.overall.valid_sentences, result.overall.matched, result.f1) == (2, 4, 100)


def test_function_tags_are_cut_but_dash_labels_stay():
    assert [strip_function_tags(x) for x in ["NP-SBJ-1", "NP=2", "ADVP-DIR=4", "-NONE-", "-LRB-", "PRT|ADVP"]] == \
        ["NP", "NP", "ADVP", "-NONE-", "-LRB-", "PRT|ADVP"]


# ----------------------------------------------------------------------------- single sentences


def test_perfect_parse_is_100_everywhere():
    tree = "(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))"
    result, sent = one(tree, tree)
    assert (result.recall, result.precision, result.f1, result.complete_match) == (100, 100, 100, 100)
    assert result.tagging_accuracy == 100 and result.average_crossing == 0 and result.no_crossing == 100
    assert (sent.matched, sent.gold_brackets, sent.words, sent.length) == (3, 3, 3, 4)  # "." not a word


def test_hand_computed_attachment_error():
    # words The cat sat on the mat . -> '.' deleted, 6 scored words, length 7 (punctuation counts there).
    # gold: S(0,6) NP(0,2) VP(2,6) PP(3,6) NP(4,6); test: S(0,6) NP(0,2) VP(2,3) PP(3,6) NP(4,6).
    # 4 of 5 match both ways; VP(2,3) sits inside gold VP(2,6): no crossing. 'sat' mistagged: 5/6 tags.
    gold = "(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"
    test = "(S (NP (DT The) (NN cat)) (VP (VBN sat)) (PP (IN on) (NP (DT the) (NN mat))) (. .))"
    result, sent = one(gold, test)
    assert (sent.length, sent.matched, sent.gold_brackets, sent.test_brackets, sent.crossing) == (7, 4, 5, 5, 0)
    assert (sent.words, sent.correct_tags) == (6, 5)
    assert result.recall == pytest.approx(80) and result.precision == pytest.approx(80)
    assert result.f1 == pytest.approx(80) and result.complete_match == 0
    assert result.tagging_accuracy == pytest.approx(500 / 6)


def test_readme_sentence_line_format():
    # README [4]: "   1    8    0  100.00 100.00     5      5    5      0      6     5    83.33"
    # 8 tokens with 2 punctuation marks, 5 brackets all right, one of the 6 scored tags wrong.
    gold = "(S (NP (DT The) (NN dog)) (, ,) (VP (VBD barked) (RB loudly) (PP (IN at) (NP (NN night)))) (. .))"
    test = gold.replace("(RB loudly)", "(JJ loudly)")
    result, sent = one(gold, test)
    assert sentence_line(sent) == "   1    8    0  100.00 100.00     5      5    5      0      6     5    83.33"
    assert evalb_stdout(result).splitlines()[3] == sentence_line(sent)


def test_deleted_labels_top_punctuation_and_traces():
    # TOP is not a bracket; '.' is not a word, so attaching it elsewhere changes no span.
    result, sent = one("(TOP (S (NP (NNP John)) (VP (VBD ran)) (. .)))",
                       "(TOP (S (NP (NNP John)) (VP (VBD ran) (. .))))")
    assert (sent.gold_brackets, sent.matched, sent.words, sent.length) == (3, 3, 2, 3)
    assert result.f1 == 100
    # An NP dominating only a trace disappears with it; the trace is not part of the length.
    result, sent = one("(S (NP-SBJ (-NONE- *)) (VP (VB go) (SBAR (-NONE- 0) (S (-NONE- *T*-1)))))",
                       "(S (VP (VB go)))")
    assert (sent.gold_brackets, sent.test_brackets, sent.matched, sent.length) == (2, 2, 2, 1)
    # A constituent holding only punctuation spans nothing and is dropped too.
    _, sent = one("(S (NP (NN x)) (PRN (, ,)) (VP (VB y)))", "(S (NP (NN x)) (, ,) (VP (VB y)))")
    assert (sent.gold_brackets, sent.matched, sent.length) == (3, 3, 3)


def test_advp_and_prt_are_equal_labels():
    gold = "(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))"
    test = "(S (NP (PRP He)) (VP (VBD gave) (ADVP (RP up))))"
    assert one(gold, test)[0].f1 == 100
    no_eq = dataclasses.replace(COLLINS, eq_labels=())
    assert one(gold, test, no_eq)[0].recall == pytest.approx(75)  # S NP VP match, PRT does not


def test_function_tags_do_not_matter():
    assert one("(S (NP-SBJ-1 (PRP He)) (VP=2 (VBD ran)))", "(S (NP (PRP He)) (VP (VBD ran)))")[0].f1 == 100


def test_unlabeled_parameter_ignores_labels():
    unlabeled = dataclasses.replace(COLLINS, labeled=False)
    result, _ = one("(S (NP (DT a) (NN b)) (VP (VB c)))", "(X (Y (DT a) (NN b)) (Z (VB c)))", unlabeled)
    assert result.f1 == 100


def test_unary_chains_count_each_level():
    # gold S(0,1) VP(0,1); test S(0,1): recall 1/2, precision 1/1.
    result, _ = one("(S (VP (VB Go)))", "(S (VB Go))")
    assert (result.recall, result.precision) == (50, 100)
    # the same multiset of (label, span) in a different order is a perfect match
    assert one("(S (VP (VB Go)))", "(VP (S (VB Go)))")[0].f1 == 100


def test_duplicate_brackets_are_a_multiset():
    # README [7].5: n gold copies, m test copies of (NP, span) match min(n, m) times.
    gold = "(S (NP (NP (DT the) (NN man))) (VP (VBD left)))"      # S, NP, NP, VP
    test = "(S (NP (DT the) (NN man)) (VP (VBD left)))"           # S, NP, VP
    result, sent = one(gold, test)
    assert (sent.matched, result.recall, result.precision) == (3, 75, 100)
    test3 = "(S (NP (NP (NP (DT the) (NN man)))) (VP (VBD left)))"  # S, NP x3, VP
    result, sent = one(gold, test3)
    assert (sent.matched, result.recall, result.precision) == (4, 100, 80)


def test_crossing_counts_test_brackets_once():
    # gold S(0,4) NP(0,2) VP(2,4); test S(0,4) XP(1,3). XP crosses both NP and VP but counts once.
    result, sent = one("(S (NP (DT a) (NN b)) (VP (VB c) (NN d)))", "(S (DT a) (XP (NN b) (VB c)) (NN d))")
    assert (sent.crossing, sent.matched) == (1, 1)
    assert result.recall == pytest.approx(100 / 3) and result.precision == 50
    assert result.f1 == pytest.approx(40)


RIGHT = "(S (A (X a) (B (X b) (C (X c) (D (X d) (X e))))))"   # S A (0,5) B(1,5) C(2,5) D(3,5)
LEFT = "(S (A (B (C (D (X a) (X b)) (X c)) (X d)) (X e)))"    # S A (0,5) B(0,4) C(0,3) D(0,2)


def test_three_crossings_and_the_crossing_summary():
    _, sent = one(RIGHT, LEFT)  # B(0,4), C(0,3), D(0,2) each cross gold B(1,5)
    assert (sent.crossing, sent.matched) == (3, 2)
    perfect = "(S (NP (NN x)) (VP (VB y)))"
    crossing1 = ("(S (NP (DT a) (NN b)) (VP (VB c) (NN d)))", "(S (DT a) (XP (NN b) (VB c)) (NN d))")
    result = evaluate([crossing1[0], RIGHT, perfect], [crossing1[1], LEFT, perfect])
    assert result.average_crossing == pytest.approx(4 / 3)
    assert result.no_crossing == pytest.approx(100 / 3)
    assert result.two_or_less_crossing == pytest.approx(200 / 3)
    assert result.complete_match == pytest.approx(100 / 3)
    # brackets: matched 1+2+3, gold 3+5+3, test 2+5+3
    assert (result.overall.matched, result.overall.gold_brackets, result.overall.test_brackets) == (6, 11, 10)


# ----------------------------------------------------------------------------- errors and skips


def test_length_mismatch_is_an_error_sentence_left_out_of_the_scores():
    gold = ["(S (NP (NN a)) (VP (VB b)))", "(S (NP (NN x)) (VP (VB y)))"]
    test = ["(S (NP (NN a)) (VP (VB b) (NN c)))", "(S (NP (NN x)) (VP (VB y)))"]
    result = evaluate(gold, test)
    assert [s.status for s in result.sentences] == [ERROR, OK]
    assert (result.overall.sentences, result.overall.error_sentences, result.overall.valid_sentences) == (2, 1, 1)
    assert result.f1 == 100 and result.overall.words == 2
    assert result.errors == ["sentence 1: Length unmatch (2|3)"]


def test_punctuation_tagged_as_a_word_is_a_length_mismatch_under_collins():
    # The README's 2006 note: gold (, ,) is deleted, test (NN ,) is not -> lengths 2 vs 3.
    _, sent = one("(S (NP (NN a)) (, ,) (VP (VB b)))", "(S (NP (NN a)) (NN ,) (VP (VB b)))")
    assert sent.status == ERROR and "Length unmatch (2|3)" in sent.message


def test_quote_label_puts_a_mistagged_quote_back():
    # With QUOTE_LABEL (as in EVALB's new.prm) the deleted gold '' is reinserted: 3 words both sides,
    # gold S(0,3) NP(0,2) VP(2,3) = test; the quote's tag differs: 2/3 tags.
    quotes = dataclasses.replace(COLLINS, quote_labels=frozenset({"''", "POS"}))
    gold, test = "(S (NP (NNP John) ('' ')) (VP (VBD left)))", "(S (NP (NNP John) (POS ')) (VP (VBD left)))"
    assert one(gold, test)[1].status == ERROR
    result, sent = one(gold, test, quotes)
    assert (sent.status, sent.matched, sent.gold_brackets, sent.words, sent.correct_tags) == (OK, 3, 3, 3, 2)


def test_different_words_are_an_error():
    _, sent = one("(S (NN a) (VB b))", "(S (NN a) (VB c))")
    assert sent.status == ERROR and sent.message == "Words unmatch (b|c)"


def test_missing_parse_is_a_skip_sentence():
    result = evaluate(["(S (NN a))", "(S (NN b))"], [None, "(S (NN b))"])
    assert [s.status for s in result.sentences] == [SKIP, OK]
    assert (result.overall.skip_sentences, result.overall.valid_sentences, result.f1) == (1, 1, 100)


def test_different_tree_counts_and_too_many_errors_raise():
    # evalb.c would score the common line only (fixture fewer_test_lines): a departure, on purpose.
    with pytest.raises(ParsevalError, match="gold has 2 trees but test has 1"):
        evaluate(["(S (NN a))", "(S (NN b))"], ["(S (NN a))"])
    # EVALB's Error() exits once its count already exceeds MAX_ERROR: with MAX_ERROR 1, two errors pass.
    strict = dataclasses.replace(COLLINS, max_error=1)
    gold, bad = "(S (NN a) (NN b))", "(S (NN a))"
    assert evaluate([gold] * 2, [bad] * 2, strict).overall.error_sentences == 2
    with pytest.raises(ParsevalError, match="MAX_ERROR=1"):
        evaluate([gold] * 3, [bad] * 3, strict)
    # complaints count, not sentences: unbalanced and too short is two (fixture max_error_counts_calls)
    with pytest.raises(ParsevalError, match="MAX_ERROR=1"):
        evaluate([gold] * 2, ["(S (NN a)", bad], strict)


# ----------------------------------------------------------------------------- len<=40 and the summary


def test_cutoff_block_uses_gold_length_with_punctuation_without_traces():
    words41 = " ".join(f"(NN w{i})" for i in range(40)) + " (. .)"          # length 41
    traced = " ".join(f"(NN w{i})" for i in range(40)) + " (-NONE- *) (-NONE- *T*)"  # length 40
    gold = [f"(S {words41})", f"(S {traced})"]
    result = evaluate(gold, [f"(S {words41})", f"(S {' '.join(f'(NN w{i})' for i in range(40))})"])
    assert [s.length for s in result.sentences] == [41, 40]
    assert (result.overall.sentences, result.short.sentences) == (2, 1)
    assert result.short.words == 40 and result.overall.words == 80


def test_summary_text_matches_evalb_layout():
    gold = "(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"
    test = "(S (NP (DT The) (NN cat)) (VP (VBN sat)) (PP (IN on) (NP (DT the) (NN mat))) (. .))"
    block = """Number of sentence        =      1
Number of Error sentence  =      0
Number of Skip  sentence  =      0
Number of Valid sentence  =      1
Bracketing Recall         =  80.00
Bracketing Precision      =  80.00
Bracketing FMeasure       =  80.00
Complete match            =   0.00
Average crossing          =   0.00
No crossing               = 100.00
2 or less crossing        = 100.00
Tagging accuracy          =  83.33
"""
    expected = "=== Summary ===\n\n-- All --\n" + block + "\n-- len<=40 --\n" + block
    assert evaluate([gold], [test]).summary_text() == expected


# ----------------------------------------------------------------------------- parameter files


def test_collins_prm_file_gives_the_builtin_params(data_path):
    assert load_params(data_path("evalb-params/COLLINS.prm")) == COLLINS


def test_other_parameter_files(tmp_path):
    prm = tmp_path / "mine.prm"
    prm.write_text("# comment\nLABELED 0\nCUTOFF_LEN 10\nDELETE_LABEL S1\nEQ_LABEL NP NX\nEQ_WORD a A\n")
    params = load_params(prm)
    assert (params.labeled, params.cutoff_len, params.delete_labels) == (False, 10, frozenset({"S1"}))
    assert params.label_eq("NX", "NP") and params.word_eq("A", "a")
    prm.write_text("LABELED 1\nEQ_LABEL ADVP PRT X\n")
    with pytest.raises(ParsevalError, match=r"mine\.prm:2"):
        load_params(prm)
    prm.write_text("CUTOFF_LEN forty\n")
    with pytest.raises(ParsevalError, match="whole number"):
        load_params(prm)


def test_parameter_lines_end_at_newline_and_keys_at_any_space(tmp_path):
    # evalb.c: fgets lines, isspace() between key and value; U+2028 is part of a label.
    prm = tmp_path / "mine.prm"
    prm.write_bytes("MAX_ERROR\t3\nDELETE_LABEL A\u2028B\r\nDELETE_LABEL C\x85D\n".encode())
    params = load_params(prm)
    assert (params.max_error, params.delete_labels) == (3, frozenset({"A\u2028B", "C\x85D"}))


def test_tree_objects_and_files_are_accepted(tmp_path):
    path = tmp_path / "gold.trees"
    path.write_text("( (S (NP (NN a)) (VP (VB b))) )\n(S (NN c))\n")
    trees = read_trees(path)
    assert all(isinstance(t, Tree) for t in trees)
    assert evaluate(trees, [str(t) for t in trees]).f1 == 100
    with pytest.raises(ParsevalError, match="cannot read"):
        read_trees(tmp_path / "missing.trees")


# ----------------------------------------------------------------------------- against evalb.c itself

EVALB = pathlib.Path(__file__).parent / "fixtures" / "evalb"  # README there: provenance and command lines
CASES = sorted(path.name for path in EVALB.iterdir() if path.is_dir())
SUMMARY_ROWS = {
    "Number of sentence": "sentences", "Number of Error sentence": "error_sentences",
    "Number of Skip  sentence": "skip_sentences", "Number of Valid sentence": "valid_sentences",
    "Bracketing Recall": "recall", "Bracketing Precision": "precision", "Bracketing FMeasure": "f1",
    "Complete match": "complete_match", "Average crossing": "average_crossing", "No crossing": "no_crossing",
    "2 or less crossing": "two_or_less_crossing", "Tagging accuracy": "tagging_accuracy",
}


def _evalb_summary(stdout: str) -> dict:
    """``{"All": {caption: printed value}, "len<=40": {...}}`` from evalb's ``=== Summary ===``."""
    blocks = {}
    for block in stdout.split("=== Summary ===")[1].split("\n-- ")[1:]:
        title, *rows = block.strip().splitlines()
        blocks[title.strip(" -")] = dict((caption.strip(), value.strip()) for caption, value in
                                         (row.split("=") for row in rows))
    return blocks


def _evalb_table(stdout: str) -> list:
    """(sentence id, length, status) of every row of evalb's sentence table."""
    table = stdout.split("=" * 76 + "\n")[1]
    return [tuple(int(x) for x in row.split()[:3]) for row in table.splitlines() if row.strip()]


def _evalb_complaints(stderr: str) -> Counter:
    """How many times evalb.c's Error() spoke about each sentence (its stderr lines are ``N : message``)."""
    return Counter(int(line.split(" : ")[0]) for line in stderr.splitlines() if "Number of lines" not in line)


@pytest.mark.parametrize("case", CASES)
def test_summary_equals_evalb(case):
    folder = EVALB / case
    params = load_params(folder / "params.prm") if (folder / "params.prm").exists() else COLLINS
    stdout, stderr = (folder / "evalb.stdout").read_text(), (folder / "evalb.stderr").read_text()

    def score():
        return evaluate(read_trees(folder / "gold.txt"), read_trees(folder / "test.txt"), params)

    if int((folder / "evalb.status").read_text()) != 0:  # evalb.c stopped without a summary
        with pytest.raises(ParsevalError, match="Reading sentence" if "Reading sentence" in stderr else "MAX_ERROR"):
            score()
        return
    if case == "fewer_test_lines":  # departure: evalb.c scores the common lines only; we refuse
        with pytest.raises(ParsevalError, match="gold has 3 trees but test has 2"):
            score()
        return
    result = score()
    evalb = _evalb_summary(stdout)
    for title, ours in (("All", result.overall), (f"len<={params.cutoff_len}", result.short)):
        assert set(evalb[title]) == set(SUMMARY_ROWS)
        for caption, printed in evalb[title].items():
            value = getattr(ours, SUMMARY_ROWS[caption])
            if printed.endswith("nan"):  # departure: F of precision 0 and recall 0 is 0, not nan
                assert caption == "Bracketing FMeasure" and value == 0, (title, caption)
            elif "." in printed:
                assert value == pytest.approx(float(printed), abs=0.0051), (title, caption)
            else:
                assert value == int(printed), (title, caption)
    assert [(s.id, s.length, s.status) for s in result.sentences] == _evalb_table(stdout)
    assert Counter({s.id: len(s.messages) for s in result.sentences if s.messages}) == _evalb_complaints(stderr)
    assert evalb_stdout(result) == stdout.replace("  -nan", "  0.00")  # every row and column, as printed

"""Tree linearisation for parsing as translation: cleaning, round trips, repairs of bad outputs."""

import random

import pytest

from nmt_toolkit.data.trees import TreeError, parse_tree
from nmt_toolkit.scoring.parseval import ERROR, evaluate
from nmt_toolkit.data.linearised_trees import (
    delinearise, linearise_tree, preprocess_tree, read_treebank,
)

PTB = ("( (S (NP-SBJ-1 (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog)) "
       "(SBAR (-NONE- 0) (S (NP-SBJ (-NONE- *T*-1)) (VP (-NONE- *?*))))) (. .)) )")


def restore_pos_tags(tree_str: str, pos_tags) -> str:
    """The tree with its preterminal labels replaced by ``pos_tags``."""
    tree = parse_tree(tree_str)
    leaves = list(tree.preterminals())
    assert len(leaves) == len(pos_tags)
    for leaf, tag in zip(leaves, pos_tags):
        leaf.label = tag
    return str(tree)


def test_preprocess_removes_traces_emptied_nodes_tags_and_wrapper():
    assert preprocess_tree(PTB) == "(S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))"


def test_linearise_matches_vinyals_format():
    words, target = linearise_tree(PTB)
    assert words == ["John", "has", "a", "dog", "."]
    assert " ".join(target) == "(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S"


def test_delinearise_puts_words_back():
    words, target = linearise_tree(PTB)
    assert delinearise(target, words) == "(S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .))"
    tags = ["NNP", "VBZ", "DT", "NN", "."]
    assert delinearise(target, words, pos_tags=tags) == preprocess_tree(PTB)


def test_read_treebank_multiline_mrg_equals_oneline(data_path):
    mrg_dir = data_path("ptb-sample/mrg")
    oneline = list(read_treebank(data_path("ptb-sample/oneline/dev.wsj_sample.trees")))
    multiline = [t for i in range(160, 180) for t in read_treebank(mrg_dir / f"wsj_{i:04d}.mrg")]
    assert len(oneline) == len(multiline) == 273
    assert [str(parse_tree(t)) for t in multiline] == [str(parse_tree(t)) for t in oneline]


def test_read_treebank_reports_broken_files(tmp_path):
    path = tmp_path / "bad.mrg"
    path.write_text("( (S\n  (NP (NN a)) ))\n\n( (S\n  (NP (NN b))\n")
    with pytest.raises(TreeError, match="line 4"):
        list(read_treebank(path))


def test_round_trip_on_dev_gives_the_tree_back_and_f1_100(data_path):
    trees = list(read_treebank(data_path("ptb-sample/oneline/dev.wsj_sample.trees")))
    gold = [preprocess_tree(t) for t in trees]
    predicted = []
    for tree, clean in zip(trees, gold):
        words, target = linearise_tree(tree)
        assert "XX" in target and all(tok == "XX" or tok[0] in "()" for tok in target)
        tags = [tag for _, tag in parse_tree(clean).pos()]
        assert delinearise(target, words) == restore_pos_tags(clean, ["XX"] * len(words))
        predicted.append(delinearise(target, words, pos_tags=tags))
    assert predicted == gold
    result = evaluate(gold, predicted)
    assert result.f1 == 100 and result.overall.error_sentences == 0
    # Scored against the raw treebank (traces, function tags) EVALB's deletions give the same answer, once
    # parse_tree drops the PTB's unlabelled root "( (S ...) )", which evalb.c counts as a bracket labelled "".
    assert evaluate([parse_tree(t) for t in trees], predicted).f1 == 100
    assert evaluate(trees, predicted).overall.recall < 100


def test_xx_tags_hide_punctuation_from_evalb():
    # Why delinearise takes pos_tags: with XX, '.' is a word in the test tree but not in gold.
    words, target = linearise_tree(PTB)
    result = evaluate([preprocess_tree(PTB)], [delinearise(target, words)])
    assert result.sentences[0].status == ERROR


WORDS = ["w0", "w1", "w2", "w3", "w4"]


@pytest.mark.parametrize("target, expected", [
    ([], "(S (XX w0) (XX w1) (XX w2) (XX w3) (XX w4))"),
    (["(S", "(NP", "XX", "XX"], "(S (NP (XX w0) (XX w1) (XX w2) (XX w3) (XX w4)))"),      # unclosed, too few
    ([")NP", "(S"] + ["XX"] * 7 + [")S", ")S"],                                                # stray closers, too many
     "(S (XX w0) (XX w1) (XX w2) (XX w3) (XX w4))"),
    (["(S", "(NP", "XX", "XX", ")VP", "(VP", "XX", "XX", "XX", ")NP", ")S"],  # closers match by position
     "(S (NP (XX w0) (XX w1)) (VP (XX w2) (XX w3) (XX w4)))"),
    (["(S", "(NP", "XX", ")NP", ")S", "XX", "(VP", "XX", ")VP"],                               # output after the root
     "(S (NP (XX w0)) (XX w1) (VP (XX w2)) (XX w3) (XX w4))"),
    (["XX", "(S", "(NP", ")NP", "XX", ")S"],                                                   # leaf before any bracket
     "(S (XX w0) (S (XX w1)) (XX w2) (XX w3) (XX w4))"),
    (["(S", "(ADJP", ")ADJP", "XX", "XX", "XX", "XX", "XX", ")S"],                             # empty constituent
     "(S (XX w0) (XX w1) (XX w2) (XX w3) (XX w4))"),
])
def test_repairs(target, expected):
    assert delinearise(target, WORDS) == expected


def test_random_outputs_always_give_a_tree_over_all_the_words():
    rng = random.Random(1234)
    vocab = ["(S", "(NP", "(VP", ")S", ")NP", ")VP", ")", "XX", "XX", "XX", "<unk>", "("]
    gold = "(S " + " ".join(f"(NN {w})" for w in WORDS) + ")"
    outputs = []
    for _ in range(300):
        target = [rng.choice(vocab) for _ in range(rng.randint(0, 25))]
        tree = delinearise(target, WORDS)
        assert parse_tree(tree).leaves() == WORDS, (target, tree)
        outputs.append(delinearise(target, WORDS, pos_tags=["NN"] * len(WORDS)))
    assert evaluate([gold] * len(outputs), outputs).overall.error_sentences == 0


def test_deeply_nested_output_does_not_overflow():
    tree = delinearise(["(NP"] * 5000 + ["XX"], ["w"])
    assert parse_tree(tree).leaves() == ["w"]


def test_pos_tags_must_match_words():
    with pytest.raises(ValueError, match="2 POS tags for 1 words"):
        delinearise(["XX"], ["w"], pos_tags=["NN", "VB"])
    assert delinearise(["(S", ")S"], []) == ""

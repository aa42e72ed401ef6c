#!/usr/bin/env python3
"""Penn Treebank <-> sequence pairs for parsing as translation (section 6.3 of the paper).

Two steps of the recipe, both thin wrappers over :mod:`nmt_toolkit.data.linearised_trees`:

``prepare``
    Read trees (``.mrg`` files or one tree per line), clean them (drop ``-NONE-`` and the constituents
    left empty, strip function tags and indices), split them, and write per split ``S.words`` (the
    source: the sentence), ``S.tree`` (the target: the linearised bracket sequence, every tag written
    ``XX``) and ``S.gold`` (the cleaned tree with its POS tags, the reference for PARSEVAL).

    Splits: the full WSJ treebank (a folder with section folders ``00`` … ``24``): 02–21 train, 22 dev,
    23 test, the split of every parsing paper. A folder of ``wsj_NNNN.mrg`` files without sections (the
    NLTK 10% sample, wsj_0001–wsj_0199): train wsj_0001–0159, dev 0160–0179, test 0180–0199 — the same
    split as ``ptb-sample/oneline/{train,dev,test}``. A folder of one-tree-per-line files: the files whose
    names start with ``train``, ``dev`` (or ``valid``) and ``test``.

``delinearise``
    Turn ``nmt-generate`` output back into trees: the hypotheses (``H-`` lines, in any order) are put back in
    input order, the original words (not the ``<unk>``-ed ones the model saw) are put back into each
    predicted bracket sequence, and unbalanced or wrong-length outputs are repaired, so every sentence gets a
    tree. With ``--gold`` the gold POS tags are put on the leaves: the model predicts no tags (every leaf is
    ``XX``), and EVALB drops punctuation by its tag, so the gold tags keep the word counts aligned; see the
    docstring of :mod:`nmt_toolkit.data.linearised_trees`.

``score``
    PARSEVAL F1 with the EVALB ``COLLINS.prm`` rules, straight from the library (``nmt-score --metric
    parseval`` is the program that does this; this is the same computation for when it is not installed).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from nmt_toolkit.data.trees import TreeError
from nmt_toolkit.scoring import parseval
from nmt_toolkit.data.linearised_trees import clean_tree, delinearise, linearise_tree, read_treebank

WSJ_SPLIT = {"train": range(2, 22), "valid": range(22, 23), "test": range(23, 24)}
SAMPLE_SPLIT = {"train": range(1, 160), "valid": range(160, 180), "test": range(180, 200)}
ONELINE_PREFIXES = {"train": ("train",), "valid": ("dev", "valid"), "test": ("test",)}


def find_splits(treebank: Path) -> dict[str, list[Path]]:
    """The files of each split, by the rules in the module docstring."""
    if not treebank.is_dir():
        raise SystemExit(f"treebank.py: error: {treebank} is not a folder")
    sections = sorted(p for p in treebank.iterdir() if p.is_dir() and re.fullmatch(r"\d\d", p.name))
    if sections:
        return {split: sorted(f for s in sections if int(s.name) in numbers for f in s.glob("*.mrg"))
                for split, numbers in WSJ_SPLIT.items()}
    mrg = sorted(treebank.glob("wsj_*.mrg"))
    if mrg:
        return {split: [f for f in mrg if int(re.search(r"wsj_(\d+)", f.name).group(1)) in numbers]
                for split, numbers in SAMPLE_SPLIT.items()}
    files = sorted(p for p in treebank.iterdir() if p.is_file())
    splits = {split: [f for f in files if f.name.startswith(prefixes) and not f.name.startswith("all")]
              for split, prefixes in ONELINE_PREFIXES.items()}
    if not all(splits.values()):
        missing = [s for s, f in splits.items() if not f]
        raise SystemExit(f"treebank.py: error: {treebank}: no section folders 00-24, no wsj_*.mrg files, and no "
                         f"one-tree-per-line files for {', '.join(missing)} (names starting with train/dev/test)")
    return splits


def prepare(args) -> int:
    splits = find_splits(Path(args.treebank))
    os.makedirs(args.outdir, exist_ok=True)
    for split, files in splits.items():
        if not files:
            raise SystemExit(f"treebank.py: error: no files for the {split} split in {args.treebank}")
        count = dropped = 0
        with open(os.path.join(args.outdir, f"{split}.words"), "w", encoding="utf-8") as words_out, \
                open(os.path.join(args.outdir, f"{split}.tree"), "w", encoding="utf-8") as tree_out, \
                open(os.path.join(args.outdir, f"{split}.gold"), "w", encoding="utf-8") as gold_out:
            for path in files:
                for tree_str in read_treebank(path):
                    try:
                        tree = clean_tree(tree_str)
                    except TreeError:  # a tree of empty elements only
                        dropped += 1
                        continue
                    words, target = linearise_tree(tree)
                    words_out.write(" ".join(words) + "\n")
                    tree_out.write(" ".join(target) + "\n")
                    gold_out.write(str(tree) + "\n")
                    count += 1
        note = f" ({dropped} trees with no words dropped)" if dropped else ""
        print(f"{split}: {count} trees from {len(files)} file(s){note}", file=sys.stderr)
    return 0


def read_hypotheses(path: str) -> dict[int, list[str]]:
    """``H-<id>\\t<score>\\t<tokens>`` lines of nmt-generate, by id (first hypothesis of each)."""
    hyps: dict[int, list[str]] = {}
    with open(path, encoding="utf-8", newline="\n") as handle:  # one line per \n, as nmt-generate writes them
        for line in handle:
            if line.startswith("H-"):
                fields = line.rstrip("\n").split("\t")
                ident = int(fields[0][2:])
                if ident not in hyps:
                    hyps[ident] = fields[2].split() if len(fields) > 2 else []
    return hyps


def delinearise_cmd(args) -> int:
    hyps = read_hypotheses(args.generate_output)
    with open(args.words, encoding="utf-8", newline="\n") as handle:  # a \r inside a line does not end it
        sentences = [line.split() for line in handle]
    gold_tags = None
    if args.gold:
        gold_tags = []
        for tree in parseval.read_trees(args.gold):
            gold_tags.append([leaf.label for leaf in tree.preterminals()] if tree is not None else None)
        if len(gold_tags) != len(sentences):
            raise SystemExit(f"treebank.py: error: {args.gold} has {len(gold_tags)} trees but {args.words} "
                             f"has {len(sentences)} sentences")
    missing = 0
    with open(args.output, "w", encoding="utf-8") as out:
        for ident, words in enumerate(sentences):
            if ident not in hyps:
                missing += 1
            tags = gold_tags[ident] if gold_tags is not None else None
            if tags is not None and len(tags) != len(words):
                tags = None
            out.write(delinearise(hyps.get(ident, []), words, pos_tags=tags) + "\n")
    if missing:
        print(f"treebank.py: warning: {missing} sentences had no hypothesis in {args.generate_output}; "
              "they got flat trees", file=sys.stderr)
    return 0


def score(args) -> int:
    params = parseval.load_params(args.params) if args.params else parseval.COLLINS
    result = parseval.evaluate(parseval.read_trees(args.ref), parseval.read_trees(args.sys), params)
    print(result.summary_text())
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="trees -> {train,valid,test}.{words,tree,gold}")
    p.add_argument("treebank", help="folder of .mrg files (WSJ sections or the sample) or of one-line tree files")
    p.add_argument("outdir")
    p.set_defaults(func=prepare)
    d = sub.add_parser("delinearise", help="nmt-generate output -> one tree per line")
    d.add_argument("generate_output", help="the output of nmt-generate (H- lines)")
    d.add_argument("--words", required=True, help="the source sentences, one per line (e.g. test.words)")
    d.add_argument("--gold", help="gold trees whose POS tags go on the leaves (for EVALB; see --help of the module)")
    d.add_argument("--output", required=True)
    d.set_defaults(func=delinearise_cmd)
    s = sub.add_parser("score", help="PARSEVAL (EVALB, COLLINS.prm) of --sys trees against --ref trees")
    s.add_argument("--sys", required=True)
    s.add_argument("--ref", required=True)
    s.add_argument("--params", help="an EVALB .prm file (default: COLLINS.prm's settings)")
    s.set_defaults(func=score)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Penn Treebank -> (words, linearised tree) pairs -> data-bin, for parsing as translation (section 6.3).
#
#   examples/ptb_parsing/prepare.sh [TREEBANK] [WORKDIR]
#
# TREEBANK: the full WSJ treebank (a folder with sections 00..24 of .mrg files: 02-21 train, 22 dev, 23 test),
#           the 10% sample (wsj_0001-0199.mrg: 0001-0159 / 0160-0179 / 0180-0199), or a folder of one-tree-per-line
#           files named train*, dev*, test* (default: $NMT_TOOLKIT_TEST_DATA/ptb-sample/oneline).
# WORKDIR:  text files go to WORKDIR/text ({train,valid,test}.{words,tree,gold}); binarized data to
#           WORKDIR/data-bin (default: runs/ptb_parsing).
#
# Dictionaries: separate. The source (words) keeps the 16000 most frequent words, the WSJ-only vocabulary of
# the paper (the rest become <unk>; the original words are put back when the trees are rebuilt); the target
# is the small vocabulary of brackets "(NP", ")NP" and the leaf symbol "XX". No subword model: a word is a token.
# Environment: SRC_VOCAB (16000).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TREEBANK="${1:-${NMT_TOOLKIT_TEST_DATA:-$REPO/../shared/data}/ptb-sample/oneline}"
WORKDIR="${2:-runs/ptb_parsing}"
T0=$(date +%s)

python3 "$HERE/treebank.py" prepare "$TREEBANK" "$WORKDIR/text"
nmt-preprocess --source-lang words --target-lang tree \
  --trainpref "$WORKDIR/text/train" --validpref "$WORKDIR/text/valid" --testpref "$WORKDIR/text/test" \
  --nwordssrc "${SRC_VOCAB:-16000}" --workers 2 --destdir "$WORKDIR/data-bin" --overwrite >&2
echo "prepare.sh: $WORKDIR/data-bin in $(( $(date +%s) - T0 ))s" >&2

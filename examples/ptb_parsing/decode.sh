#!/usr/bin/env bash
# Parse the test sentences (beam 21, length penalty alpha 0.3, maximum length input+300, as section 6.3),
# rebuild trees from the predicted bracket sequences (repairing unbalanced or wrong-length outputs so every
# sentence gets a tree), and score them with PARSEVAL (EVALB, COLLINS.prm).
#
#   examples/ptb_parsing/decode.sh [WORKDIR] [MODEL]   # MODEL default: WORKDIR/checkpoints/checkpoint_best.pt
# Environment: SPLIT (test; or valid), BEAM (21), LENPEN (0.3), MAX_TOKENS (8000), EXTRA (more nmt-generate flags).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORKDIR="${1:-runs/ptb_parsing}"
MODEL="${2:-$WORKDIR/checkpoints/checkpoint_best.pt}"
SPLIT="${SPLIT:-test}"
OUT="$WORKDIR/decode"
mkdir -p "$OUT"

# shellcheck disable=SC2086
nmt-generate "$WORKDIR/data-bin" --path "$MODEL" --gen-subset "$SPLIT" \
  --beam "${BEAM:-21}" --lenpen "${LENPEN:-0.3}" --max-len-a 1 --max-len-b 300 \
  --max-tokens "${MAX_TOKENS:-8000}" ${EXTRA:-} > "$OUT/$SPLIT.generate.txt"
# gold POS tags on the leaves: the model predicts none, and EVALB drops punctuation by its tag
python3 "$HERE/treebank.py" delinearise "$OUT/$SPLIT.generate.txt" \
  --words "$WORKDIR/text/$SPLIT.words" --gold "$WORKDIR/text/$SPLIT.gold" --output "$OUT/$SPLIT.trees"
nmt-score --metric parseval --sys "$OUT/$SPLIT.trees" --ref "$WORKDIR/text/$SPLIT.gold" | tee "$OUT/$SPLIT.parseval.txt"

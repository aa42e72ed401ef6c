#!/usr/bin/env bash
# Average the last N checkpoints written every 10 minutes (the paper: 5 for base, 20 for big).
#
#   examples/wmt14/average.sh SAVE_DIR [N=5] [OUTPUT=SAVE_DIR/averaged.pt]
set -euo pipefail
SAVE_DIR="${1:?usage: average.sh SAVE_DIR [N] [OUTPUT]}"
N="${2:-5}"
OUTPUT="${3:-$SAVE_DIR/averaged.pt}"
# checkpoints written by --save-interval-minutes/--save-interval-updates are named checkpoint_<epoch>_<updates>.pt
nmt-average-checkpoints --inputs "$SAVE_DIR" --num-update-checkpoints "$N" --output "$OUTPUT"
echo "average.sh: $OUTPUT" >&2

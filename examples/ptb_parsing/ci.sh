#!/usr/bin/env bash
# The parsing recipe end to end on the Penn Treebank sample in a few minutes on a CPU, as CI runs it:
# prepare.sh on ptb-sample/oneline, train.sh with a tiny model and 200 updates of 1024 tokens, decode.sh
# (beam 4 here) with PARSEVAL F1. The F1 (~12) is far below the paper's (3.4k training trees, a tiny model,
# seconds): the model has learned the shape of trees, not yet to fit them to the sentence. This checks the
# whole chain, including tree repair, on real trees; a broken model's output scores near 0.
#
#   examples/ptb_parsing/ci.sh [WORKDIR]        # data from $NMT_TOOLKIT_TEST_DATA (default <repo>/../shared/data)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DATA="${NMT_TOOLKIT_TEST_DATA:-$REPO/../shared/data}"
WORK="${1:-${TMPDIR:-/tmp}/nmt_ptb_ci}"
# a new or empty folder becomes this script's; what an earlier run of it wrote there is removed; anything else
# is refused, never wiped
python3 -m nmt_toolkit.cli.workdir "$WORK" --owner examples/ptb_parsing/ci.sh --flag WORKDIR \
  --entries text,data-bin,checkpoints,decode,train.log || exit 2
T0=$(date +%s)
t() { echo "== $1: $(( $(date +%s) - T0 ))s" >&2; T0=$(date +%s); }

"$HERE/prepare.sh" "$DATA/ptb-sample/oneline" "$WORK"
t prepare
ARCH=transformer_tiny MAX_UPDATE="${CI_MAX_UPDATE:-200}" MAX_TOKENS="${CI_MAX_TOKENS:-1024}" WARMUP=50 LR=0.3 \
  EXTRA="--dropout 0.1 --log-interval 50 --no-validate-at-start ${CI_EXTRA:-}" \
  "$HERE/train.sh" "$WORK" 2> "$WORK/train.log" || { tail -n 30 "$WORK/train.log" >&2; exit 1; }
tail -n 3 "$WORK/train.log" >&2
t train
# beam 4 and output length <= 3 x input + 10 (instead of 21 and input+300): an undertrained model's
# outputs run to the length limit, and 21 beams x 300 steps x 245 sentences is not "minutes" on a CPU
BEAM="${CI_BEAM:-4}" EXTRA="--max-len-a 3 --max-len-b 10" "$HERE/decode.sh" "$WORK" "$WORK/checkpoints/checkpoint_last.pt"
t decode

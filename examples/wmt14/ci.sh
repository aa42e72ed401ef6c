#!/usr/bin/env bash
# The WMT14 recipe end to end in under a minute on a CPU, as CI runs it: the same scripts in --local mode on
# the 10k-pair WMT14 sample, a tiny model, 250 updates, scored on (the first lines of) the real newstest2014.
# At that size the model learns the target language, not yet translation: the BLEU is near 0, and what
# tests/test_examples.py checks is the validation perplexity (~4300 untrained, ~270 after the run).
#
#   examples/wmt14/ci.sh [WORKDIR]            # data from $NMT_TOOLKIT_TEST_DATA (default <repo>/../shared/data)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DATA="${NMT_TOOLKIT_TEST_DATA:-$REPO/../shared/data}"
WORK="${1:-${TMPDIR:-/tmp}/nmt_wmt14_ci}"
# a new or empty folder becomes this script's; what an earlier run of it wrote there is removed; anything else
# is refused, never wiped
python3 -m nmt_toolkit.cli.workdir "$WORK" --owner examples/wmt14/ci.sh --flag WORKDIR \
  --entries prep,data-bin,checkpoints,train.log,newstest2014 || exit 2
T0=$(date +%s)
t() { echo "== $1: $(( $(date +%s) - T0 ))s" >&2; T0=$(date +%s); }

"$HERE/prepare-wmt14en2de.sh" --local "$DATA/wmt14-sample" --test-local "$DATA/newstest2014" --unescape \
  --workdir "$WORK/prep" --destdir "$WORK/data-bin" --vocab-size "${CI_VOCAB:-2000}" \
  --max-test-lines "${CI_TEST_LINES:-200}" --max-valid-lines 200 --workers 2
t prepare

# tiny model, 250 updates of 512 tokens, a checkpoint every 25 updates (instead of every 10 minutes)
GPUS=0 ARCH=transformer_tiny MAX_UPDATE="${CI_MAX_UPDATE:-250}" MAX_TOKENS=512 UPDATE_FREQ=1 WARMUP=50 LR=0.25 \
  EXTRA="--save-interval-updates 25 --log-interval 25 --no-validate-at-start ${CI_EXTRA:-}" \
  "$HERE/train-base.sh" "$WORK/data-bin" "$WORK/checkpoints" 2> "$WORK/train.log" || { tail -n 30 "$WORK/train.log" >&2; exit 1; }
tail -n 3 "$WORK/train.log" >&2
t train

"$HERE/average.sh" "$WORK/checkpoints" 3 "$WORK/checkpoints/averaged.pt"
t average

EXTRA="--max-len-a 0 --max-len-b 20" "$HERE/generate-and-score.sh" "$WORK/data-bin" "$WORK/checkpoints/averaged.pt" "$WORK/newstest2014"
t generate-and-score

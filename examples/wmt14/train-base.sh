#!/usr/bin/env bash
# Transformer base on WMT14 (Table 2: 27.3 BLEU en-de, 38.1 en-fr): N=6, d_model=512, d_ff=2048, h=8,
# P_drop=0.1, label smoothing 0.1, Adam(0.9, 0.98, 1e-9), eq. 3 with warmup 4000, 100k updates of
# ~25k+25k tokens, a checkpoint every 10 minutes (the last 5 are averaged by average.sh).
# The paper: 12 hours on 8 P100 (0.4 s/step).
#
#   examples/wmt14/train-base.sh [DATA_BIN] [SAVE_DIR]      # see train-common.sh for GPUS=, MAX_TOKENS=, EXTRA= …
#   LANGPAIR=en-fr examples/wmt14/train-base.sh             # data-bin/wmt14_en_fr
set -euo pipefail
SIZE=base
NAME="wmt14_${LANGPAIR:-en-de}"; NAME="${NAME/-/_}"
ARCH="${ARCH:-transformer_base}"
MAX_UPDATE="${MAX_UPDATE:-100000}"
KEEP="${KEEP:-5}"
source "$(dirname "${BASH_SOURCE[0]}")/train-common.sh"

#!/usr/bin/env bash
# Transformer big on WMT14 (Table 2: 28.4 BLEU en-de, 41.8 en-fr): N=6, d_model=1024, d_ff=4096, h=16,
# P_drop=0.3 (0.1 for en-fr: transformer_big_enfr), 300k updates of ~25k+25k tokens, a checkpoint every
# 10 minutes (the last 20 are averaged by average.sh). The paper: 3.5 days on 8 P100 (1.0 s/step).
#
#   examples/wmt14/train-big.sh [DATA_BIN] [SAVE_DIR]       # see train-common.sh for GPUS=, MAX_TOKENS=, EXTRA= …
#   LANGPAIR=en-fr examples/wmt14/train-big.sh              # transformer_big_enfr on data-bin/wmt14_en_fr
set -euo pipefail
SIZE=big
NAME="wmt14_${LANGPAIR:-en-de}"; NAME="${NAME/-/_}"
if [[ "${LANGPAIR:-en-de}" == en-fr ]]; then ARCH="${ARCH:-transformer_big_enfr}"; else ARCH="${ARCH:-transformer_big}"; fi
MAX_UPDATE="${MAX_UPDATE:-300000}"
KEEP="${KEEP:-20}"
source "$(dirname "${BASH_SOURCE[0]}")/train-common.sh"

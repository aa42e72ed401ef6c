#!/usr/bin/env bash
# Train the parser of section 6.3: transformer_parsing (4 layers, d_model 1024, d_ff 4096, 16 heads,
# dropout 0.3), Adam(0.9, 0.98, 1e-9) with eq. 3's schedule (warmup 4000), label smoothing 0.1.
#
#   examples/ptb_parsing/train.sh [WORKDIR]           # reads WORKDIR/data-bin, writes WORKDIR/checkpoints
# Environment overrides (CI uses a tiny model): ARCH (transformer_parsing), MAX_UPDATE (20000),
# MAX_TOKENS (4096), UPDATE_FREQ (1), LR (noam scale, 1.0), WARMUP (4000), EXTRA (more nmt-train flags).
set -euo pipefail
WORKDIR="${1:-runs/ptb_parsing}"
[[ -d "$WORKDIR/data-bin" ]] || { echo "train.sh: error: no $WORKDIR/data-bin (run prepare.sh first)" >&2; exit 2; }
# shellcheck disable=SC2086
nmt-train "$WORKDIR/data-bin" --arch "${ARCH:-transformer_parsing}" \
  --optimizer adam --adam-betas 0.9,0.98 --adam-eps 1e-9 \
  --lr-scheduler noam --lr "${LR:-1.0}" --warmup-updates "${WARMUP:-4000}" \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --max-tokens "${MAX_TOKENS:-4096}" --update-freq "${UPDATE_FREQ:-1}" --max-update "${MAX_UPDATE:-20000}" \
  --save-dir "$WORKDIR/checkpoints" --keep-last-epochs 5 \
  --log-format simple --log-interval 50 --seed 1 ${EXTRA:-}

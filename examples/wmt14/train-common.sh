#!/usr/bin/env bash
# Shared by train-base.sh and train-big.sh (sourced): the paper's recipe, section 5, for any number of GPUs.
#
# Batches: the paper trains on ~25000 source + ~25000 target tokens per update. --max-tokens bounds the
# (padded) tokens of one side on one GPU, so with GPUS devices and gradient accumulation --update-freq F:
#     GPUS x MAX_TOKENS x F ~= 25000.
# F = ceil(25000 / (GPUS x MAX_TOKENS)), then MAX_TOKENS is lowered so the product is ~25000 again
# (8 GPUs: 3125 tokens each, F=1; 1 GPU with 4096: 3572 tokens, F=7).
#
# Positional arguments: DATA_BIN (default data-bin/$NAME) SAVE_DIR (default checkpoints/$NAME_$SIZE).
# Environment overrides (all optional):
#   GPUS            devices to use (default: all visible CUDA devices; 0 = CPU, e.g. for CI)
#   ARCH            model architecture (default per script)
#   MAX_UPDATE      updates to train (default per script: 100k base, 300k big)
#   MAX_TOKENS      tokens per device per step before the 25k adjustment (default 4096)
#   UPDATE_FREQ     force --update-freq (skips the 25k computation)
#   TOKENS_PER_UPDATE  the 25000 above
#   LR              --lr: the scale factor of the noam schedule (default 1.0 = eq. 3 exactly)
#   WARMUP          warmup steps of eq. 3 (default 4000)
#   SAVE_MINUTES    write a checkpoint every this many minutes (default 10, as the paper)
#   PRECISION       fp16 | bf16 | fp32 (default: fp16 on GPUs, fp32 on CPU)
#   EXTRA           further nmt-train flags, appended last (so they win)
set -euo pipefail

DATA_BIN="${1:-data-bin/$NAME}"
SAVE_DIR="${2:-checkpoints/${NAME}_${SIZE}}"
[[ -d "$DATA_BIN" ]] || { echo "$(basename "$0"): error: no data folder $DATA_BIN (run prepare-wmt14*.sh first)" >&2; exit 2; }

if [[ -z "${GPUS:-}" ]]; then
  GPUS=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
fi
TOKENS_PER_UPDATE="${TOKENS_PER_UPDATE:-25000}"
MAX_TOKENS="${MAX_TOKENS:-4096}"
DEVICES=$(( GPUS > 0 ? GPUS : 1 ))
if [[ -z "${UPDATE_FREQ:-}" ]]; then
  UPDATE_FREQ=$(( (TOKENS_PER_UPDATE + DEVICES * MAX_TOKENS - 1) / (DEVICES * MAX_TOKENS) ))
  (( UPDATE_FREQ >= 1 )) || UPDATE_FREQ=1
  MAX_TOKENS=$(( (TOKENS_PER_UPDATE + DEVICES * UPDATE_FREQ - 1) / (DEVICES * UPDATE_FREQ) ))
fi

ARGS=("$DATA_BIN" --arch "$ARCH" --share-all-embeddings
      --optimizer adam --adam-betas 0.9,0.98 --adam-eps 1e-9
      --lr-scheduler noam --lr "${LR:-1.0}" --warmup-updates "${WARMUP:-4000}"
      --criterion label_smoothed_cross_entropy --label-smoothing 0.1
      --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE"
      --save-dir "$SAVE_DIR" --save-interval-minutes "${SAVE_MINUTES:-10}" --keep-interval-updates "$KEEP"
      --keep-last-epochs 1 --log-format simple --log-interval 100 --seed 1)
PRECISION="${PRECISION:-$([[ $GPUS -gt 0 ]] && echo fp16 || echo fp32)}"
case "$PRECISION" in
  fp16) ARGS+=(--fp16) ;;
  bf16) ARGS+=(--bf16) ;;
  fp32) ;;
  *) echo "$(basename "$0"): error: PRECISION must be fp16, bf16 or fp32, not $PRECISION" >&2; exit 2 ;;
esac
if (( GPUS > 1 )); then ARGS+=(--distributed-world-size "$GPUS"); fi
if (( GPUS == 0 )); then ARGS+=(--cpu); fi

echo "$(basename "$0"): $ARCH on $DEVICES $([[ $GPUS -gt 0 ]] && echo GPU || echo CPU)(s): --max-tokens $MAX_TOKENS" \
     "x --update-freq $UPDATE_FREQ = $(( DEVICES * MAX_TOKENS * UPDATE_FREQ )) tokens per side per update" >&2
mkdir -p "$SAVE_DIR"
# shellcheck disable=SC2086
exec nmt-train "${ARGS[@]}" ${EXTRA:-}

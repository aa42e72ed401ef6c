#!/usr/bin/env bash
# A training change measured against the code before it, in one call of a lent machine: benchmarks/gpu_train.py
# from this tree ("new") and from OLD (the same files at another revision) alternate on transformer_big bf16 at
# 16k target tokens, so both sides meet the same card, clocks and inductor cache; the trained model's float32
# hypotheses, static search against dynamic; then the new tree at 32k tokens, with the memory-efficient
# attention kernel in place of flash, the A/B pair again, and transformer_base, as far as the time goes.
#
#   git archive REV nmt_toolkit benchmarks | tar -x -C old
#   OUT=/tmp/out OLD=old MODEL=m.pt DATA=bin bash benchmarks/gpu_train_ab.sh
#
# The first run compiles cold (about 150 s for transformer_big on an H100); the model's graph is the same in
# both trees when the change is outside the model, so later runs find it in inductor's cache. Writes
# $OUT/ab_new.jsonl, $OUT/ab_old.jsonl, $OUT/gpu_decode.jsonl (one JSON object per figure), $OUT/train.log,
# $OUT/profile_train.txt (the new tree, transformer_big bf16) and $OUT/env.txt.
SUITE_SECONDS=${SUITE_SECONDS:-560}
source "$(dirname "${BASH_SOURCE[0]}")/gpu_suite_lib.sh"
OLD=$(cd "${OLD:?OLD: the tree to compare with}" && pwd)
MODEL=${MODEL:?MODEL: a checkpoint} DATA=${DATA:?DATA: a data-bin with a test split}
NEW_R=$OUT/ab_new.jsonl OLD_R=$OUT/ab_old.jsonl L=$OUT/train.log
print_machine | tee -a "$OUT/env.txt"
if [ -n "${GPU_SUITE_SMOKE:-}" ]; then
  SIZES=(--device cpu --vocab 1000 --from 2 --to 4 --compile off); BIG=transformer_tiny BASE=transformer_tiny
  TOKENS=1024 DOUBLE=2048
else
  SIZES=(--from 50 --to 150); BIG=transformer_big BASE=transformer_base TOKENS=16384 DOUBLE=32768
fi
new=("$PY" "$REPO/benchmarks/gpu_train.py" "${SIZES[@]}")
old=(env PYTHONPATH="$OLD" "$PY" "$OLD/benchmarks/gpu_train.py" "${SIZES[@]}")
identity() {  # the static search's float32 hypotheses against the dynamic one's, on the trained model
  local gen=(nmt-generate "$DATA" --path "$MODEL" --beam 4 --lenpen 0.6 --gen-subset test) eager
  eager=$(mktemp)
  [ -n "${GPU_SUITE_SMOKE:-}" ] && gen+=(--cpu --threads 2)  # the smoke test's 1,000 sentences take minutes
  step "$OUT/gpu_decode.jsonl" "$OUT/decode.log" model_1k_fp32_eager 20 "$PY" "$REPO/benchmarks/decode_run.py" \
    --label "trained model, Multi30k test" --save "$eager" -- "${gen[@]}" --static-search off
  step "$OUT/gpu_decode.jsonl" "$OUT/decode.log" model_1k_fp32_graphs 20 "$PY" "$REPO/benchmarks/decode_run.py" \
    --label "trained model, Multi30k test" --search "static (CUDA graphs)" --reference "$eager" -- "${gen[@]}" \
    --static-search "$([ -n "${GPU_SUITE_SMOKE:-}" ] && echo off || echo on)"
}

step "$OLD_R" "$L" old_big_bf16 200 "${old[@]}" --arch "$BIG" --precision bf16 --max-tokens "$TOKENS"
step "$NEW_R" "$L" new_big_bf16 80 "${new[@]}" --arch "$BIG" --precision bf16 --max-tokens "$TOKENS" \
  --profile-table "$OUT/profile_train.txt"
[ -n "${SKIP_IDENTITY:-}" ] || identity
step "$NEW_R" "$L" new_big_bf16_double 60 "${new[@]}" --arch "$BIG" --precision bf16 --max-tokens "$DOUBLE"
# the causal self-attention through the memory-efficient kernel instead of flash (a new graph: compiles cold)
step "$NEW_R" "$L" new_big_bf16_no_flash 190 "${new[@]}" --arch "$BIG" --precision bf16 --max-tokens "$TOKENS" \
  --sdpa EFFICIENT_ATTENTION,MATH
step "$OLD_R" "$L" old_big_bf16_again 45 "${old[@]}" --arch "$BIG" --precision bf16 --max-tokens "$TOKENS"
step "$NEW_R" "$L" new_big_bf16_again 45 "${new[@]}" --arch "$BIG" --precision bf16 --max-tokens "$TOKENS"
step "$NEW_R" "$L" new_base_bf16 120 "${new[@]}" --arch "$BASE" --precision bf16 --max-tokens "$TOKENS"
echo "== gpu_train_ab.sh done in $(( $(date +%s) - SUITE_START ))s"
"$PY" "$REPO/benchmarks/suite_summary.py" "$OLD_R" "$NEW_R" "$OUT/gpu_decode.jsonl"

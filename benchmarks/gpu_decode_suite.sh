#!/usr/bin/env bash
# GPU decoding figures in one call of a lent machine (about 4 minutes), with the same machine's CPU as the
# baseline: beam 4, --lenpen 0.6, on the transformer_base shape with random weights (benchmarks/gpu_generate.py,
# outputs cut at the source length) and on a trained model through whole nmt-generate processes
# (benchmarks/decode_run.py), 1,000 and 10,000 sentences, float32/fp16/bf16, the static-shape search (CUDA
# graphs) against the dynamic (eager) one, and the CPU with all its cores and with 2 (taskset).
#
#   OUT=/tmp/out MODEL=m.pt DATA=bin bash benchmarks/gpu_decode_suite.sh [all|cpu2|gpu]
#   GPU_SUITE_SMOKE=1 OUT=/tmp/out MODEL=m.pt DATA=bin bash benchmarks/gpu_decode_suite.sh   # CPU, tiny sizes
#
# DATA is a data-bin with splits "test" (1,000 sentences) and "test1" (10,000); MODEL a checkpoint trained on
# it. "cpu2" runs only the 2-core figures, pinned to the last two cores (run it in the background while the
# training suite runs on the others); "gpu" runs the rest; "all" both in turn. Writes $OUT/gpu_decode.jsonl
# (one JSON object per figure), $OUT/decode.log and $OUT/profile_decode.txt.
SUITE_SECONDS=${SUITE_SECONDS:-250}
source "$(dirname "${BASH_SOURCE[0]}")/gpu_suite_lib.sh"
PART=${1:-all}
R=$OUT/gpu_decode.jsonl
L=$OUT/decode.log
MODEL=${MODEL:?MODEL: a checkpoint} DATA=${DATA:?DATA: a data-bin with test and test1}
TMP=$(mktemp -d)
NCPU=$("$PY" -c "import os; print(os.cpu_count())")
GEN=(nmt-generate "$DATA" --path "$MODEL" --beam 4 --lenpen 0.6)
RUN=("$PY" "$REPO/benchmarks/decode_run.py")
SYN=("$PY" "$REPO/benchmarks/gpu_generate.py" --jsonl --beam 4)
if [ -n "${GPU_SUITE_SMOKE:-}" ]; then
  SYN+=(--arch transformer_tiny --vocab 1000 --max-tokens 400); N1=48; N10=96; GPU=0  # no 10k-sentence model runs
else
  SYN+=(--arch transformer_base --max-tokens 8192); N1=1000; N10=10000; GPU=1
fi

cpu2() {  # the 2-core baseline, on the last two cores
  local pin=(taskset -c "$((NCPU - 2)),$((NCPU - 1))")
  step "$R" "$L" cpu2_synthetic_1k 60 "${pin[@]}" "${SYN[@]}" --device cpu --threads 2 --searches dynamic \
    --precisions fp32 --sentences "$N1" --repeats 1
  step "$R" "$L" cpu2_model_1k 30 "${RUN[@]}" --label "trained model, Multi30k test" --device cpu --cores 2 \
    -- "${pin[@]}" "${GEN[@]}" --gen-subset test --cpu --threads 2
  (( GPU )) && step "$R" "$L" cpu2_model_10k 150 "${RUN[@]}" --label "trained model, 10,000 Multi30k train sentences" \
    --device cpu --cores 2 -- "${pin[@]}" "${GEN[@]}" --gen-subset test1 --cpu --threads 2
}

model_gpu() {  # NAME SPLIT DTYPE SEARCH ESTIMATE [--save F | --reference F]
  local name=$1 split=$2 dtype=$3 search=$4 estimate=$5
  shift 5
  local flags=(--gen-subset "$split" --static-search "$search") label="dynamic (eager)"
  [ "$search" = on ] && label="static (CUDA graphs)"
  [ "$dtype" = fp32 ] || flags+=(--"$dtype")
  local what="trained model, Multi30k test"
  [ "$split" = test1 ] && what="trained model, 10,000 Multi30k train sentences"
  step "$R" "$L" "$name" "$estimate" "${RUN[@]}" --label "$what" --dtype "$dtype" \
    --search "$label" "$@" -- "${GEN[@]}" "${flags[@]}"
}

gpu() {
  echo "{\"engine\": \"ctranslate2\", \"probe\": \"$("$PY" -c 'import ctranslate2; print(ctranslate2.get_cuda_device_count(), "CUDA devices")' 2>&1 | tail -1)\", \"libcublas.so.12\": \"$(ldconfig -p 2>/dev/null | grep -c 'libcublas.so.12')\"}" | tee -a "$R"
  if (( GPU )); then
    step "$R" "$L" gpu_synthetic_1k 90 "${SYN[@]}" --sentences "$N1" --repeats 2 --profile-table "$OUT/profile_decode.txt"
    model_gpu gpu_model_1k_fp32_eager test fp32 off 15 --save "$TMP/eager1k.json"
    model_gpu gpu_model_1k_fp32_graphs test fp32 on 15 --reference "$TMP/eager1k.json"
    model_gpu gpu_model_1k_bf16_graphs test bf16 on 15
    model_gpu gpu_model_1k_fp16_graphs test fp16 on 15
    model_gpu gpu_model_1k_bf16_eager test bf16 off 15
  fi
  step "$R" "$L" cpu_all_synthetic_1k 30 "${SYN[@]}" --device cpu --threads "$NCPU" --searches dynamic \
    --precisions fp32 --sentences "$N1" --repeats 1
  step "$R" "$L" cpu_all_model_1k 20 "${RUN[@]}" --label "trained model, Multi30k test" --device cpu \
    --cores "$NCPU" -- "${GEN[@]}" --gen-subset test --cpu --threads "$NCPU"
  if (( GPU )); then
    model_gpu gpu_model_10k_bf16_graphs test1 bf16 on 25
    step "$R" "$L" gpu_synthetic_10k 40 "${SYN[@]}" --sentences "$N10" --repeats 1 --precisions bf16,fp32 \
      --searches static
    model_gpu gpu_model_10k_fp32_eager test1 fp32 off 30 --save "$TMP/eager10k.json"
    model_gpu gpu_model_10k_fp32_graphs test1 fp32 on 25 --reference "$TMP/eager10k.json"
  fi
  (( GPU )) && step "$R" "$L" cpu_all_model_10k 45 "${RUN[@]}" --label "trained model, 10,000 Multi30k train sentences" \
    --device cpu --cores "$NCPU" -- "${GEN[@]}" --gen-subset test1 --cpu --threads "$NCPU"
}

case "$PART" in
  cpu2) cpu2 ;;
  gpu) gpu ;;
  all) cpu2; gpu ;;
  *) echo "usage: $0 [all|cpu2|gpu]" >&2; exit 2 ;;
esac
echo "== gpu_decode_suite.sh $PART done in $(( $(date +%s) - SUITE_START ))s"
"$PY" "$REPO/benchmarks/suite_summary.py" "$R"

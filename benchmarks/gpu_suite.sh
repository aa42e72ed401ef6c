#!/usr/bin/env bash
# GPU training figures in one call of a lent machine (about 6 minutes): the card's own matrix rate, then
# transformer_big in bf16, fp16 and TF32 and transformer_base in bf16, each through benchmarks/gpu_train.py
# (nmt-train's step, --compile, synthetic WMT-like batches of 16k target tokens, updates 50-150 timed).
#
#   OUT=/tmp/out SUITE_SECONDS=320 bash benchmarks/gpu_suite.sh
#   GPU_SUITE_SMOKE=1 OUT=/tmp/out bash benchmarks/gpu_suite.sh      # the CPU, tiny sizes: the script's own test
#
# Writes $OUT/gpu_train.jsonl (one JSON object per figure), $OUT/train.log (the programs' stderr),
# $OUT/profile_train.txt (torch.profiler's table of transformer_big bf16) and $OUT/env.txt. Steps run in
# order of importance; one that does not fit the time left is recorded as skipped. The estimates are an
# H100's, measured: a cold compile of transformer_big costs about 150 s before update 50, and fp16 reuses
# most of bf16's kernels from inductor's cache.
SUITE_SECONDS=${SUITE_SECONDS:-340}
source "$(dirname "${BASH_SOURCE[0]}")/gpu_suite_lib.sh"
R=$OUT/gpu_train.jsonl
L=$OUT/train.log
print_machine | tee -a "$OUT/env.txt"

if [ -n "${GPU_SUITE_SMOKE:-}" ]; then
  SIZES=(--device cpu --vocab 1000 --max-tokens 1024 --from 2 --to 4 --compile off)
  BIG=transformer_tiny BASE=transformer_tiny
else
  SIZES=(--max-tokens 16384 --from 50 --to 150)
  BIG=transformer_big BASE=transformer_base
  step "$R" "$L" matmul_ceiling 15 "$PY" - <<'PY'
import datetime, json, torch
dev = torch.device("cuda")
for name, dtype, tf32 in (("bf16", torch.bfloat16, False), ("fp16", torch.float16, False), ("tf32", torch.float32, True)):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    n, times = 8192, []
    pairs = [(torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)) for _ in range(3)]
    for i in range(25):
        a, b = pairs[i % 3]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); torch.mm(a, b); end.record(); torch.cuda.synchronize()
        if i >= 5:
            times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    print(json.dumps({"benchmark": "matmul_ceiling", "date": datetime.date.today().isoformat(), "dtype": name,
                      "shape": "8192x8192x8192, random normal", "tflops": round(2 * n ** 3 / times[len(times) // 2] / 1e12, 1),
                      "device": torch.cuda.get_device_name(dev), "torch": torch.__version__}))
    del pairs
torch.backends.cuda.matmul.allow_tf32 = False
PY
fi
step "$R" "$L" big_bf16 190 "$PY" "$REPO/benchmarks/gpu_train.py" --arch "$BIG" --precision bf16 "${SIZES[@]}" \
  --profile-table "$OUT/profile_train.txt"
step "$R" "$L" base_bf16 110 "$PY" "$REPO/benchmarks/gpu_train.py" --arch "$BASE" --precision bf16 "${SIZES[@]}"
step "$R" "$L" big_fp16 60 "$PY" "$REPO/benchmarks/gpu_train.py" --arch "$BIG" --precision fp16 "${SIZES[@]}"
step "$R" "$L" big_tf32 150 "$PY" "$REPO/benchmarks/gpu_train.py" --arch "$BIG" --precision tf32 "${SIZES[@]}"
echo "== gpu_suite.sh done in $(( $(date +%s) - SUITE_START ))s"
"$PY" "$REPO/benchmarks/suite_summary.py" "$R"

# Shared by benchmarks/gpu_suite.sh and benchmarks/gpu_decode_suite.sh (sourced, not run).
#
# Runs the repository's programs without installing it (the device machine has torch, numpy, click, pyyaml,
# sacrebleu, sentencepiece and tqdm, and nothing can be fetched there), gives every step a share of one
# wall-clock budget, and never waits for input. Each step's JSON line goes to the suite's results file;
# a step that does not fit the time left writes a "skipped" line instead, one that fails a "failed" line.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/gpu-suite-out}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# An installed copy maps cli/ to nmt_toolkit.cli (setup.py's package_dir); a bare checkout needs the link.
"$PY" -c "import nmt_toolkit.cli" 2>/dev/null || ln -s ../cli "$REPO/nmt_toolkit/cli"
SHIMS=$(mktemp -d)
for prog in generate preprocess train; do
  printf '#!/bin/sh\nexec %s -c "import sys; sys.argv[0] = \\"nmt-%s\\"; from nmt_toolkit.cli.%s import main; main()" "$@"\n' \
    "$PY" "$prog" "$prog" >"$SHIMS/nmt-$prog"
  chmod +x "$SHIMS/nmt-$prog"
done
export PATH="$SHIMS:$PATH"
SUITE_START=$(date +%s)

seconds_left() { echo $(( SUITE_SECONDS - ($(date +%s) - SUITE_START) )); }

# step RESULTS LOG NAME ESTIMATE_S COMMAND...: run COMMAND if ESTIMATE_S fits, stdout to RESULTS, stderr to LOG.
step() {
  local results=$1 log=$2 name=$3 estimate=$4 left
  shift 4
  left=$(seconds_left)
  if (( left < estimate )); then
    printf '{"skipped": "%s", "reason": "%ss left of the suite, the step needs about %ss"}\n' "$name" "$left" "$estimate" \
      | tee -a "$results"
    return 0
  fi
  printf '== %s (estimate %ss, %ss left) %s\n' "$name" "$estimate" "$left" "$(date +%T)" | tee -a "$log"
  local t0=$SECONDS
  timeout -k 10 "$left" "$@" >>"$results" 2>>"$log"
  local rc=$?
  (( rc == 0 )) || printf '{"failed": "%s", "exit": %s}\n' "$name" "$rc" | tee -a "$results"
  printf '   %s: %ss, exit %s\n' "$name" $(( SECONDS - t0 )) "$rc" | tee -a "$log"
}

print_machine() {
  nvidia-smi 2>&1 || echo "no nvidia-smi"
  "$PY" -c "import torch, platform; print('python', platform.python_version(), '| torch', torch.__version__, '| cuda', torch.version.cuda, '| cudnn', torch.backends.cudnn.version(), '| gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
  "$PY" -c "import os; print('cpu cores:', os.cpu_count(), '| usable here (affinity):', len(os.sched_getaffinity(0)))"
  grep -m1 'model name' /proc/cpuinfo
}

#!/usr/bin/env bash
# The whole pipeline, offline, on a laptop CPU in a few minutes:
#   make data -> nmt-preprocess (learned sentencepiece) -> nmt-train (transformer_tiny)
#   -> nmt-average-checkpoints -> nmt-generate (beam 4) -> nmt-score (sacreBLEU)
#
# Usage:
#   examples/quickstart/run.sh                      # built-in synthetic task (SVO -> SOV with agreement)
#   examples/quickstart/run.sh --data DIR           # any corpus DIR/{train,valid,test}.{src,tgt}
#   examples/quickstart/run.sh --data ../shared/data/multi30k --src en --tgt de \
#       --valid-name val --test-name test_2016_flickr --max-train-lines 10000
#
# Options:
#   --data DIR             parallel corpus, one sentence per line (default: generate the built-in task)
#   --src L / --tgt L      file suffixes of the two sides (default: src / tgt)
#   --valid-name NAME      prefix of the validation files (default: valid)
#   --test-name NAME       prefix of the test files (default: test)
#   --max-train-lines N    use only the first N training pairs (to fit the time on a CPU)
#   --workdir DIR          where everything is written (default: runs/quickstart)
#   --minutes M            training time budget in minutes (default: 6)
#   --vocab-size V         sentencepiece vocabulary, joint (default: 500; 8000 with --data)
#   --threads T            torch threads (default: number of CPU cores, at most 4)
#   --keep                 reuse what an earlier run left in the work dir (otherwise it is wiped)
# Environment overrides (for CI): QS_TRAIN_PAIRS, QS_VALID_PAIRS, QS_TEST_PAIRS (sizes of the built-in task), QS_MAX_EPOCH, QS_EXTRA
# (extra nmt-train flags).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA=""
SRC=src
TGT=tgt
VALID_NAME=valid
TEST_NAME=test
MAX_TRAIN_LINES=""
WORKDIR="runs/quickstart"
MINUTES=6
VOCAB=""
THREADS=""
KEEP=0

die() { echo "run.sh: error: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DATA="${2:?--data needs a folder}"; shift 2 ;;
    --src) SRC="$2"; shift 2 ;;
    --tgt) TGT="$2"; shift 2 ;;
    --valid-name) VALID_NAME="$2"; shift 2 ;;
    --test-name) TEST_NAME="$2"; shift 2 ;;
    --max-train-lines) MAX_TRAIN_LINES="$2"; shift 2 ;;
    --workdir) WORKDIR="$2"; shift 2 ;;
    --minutes) MINUTES="$2"; shift 2 ;;
    --vocab-size) VOCAB="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

for prog in nmt-preprocess nmt-train nmt-average-checkpoints nmt-generate nmt-score; do
  command -v "$prog" >/dev/null || die "$prog not found: install the toolkit first (pip install -e .)"
done

if [[ -z "$THREADS" ]]; then
  THREADS=$(python3 -c 'import os; print(max(1, min(4, len(os.sched_getaffinity(0)))))')
fi
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"

[[ $KEEP == 1 ]] || rm -rf "$WORKDIR"
mkdir -p "$WORKDIR"
RAW="$WORKDIR/raw"
BIN="$WORKDIR/data-bin"
CKPT="$WORKDIR/checkpoints"
OUT="$WORKDIR/output"
mkdir -p "$RAW" "$OUT"

T_ALL=$(date +%s)
T_STAGE=$T_ALL
stage() {  # stage NAME: print the time the previous stage took and announce the next
  local now; now=$(date +%s)
  [[ -n "${STAGE_NAME:-}" ]] && printf '== %-12s done in %4ds\n' "$STAGE_NAME" $((now - T_STAGE)) >&2
  T_STAGE=$now
  STAGE_NAME="$1"
  [[ -n "$1" ]] && echo "== $1 ..." >&2
  return 0
}

# ---------------------------------------------------------------------------------------------- data
stage data
if [[ -z "$DATA" ]]; then
  python3 "$HERE/make_task.py" "$RAW" --train "${QS_TRAIN_PAIRS:-15000}" --valid "${QS_VALID_PAIRS:-500}" --test "${QS_TEST_PAIRS:-500}" --seed 1
  VOCAB="${VOCAB:-500}"
else
  [[ -d "$DATA" ]] || die "--data $DATA: no such folder"
  for pair in "train:train" "$VALID_NAME:valid" "$TEST_NAME:test"; do
    name="${pair%%:*}"; split="${pair##*:}"
    for side in "$SRC:src" "$TGT:tgt"; do
      lang="${side%%:*}"; ext="${side##*:}"
      file="$DATA/$name.$lang"
      [[ -f "$file" ]] || die "--data: missing $file (expected $name.{$SRC,$TGT}; see --valid-name/--test-name/--src/--tgt)"
      if [[ $split == train && -n "$MAX_TRAIN_LINES" ]]; then
        head -n "$MAX_TRAIN_LINES" "$file" > "$RAW/$split.$ext"
      else
        cp "$file" "$RAW/$split.$ext"
      fi
    done
  done
  VOCAB="${VOCAB:-8000}"
fi
wc -l "$RAW"/train.src "$RAW"/valid.src "$RAW"/test.src | sed '$d' >&2

# ---------------------------------------------------------------------------------------- preprocess
stage preprocess
nmt-preprocess --source-lang src --target-lang tgt \
  --trainpref "$RAW/train" --validpref "$RAW/valid" --testpref "$RAW/test" \
  --bpe sentencepiece --bpe-vocab-size "$VOCAB" --joined-dictionary \
  --workers "$THREADS" --destdir "$BIN" --overwrite > "$OUT/preprocess.log"
tail -n 5 "$OUT/preprocess.log" >&2

# --------------------------------------------------------------------------------------------- train
stage train
# nmt-train's whole log goes to train.log. Its log is not a terminal, so --log-format tqdm writes a plain
# "progress | ..." line after the first update and then at every 5% of the budget (here: the time); those lines
# are shown here as they come, redrawn in place when this script's stderr is a terminal.
show_progress() {
  local line drawn=0
  while IFS= read -r line; do
    [[ $line == "progress | "* ]] || continue
    if [[ -t 2 ]]; then
      printf '\r\033[K   %s' "${line#progress | }" >&2
      drawn=1
    else
      printf '   %s\n' "${line#progress | }" >&2
    fi
  done
  [[ $drawn == 0 ]] || printf '\n' >&2
}
# Time-boxed: training stops after --stop-time-hours (or QS_MAX_EPOCH epochs). A checkpoint every 50 updates,
# the last 3 kept: the model still improves fast at the end of a short run, so only the last ones are averaged.
HOURS=$(python3 -c "print(round($MINUTES / 60, 5))")
# shellcheck disable=SC2086
nmt-train "$BIN" --arch transformer_tiny --share-all-embeddings \
  --optimizer adam --adam-betas 0.9,0.98 --adam-eps 1e-9 --clip-norm 1.0 \
  --lr 2e-3 --lr-scheduler inverse_sqrt --warmup-updates 300 --warmup-init-lr 1e-7 \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --dropout 0.1 --max-tokens 2048 --seed 1 \
  --max-epoch "${QS_MAX_EPOCH:-100}" --stop-time-hours "$HOURS" \
  --save-dir "$CKPT" --save-interval-updates 50 --keep-interval-updates 3 --keep-last-epochs 1 \
  --log-format tqdm --log-interval 50 ${QS_EXTRA:-} 2>&1 | tee "$OUT/train.log" | show_progress \
  || { tail -n 20 "$OUT/train.log" >&2; die "nmt-train failed (the whole log: $OUT/train.log)"; }
grep -E '^(valid|train) \|' "$OUT/train.log" | tail -n 3 >&2 || true

# ------------------------------------------------------------------------------------------- average
stage average
N_CKPT=$(find "$CKPT" -maxdepth 1 -name 'checkpoint_[0-9]*_[0-9]*.pt' | wc -l)
if [[ $N_CKPT -ge 2 ]]; then
  N_AVG=$(( N_CKPT < 3 ? N_CKPT : 3 ))
  nmt-average-checkpoints --inputs "$CKPT" --num-update-checkpoints "$N_AVG" --output "$CKPT/averaged.pt" >&2
  MODEL="$CKPT/averaged.pt"
else
  MODEL="$CKPT/checkpoint_last.pt"
fi
echo "model: $MODEL" >&2

# ------------------------------------------------------------------------------------------ generate
stage generate
nmt-generate "$BIN" --path "$MODEL" --gen-subset test --beam 4 --lenpen 0.6 \
  --max-tokens 8000 > "$OUT/generate.txt" 2> "$OUT/generate.log"
# D-<id> <score> <detokenized hypothesis>, back in input order
grep '^D-' "$OUT/generate.txt" | sed 's/^D-//' | sort -n -k1,1 | cut -f3- > "$OUT/hyp.txt"
cp "$RAW/test.tgt" "$OUT/ref.txt"
[[ $(wc -l < "$OUT/hyp.txt") == $(wc -l < "$OUT/ref.txt") ]] || die "generate gave $(wc -l < "$OUT/hyp.txt") hypotheses for $(wc -l < "$OUT/ref.txt") references (see $OUT/generate.log)"

# --------------------------------------------------------------------------------------------- score
stage score
nmt-score --sys "$OUT/hyp.txt" --ref "$OUT/ref.txt" > "$OUT/score.txt"
stage ""

echo
echo "Some translations (source / reference / system):"
paste "$RAW/test.src" "$OUT/ref.txt" "$OUT/hyp.txt" > "$OUT/side_by_side.tsv"
head -n 5 "$OUT/side_by_side.tsv" | while IFS=$'\t' read -r s r h; do
  printf '  SRC  %s\n  REF  %s\n  SYS  %s\n\n' "$s" "$r" "$h"
done
cat "$OUT/score.txt"
echo "total time: $(( $(date +%s) - T_ALL ))s; everything is in $WORKDIR"

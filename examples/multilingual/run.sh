#!/usr/bin/env bash
# One model for six directions (en<->de, en<->fr, en<->cs) on Multi30k against six bilingual models with the
# same update budget, BLEU per direction on test_2016_flickr plus zero-shot directions (see README.md beside this).
#
#   examples/multilingual/run.sh [--ci] [WORKDIR]      (default WORKDIR: ${TMPDIR:-/tmp}/nmt_multilingual)
#
# Full size: one data-bin for the six directions (joint sentencepiece 8000 over en, de, fr, cs); a 3+3 x 256/1024
# model, 4 heads, shared embeddings, dropout 0.1, Adam (0.9, 0.98), inverse_sqrt lr 1e-3 warmup 200, label
# smoothing 0.1, --max-tokens 4096 (the parity recipe of ../shared/checks/parity.sh), --encoder-langtok src
# --decoder-langtok, temperature sampling T=1.5, UPDATES updates (1200). Six bilingual models of the same size
# and recipe, each UPDATES/6 updates (the multilingual model's share per direction), on three bilingual
# data-bins (en-de, en-fr, en-cs: each its own joint sentencepiece 8000 over its two languages, read in both
# directions). Beam 4, lenpen 0.6; sacreBLEU on the detokenized hypotheses against the raw references.
# Prints the table: direction, multilingual BLEU, bilingual BLEU, difference, and the bar (within 2.0 or better).
#
# --ci: the first 400/60/50 lines, a 1+1 x 32 model, vocabulary 300, 12 updates (bilinguals 2), beam 2, zero-shot
# de-fr only: checks the chain (the BLEU of such a run is 0). Its steps take seconds, most of them starting Python
# and torch, so two run at once, one thread each (OMP_NUM_THREADS, default 1): the independent data-bins, then
# the seven trainings, then the decodes.
# Every step is skipped when its output exists, so a stopped run resumes. Environment: UPDATES, MULTI30K (the
# data folder, default <repo>/../shared/data/multi30k), LOCK (a file: every training and decoding then runs
# under `flock $LOCK nice -n 5`), ZERO_SHOT (zero-shot directions, "de-fr fr-de cs-de"), ENCODER_LANGTOK (src).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CI=0; [ "${1:-}" = "--ci" ] && { CI=1; shift; }
W=${1:-${TMPDIR:-/tmp}/nmt_multilingual}
# a new or empty folder becomes this script's; one it made before is resumed; anything else is refused
python3 -m nmt_toolkit.cli.workdir "$W" --owner examples/multilingual/run.sh --flag WORKDIR --keep || exit 2
W=$(cd "$W" && pwd)
DATA=${MULTI30K:-$REPO/../shared/data/multi30k}
PAIRS="en-de de-en en-fr fr-en en-cs cs-en"
log() { echo "$(date -u +%H:%M:%S) $*" >&2; }
heavy() { if [ -n "${LOCK:-}" ]; then flock "$LOCK" nice -n 5 "$@"; else "$@"; fi; }

if [ $CI = 1 ]; then
  U=${UPDATES:-12}; VOCAB=300; ZERO_SHOT=${ZERO_SHOT:-de-fr}
  MODEL=(--encoder-layers 1 --decoder-layers 1 --embed-dim 32 --ffn-embed-dim 64 --attention-heads 2)
  OPT=(--max-tokens 1024 --warmup-updates 4 --lr 3e-3)
  SEARCH=(--beam 2 --lenpen 0.6 --batch-size 64 --max-len-a 1.2 --max-len-b 5)
  JOBS=2; export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
else
  U=${UPDATES:-1200}; VOCAB=8000; ZERO_SHOT=${ZERO_SHOT:-de-fr fr-de cs-de}
  MODEL=(--encoder-layers 3 --decoder-layers 3 --embed-dim 256 --ffn-embed-dim 1024 --attention-heads 4)
  OPT=(--max-tokens 4096 --warmup-updates 200 --lr 1e-3)
  SEARCH=(--beam 4 --lenpen 0.6 --batch-size 64 --max-len-a 1.5 --max-len-b 10)
  JOBS=1  # each step uses every core
fi
[ $((U % 6)) = 0 ] || { echo "run.sh: UPDATES=$U: must be a multiple of 6 (each bilingual model gets UPDATES/6)" >&2; exit 2; }
RECIPE=(--arch transformer_base "${MODEL[@]}" "${OPT[@]}" --seed 1 --share-all-embeddings --dropout 0.1
  --optimizer adam --adam-betas 0.9,0.98 --lr-scheduler inverse_sqrt --criterion label_smoothed_cross_entropy
  --label-smoothing 0.1 --no-epoch-checkpoints --no-validate-at-start --log-format simple --log-interval 20)
SEARCH+=(--lenpen-style fairseq)

PIDS=()
spawn() {  # run "$@" in the background, at most JOBS steps at once (JOBS=1: in the foreground, where Ctrl-C stops it)
  if [ "$JOBS" = 1 ]; then "$@"; return; fi
  if [ ${#PIDS[@]} -ge "$JOBS" ]; then wait "${PIDS[0]}"; PIDS=("${PIDS[@]:1}"); fi
  "$@" & PIDS+=($!)
}
settle() {  # wait for every spawned step; a failed one stops the script (set -e)
  local p; for p in "${PIDS[@]}"; do wait "$p"; done; PIDS=()
}

data() {  # the corpus: Multi30k itself, or its first lines for --ci
  if [ $CI = 0 ]; then D=$DATA; return 0; fi
  D=$W/data; [ -f "$D/.done" ] && return 0
  mkdir -p "$D"; local l
  for l in en de fr cs; do
    head -n 400 "$DATA/train.$l" > "$D/train.$l"; head -n 60 "$DATA/val.$l" > "$D/val.$l"
    head -n 50 "$DATA/test_2016_flickr.$l" > "$D/test_2016_flickr.$l"
  done
  touch "$D/.done"
}

preprocess() {  # DESTDIR ARGS...: binarize unless done
  local B=$1; shift
  [ -f "$B/preprocess.json" ] && return 0
  log "nmt-preprocess $* -> $B"; mkdir -p "$(dirname "$B")"
  heavy nmt-preprocess "$@" --trainpref "$D/train" --validpref "$D/val" --testpref "$D/test_2016_flickr" \
    --bpe sentencepiece --bpe-vocab-size "$VOCAB" --workers 2 --destdir "$B" > "$B.prep.log" 2>&1 \
    || { tail -n 5 "$B.prep.log" >&2; exit 1; }
}

train() {  # DATABIN SAVEDIR UPDATES ARGS...
  local B=$1 S=$2 N=$3; shift 3
  [ -f "$S/checkpoint_last.pt" ] && return 0
  log "nmt-train $* ($N updates) -> $S"
  mkdir -p "$S"
  heavy nmt-train "$B" "${RECIPE[@]}" --max-update "$N" --save-dir "$S" "$@" > "$S/train.log" 2>&1 \
    || { tail -n 5 "$S/train.log" >&2; exit 1; }
}

decode() {  # DATABIN CHECKPOINT PAIR OUTDIR [--input FILE]: the detokenized hypotheses, in input order
  local B=$1 C=$2 P=$3 O=$4; shift 4
  [ -f "$O/hyp.$P.txt" ] && return 0
  log "nmt-generate $C $P"
  mkdir -p "$O"
  heavy nmt-generate "$B" --path "$C" --source-lang "${P%-*}" --target-lang "${P#*-}" --gen-subset test \
    "${SEARCH[@]}" "$@" > "$O/gen.$P.out" 2> "$O/gen.$P.err" || { tail -n 5 "$O/gen.$P.err" >&2; exit 1; }
  grep '^D-' "$O/gen.$P.out" | sed 's/^D-//' | sort -n -k1,1 | cut -f3- > "$O/hyp.$P.tmp"
  mv "$O/hyp.$P.tmp" "$O/hyp.$P.txt"
}

data
MULTI_PAIRS=${PAIRS// /,}
spawn preprocess "$W/multi/bin" --lang-pairs "$MULTI_PAIRS"
for x in de fr cs; do spawn preprocess "$W/bi-en-$x/bin" --lang-pairs "en-$x,$x-en"; done
settle

spawn train "$W/multi/bin" "$W/multi/ck" "$U" --task translation_multi_simple_epoch --lang-pairs "$MULTI_PAIRS" \
  --encoder-langtok "${ENCODER_LANGTOK:-src}" --decoder-langtok --sampling-method temperature --sampling-temperature 1.5
for p in $PAIRS; do
  x=${p/en/}; x=${x/-/}
  spawn train "$W/bi-en-$x/bin" "$W/bi-$p/ck" $((U / 6)) --source-lang "${p%-*}" --target-lang "${p#*-}"
done
settle

for p in $PAIRS; do
  spawn decode "$W/multi/bin" "$W/multi/ck/checkpoint_last.pt" "$p" "$W/multi"
  x=${p/en/}; x=${x/-/}
  spawn decode "$W/bi-en-$x/bin" "$W/bi-$p/ck/checkpoint_last.pt" "$p" "$W/bi-$p"
done
for p in $ZERO_SHOT; do  # no test.de-fr in the data-bin: the raw source text
  spawn decode "$W/multi/bin" "$W/multi/ck/checkpoint_last.pt" "$p" "$W/multi" --input "$D/test_2016_flickr.${p%-*}"
done
settle

python "$HERE/table.py" "$W" "$D/test_2016_flickr" --pairs $PAIRS --zero-shot $ZERO_SHOT --updates "$U" | tee "$W/table.md"

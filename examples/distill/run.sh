#!/usr/bin/env bash
# Sequence-level knowledge distillation (Kim & Rush, 2016) on Multi30k en->de: a teacher, its translations of
# the training sources, a small student trained on them, and the two side by side (see README.md beside this).
#
#   examples/distill/run.sh [--ci] [WORKDIR]      (default WORKDIR: ${TMPDIR:-/tmp}/nmt_distill)
#
# Stages, each skipped when its output exists, so a run stopped at any point resumes where it stopped:
#   bin/              nmt-preprocess: joint sentencepiece VOCAB (8000), one joined dictionary
#   teacher/          nmt-train, the parity recipe (3+3 x 256/1024, 4 heads) for TEACHER_UPDATES (3000), or
#                     TEACHER=CHECKPOINT: a checkpoint trained on this bin/ (its dictionaries are checked)
#   forward/          the teacher's translations of the training sources: nmt-generate --gen-subset train,
#                     SHARDS (4) processes' worth of shards, one at a time, each kept when complete (beam BEAM=4,
#                     lenpen 0.6, as the teacher is decoded)
#   student-bin/      the training sources with the teacher's translations as targets (MIX=W > 0 adds the original
#                     pairs as a second corpus of weight W: --corpus-weights 1,W), the teacher's subword model and
#                     dictionary, Multi30k's own validation and test sets
#   student/          nmt-train --arch transformer_student (6+1 layers x 256) for STUDENT_UPDATES (3000); the last
#                     5 interval checkpoints averaged into student/averaged.pt
#   export/           teacher and student as model folders (torch, float32) and CTranslate2 int8 folders
#   distill.jsonl     the teacher at BEAM and the student at BEAM and greedy, in each engine: BLEU on
#                     test_2016_flickr, words per second on one core (whole --plain processes, alternating), peak
#                     memory, model size; table.md the same as a table
#
# --ci: the first 400/60/50 lines, 1+1 x 32 models, vocabulary 300, 12 and 12 updates, beam 2: checks the chain
# (such models score BLEU 0). Environment: MULTI30K (the data folder, default <repo>/../shared/data/multi30k),
# TEACHER, TEACHER_UPDATES, STUDENT_UPDATES, SHARDS, BEAM, MIX, RUNS (timed runs per system and engine, 3).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CI=0; [ "${1:-}" = "--ci" ] && { CI=1; shift; }
W=${1:-${TMPDIR:-/tmp}/nmt_distill}
if [ -n "${TEACHER:-}" ] && [ ! -f "$TEACHER" ]; then
  echo "run.sh: TEACHER=$TEACHER: no such checkpoint file" >&2; exit 2
fi
# a new or empty folder becomes this script's; one it made before is resumed; anything else is refused
python3 -m nmt_toolkit.cli.workdir "$W" --owner examples/distill/run.sh --flag WORKDIR --keep || exit 2
W=$(cd "$W" && pwd)
DATA=${MULTI30K:-$REPO/../shared/data/multi30k}
[ -f "$DATA/train.en" ] || { echo "run.sh: MULTI30K=$DATA: no train.en there" >&2; exit 2; }
SHARDS=${SHARDS:-4}; MIX=${MIX:-0}; RUNS=${RUNS:-3}
log() { echo "$(date -u +%H:%M:%S) $*" >&2; }
fail() { echo "run.sh: $(tail -n 1 "$1") (the whole log: $1)" >&2; exit 1; }  # one line: the failing step's

if [ $CI = 1 ]; then
  VOCAB=300; TU=${TEACHER_UPDATES:-12}; SU=${STUDENT_UPDATES:-12}; BEAM=${BEAM:-2}
  TEACHER_MODEL=(--arch transformer_base --encoder-layers 1 --decoder-layers 1 --embed-dim 32 --ffn-embed-dim 64
    --attention-heads 2)
  STUDENT_MODEL=(--arch transformer_student --encoder-layers 1 --embed-dim 32 --ffn-embed-dim 64 --attention-heads 2)
  OPT=(--max-tokens 1024 --warmup-updates 4 --lr 3e-3); INTERVAL=2
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
else
  VOCAB=8000; TU=${TEACHER_UPDATES:-3000}; SU=${STUDENT_UPDATES:-3000}; BEAM=${BEAM:-4}
  TEACHER_MODEL=(--arch transformer_base --encoder-layers 3 --decoder-layers 3 --embed-dim 256 --ffn-embed-dim 1024
    --attention-heads 4)
  STUDENT_MODEL=(--arch transformer_student)
  OPT=(--max-tokens 4096 --warmup-updates 200 --lr 1e-3); INTERVAL=$((SU / 20))
fi
RECIPE=("${OPT[@]}" --seed 1 --share-all-embeddings --dropout 0.1 --optimizer adam --adam-betas 0.9,0.98
  --lr-scheduler inverse_sqrt --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --no-epoch-checkpoints
  --no-validate-at-start --log-format simple --log-interval 20)
SEARCH=(--lenpen 0.6 --max-len-a 1.2 --max-len-b 10)  # with --beam: BEAM for the teacher, BEAM and 1 for the student

data() {  # the corpus: Multi30k itself, or its first lines for --ci
  if [ $CI = 0 ]; then D=$DATA; return 0; fi
  D=$W/data; [ -f "$D/.done" ] && return 0
  mkdir -p "$D"; local l
  for l in en de; do
    head -n 400 "$DATA/train.$l" > "$D/train.$l"; head -n 60 "$DATA/val.$l" > "$D/val.$l"
    head -n 50 "$DATA/test_2016_flickr.$l" > "$D/test_2016_flickr.$l"
  done
  touch "$D/.done"
}

preprocess() {
  [ -f "$W/bin/preprocess.json" ] && return 0
  log "nmt-preprocess -> bin/"
  nmt-preprocess --source-lang en --target-lang de --trainpref "$D/train" --validpref "$D/val" \
    --testpref "$D/test_2016_flickr" --bpe sentencepiece --bpe-vocab-size "$VOCAB" --joined-dictionary --workers 2 \
    --destdir "$W/bin" > "$W/bin.log" 2>&1 || fail "$W/bin.log"
}

train() {  # DATABIN SAVEDIR UPDATES ARGS...: a run stopped part-way resumes from its checkpoint_last.pt
  local B=$1 S=$2 N=$3; shift 3
  [ -f "$S/.done" ] && return 0
  log "nmt-train $B ($N updates) -> $S"
  mkdir -p "$S"
  nmt-train "$B" "${RECIPE[@]}" --max-update "$N" --save-dir "$S" "$@" >> "$S/train.log" 2>&1 || fail "$S/train.log"
  touch "$S/.done"
}

teacher() {  # the teacher checkpoint's path on stdout
  if [ -n "${TEACHER:-}" ]; then echo "$TEACHER"; return 0; fi
  train "$W/bin" "$W/teacher" "$TU" "${TEACHER_MODEL[@]}" >&2
  echo "$W/teacher/checkpoint_last.pt"
}

forward() {  # T: the teacher's translations of train.en, in the corpus's order, as forward/train.de
  local T=$1 i
  [ -f "$W/forward/train.de" ] && return 0
  mkdir -p "$W/forward"
  for ((i = 0; i < SHARDS; i++)); do
    [ -f "$W/forward/shard$i.txt" ] && continue  # a shard already translated is kept
    log "forward translation: shard $i of $SHARDS"
    nmt-generate "$W/bin" --path "$T" --gen-subset train --num-shards "$SHARDS" --shard-id "$i" --beam "$BEAM" \
      --batch-size 64 "${SEARCH[@]}" > "$W/forward/shard$i.out" 2> "$W/forward/shard$i.err" || fail "$W/forward/shard$i.err"
    grep '^D-' "$W/forward/shard$i.out" | sed 's/^D-//' | cut -f1,3 > "$W/forward/shard$i.tmp"
    mv "$W/forward/shard$i.tmp" "$W/forward/shard$i.txt"; rm -f "$W/forward/shard$i.out"
  done
  python3 "$HERE/merge_shards.py" "$(wc -l < "$D/train.en")" "$W"/forward/shard*.txt > "$W/forward/train.tmp"
  mv "$W/forward/train.tmp" "$W/forward/train.de"
}

student_bin() {
  [ -f "$W/student-bin/preprocess.json" ] && return 0
  mkdir -p "$W/forward/corpus"
  cp "$D/train.en" "$W/forward/corpus/distilled.en"; cp "$W/forward/train.de" "$W/forward/corpus/distilled.de"
  local prefixes="$W/forward/corpus/distilled"
  [ "$MIX" != 0 ] && prefixes="$prefixes,$D/train"
  log "nmt-preprocess -> student-bin/ (the teacher's subword model and dictionary)"
  nmt-preprocess --source-lang en --target-lang de --trainpref "$prefixes" --validpref "$D/val" \
    --testpref "$D/test_2016_flickr" --bpe sentencepiece --bpe-model "$W/bin/spm.model" --srcdict "$W/bin/dict.en.txt" \
    --tgtdict "$W/bin/dict.de.txt" --workers 2 --destdir "$W/student-bin" > "$W/student-bin.log" 2>&1 \
    || fail "$W/student-bin.log"
}

student() {
  local mix=(); [ "$MIX" != 0 ] && mix=(--corpus-weights "1,$MIX")
  train "$W/student-bin" "$W/student" "$SU" "${STUDENT_MODEL[@]}" --save-interval-updates "$INTERVAL" \
    --keep-interval-updates 5 "${mix[@]}"
  [ -f "$W/student/averaged.pt" ] && return 0
  nmt-average-checkpoints --inputs "$W/student" --num-update-checkpoints 5 --output "$W/student/averaged.pt" \
    > "$W/student/average.log" 2>&1 || fail "$W/student/average.log"
}

export_both() {  # ROLE CHECKPOINT DATABIN
  local R=$1 C=$2 B=$3
  [ -d "$W/export/$R.folder" ] || nmt-export "$B" --path "$C" --format folder --output-dir "$W/export/$R.folder" \
    > "$W/export/$R.log" 2>&1 || fail "$W/export/$R.log"
  [ -d "$W/export/$R.ct2" ] || nmt-export "$B" --path "$C" --format ctranslate2 --quantization int8 \
    --output-dir "$W/export/$R.ct2" >> "$W/export/$R.log" 2>&1 || fail "$W/export/$R.log"
}

data
preprocess
T=$(teacher)
forward "$T"
student_bin
student
mkdir -p "$W/export"
export_both teacher "$T" "$W/bin"
export_both student "$W/student/averaged.pt" "$W/student-bin"
python3 "$HERE/evaluate.py" "$W" --source "$D/test_2016_flickr.en" --reference "$D/test_2016_flickr.de" \
  --runs "$RUNS" --beam "$BEAM" --student-beams "$BEAM,1" -- "${SEARCH[@]}" | tee "$W/table.md"

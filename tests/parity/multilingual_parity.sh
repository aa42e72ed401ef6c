#!/usr/bin/env bash
# Learning parity with fairseq 0.12.3's translation_multi_simple_epoch on Multi30k (see README.md beside this).
#   One data-bin made by OUR nmt-preprocess --lang-pairs en-de,de-en,en-fr,fr-en (joint sentencepiece 8000)
#   is read by both systems; encoder langtok src + decoder langtok, temperature sampling T=1.5, 3+3 x 256/1024,
#   4 heads, shared embeddings, dropout 0.1, Adam (0.9,0.98), inverse_sqrt lr 1e-3 warmup 200, label smoothing
#   0.1, --max-tokens 4096, MAX_UPDATE updates (1200; 300 is a quicker look, whose BLEU of 5-10 moves by up to
#   2.8 between seeds), seeds SEEDS ("1 2"). Then:
#   - per-direction validation nll (fairseq's: fairseq_direction_nll.py, its own task/model/criterion; ours:
#     nmt-train's valid.<pair> lines), mean over seeds, % difference;
#   - BLEU per direction on test_2016_flickr (beam 4, lenpen 0.6, batch 64, fairseq-generate's length penalty,
#     stopping rule and maximum length on both sides), sacreBLEU on detokenized text;
#   - fairseq's seed-1 checkpoint converted by nmt-convert --from fairseq and decoded by nmt-generate for
#     IDENTITY_PAIRS ("en-de de-en"): the share of hypotheses identical to fairseq-generate's.
#   multilingual_report.py prints the table and OK/FAIL against the bar (nll within 3 %, BLEU within 1.0,
#   identity >= 99 %).
# Usage: multilingual_parity.sh WORKDIR [both|fairseq|nmt|report]
#   fairseq: fairseq's side only (then record it: multilingual_report.py WORKDIR --max-update N --record
#     multilingual_fairseq.json)
#   nmt: our side only, compared against WORKDIR's fairseq results or else the recorded multilingual_fairseq.json
#     (the identity check needs fairseq's checkpoint and hypotheses, so it runs only where WORKDIR has them).
# FAIRSEQ_PYTHON: a Python with fairseq-fixed 0.12.3.1 (default /tmp/nmt-checks/fairseq-venv/bin/python); our
# programs from the active environment. Every training and decoding runs under `flock $LOCK` (/tmp/heavy.lock)
# at nice 5, logged to files in WORKDIR.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
W=$(mkdir -p "$1" && cd "$1" && pwd); WHAT=${2:-both}
MU=${MAX_UPDATE:-1200}; SEEDS=${SEEDS:-1 2}; IDENTITY_PAIRS=${IDENTITY_PAIRS:-en-de de-en}
DATA=${MULTI30K:-$HERE/../../../shared/data/multi30k}; LOCK=${LOCK:-/tmp/heavy.lock}
FAIRSEQ_PYTHON=${FAIRSEQ_PYTHON:-/tmp/nmt-checks/fairseq-venv/bin/python}; FB=$(dirname "$FAIRSEQ_PYTHON")
PAIRS=en-de,de-en,en-fr,fr-en
heavy() { flock "$LOCK" nice -n 5 "$@"; }
log() { echo "$(date -u +%H:%M:%S) $*" >&2; }

TASK=(--task translation_multi_simple_epoch --lang-pairs $PAIRS --encoder-langtok src --decoder-langtok)
RECIPE=("${TASK[@]}" --sampling-method temperature --sampling-temperature 1.5 --encoder-layers 3 --decoder-layers 3
  --share-all-embeddings --dropout 0.1 --optimizer adam --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 200
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 4096 --max-update "$MU"
  --no-epoch-checkpoints --log-format simple --log-interval 20)
SEARCH=(--gen-subset test --beam 4 --lenpen 0.6 --batch-size 64 --required-batch-size-multiple 1)
# fairseq-generate's search rules, which our defaults differ from, named for nmt-generate: |Y|^alpha length
# penalty, a sentence done at --beam finished hypotheses, outputs up to 200 tokens (ours: the source's + 50)
FAIRSEQ_RULES=(--lenpen-style fairseq --early-stop beam --max-len-a 0 --max-len-b 200)

prepare() {
  [ -f "$W/bin/preprocess.json" ] && return 0
  log "nmt-preprocess --lang-pairs $PAIRS"
  heavy nmt-preprocess --lang-pairs $PAIRS --trainpref "$DATA/train" --validpref "$DATA/val" \
    --testpref "$DATA/test_2016_flickr" --bpe sentencepiece --bpe-vocab-size "${BPE_VOCAB:-8000}" --destdir "$W/bin" --workers 2 \
    > "$W/prep.log" 2>&1
}

hypotheses() { grep '^D-' "$1" | sed 's/^D-//' | sort -n -k1,1 | cut -f3-; }
bleu() { sacrebleu "$DATA/test_2016_flickr.${1#*-}" -i "$2" -b; }

fairseq_seed() {  # train, per-direction nll, then decode every direction
  local S=$1 D=$W/fairseq-$1; mkdir -p "$D"
  export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 PYTHONWARNINGS=ignore  # fairseq 0.12 predates weights_only loading
  if ! grep -q "done training in" "$D/train.log" 2>/dev/null; then  # a stopped run resumes from checkpoint_last.pt
    log "fairseq-train seed $S ($MU updates)"
    heavy "$FB/fairseq-train" "$W/bin" "${RECIPE[@]}" --seed "$S" --arch transformer --encoder-embed-dim 256 \
      --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4 \
      --decoder-attention-heads 4 --adam-betas '(0.9,0.98)' --cpu --num-workers 0 --save-dir "$D/ck" \
      --no-progress-bar >> "$D/train.log" 2>&1
  fi
  [ -f "$D/nll.json" ] || heavy "$FAIRSEQ_PYTHON" "$HERE/fairseq_direction_nll.py" "$W/bin" "$D/ck/checkpoint_last.pt" \
    2> "$D/nll.log" | tail -1 > "$D/nll.json"
}

fairseq_decode() {  # SEED PAIR...
  local S=$1 D=$W/fairseq-$1 p; shift
  for p in "$@"; do
    [ -s "$D/hyp.$p.txt" ] && continue
    log "fairseq-generate seed $S $p"
    heavy "$FB/fairseq-generate" "$W/bin" "${TASK[@]}" --source-lang "${p%-*}" --target-lang "${p#*-}" \
      --path "$D/ck/checkpoint_last.pt" --cpu --num-workers 0 "${SEARCH[@]}" --remove-bpe sentencepiece \
      > "$D/gen.$p.out" 2> "$D/gen.$p.err"
    hypotheses "$D/gen.$p.out" > "$D/hyp.$p.txt"
  done
}

nmt_seed() {
  local S=$1 D=$W/nmt-$1; mkdir -p "$D"
  if ! grep -q "done training: reached --max-update" "$D/train.log" 2>/dev/null; then  # a stopped run resumes
    log "nmt-train seed $S ($MU updates)"
    heavy nmt-train "$W/bin" "${RECIPE[@]}" --seed "$S" --arch transformer_base --embed-dim 256 --ffn-embed-dim 1024 \
      --attention-heads 4 --adam-betas 0.9,0.98 --no-validate-at-start --save-dir "$D/ck" >> "$D/train.log" 2>&1
  fi
}

nmt_decode() {  # CHECKPOINT OUTDIR PAIR...
  local C=$1 D=$2 p; shift 2
  for p in "$@"; do
    [ -s "$D/hyp.$p.txt" ] && continue
    log "nmt-generate $C $p"
    heavy nmt-generate "$W/bin" --path "$C" --source-lang "${p%-*}" --target-lang "${p#*-}" "${SEARCH[@]}" \
      "${FAIRSEQ_RULES[@]}" > "$D/gen.$p.out" 2> "$D/gen.$p.err"
    hypotheses "$D/gen.$p.out" > "$D/hyp.$p.txt"
  done
}

scores() {  # OUTDIR: bleu.json from its hyp.<pair>.txt
  local D=$1 p; { echo "{"; for p in ${PAIRS//,/ }; do
    [ -s "$D/hyp.$p.txt" ] && echo "\"$p\": $(bleu "$p" "$D/hyp.$p.txt"),"; done; echo '"_": null}'; } > "$D/bleu.json"
}

FIRST=${SEEDS%% *}

imported_decode() {  # fairseq's first-seed checkpoint, converted, decoded by nmt-generate
  local F=$W/fairseq-$FIRST/ck/checkpoint_last.pt
  [ -f "$F" ] || return 0
  mkdir -p "$W/imported"
  [ -f "$W/imported/checkpoint.pt" ] || nmt-convert --from fairseq --path "$F" --output "$W/imported/checkpoint.pt" \
    > "$W/imported/convert.log" 2>&1
  nmt_decode "$W/imported/checkpoint.pt" "$W/imported" $IDENTITY_PAIRS
}

run_fairseq() {
  prepare
  for S in $SEEDS; do fairseq_seed "$S"; done
  for S in $SEEDS; do fairseq_decode "$S" ${PAIRS//,/ }; scores "$W/fairseq-$S"; done
}

run_nmt() {
  prepare
  for S in $SEEDS; do nmt_seed "$S"; done
  imported_decode
  for S in $SEEDS; do nmt_decode "$W/nmt-$S/ck/checkpoint_last.pt" "$W/nmt-$S" ${PAIRS//,/ }; scores "$W/nmt-$S"; done
}

run_both() {  # trainings first, seed by seed, then the identity check, so a run cut short keeps the most
  prepare
  for S in $SEEDS; do fairseq_seed "$S"; nmt_seed "$S"; done
  fairseq_decode "$FIRST" $IDENTITY_PAIRS; imported_decode
  for S in $SEEDS; do
    fairseq_decode "$S" ${PAIRS//,/ }; scores "$W/fairseq-$S"
    nmt_decode "$W/nmt-$S/ck/checkpoint_last.pt" "$W/nmt-$S" ${PAIRS//,/ }; scores "$W/nmt-$S"
  done
}

case $WHAT in
  fairseq) run_fairseq ;;
  nmt) run_nmt ;;
  both) run_both ;;
  report) ;;
  *) echo "usage: multilingual_parity.sh WORKDIR [both|fairseq|nmt|report]" >&2; exit 2 ;;
esac
python "$HERE/multilingual_report.py" "$W" --seeds $SEEDS --identity-pairs $IDENTITY_PAIRS --max-update "$MU"

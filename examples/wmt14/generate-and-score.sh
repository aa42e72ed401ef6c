#!/usr/bin/env bash
# Translate newstest2014 as the paper does (beam 4, length penalty alpha 0.6, maximum length input+50)
# and score it two ways:
#   1. detokenized sacreBLEU against the raw references (the number to compare across papers today);
#   2. the paper's number: tokenized BLEU with compound splitting ("##AT##-##AT##"), as tensor2tensor's
#      get_ende_bleu.sh and fairseq's compound_split_bleu.sh compute it.
#
#   examples/wmt14/generate-and-score.sh DATA_BIN MODEL [OUTDIR]
# Environment: BEAM (4), LENPEN (0.6), MAX_TOKENS (4096), EXTRA (more nmt-generate flags),
#              REF (reference file; default DATA_BIN/raw/test.<tgt>).
set -euo pipefail
DATA_BIN="${1:?usage: generate-and-score.sh DATA_BIN MODEL [OUTDIR]}"
MODEL="${2:?usage: generate-and-score.sh DATA_BIN MODEL [OUTDIR]}"
OUTDIR="${3:-$(dirname "$MODEL")/newstest2014}"
mkdir -p "$OUTDIR"
TGT=$(ls "$DATA_BIN"/test.*-*.*.idx | head -n 1 | sed -E 's/.*test\.[^-]+-([^.]+)\..*/\1/')
REF="${REF:-$DATA_BIN/raw/test.$TGT}"
[[ -f "$REF" ]] || { echo "generate-and-score.sh: error: no reference file $REF (set REF=)" >&2; exit 2; }

# shellcheck disable=SC2086
nmt-generate "$DATA_BIN" --path "$MODEL" --gen-subset test \
  --beam "${BEAM:-4}" --lenpen "${LENPEN:-0.6}" --max-len-a 1 --max-len-b 50 \
  --max-tokens "${MAX_TOKENS:-4096}" ${EXTRA:-} > "$OUTDIR/generate.txt"
# D-<id> <score> <detokenized text>, back in the order of the test set
grep '^D-' "$OUTDIR/generate.txt" | sed 's/^D-//' | sort -n -k1,1 | cut -f3- > "$OUTDIR/hyp.detok.$TGT"
[[ $(wc -l < "$OUTDIR/hyp.detok.$TGT") == $(wc -l < "$REF") ]] || {
  echo "generate-and-score.sh: error: $(wc -l < "$OUTDIR/hyp.detok.$TGT") hypotheses for $(wc -l < "$REF") references" >&2; exit 1; }

echo "== detokenized sacreBLEU (newstest2014, $(wc -l < "$REF") sentences)"
nmt-score --sys "$OUTDIR/hyp.detok.$TGT" --ref "$REF" | tee "$OUTDIR/sacrebleu.txt"
echo "== tokenized BLEU with compound splitting (the paper's Table 2 metric)"
nmt-score --sys "$OUTDIR/hyp.detok.$TGT" --ref "$REF" --tokenized-bleu --compound-split --lang "$TGT" | tee "$OUTDIR/tokenized_bleu.txt"

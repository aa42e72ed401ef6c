#!/usr/bin/env bash
# Shared by prepare-wmt14en2de.sh and prepare-wmt14en2fr.sh (sourced, not run): download or take local files,
# clean by length and ratio, learn a joint subword vocabulary and binarize with nmt-preprocess.
#
# The caller sets: SRC TGT (languages), URLS FILES CORPORA (as fairseq's recipe), DEV (path of the dev set
# inside the downloaded files, without the language suffix), SACREBLEU_TEST (sacreBLEU test-set name),
# VOCAB_DEFAULT, NAME (default output name). Options (all optional):
#   --local DIR          no download: DIR holds train.{SRC,TGT} (and valid.* / test.* used when present)
#   --test-local DIR     the raw test set is read from DIR/newstest2014.{SRC,TGT} (or DIR/test.*) instead of sacreBLEU
#   --unescape           undo Moses XML escapes (&apos; &quot; …) in local files that were Moses-tokenized
#   --workdir DIR        downloads and intermediate text (default: wmt14_work/NAME)
#   --destdir DIR        the binarized data (default: data-bin/NAME)
#   --vocab-size V       joint subword vocabulary size (default: VOCAB_DEFAULT)
#   --bpe KIND           sentencepiece (default) or subword_nmt
#   --max-train-lines N  keep only the first N cleaned training pairs (CI)
#   --max-valid-lines N  keep only the first N dev sentences (CI)
#   --max-test-lines N   keep only the first N test sentences (CI)
#   --workers N          binarization processes (default: number of CPUs)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCAL=""
TEST_LOCAL=""
UNESCAPE=""
WORKDIR="wmt14_work/$NAME"
DESTDIR="data-bin/$NAME"
VOCAB="$VOCAB_DEFAULT"
BPE=sentencepiece
MAX_TRAIN_LINES=0
MAX_TEST_LINES=0
MAX_VALID_LINES=0
WORKERS=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')

die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --local) LOCAL="$2"; shift 2 ;;
    --test-local) TEST_LOCAL="$2"; shift 2 ;;
    --unescape) UNESCAPE="--unescape"; shift ;;
    --workdir) WORKDIR="$2"; shift 2 ;;
    --destdir) DESTDIR="$2"; shift 2 ;;
    --vocab-size) VOCAB="$2"; shift 2 ;;
    --bpe) BPE="$2"; shift 2 ;;
    --max-train-lines) MAX_TRAIN_LINES="$2"; shift 2 ;;
    --max-test-lines) MAX_TEST_LINES="$2"; shift 2 ;;
    --max-valid-lines) MAX_VALID_LINES="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
               sed -n '2,/^set -euo/p' "$HERE/prepare-common.sh" | sed '$d' | sed -n '/^# Options/,$p' | sed 's/^# \{0,1\}//'
               exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
command -v nmt-preprocess >/dev/null || die "nmt-preprocess not found: pip install -e . first"

ORIG="$WORKDIR/orig"
TMP="$WORKDIR/tmp"
mkdir -p "$ORIG" "$TMP"
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" >&2; }

fetch() {  # fetch URL FILE: download into $ORIG unless already there, then unpack
  local url="$1" file="$2"
  if [[ -f "$ORIG/$file" ]]; then
    say "$file already downloaded"
  else
    say "downloading $url"
    if command -v wget >/dev/null; then wget -q -O "$ORIG/$file.part" "$url"; else curl -fsSL -o "$ORIG/$file.part" "$url"; fi
    mv "$ORIG/$file.part" "$ORIG/$file"
  fi
  case "$file" in
    *.tgz|*.tar.gz) tar -xzf "$ORIG/$file" -C "$ORIG" ;;
    *.tar) tar -xf "$ORIG/$file" -C "$ORIG" ;;
  esac
}

# ------------------------------------------------------------------------------- 1. raw train/dev/test
if [[ -z "$LOCAL" ]]; then
  for ((i = 0; i < ${#URLS[@]}; ++i)); do fetch "${URLS[i]}" "${FILES[i]}"; done
  for f in "$ORIG"/*.gz; do [[ -e "$f" ]] && gunzip -kf "$f"; done
  for l in "$SRC" "$TGT"; do
    : > "$TMP/train.raw.$l"
    for c in "${CORPORA[@]}"; do cat "$ORIG/$c.$l" >> "$TMP/train.raw.$l"; done
    cp "$ORIG/$DEV.$l" "$TMP/valid.raw.$l"
  done
else
  [[ -f "$LOCAL/train.$SRC" && -f "$LOCAL/train.$TGT" ]] || die "--local $LOCAL: expected train.$SRC and train.$TGT there"
  [[ -f "$LOCAL/valid.$SRC" ]] || die "--local $LOCAL: expected valid.$SRC and valid.$TGT there (the dev set)"
  for l in "$SRC" "$TGT"; do
    cp "$LOCAL/train.$l" "$TMP/train.raw.$l"
    cp "$LOCAL/valid.$l" "$TMP/valid.raw.$l"
  done
fi

if [[ -n "$TEST_LOCAL" ]]; then
  for l in "$SRC" "$TGT"; do
    if [[ -f "$TEST_LOCAL/newstest2014.$l" ]]; then cp "$TEST_LOCAL/newstest2014.$l" "$TMP/test.raw.$l"
    elif [[ -f "$TEST_LOCAL/test.$l" ]]; then cp "$TEST_LOCAL/test.$l" "$TMP/test.raw.$l"
    else die "--test-local $TEST_LOCAL: no newstest2014.$l or test.$l there"; fi
  done
elif [[ -n "$LOCAL" && -f "$LOCAL/test.$SRC" ]]; then
  for l in "$SRC" "$TGT"; do cp "$LOCAL/test.$l" "$TMP/test.raw.$l"; done
else
  command -v sacrebleu >/dev/null || die "sacrebleu not found (pip install sacrebleu), or give --test-local DIR"
  say "newstest2014 from sacreBLEU ($SACREBLEU_TEST)"
  sacrebleu -t "$SACREBLEU_TEST" -l "$SRC-$TGT" --echo src > "$TMP/test.raw.$SRC"
  sacrebleu -t "$SACREBLEU_TEST" -l "$SRC-$TGT" --echo ref > "$TMP/test.raw.$TGT"
fi
for l in "$SRC" "$TGT"; do
  if [[ $MAX_TEST_LINES -gt 0 ]]; then head -n "$MAX_TEST_LINES" "$TMP/test.raw.$l" > "$TMP/t"; mv "$TMP/t" "$TMP/test.raw.$l"; fi
  if [[ $MAX_VALID_LINES -gt 0 ]]; then head -n "$MAX_VALID_LINES" "$TMP/valid.raw.$l" > "$TMP/t"; mv "$TMP/t" "$TMP/valid.raw.$l"; fi
done

# ------------------------------------------------------------------------------------------- 2. clean
# Length 1..250 words and ratio <= 1.5, as fairseq's recipe runs clean-corpus-n.perl. The dev and test
# sets are not filtered (the test set must stay whole to be comparable).
say "cleaning by length and ratio"
python3 "$HERE/clean_corpus.py" "$TMP/train.raw" "$SRC" "$TGT" "$TMP/train" 1 250 --ratio 1.5 \
  --max-lines "$MAX_TRAIN_LINES" $UNESCAPE
for split in valid test; do
  for l in "$SRC" "$TGT"; do
    if [[ -n "$UNESCAPE" ]]; then
      python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); from clean_corpus import unescape
for line in sys.stdin: sys.stdout.write(unescape(line))' "$HERE" < "$TMP/$split.raw.$l" > "$TMP/$split.$l"
    else
      cp "$TMP/$split.raw.$l" "$TMP/$split.$l"
    fi
  done
done
wc -l "$TMP"/{train,valid,test}."$SRC" | sed '$d' >&2

# ------------------------------------------------------------------- 3. joint subword vocabulary + binarize
say "nmt-preprocess: joint $BPE vocabulary of $VOCAB, binarizing"
if [[ $BPE == subword_nmt ]]; then SIZE_FLAG=(--bpe-merges "$VOCAB"); else SIZE_FLAG=(--bpe-vocab-size "$VOCAB"); fi
nmt-preprocess --source-lang "$SRC" --target-lang "$TGT" \
  --trainpref "$TMP/train" --validpref "$TMP/valid" --testpref "$TMP/test" \
  --bpe "$BPE" "${SIZE_FLAG[@]}" ${BPE_EXTRA:-} --joined-dictionary \
  --workers "$WORKERS" --destdir "$DESTDIR" --overwrite >&2

# The untouched test text, for scoring detokenized output against the real references.
mkdir -p "$DESTDIR/raw"
for l in "$SRC" "$TGT"; do cp "$TMP/test.$l" "$DESTDIR/raw/test.$l"; done
say "done: $DESTDIR (raw test text in $DESTDIR/raw/)"

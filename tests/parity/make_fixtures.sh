#!/usr/bin/env bash
# Regenerate tests/parity/fixtures/ from real fairseq (see README.md beside this script).
# Usage: make_fixtures.sh [all|bilingual|multilingual]
# FAIRSEQ_PYTHON: a Python with fairseq-fixed==0.12.3.1 installed; by default a side venv is built at
# $FAIRSEQ_VENV (default ${TMPDIR:-/tmp}/fairseq-venv): torch 2.13.0 first, then fairseq's build dependencies,
# then fairseq-fixed without build isolation (it compiles C++/Cython extensions: a few minutes).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -z "${FAIRSEQ_PYTHON:-}" ]; then
  FV=${FAIRSEQ_VENV:-${TMPDIR:-/tmp}/fairseq-venv}
  if [ ! -x "$FV/bin/python" ] || ! "$FV/bin/python" -c "import fairseq" 2>/dev/null; then
    python3 -m venv "$FV"
    "$FV/bin/pip" install -q "pip==24.0"
    "$FV/bin/pip" install -q torch==2.13.0
    "$FV/bin/pip" install -q cffi cython "hydra-core==1.3.2" "omegaconf==2.3.0" "numpy<2" regex sacrebleu tqdm \
      bitarray scikit-learn packaging
    "$FV/bin/pip" install -q --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
  fi
  FAIRSEQ_PYTHON=$FV/bin/python
fi
# fairseq 0.12 predates torch's weights_only default; its own code loads nothing untrusted here
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 PYTHONWARNINGS=ignore
WHAT=${1:-all}  # all, bilingual (make_fixtures.py) or multilingual (make_multilingual_fixtures.py)
if [ "$WHAT" != multilingual ]; then
  "$FAIRSEQ_PYTHON" "$HERE/make_fixtures.py" --out "$HERE/fixtures"
fi
if [ "$WHAT" != bilingual ]; then  # our nmt-preprocess (the active environment) writes the data-bin fairseq reads
  ML=$HERE/fixtures/multilingual; RAW=$(mktemp -d)
  python "$HERE/make_multilingual_fixtures.py" --write-raw "$RAW"
  rm -rf "$ML"
  nmt-preprocess --lang-pairs en-de,de-en,en-fr --trainpref "$RAW/train" --validpref "$RAW/valid" --destdir "$ML/bin" \
    --workers 1 > /dev/null
  "$FAIRSEQ_PYTHON" "$HERE/make_multilingual_fixtures.py" --out "$ML"
  for pair in en-de de-en en-fr; do
    "$(dirname "$FAIRSEQ_PYTHON")/fairseq-generate" "$ML/bin" --task translation_multi_simple_epoch \
      --lang-pairs en-de,de-en,en-fr --encoder-langtok src --decoder-langtok --source-lang "${pair%-*}" \
      --target-lang "${pair#*-}" --path "$ML/checkpoint.pt" --gen-subset valid --beam 4 --lenpen 0.6 \
      --batch-size 8 --cpu --num-workers 0 2> /dev/null | grep '^D-' | sed 's/^D-//' | sort -n -k1,1 | cut -f3- \
      > "$ML/generate.$pair.txt"
  done
  rm -rf "$RAW"
fi

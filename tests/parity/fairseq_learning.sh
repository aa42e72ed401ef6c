#!/usr/bin/env bash
# fairseq's validation nll on the recipe of test_learning.py (see README.md): run once per seed, record the
# numbers in test_learning.py's FAIRSEQ_VALID_NLL. Usage: fairseq_learning.sh WORKDIR [SEED...]
# WORKDIR must hold the data-bin that test_learning.py builds (bin/: run the test with
# NMT_TOOLKIT_KEEP_LEARNING_BIN=WORKDIR once) — the same sentencepiece model encodes fairseq's text.
set -euo pipefail
W=$1; shift; FAIRSEQ_PYTHON=${FAIRSEQ_PYTHON:?set FAIRSEQ_PYTHON to a python with fairseq-fixed 0.12.3.1}
FB=$(dirname "$FAIRSEQ_PYTHON"); RAW=$W/raw; cd "$W"
mkdir -p enc
for sp in train valid; do for l in en de; do
  "$FAIRSEQ_PYTHON" -c "import sentencepiece as s; m=s.SentencePieceProcessor(model_file='bin/spm.model'); [print(' '.join(m.encode(x.rstrip('\n'), out_type=str))) for x in open('$RAW/$sp.$l', encoding='utf-8')]" > enc/$sp.$l
done; done
rm -rf fs-bin; "$FB/fairseq-preprocess" --source-lang en --target-lang de --trainpref enc/train --validpref enc/valid \
  --destdir fs-bin --joined-dictionary --workers 1 > fs-prep.log 2>&1
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 PYTHONWARNINGS=ignore
for S in "${@:-1}"; do
  "$FB/fairseq-train" fs-bin --cpu --num-workers 0 --seed "$S" --arch transformer --encoder-layers 2 --decoder-layers 2 \
    --encoder-embed-dim 128 --decoder-embed-dim 128 --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512 \
    --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings --dropout 0.1 \
    --optimizer adam --adam-betas '(0.9,0.98)' --lr 2e-3 --lr-scheduler inverse_sqrt --warmup-updates 100 \
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 2048 --max-update 300 \
    --no-save --log-format simple --log-interval 50 --no-progress-bar > "fs-train-$S.log" 2>&1
  echo "seed $S: $(grep '| valid |' "fs-train-$S.log" | tail -1 | grep -oE 'nll_loss [0-9.]+')"
done

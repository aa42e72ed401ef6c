#!/usr/bin/env bash
# Start from a pretrained Hugging Face Marian (OPUS-MT) model: import it, translate raw text, fine-tune it on
# your data, export it to CTranslate2 for serving and back to the Hugging Face format for the Hub.
#
# Usage:
#   huggingface-cli download Helsinki-NLP/opus-mt-en-de --local-dir opus-mt-en-de     # outside the toolkit
#   examples/opus-mt/run.sh opus-mt-en-de --data ../shared/data/multi30k --src en --tgt de \
#       --valid-name val --test-name test_2016_flickr
#   examples/opus-mt/run.sh tests/fixtures/marian/en-de --data ../shared/data/multi30k   # the test fixture
#
# Arguments and options:
#   MARIAN_DIR            a MarianMTModel folder (config.json, model.safetensors or pytorch_model.bin,
#                         vocab.json, source.spm, target.spm, tokenizer_config.json)
#   --data DIR            parallel corpus DIR/{train,VALID,TEST}.{SRC,TGT}, raw text (without it: import,
#                         translate the built-in sentences and export, no fine-tuning)
#   --src L / --tgt L     file suffixes (default: en / de)
#   --valid-name NAME     validation prefix (default: val)      --test-name NAME   test prefix (default:
#                         test_2016_flickr)
#   --max-train-lines N   fine-tune on the first N pairs (default: 10000)
#   --test-lines N        translate and score the first N test sentences (default: 200)
#   --max-update N        fine-tuning updates (default: 300)
#   --lr LR               fine-tuning learning rate, constant (default: 5e-5)
#   --workdir DIR         where everything is written (default: runs/opus-mt): a new or empty folder, or one an
#                         earlier run made (what that run wrote is removed first; any other folder is refused)
#   --threads T           torch threads (default: 2)
#   --tag TAG             a multilingual model's target-language token (e.g. >>fra<<)
#
# Exit status: 0 when every step ran; non-zero with the failing program's one-line error otherwise.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -* ]]; then
    sed -n '2,25p' "$0"
    exit 2
fi
MARIAN="$1"; shift
DATA=""; SRC=en; TGT=de; VALID=val; TEST=test_2016_flickr
TRAIN_LINES=10000; TEST_LINES=200; MAX_UPDATE=300; LR=5e-5; WORK=runs/opus-mt; THREADS=2; TAG=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --data) DATA="$2"; shift 2 ;;
        --src) SRC="$2"; shift 2 ;;
        --tgt) TGT="$2"; shift 2 ;;
        --valid-name) VALID="$2"; shift 2 ;;
        --test-name) TEST="$2"; shift 2 ;;
        --max-train-lines) TRAIN_LINES="$2"; shift 2 ;;
        --test-lines) TEST_LINES="$2"; shift 2 ;;
        --max-update) MAX_UPDATE="$2"; shift 2 ;;
        --lr) LR="$2"; shift 2 ;;
        --workdir) WORK="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --tag) TAG="$2"; shift 2 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
export OMP_NUM_THREADS="$THREADS"
# a new or empty folder becomes this script's; what an earlier run of it wrote there is removed; anything else
# is refused, never wiped
python3 -m nmt_toolkit.cli.workdir "$WORK" --owner examples/opus-mt/run.sh --entries "model,bin,ck,finetuned,ct,hf,test.*,train.*,valid.*" || exit 2
TAG_FLAG=(); [[ -n "$TAG" ]] && TAG_FLAG=(--target-lang-tag "$TAG")

hypotheses() {  # nmt-generate's detokenized outputs, one per line in input order
    grep '^D-' | cut -f3-
}

echo "== 1. Hugging Face Marian -> our model folder"
nmt-convert --from marian --path "$MARIAN" --output "$WORK/model" --source-lang "$SRC" --target-lang "$TGT" \
    "${TAG_FLAG[@]}"

echo "== 2. translate raw text (no data-bin, no preprocessing)"
if [[ -n "$DATA" ]]; then
    head -n "$TEST_LINES" "$DATA/$TEST.$SRC" > "$WORK/test.$SRC"
    head -n "$TEST_LINES" "$DATA/$TEST.$TGT" > "$WORK/test.$TGT"
else
    printf '%s\n' "A man rides a red bicycle." "Two dogs play in the snow." > "$WORK/test.$SRC"
fi
nmt-generate --path "$WORK/model" --input "$WORK/test.$SRC" --beam 4 | hypotheses > "$WORK/test.imported.$TGT"
head -n 2 "$WORK/test.imported.$TGT"
[[ -n "$DATA" ]] && nmt-score --sys "$WORK/test.imported.$TGT" --ref "$WORK/test.$TGT"

FINAL="$WORK/model"
if [[ -n "$DATA" ]]; then
    echo "== 3. fine-tune $MAX_UPDATE updates on $DATA (the folder's dictionaries and sentencepiece models)"
    head -n "$TRAIN_LINES" "$DATA/train.$SRC" > "$WORK/train.$SRC"
    head -n "$TRAIN_LINES" "$DATA/train.$TGT" > "$WORK/train.$TGT"
    cp "$DATA/$VALID.$SRC" "$WORK/valid.$SRC"; cp "$DATA/$VALID.$TGT" "$WORK/valid.$TGT"
    nmt-preprocess --model-folder "$WORK/model" --trainpref "$WORK/train" --validpref "$WORK/valid" \
        --destdir "$WORK/bin" --workers 1
    nmt-train "$WORK/bin" --finetune-from-model "$WORK/model" --optimizer adam --lr "$LR" --lr-scheduler fixed \
        --max-tokens 4000 --max-update "$MAX_UPDATE" --validate-interval-updates "$MAX_UPDATE" \
        --save-dir "$WORK/ck" --save-model-folder "$WORK/finetuned" --no-epoch-checkpoints --log-format simple
    nmt-generate --path "$WORK/finetuned" --input "$WORK/test.$SRC" --beam 4 | hypotheses > "$WORK/test.finetuned.$TGT"
    nmt-score --sys "$WORK/test.finetuned.$TGT" --ref "$WORK/test.$TGT"
    FINAL="$WORK/finetuned"
fi

echo "== 4. export to CTranslate2 (serving) and decode with it"
if python -c "import ctranslate2" 2>/dev/null; then
    nmt-export --path "$FINAL" --format ctranslate2 --output-dir "$WORK/ct2"
    SAME=(--beam 4 --lenpen-style fairseq --early-stop beam)  # the search options CTranslate2 has
    nmt-generate "$FINAL" --path "$WORK/ct2" --engine ctranslate2 --input "$WORK/test.$SRC" "${SAME[@]}" \
        | hypotheses > "$WORK/test.ct2.$TGT"
    nmt-generate --path "$FINAL" --input "$WORK/test.$SRC" "${SAME[@]}" | hypotheses > "$WORK/test.torch.$TGT"
    same=$(paste "$WORK/test.ct2.$TGT" "$WORK/test.torch.$TGT" | awk -F'\t' '$1 == $2' | wc -l)
    echo "CTranslate2 and our engine agree on $same of $(wc -l < "$WORK/test.$SRC") sentences"
else
    echo "(ctranslate2 not installed: pip install 'nmt_toolkit[ct2]')"
fi

echo "== 5. export back to Hugging Face Marian"
nmt-export --path "$FINAL" --format marian --output-dir "$WORK/hf"
echo "MarianMTModel.from_pretrained('$WORK/hf') loads it; publish it with:"
echo "    huggingface-cli upload <user>/<model-name> $WORK/hf"

#!/usr/bin/env bash
# Acceptance check of lexically constrained decoding on a real model: our nmt-generate --constraints against real
# fairseq-interactive --constraints (fairseq 0.12) decoding the same checkpoint, exported with nmt-export.
#
#   tests/parity/constraints_agreement.sh CHECKPOINT DATA_BIN WORKDIR
#   e.g. tests/parity/constraints_agreement.sh /tmp/hyps/parity.pt /tmp/nmt-checks/parity-nmt/bin /tmp/cons-parity
#
# 1. exports CHECKPOINT to WORKDIR/fairseq (nmt-export --format fairseq: checkpoint.pt and the dictionaries);
# 2. draws 1-2 constraints per test sentence, each 1-3 consecutive words of the raw (detokenized) reference, in
#    reference order and disjoint (tests/fixtures/fairseq/draw_constraints.py, seed 1), from words whose pieces
#    the target dictionary holds (we refuse a phrase the model could only write as <unk>; fairseq would force
#    <unk>): WORKDIR/input.txt, source<TAB>c1[<TAB>c2] as raw text;
# 3. fairseq reads WORKDIR/input.pieces.txt, every field of input.txt cut into pieces by the data-bin's
#    sentencepiece model (the sentencepiece library, no --bpe in fairseq: its venv need not have it), while ours
#    reads the raw input.txt and encodes it itself - so both decode the same token sequences, or the check fails;
# 4. per configuration (CONFIGS, default ordered and unordered x beam 4 and 10; lenpen 0.6, nbest 1, the length
#    limit 0 * source + 200 on both sides, so batching cannot matter) runs fairseq-interactive and ours, with and
#    without constraints, keeping every output in WORKDIR (fairseq-<mode>-beam<N>.txt, ours-..., *-plain-...);
# 5. prints one line per configuration: sentences, identical best hypotheses (%), constraint coverage of ours
#    and of fairseq's (% of outputs holding all their phrases as pieces), BLEU without -> with constraints
#    (sacreBLEU on the spm-decoded H- lines against the raw references) for each side, and run times.
# Exits 1 if any configuration has < 99 % identical hypotheses or < 100 % coverage of ours.
#
# Environment: FAIRSEQ_PYTHON (default /tmp/nmt-checks/fairseq-venv/bin/python), NMT_PYTHON (default python3),
# CONFIGS ("ordered:4 unordered:4 ordered:10 unordered:10"), SIDES ("fairseq ours": SIDES=fairseq runs and reports
# fairseq's half only; SIDES=ours reruns ours against the fairseq outputs an earlier run left in WORKDIR - the
# constraints are drawn again, identically), LIMIT (first N sentences; default all), THREADS (2),
# SOURCE/REFERENCE (raw test files; default: those preprocess.json of DATA_BIN records for its test split).
# Measured (2026-11-28, /tmp/hyps/parity.pt: 300 updates on Multi30k, 1,000 sentences, 1 thread on a shared
# 2-core CPU): fairseq 78/76/158/155 s for ordered 4, unordered 4, ordered 10, unordered 10 (27 and 49 s without
# constraints), ours 45/44/93/100 s; identical 100/100/100/99.9 %, coverage 100 % on both sides; BLEU
# 20.73 -> 25.08/24.29 at beam 4, 20.50 -> 31.70/31.12 at beam 10.
set -euo pipefail
CK=${1:?CHECKPOINT}; BIN=${2:?DATA_BIN}; W=${3:?WORKDIR}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd); TOOL=$HERE/../fixtures/fairseq/draw_constraints.py
FP=${FAIRSEQ_PYTHON:-/tmp/nmt-checks/fairseq-venv/bin/python}; NP=${NMT_PYTHON:-python3}; FB=$(dirname "$FP")
CONFIGS=${CONFIGS:-"ordered:4 unordered:4 ordered:10 unordered:10"}; SIDES=${SIDES:-"fairseq ours"}
THREADS=${THREADS:-2}
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 PYTHONWARNINGS=ignore  # fairseq 0.12 predates torch's weights_only default
mkdir -p "$W"

# languages, raw test text and subword model, as nmt-preprocess recorded them
read -r SL TL SRC REF SPM < <("$NP" - "$BIN" <<'EOF'
import json, os, sys
bin_ = sys.argv[1]
p = json.load(open(os.path.join(bin_, "preprocess.json")))
sl, tl, test = p["source_lang"], p["target_lang"], p["splits"]["test"]
sub = p.get("subword") or {}
if sub and sub.get("type") != "sentencepiece":
    sys.exit(f"{bin_}: subword model {sub.get('type')}: this check encodes for fairseq with sentencepiece only")
print(sl, tl, os.environ.get("SOURCE", test[sl]["file"]), os.environ.get("REFERENCE", test[tl]["file"]),
      os.path.join(bin_, sub["model"]) if sub else "-")
EOF
)
SPM_FLAGS=(); [ "$SPM" != - ] && SPM_FLAGS=(--spm "$SPM")

# 1. the export fairseq decodes (kept between runs: the same checkpoint exports the same file)
[ -f "$W/fairseq/checkpoint.pt" ] || "$NP" -m nmt_toolkit.cli.export "$BIN" --path "$CK" --format fairseq \
  --output-dir "$W/fairseq" > "$W/export.log" 2>&1
# 2-3. constraints, the raw files ours reads and the pieces fairseq reads
"$NP" "$TOOL" draw "$SRC" "$REF" "$W/input.txt" --seed 1 ${LIMIT:+--limit "$LIMIT"} \
  ${SPM_FLAGS[@]+"${SPM_FLAGS[@]}"} --dict "$BIN/dict.$TL.txt"
N=$(wc -l < "$W/input.txt"); head -n "$N" "$REF" > "$W/reference.txt"
if [ "$SPM" != - ]; then "$NP" "$TOOL" encode "$W/input.txt" "$W/input.pieces.txt" --spm "$SPM"
else cp "$W/input.txt" "$W/input.pieces.txt"; fi
cut -f1 "$W/input.txt" > "$W/source.txt"; cut -f1 "$W/input.pieces.txt" > "$W/source.pieces.txt"

fairseq() {  # fairseq <output> <input> <beam> [--constraints MODE]: one fairseq-interactive run, CPU
  OMP_NUM_THREADS=$THREADS "$FB/fairseq-interactive" "$W/fairseq" --path "$W/fairseq/checkpoint.pt" \
    --source-lang "$SL" --target-lang "$TL" --cpu --beam "$3" --nbest 1 --lenpen 0.6 --max-len-a 0 --max-len-b 200 \
    --buffer-size 1000 --batch-size 32 --required-batch-size-multiple 1 --input "$2" "${@:4}" > "$1" 2> "$1.log"
}
ours() {  # ours <output> <input> <beam> [--constraints MODE]: nmt-generate with fairseq's search rules, CPU
  "$NP" -m nmt_toolkit.cli.generate "$BIN" --path "$CK" --input "$2" --beam "$3" --nbest 1 --lenpen 0.6 \
    --lenpen-style fairseq --early-stop beam --max-len-a 0 --max-len-b 200 --batch-size 32 --cpu \
    --threads "$THREADS" "${@:4}" > "$1" 2> "$1.log"
}
timed() {  # timed <label> <command...>: run it, append "<label> <seconds>" to WORKDIR/times.txt
  local start=$EPOCHREALTIME
  "${@:2}" || { echo "constraints_agreement.sh: $1 failed; its stderr: $3.log" >&2; exit 1; }
  awk "BEGIN { printf \"%s %.1f\\n\", \"$1\", $EPOCHREALTIME - $start }" >> "$W/times.txt"
}
seconds() { awk -v k="$1" '$1 == k { s = $2 } END { print (s == "" ? "-" : s) " s" }' "$W/times.txt"; }

# 4-5. every configuration: decode, then report
: > "$W/times.txt"; status=0; declare -A plain_done  # each beam's unconstrained run, once
for config in $CONFIGS; do
  mode=${config%:*}; beam=${config#*:}
  for side in $SIDES; do
    if [ "$side" = fairseq ]; then input=$W/input.pieces.txt; plain=$W/source.pieces.txt; else input=$W/input.txt; plain=$W/source.txt; fi
    timed "$side-$mode-beam$beam" "$side" "$W/$side-$mode-beam$beam.txt" "$input" "$beam" --constraints "$mode"
    if [ -z "${plain_done[$side$beam]:-}" ]; then
      timed "$side-plain-beam$beam" "$side" "$W/$side-plain-beam$beam.txt" "$plain" "$beam"; plain_done[$side$beam]=1
    fi
  done
  args=(--mode "$mode" --reference "$W/reference.txt" --fairseq "$W/fairseq-$mode-beam$beam.txt"
        --fairseq-plain "$W/fairseq-plain-beam$beam.txt" ${SPM_FLAGS[@]+"${SPM_FLAGS[@]}"})
  [[ " $SIDES " == *" ours "* ]] && args+=(--ours "$W/ours-$mode-beam$beam.txt" --ours-plain "$W/ours-plain-beam$beam.txt")
  label="$mode beam $beam (fairseq $(seconds "fairseq-$mode-beam$beam"), ours $(seconds "ours-$mode-beam$beam"))"
  "$NP" "$TOOL" report "$W/input.pieces.txt" --label "$label" "${args[@]}" || status=1
done
exit $status

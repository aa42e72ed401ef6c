"""What lexical constraints cost: the same sentences through nmt-generate with and without --constraints.

    python benchmarks/constraints_speed.py DATA_BIN --path M.pt --input constrained.en --reference test.de \
        [--rounds 3] [--kinds ordered,unordered] -- --beam 4 --lenpen 0.6 …

``--input`` holds fairseq-interactive's constrained lines (the source, then each target phrase after a TAB);
the run without constraints reads the sources alone. Each side is a whole ``nmt-generate --input`` process
(2 threads unless the search options say otherwise), the sides taking turns ``--rounds`` times. One JSON line
per side: the median sentences/s of decoding (the program's own line), the median whole-process seconds,
sacreBLEU of its translations against ``--reference``, and the share of outputs holding every phrase (in
order for ``ordered``), looked for in the detokenized translations.
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from decode_run import RATE, code_revision, cpu_name  # noqa: E402


def run_side(command: list[str]) -> tuple[float, float, dict[int, str]]:
    """(decoding sentences/s, whole-process seconds, {sentence id: detokenized translation})."""
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"constraints_speed.py: {' '.join(command)}: {done.stderr.strip().splitlines()[-1:]}")
    rate = RATE.search(done.stderr)
    hyps = {int(k[2:]): t for k, _, t in (line.split("\t", 2) for line in done.stdout.splitlines()
                                          if line.startswith("D-"))}
    return float(rate.group(4)) if rate else float("nan"), wall, hyps


def holds(text: str, phrases: list[str], ordered: bool) -> bool:
    """Whether ``text`` contains each phrase, one after another when ``ordered`` (a phrase met as subword
    pieces is a substring of the detokenized translation)."""
    at = 0
    for phrase in phrases:
        found = text.find(phrase, at if ordered else 0)
        if found < 0:
            return False
        at = found + len(phrase)
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data")
    p.add_argument("--path", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kinds", default="ordered")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args, search = p.parse_args(argv[:cut]), argv[cut + 1:]
    import sacrebleu

    lines = pathlib.Path(args.input).read_text(encoding="utf-8").splitlines()
    phrases = [line.split("\t")[1:] for line in lines]
    references = pathlib.Path(args.reference).read_text(encoding="utf-8").splitlines()
    plain = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8")
    plain.write("".join(line.split("\t")[0] + "\n" for line in lines))
    plain.close()
    base = ["nmt-generate", args.data, "--path", args.path, *search]
    sides = {"off": base + ["--input", plain.name]}
    for kind in args.kinds.split(","):
        sides[kind] = base + ["--input", args.input, "--constraints", kind]
    measured = {side: [] for side in sides}
    for _ in range(args.rounds):
        for side, command in sides.items():
            measured[side].append(run_side(command))
    pathlib.Path(plain.name).unlink()
    for side, runs in measured.items():
        hyps = [runs[0][2][i] for i in range(len(lines))]
        print(json.dumps({
            "benchmark": "constraints_speed", "date": datetime.date.today().isoformat(), "constraints": side,
            "sentences": len(lines), "sentences_per_s": round(statistics.median(r[0] for r in runs), 2),
            "process_s": round(statistics.median(r[1] for r in runs), 2),
            "bleu": round(sacrebleu.corpus_bleu(hyps, [references]).score, 2),
            "all_phrases_present": round(sum(holds(h, c, side != "unordered") for h, c in zip(hyps, phrases))
                                         / len(lines), 4),
            "cpu": cpu_name(), "code": code_revision(), "search": " ".join(search), "rounds": args.rounds}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()

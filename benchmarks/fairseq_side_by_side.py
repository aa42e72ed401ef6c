"""nmt-generate and fairseq-generate, side by side, on the same data, beam, batch and output length.

    python benchmarks/fairseq_side_by_side.py --data data-bin --checkpoint ours.pt \\
        --fairseq-generate /path/to/venv/bin/fairseq-generate --fairseq-checkpoint theirs.pt \\
        [--source-lang en --target-lang de] [--beam 4] [--batch-size 64] [--length 20] [--runs 3] [--threads 2]
        [--ours-args "--decode-workers 1"]

Both programs translate the ``--gen-subset`` split of one data-bin (nmt-preprocess writes fairseq's binary
format and file names, so fairseq reads it as it is) with two checkpoints of the same shape. The output
length is fixed (``--min-len L --max-len-a 0 --max-len-b L``: L tokens and EOS per sentence), so both do
the same work whatever the weights are (random weights are fine: train each program one update). Runs
alternate, A B A B …; the figures are medians: the whole process's wall time, and the decoding time each
program reports itself ("translated … in Xs" / "Translated … in Xs"), which leaves out start-up and model
loading. fairseq is not a dependency of this project: install it anywhere and pass its fairseq-generate.
Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

_REPORTED = re.compile(r"[Tt]ranslated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s")


def _run(cmd: list, env: dict) -> tuple[float, float, int, int]:
    """Whole-process wall seconds and the program's own (seconds, sentences, tokens)."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"fairseq_side_by_side: {cmd[0]} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    found = _REPORTED.findall(proc.stdout)
    if not found:
        sys.exit(f"fairseq_side_by_side: no 'translated N sentences … in Xs' line from {cmd[0]}")
    sents, toks, secs = found[-1]
    return wall, float(secs), int(sents.replace(",", "")), int(toks.replace(",", ""))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--checkpoint", required=True, help="an nmt-train checkpoint")
    p.add_argument("--fairseq-generate", required=True, help="the fairseq-generate program")
    p.add_argument("--fairseq-checkpoint", required=True)
    p.add_argument("--source-lang")
    p.add_argument("--target-lang")
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--length", type=int, default=20, help="output tokens per sentence (EOS excluded)")
    p.add_argument("--lenpen", type=float, default=0.6)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ours-args", default="", help="extra nmt-generate options, one string (e.g. "
                   "'--decode-workers 1' for one batch at a time on all threads)")
    args = p.parse_args(argv)
    common = ["--gen-subset", args.gen_subset, "--beam", str(args.beam), "--batch-size", str(args.batch_size),
              "--min-len", str(args.length), "--max-len-a", "0", "--max-len-b", str(args.length),
              "--lenpen", str(args.lenpen), "--cpu", "--quiet"]
    langs = []
    if args.source_lang:
        langs += ["--source-lang", args.source_lang]
    if args.target_lang:
        langs += ["--target-lang", args.target_lang]
    ours = ([shutil.which("nmt-generate") or "nmt-generate", args.data, "--path", args.checkpoint] + langs + common
            + shlex.split(args.ours_args))
    theirs = [args.fairseq_generate, args.data, "--path", args.fairseq_checkpoint, "--num-workers", "0"] + langs + common
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    results = {"nmt-generate": [], "fairseq-generate": []}
    for _ in range(max(1, args.runs)):
        results["nmt-generate"].append(_run(ours, env))
        # fairseq 0.12 pickles its options into the checkpoint and calls torch.load without weights_only,
        # which torch >= 2.6 refuses; this lets it read its own file (our loader passes weights_only=True)
        results["fairseq-generate"].append(_run(theirs, dict(env, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")))
    report = {"benchmark": "fairseq_side_by_side", "beam": args.beam, "batch_size": args.batch_size,
              "ours_args": args.ours_args,
              "output_tokens_per_sentence": args.length + 1, "threads": args.threads, "runs": max(1, args.runs),
              "load_average_1min": round(os.getloadavg()[0], 2)}
    for name, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        decode = statistics.median(r[1] for r in runs)
        sents, toks = runs[0][2], runs[0][3]
        report[name] = {"sentences": sents, "tokens": toks, "wall_seconds": round(wall, 2),
                        "decode_seconds": round(decode, 2), "sentences_per_s": round(sents / decode, 1)}
    report["speedup_decode"] = round(report["fairseq-generate"]["decode_seconds"] /
                                     report["nmt-generate"]["decode_seconds"], 2)
    report["speedup_whole_process"] = round(report["fairseq-generate"]["wall_seconds"] /
                                            report["nmt-generate"]["wall_seconds"], 2)
    print(json.dumps(report))


if __name__ == "__main__":
    main()

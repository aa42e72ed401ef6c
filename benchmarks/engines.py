"""Inference engines side by side: our torch engine, CTranslate2 float32 and int8, and fairseq-generate.

    python benchmarks/engines.py --data data-bin --checkpoint ckpt.pt [--gen-subset test] [--beam 4]
        [--batch-size 64] [--lenpen 0.6] [--threads 2] [--runs 3] [--workdir DIR]
        [--fairseq-generate /path/to/fairseq-generate --fairseq-checkpoint theirs.pt]

One trained model, one data-bin split (e.g. the 1,000 Multi30k test_2016_flickr sentences), the same beam
search for every engine: beam 4, fairseq's length penalty ``|Y|^alpha`` and its stopping rule (``--lenpen-style
fairseq --early-stop beam``, what CTranslate2 and fairseq both do), output up to ``|x| + 50`` tokens. The
checkpoint is exported once per quantization (``nmt-export``, untimed). Each engine runs as its own process
on ``--threads`` threads; runs alternate (torch, ct2 float32, ct2 int8, fairseq, torch, …) so that a change
in the machine's load hits all engines alike. Reported per engine, medians over ``--runs``: sentences/s over
the decoding time each program reports itself ("translated N sentences … in Xs", which leaves out start-up
and model loading), the whole process's wall seconds, its peak resident memory (``ru_maxrss`` of that
child), and sacreBLEU of the D- lines against the references (the program's own "Generate" line). fairseq is
not a dependency of this project: install it anywhere and pass its fairseq-generate (with a checkpoint of
the same shape, e.g. converted by ``nmt_toolkit.importers.fairseq``). Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

_REPORTED = re.compile(r"[Tt]ranslated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s")
_BLEU = re.compile(r"^Generate \S+ with beam=\d+: .*?= ([\d.]+)[ ,]", re.M)


def _run(cmd: list, env: dict) -> dict:
    """One engine run: wall seconds, the program's decoding seconds and sentence count, peak RSS, BLEU."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"engines: {cmd[0]} failed (exit {proc.returncode}):\n{out[-2000:]}")
    found = _REPORTED.findall(out)
    bleu = _BLEU.findall(out)
    if not found or not bleu:
        sys.exit(f"engines: no 'translated N sentences … in Xs' or 'Generate … BLEU' line from {cmd[0]}:\n{out[-2000:]}")
    sents, _, secs = found[-1]
    return {"wall": wall, "decode": float(secs), "sentences": int(sents.replace(",", "")),
            "peak_rss_mb": usage.ru_maxrss / 1024, "bleu": float(bleu[-1])}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--checkpoint", required=True, help="an nmt-train checkpoint")
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lenpen", type=float, default=0.6)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workdir", help="keep the exported models here (default: a temporary folder)")
    p.add_argument("--fairseq-generate", help="fairseq's fairseq-generate program (optional)")
    p.add_argument("--fairseq-checkpoint", help="a fairseq checkpoint of the same model")
    args = p.parse_args(argv)
    nmt = shutil.which("nmt-generate") or "nmt-generate"
    workdir = args.workdir or tempfile.mkdtemp(prefix="nmt-engines-")
    common = ["--gen-subset", args.gen_subset, "--beam", str(args.beam), "--batch-size", str(args.batch_size),
              "--lenpen", str(args.lenpen), "--max-len-a", "1", "--max-len-b", "50", "--quiet"]
    ours = ["--lenpen-style", "fairseq", "--early-stop", "beam", "--cpu", "--threads", str(args.threads)]
    engines = {"torch": [nmt, args.data, "--path", args.checkpoint] + common + ours}
    for q in ("none", "int8"):
        folder = os.path.join(workdir, f"ct2-{q}")
        if not os.path.isdir(folder):
            subprocess.run([shutil.which("nmt-export") or "nmt-export", args.data, "--path", args.checkpoint,
                            "--quantization", q, "--output-dir", folder], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        engines[f"ctranslate2-{'float32' if q == 'none' else q}"] = (
            [nmt, args.data, "--path", folder, "--engine", "ctranslate2"] + common + ours)
    if args.fairseq_generate:
        if not args.fairseq_checkpoint:
            sys.exit("engines: --fairseq-generate needs --fairseq-checkpoint")
        engines["fairseq"] = [args.fairseq_generate, args.data, "--path", args.fairseq_checkpoint, "--num-workers",
                              "0", "--cpu"] + common
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    # fairseq 0.12 pickles its options into the checkpoint and calls torch.load without weights_only, which
    # torch >= 2.6 refuses; this lets fairseq's process alone read its own file (our loader keeps weights_only)
    extra_env = {"fairseq": {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}}
    results: dict = {name: [] for name in engines}
    loads = []
    for _ in range(max(1, args.runs)):
        for name, cmd in engines.items():
            loads.append(os.getloadavg()[0])
            results[name].append(_run(cmd, dict(env, **extra_env.get(name, {}))))
    report = {"benchmark": "engines", "beam": args.beam, "batch_size": args.batch_size, "lenpen": args.lenpen,
              "threads": args.threads, "runs": max(1, args.runs), "cpus": os.cpu_count(),
              "load_average_1min_median": round(statistics.median(loads), 2), "engines": {}}
    for name, runs in results.items():
        decode = statistics.median(r["decode"] for r in runs)
        report["engines"][name] = {
            "sentences": runs[0]["sentences"], "sentences_per_s": round(runs[0]["sentences"] / decode, 1),
            "decode_seconds": round(decode, 2), "decode_seconds_runs": [round(r["decode"], 2) for r in runs],
            "wall_seconds": round(statistics.median(r["wall"] for r in runs), 2),
            "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in runs)),
            "bleu": runs[0]["bleu"]}
    print(json.dumps(report))


if __name__ == "__main__":
    main()

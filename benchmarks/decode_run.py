"""One whole nmt-generate process timed and summarised as one JSON line (the GPU decoding suite's unit).

    python benchmarks/decode_run.py --label parity-test --save /tmp/eager.txt -- nmt-generate bin --path m.pt --cpu
    python benchmarks/decode_run.py --label parity-test --reference /tmp/eager.txt -- nmt-generate bin --path m.pt

The command after ``--`` runs as it is (its standard output is the hypothesis file); the program's own
"translated N sentences (T tokens) in S s (R sentences/s, …)" line gives ``sentences_per_s`` (decoding only) and
the wall clock gives ``process_s`` (start-up included). ``--save`` keeps the H- lines for later comparison;
``--reference`` counts the sentences whose hypothesis equals the reference's (``identical_to_eager``) and those
whose whole H- line, the printed score included, does (``identical_with_score``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time

RATE = re.compile(r"translated (\d+) sentences \((\d+) tokens\) in ([\d.]+)s \(([\d.]+) sentences/s")


def hypotheses(text: str) -> dict[str, str]:
    """``{sentence id: "score<TAB>tokens"}`` from the H- lines of nmt-generate's output."""
    out = {}
    for line in text.splitlines():
        if line.startswith("H-"):
            key, rest = line[2:].split("\t", 1)
            out[key] = rest
    return out


def tokens_of(h_line_rest):
    """The hypothesis of an H- line's "score<TAB>tokens" part, without the score."""
    return None if h_line_rest is None else h_line_rest.split("\t", 1)[-1]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def code_revision() -> str:
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--label", required=True, help="what was decoded, e.g. 'parity model, Multi30k test'")
    p.add_argument("--engine", default="torch")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--search", default="dynamic (eager)",
                   help="which beam search: 'static (CUDA graphs)' or 'dynamic (eager)'")
    p.add_argument("--device", default="cuda", help="cuda, or cpu (with --cores)")
    p.add_argument("--cores", type=int, default=None)
    p.add_argument("--save", default=None, help="write the H- lines here")
    p.add_argument("--reference", default=None, help="count H- lines equal to this file's")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    process_s = time.perf_counter() - start
    sys.stderr.write(done.stderr)
    rate = RATE.search(done.stderr)
    record = {"benchmark": "gpu_decode", "date": datetime.date.today().isoformat(), "model": args.label,
              "engine": args.engine, "dtype": args.dtype, "search": args.search,
              "device": "cuda" if args.device == "cuda" else f"cpu ({args.cores} cores)",
              "card": gpu_name() if args.device == "cuda" else cpu_name(), "exit": done.returncode,
              "sentences": int(rate.group(1)) if rate else None,
              "sentences_per_s": float(rate.group(4)) if rate else None,
              "tokens_per_s": round(int(rate.group(2)) / float(rate.group(3))) if rate else None,
              "process_s": round(process_s, 2), "command": " ".join(command)}
    hyps = hypotheses(done.stdout)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump(hyps, f)
    if args.reference and os.path.exists(args.reference):
        with open(args.reference, encoding="utf-8") as f:
            ref = json.load(f)
        # the tokens decide "identical"; the printed score can move in its last digit when the same sum is
        # reduced in another order (the static search's padded shapes pick other matrix kernels)
        record["identical_to_eager"] = sum(tokens_of(hyps.get(k)) == tokens_of(v) for k, v in ref.items())
        record["identical_with_score"] = sum(hyps.get(k) == v for k, v in ref.items())
        record["compared"] = len(ref)
    print(json.dumps(record), flush=True)


def gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip() or "cuda"
    except (OSError, subprocess.SubprocessError):
        return "cuda"


if __name__ == "__main__":
    main()

"""nmt-generate's CTranslate2 route against CTranslate2 alone, on the same export and the same sentences:
whole processes, alternating, idle and beside busy processes this script starts and stops itself.

    python benchmarks/ct2_overhead.py EXPORT INPUT [--threads 2] [--rounds 3] [--loads 0,1] [--max-len 256]
        [--label "distillation teacher, CTranslate2 int8, Multi30k test"] [--out results.jsonl]

Sides, run in turn (raw, raw-inter, plain, lines, raw, …) ``--rounds`` times per load level:
- ``raw``: ``raw_ctranslate2.py`` (sentencepiece, one ``translate_batch(max_batch_size=64)``, decode) with
  CTranslate2's usual layout, one replica on ``--threads`` threads;
- ``raw_inter``: the same with nmt-generate's layout and batches: ``--threads`` one-thread replicas, 16
  sentences a batch;
- ``plain``: ``nmt-generate --path EXPORT --input INPUT --engine ctranslate2 --plain`` (the translations
  alone, as the raw script prints them), its defaults otherwise;
- ``lines``: the same without ``--plain``: S-/H-/D-/P- lines with per-token scores (a second, scoring pass).
Every side searches alike: beam 4, length penalty 0.6 (``|Y|^alpha``), stopping when 4 hypotheses have
finished, every output at most ``--max-len`` tokens (``--max-len-a 0 --max-len-b N`` for nmt-generate).
Per side: median wall seconds, CPU seconds (user + system) and peak resident memory
(``ru_maxrss`` of that child); per level the ratios plain/raw and lines/raw (medians of the round-by-round
ratios), and how many translations differ from the raw side's. One JSON line per level.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

from decode_run import code_revision, cpu_name  # this folder's scripts share the machine's facts
from shared_machine import BUSY, start_busy, stop

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)


def commands(args) -> dict[str, list[str]]:
    raw = [sys.executable, os.path.join(HERE, "raw_ctranslate2.py"), args.export, args.input, "--threads",
           str(args.threads), "--max-len", str(args.max_len)]
    ours = [os.path.join(BIN, "nmt-generate"), "--path", args.export, "--input", args.input, "--engine",
            "ctranslate2", "--threads", str(args.threads), "--beam", "4", "--lenpen", "0.6", "--max-len-a", "0",
            "--max-len-b", str(args.max_len)]
    return {"raw": raw + ["--layout", "intra"], "raw_inter": raw + ["--layout", "inter", "--batch-size", "16"],
            "plain": ours + ["--plain"], "lines": ours}


def measured(command: list[str]) -> tuple[dict, list[str]]:
    """One whole process: wall s, CPU s and peak RSS MiB (its own: waited for here), and its translations."""
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{shlex.join(command)}: exit {os.waitstatus_to_exitcode(status)}: "
                         f"{err.strip().splitlines()[-1:]}")
    lines = out.splitlines()
    if any(line.startswith("S-") for line in lines):  # id order: D-<id>, sorted by id
        d_lines = [line.split("\t", 2) for line in lines if line.startswith("D-")]
        lines = [text for _, _, text in sorted(d_lines, key=lambda d: int(d[0][2:]))]
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}, lines


def level(load: int, sides: dict, rounds: int) -> dict:
    busy = start_busy(load, [sys.executable, "-c", BUSY])
    try:
        time.sleep(2.0 if load else 0.0)
        runs: dict = {name: [] for name in sides}
        texts: dict = {}
        for _ in range(rounds):
            for name, command in sides.items():
                figures, texts[name] = measured(command)
                runs[name].append(figures)
    finally:
        stop(busy)
    out: dict = {"busy_processes": load}
    for name, figures in runs.items():
        for what in ("wall", "cpu", "rss_mib"):
            out[f"{name}_{what}"] = round(statistics.median(f[what] for f in figures), 2)
    for name in ("plain", "lines", "raw_inter"):
        for what in ("wall", "cpu", "rss_mib"):
            ratios = [a[what] / b[what] for a, b in zip(runs[name], runs["raw"])]
            out[f"{name}_over_raw_{what}"] = round(statistics.median(ratios), 3)
    out["translations_differing_from_raw"] = {name: sum(a != b for a, b in zip(texts[name], texts["raw"]))
                                              for name in ("raw_inter", "plain", "lines")}
    out["runs"] = {name: [[round(f["wall"], 2), round(f["cpu"], 2), round(f["rss_mib"])] for f in figures]
                   for name, figures in runs.items()}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export")
    p.add_argument("input")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--loads", default="0,1", help="busy processes beside the runs, one level each")
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--label", default="")
    p.add_argument("--out", help="append the JSON lines to this file too")
    args = p.parse_args()
    sides = commands(args)
    facts = {"benchmark": "ct2_overhead", "date": datetime.date.today().isoformat(), "cpu": cpu_name(),
             "cores": len(os.sched_getaffinity(0)), "code": code_revision(), "label": args.label,
             "threads": args.threads, "sentences": sum(1 for _ in open(args.input, encoding="utf-8")),
             "max_len": args.max_len, "commands": {name: shlex.join(c) for name, c in sides.items()}}
    for load in (int(x) for x in args.loads.split(",")):
        line = json.dumps({**facts, **level(load, sides, args.rounds)})
        print(line, flush=True)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()

"""nmt-generate's defaults against a chosen setting on a machine shared with other work: whole processes,
alternating, idle and beside one or more busy processes this script starts and stops itself.

    python benchmarks/shared_machine.py DATA --path ck.pt [--gen-subset test] [--loads 0,1,2] [--pairs 3]
        [--common "--beam 4 --lenpen 0.6"] [--vs "--batch-size 64"] [--label "parity model, Multi30k test"]
        [--busy-command "nmt-train bin --no-save …"]

For each load level N, N busy processes (a Python loop each, or ``--busy-command``, e.g. a training run, at
the same priority as the decode) run for the whole level; then the two commands run in turn, A B A B …, ``--pairs`` times: A = ``nmt-generate DATA --path
… COMMON`` (the defaults), B = the same plus ``--vs``. Each run's wall seconds and CPU seconds (user + system
of the finished child, from the operating system) are recorded; a level prints one JSON line with the
medians, the pair-by-pair ratios A/B (their median) and whether A's and B's hypotheses were the same. Busy
processes are children of this script's process group and are stopped when a level ends, on an error and
on Ctrl-C.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import time

from decode_run import code_revision, cpu_name  # this folder's scripts share the machine's facts

BUSY = "while True: pass"


def timed(command: list[str]) -> tuple[float, float, str]:
    """(wall s, cpu s, the H- lines) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, "\n".join(line for line in done.stdout.splitlines() if line.startswith("H-"))


def start_busy(n: int, command: list[str]) -> list[subprocess.Popen]:
    return [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]


def stop(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        p.send_signal(signal.SIGKILL)
    for p in processes:
        p.wait()


def level(load: int, a: list[str], b: list[str], pairs: int, busy_command: list[str], warm_s: float) -> dict:
    busy = start_busy(load, busy_command)
    try:
        time.sleep(warm_s if load else 0.0)  # the neighbours at work before the first run starts
        runs = {"a": [], "b": []}
        hyps = {}
        for _ in range(pairs):
            for name, command in (("a", a), ("b", b)):
                wall, cpu, hyps[name] = timed(command)
                runs[name].append((wall, cpu))
    finally:
        stop(busy)
    median = {f"{name}_{what}_s": round(statistics.median(r[i] for r in runs[name]), 2)
              for name in runs for i, what in enumerate(("wall", "cpu"))}
    ratios = {f"a_over_b_{what}": round(statistics.median(x[i] / y[i] for x, y in zip(runs["a"], runs["b"])), 3)
              for i, what in enumerate(("wall", "cpu"))}
    return {"busy_processes": load, **median, **ratios, "same_hypotheses": hyps["a"] == hyps["b"],
            "runs": {name: [[round(w, 2), round(c, 2)] for w, c in r] for name, r in runs.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data")
    p.add_argument("--path", required=True)
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--common", default="", help="options both commands take, e.g. '--beam 4 --lenpen 0.6'")
    p.add_argument("--vs", default="--batch-size 64", help="what command B adds to the defaults")
    p.add_argument("--loads", default="0,1,2", help="the numbers of busy processes, comma-separated")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--label", default="")
    p.add_argument("--program", default="nmt-generate")
    p.add_argument("--code", default="", help="the revision the program runs (default: this checkout's), for --program "
                                            "from another checkout")
    p.add_argument("--busy-command", default="", help="what each busy process runs (default: a Python loop)")
    p.add_argument("--busy-warm-up", type=float, default=1.0, help="seconds the neighbours run before the first run")
    args = p.parse_args()
    busy = shlex.split(args.busy_command) if args.busy_command else [sys.executable, "-c", BUSY]
    a = [args.program, args.data, "--path", args.path, "--gen-subset", args.gen_subset, *shlex.split(args.common)]
    b = [*a, *shlex.split(args.vs)]
    common = {"benchmark": "shared_machine", "label": args.label, "a": shlex.join(a), "b": shlex.join(b),
              "cpu": cpu_name(), "cores": os.cpu_count(), "date": datetime.date.today().isoformat(),
              "code": args.code or code_revision(), "busy_command": shlex.join(busy)}
    for load in (int(x) for x in args.loads.split(",")):
        print(json.dumps({**common, **level(load, a, b, args.pairs, busy, args.busy_warm_up)}), flush=True)


if __name__ == "__main__":
    main()

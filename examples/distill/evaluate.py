"""Teacher and student side by side: ``evaluate.py WORKDIR --source test.en --reference test.de [--runs 3] -- SEARCH…``.

For each engine (the torch engine on the model folder, float32; CTranslate2 on the int8 export) the teacher's and
the student's ``nmt-generate --input SOURCE --threads 1 SEARCH…`` run as whole processes, teacher and student in
turn, ``--runs`` times each. Reported per system and engine: sacreBLEU of the detokenized hypotheses against the
reference, target words (whitespace-separated, of the hypotheses) per second of the median wall time on one
thread, so on one core (start-up included), the largest peak memory of the runs, and the size of the weights file.
Writes WORKDIR/distill.jsonl (one line per system and engine) and prints the table."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
from decode_run import code_revision, cpu_name  # noqa: E402  (the repository's benchmark scripts, beside this)

ENGINES = (("torch", "float32", "folder", ()), ("ctranslate2", "int8", "ct2", ("--engine", "ctranslate2")))
WEIGHTS = {"folder": "model.safetensors", "ct2": "model.bin"}


def timed(command: list[str], out: pathlib.Path) -> tuple[float, float]:
    """(wall seconds, peak MiB) of one whole process, its standard output kept in ``out``."""
    with open(out, "w", encoding="utf-8") as stdout, open(out.with_suffix(".err"), "w", encoding="utf-8") as stderr:
        start = time.monotonic()
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        tail = out.with_suffix(".err").read_text(encoding="utf-8").strip().splitlines()[-1:]
        raise SystemExit(f"evaluate.py: {' '.join(command)}: exit {process.returncode}: {' '.join(tail)}")
    return wall, usage.ru_maxrss / 1024


def hypotheses(out: pathlib.Path) -> list[str]:
    rows = {}
    for line in out.read_text(encoding="utf-8").splitlines():
        if line.startswith("D-"):
            key, _, text = line[2:].split("\t", 2)
            rows[int(key)] = text
    return [rows[i] for i in sorted(rows)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workdir", type=pathlib.Path)
    p.add_argument("--source", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--runs", type=int, default=3)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.search = argv[cut + 1:]  # nmt-generate's search options
    import sacrebleu

    references = pathlib.Path(args.reference).read_text(encoding="utf-8").splitlines()
    runs_dir = args.workdir / "evaluation"
    runs_dir.mkdir(exist_ok=True)
    common = {"cpu": cpu_name(), "date": datetime.date.today().isoformat(), "code": code_revision(),
              "sentences": len(references)}
    rows = []
    for engine, precision, kind, extra in ENGINES:
        measured = {role: [] for role in ("teacher", "student")}
        for run in range(args.runs):
            for role in measured:
                path = args.workdir / "export" / f"{role}.{kind}"
                command = ["nmt-generate", "--path", str(path), "--input", args.source, "--threads", "1",
                           *args.search, *extra]
                measured[role].append(timed(command, runs_dir / f"{role}.{engine}.{run}.out"))
        for role, results in measured.items():
            hyps = hypotheses(runs_dir / f"{role}.{engine}.0.out")
            wall = statistics.median(w for w, _ in results)
            weights = args.workdir / "export" / f"{role}.{kind}" / WEIGHTS[kind]
            rows.append({"role": role, "engine": engine, "precision": precision,
                         "bleu": round(sacrebleu.corpus_bleu(hyps, [references]).score, 2),
                         "words_per_s_per_core": round(sum(len(h.split()) for h in hyps) / wall, 1),
                         "wall_s": round(wall, 2), "peak_mib": round(max(m for _, m in results), 1),
                         "size_mib": round(weights.stat().st_size / 2**20, 2), **common})
    (args.workdir / "distill.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print("| system | engine | BLEU | words/s/core | wall s | peak MiB | weights MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['role']} | {r['engine']} {r['precision']} | {r['bleu']} | {r['words_per_s_per_core']} | "
              f"{r['wall_s']} | {r['peak_mib']} | {r['size_mib']} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

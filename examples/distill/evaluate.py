"""Teacher and student side by side: ``evaluate.py WORKDIR --source test.en --reference test.de [--runs 3]
[--beam 4] [--student-beams 4,1] -- SEARCH…``.

For each engine (the torch engine on the model folder, float32; CTranslate2 on the int8 export) the teacher at
``--beam`` and the student at each of ``--student-beams`` run ``nmt-generate --input SOURCE --threads 1 --plain
SEARCH…`` as whole processes (the translations alone, as a deployment makes them), taking turns, ``--runs`` times
each. Reported per system, beam and engine: sacreBLEU of the detokenized hypotheses against the reference, target
words (whitespace-separated, of the hypotheses) per second of the median wall time on one thread, so on one core
(start-up included), the largest peak memory of the runs, and the size of the weights file. Writes
WORKDIR/distill.jsonl (one line per system, beam and engine) and prints the table."""
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
    """The translations of a ``--plain`` run, one per line in input order."""
    return out.read_text(encoding="utf-8").splitlines()


def systems(beam: int, student_beams: list[int]) -> list[tuple[str, int]]:
    """(role, beam) pairs: the teacher as it is decoded, the student at each beam asked for (by default the
    teacher's and greedy search, the setting sequence-level distillation is meant to make good enough)."""
    return [("teacher", beam)] + [("student", b) for b in student_beams]


def measure(args, engine: str, kind: str, extra: tuple, runs_dir: pathlib.Path) -> dict:
    """{(role, beam): [(wall, peak MiB) per run]}, the systems taking turns run by run."""
    measured = {system: [] for system in systems(args.beam, args.student_beams)}
    for run in range(args.runs):
        for role, beam in measured:
            path = args.workdir / "export" / f"{role}.{kind}"
            command = ["nmt-generate", "--path", str(path), "--input", args.source, "--threads", "1",
                       "--plain", "--beam", str(beam), *args.search, *extra]
            measured[role, beam].append(timed(command, runs_dir / f"{role}.beam{beam}.{engine}.{run}.out"))
    return measured


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workdir", type=pathlib.Path)
    p.add_argument("--source", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--beam", type=int, default=4, help="the teacher's beam")
    p.add_argument("--student-beams", default=None, help="comma-separated (default: --beam and 1)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.search = argv[cut + 1:]  # nmt-generate's other search options
    beams = args.student_beams or f"{args.beam},1"
    args.student_beams = list(dict.fromkeys(int(b) for b in beams.split(",")))
    return args


def main() -> None:
    args = parse_args()
    import sacrebleu

    references = pathlib.Path(args.reference).read_text(encoding="utf-8").splitlines()
    runs_dir = args.workdir / "evaluation"
    runs_dir.mkdir(exist_ok=True)
    common = {"cpu": cpu_name(), "date": datetime.date.today().isoformat(), "code": code_revision(),
              "sentences": len(references)}
    rows = []
    for engine, precision, kind, extra in ENGINES:
        for (role, beam), results in measure(args, engine, kind, extra, runs_dir).items():
            hyps = hypotheses(runs_dir / f"{role}.beam{beam}.{engine}.0.out")
            wall = statistics.median(w for w, _ in results)
            weights = args.workdir / "export" / f"{role}.{kind}" / WEIGHTS[kind]
            rows.append({"role": role, "engine": engine, "precision": precision, "beam": beam,
                         "bleu": round(sacrebleu.corpus_bleu(hyps, [references]).score, 2),
                         "words_per_s_per_core": round(sum(len(h.split()) for h in hyps) / wall, 1),
                         "wall_s": round(wall, 2), "peak_mib": round(max(m for _, m in results), 1),
                         "size_mib": round(weights.stat().st_size / 2**20, 2), **common})
    (args.workdir / "distill.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print("| system | engine | beam | BLEU | words/s/core | wall s | peak MiB | weights MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['role']} | {r['engine']} {r['precision']} | {r['beam']} | {r['bleu']} | "
              f"{r['words_per_s_per_core']} | {r['wall_s']} | {r['peak_mib']} | {r['size_mib']} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

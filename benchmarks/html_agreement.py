"""nmt-serve's ``format: html`` on Multi30k sentences with inline tags put around source words: is the answer
well-formed with the same elements, and with its tags stripped is it the plain sentence's translation?

    python benchmarks/html_agreement.py --data BIN --path CK [--sentences 200] [--seed 1] [--threads 2]

The first ``--sentences`` lines of Multi30k's test_2016_flickr.en each get one to three inline elements
(``b``, ``i``, ``em``, ``strong``, ``u``, ``span``, ``a href``; each with a ``data-k`` attribute of its own)
around runs of one to three words, a third of them with a second element nested inside (seeded; never a
link in a link, which HTML forbids and parsers take apart). One
nmt-serve process (``--cpu``, loopback) answers each sentence twice, as ``format: html`` and as plain text,
in requests of ``--per-request`` texts. The answers are read by a parser independent of the server's (the
standard library's, tests/html_check.py): well-formed (every element closed in nesting order), the same
elements with the same attributes and ancestors, and the text without tags equal to the plain answer. Prints
one JSON line: the three rates, the share of elements left empty (their words aligned nowhere, or overlapped
by a sibling's), of sentences whose elements changed order, and both passes' seconds.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import random
import subprocess
import sys
import threading
import time

import httpx

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))
from decode_run import code_revision, cpu_name  # noqa: E402
from html_check import first_difference, parse_strict, tagged  # noqa: E402


def start_server(args) -> tuple[subprocess.Popen, str]:
    command = [str(pathlib.Path(sys.executable).parent / "nmt-serve"), args.data, "--path", args.path, "--cpu",
               "--threads", str(args.threads), "--port", "0", "--max-chars", "100000", "--max-request-bytes",
               "1000000"]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "serving " in line and " on http://" in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, line.split(" on ", 1)[1].split()[0]
    sys.exit(f"html_agreement: nmt-serve ended with {proc.wait()} before serving")


def translate_all(url: str, texts: list[str], fmt: str, per_request: int) -> tuple[list[str], float]:
    found: list[str] = []
    started = time.perf_counter()
    for i in range(0, len(texts), per_request):
        answer = httpx.post(url + "/translate", json={"q": texts[i: i + per_request], "source": "en", "target": "de",
                                                      "format": fmt}, timeout=600)
        if answer.status_code != 200:
            sys.exit(f"html_agreement: HTTP {answer.status_code}: {answer.text[:300]}")
        found += answer.json()["translatedText"]
    return found, time.perf_counter() - started


def score(sources: list[str], answers: list[str], plain: list[str]) -> dict:
    well_formed = same = agree = empty = elements = reordered = 0
    failures = []
    for source, answer, want in zip(sources, answers, plain):
        problem = first_difference(source, answer)
        well_formed += problem is None or not problem.startswith("not well-formed")
        same += problem is None
        if problem is not None:
            failures.append({"source": source, "answer": answer, "problem": problem})
            continue
        got = parse_strict(answer)
        agree += got.text == want
        if got.text != want:
            failures.append({"source": source, "answer": answer, "plain": want})
        order = [dict(e.attrs)["data-k"] for e in got.elements]
        reordered += order != [dict(e.attrs)["data-k"] for e in parse_strict(source).elements]
        empty += len(got.empty)
        elements += len(order)
    n = len(sources)
    return {"well_formed": round(well_formed / n, 4), "same_elements": round(same / n, 4),
            "stripped_equals_plain": round(agree / n, 4), "elements": elements,
            "empty_elements": round(empty / max(1, elements), 4), "reordered_sentences": round(reordered / n, 4),
            "failures": failures[:5]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="the data-bin of --path")
    p.add_argument("--path", required=True, help="a checkpoint (the torch engine: html needs alignments)")
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--per-request", type=int, default=20)
    args = p.parse_args()
    data = pathlib.Path(os.environ.get("NMT_TOOLKIT_TEST_DATA", REPO.parent / "shared" / "data")) / "multi30k"
    lines = (data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[: args.sentences]
    rng, counter = random.Random(args.seed), [0]
    sources = [tagged(line, rng, counter) for line in lines]
    proc, url = start_server(args)
    try:
        answers, html_s = translate_all(url, sources, "html", args.per_request)
        plain, plain_s = translate_all(url, lines, "text", args.per_request)
    finally:
        proc.terminate()
        proc.wait(60)
    row = {"sentences": len(lines), "seed": args.seed, **score(sources, answers, plain), "html_s": round(html_s, 2),
           "plain_s": round(plain_s, 2), "path": args.path, "threads": args.threads, "cpu": cpu_name(),
           "revision": code_revision(), "date": datetime.date.today().isoformat()}
    print(json.dumps(row, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()

"""Where an nmt-serve HTML request's time goes, in one process: reading the HTML, the search with and without
the word alignments it needs, and writing the translation back into the markup.

    python benchmarks/html_cost.py --data BIN --path CK [--sentences 96] [--threads 1] [--repeats 3]

The first ``--sentences`` Multi30k test sentences, tagged as ``benchmarks/html_agreement.py`` tags them, go
through what the server runs for ``format: "html"``: ``AlignedHtml`` (lxml's parse, the sentences' source
pieces), ``ServedModel.decode`` (the beam search; with ``alignment`` it records the attention) on batches of
32, 16, 3 and 1 sentences, and ``render`` (alignment onto words, tag placement, lxml's serialisation). Each
is timed ``--repeats`` times (the two searches alternating), the best kept. Prints one JSON line: milliseconds per sentence read and
written, and per batch size the search's milliseconds without and with alignments.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import random
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))
from decode_run import code_revision, cpu_name  # noqa: E402
from html_check import tagged  # noqa: E402


def best_of(repeats: int, work):
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="the data-bin of --path")
    p.add_argument("--path", required=True, help="a checkpoint (the torch engine: html needs alignments)")
    p.add_argument("--sentences", type=int, default=96)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    import torch

    from nmt_toolkit import Translator
    from nmt_toolkit.markup.html import AlignedHtml
    from nmt_toolkit.serving.models import ServedModel

    torch.set_num_threads(args.threads)
    model = ServedModel("en", "de", Translator.load(args.path, data=args.data, device="cpu"))
    data = pathlib.Path(os.environ.get("NMT_TOOLKIT_TEST_DATA", REPO.parent / "shared" / "data")) / "multi30k"
    lines = (data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[: args.sentences]
    rng, counter = random.Random(1), [0]
    texts = [tagged(line, rng, counter) for line in lines]
    read_s, read = best_of(args.repeats, lambda: [AlignedHtml(text, model) for text in texts])
    plain, aligned = model.options_key({}, False, False), model.options_key({}, False, True)
    ids = model.encode(lines)
    search = {}
    for size in (32, 16, 3, 1):
        batch, best = ids[:size], {plain: float("inf"), aligned: float("inf")}
        for _ in range(args.repeats):  # alternating, so that a change in the machine's load hits both
            for key in best:
                started = time.perf_counter()
                model.decode(key, batch)
                best[key] = min(best[key], time.perf_counter() - started)
        search[size] = {"ms": round(best[plain] * 1000, 1), "with_alignments_ms": round(best[aligned] * 1000, 1)}
    found = iter(model.decode(aligned, model.encode([s for r in read for s in r.sentences])))
    hyps = [[next(found)[0] for _ in r.sentences] for r in read]
    write_s, _ = best_of(args.repeats, lambda: [r.render(h) for r, h in zip(read, hyps)])
    print(json.dumps({"benchmark": "html_cost", "sentences": len(texts), "read_ms_per_sentence":
                      round(read_s * 1000 / len(texts), 3), "write_ms_per_sentence": round(write_s * 1000 / len(texts), 3),
                      "search_by_batch_size": search, "path": args.path, "threads": args.threads, "cpu": cpu_name(),
                      "code": code_revision(), "load_average": os.getloadavg()[0],
                      "date": datetime.date.today().isoformat()}), flush=True)


if __name__ == "__main__":
    main()

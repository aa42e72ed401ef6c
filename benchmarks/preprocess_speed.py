"""nmt-preprocess speed: binarize pre-tokenized text with --workers 2; RSS while reading the dataset.

Builds 100k- and 1M-line corpora from the real wmt14-sample text by repetition (in a temp folder), times
``nmt-preprocess --workers 2`` on each (dictionary counting + binarization, no subword model), then reads
every sequence of each binarized training set in a fresh process and reports its peak RSS: it must not grow
with the corpus size (the reader memory-maps the files). Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
DATA = pathlib.Path(os.environ.get("NMT_TOOLKIT_TEST_DATA", REPO.parent / "shared" / "data")) / "wmt14-sample"

READER = r"""
import resource, sys, numpy as np
from nmt_toolkit.data.indexed_dataset import MMapIndexedDataset
ds = MMapIndexedDataset(sys.argv[1]); total = 0
for i in range(len(ds)):
    total += int(ds[i][-1])
status = dict(l.split(":", 1) for l in open("/proc/self/status"))
anon = int(status.get("RssAnon", "0 kB").split()[0]) // 1024
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, anon)
"""


def make_corpus(folder: pathlib.Path, lines: int) -> tuple[str, int]:
    prefix = folder / f"corpus{lines}"
    tokens = 0
    for lang in ("en", "de"):
        src = open(DATA / f"train.{lang}", encoding="utf-8").read().splitlines(keepends=True)
        with open(f"{prefix}.{lang}", "w", encoding="utf-8") as out:
            full, rest = divmod(lines, len(src))
            block = "".join(src)
            for _ in range(full):
                out.write(block)
            out.write("".join(src[:rest]))
        if lang == "en":
            per = sum(len(l.split()) for l in src)
            tokens = per * full + sum(len(l.split()) for l in src[:rest])
    return str(prefix), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    result: dict = {"benchmark": "preprocess_speed", "workers": args.workers}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for n in (int(s) for s in args.sizes.split(",")):
            prefix, src_tokens = make_corpus(tmp, n)
            dest = tmp / f"bin{n}"
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "nmt_toolkit.cli.preprocess", "--source-lang", "en",
                            "--target-lang", "de", "--trainpref", prefix, "--workers", str(args.workers),
                            "--destdir", str(dest), "--no-progress-bar"], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            seconds = time.perf_counter() - start
            record = json.load(open(dest / "preprocess.json"))
            tokens = sum(record["splits"]["train"][l]["tokens"] for l in ("en", "de"))
            rss = subprocess.run([sys.executable, "-c", READER, str(dest / "train.en-de.en")], check=True,
                                 capture_output=True, text=True).stdout.split()
            result[f"{n}"] = {"seconds": round(seconds, 2), "lines_per_s": round(2 * n / seconds),
                              "pairs_per_s": round(n / seconds), "tokens_per_s": round(tokens / seconds),
                              "avg_tokens_per_line": round(src_tokens / n, 1), "read_peak_rss_mb": int(rss[0]),
                              "read_anon_rss_mb": int(rss[1])}  # peak RSS includes mapped file pages touched
            for path in tmp.glob(f"corpus{n}.*"):
                path.unlink()
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""nmt-serve under load: N concurrent clients, one Multi30k test sentence per request, over loopback.

    python benchmarks/serve_load.py --data BIN --path CK [--engines torch,ctranslate2] [--clients 32]
                                    [--requests 1000] [--threads 2] [--rounds 1] [--offline] [--search FLAGS]
                                    [--html-shares 0,0.1]

For each engine, servers with dynamic batching on and off (``--no-batching``: one request at a time, each
its own batch) are started in turn (on, off, on, off … for ``--rounds``, so a change in the machine's load
hits both), warmed up with 64 requests, then sent ``--requests`` requests by ``--clients`` clients, each
sending its next request when the previous one is answered (a closed loop: the server is never idle).
Prints one JSON line per run: requests/s (= sentences/s), latency p50/p99/mean in ms, the mean decoded batch
size (from /metrics), the server's CPU time per request (its own work, which the machine's other load moves
less than it moves requests/s), and the latency of one request alone (1 client, 50 requests). ``--offline`` also runs
nmt-generate on the same sentences (``--input``, the same threads) and prints its sentences/s, the figure
the server's throughput is compared with. ``--html-shares 0,0.1`` runs each server setting once per share in
each round (alternating): that share of the requests, drawn at random (seeded) but always the same ones, is
sent as ``format: "html"``, its sentence with one to three inline elements (``b``, ``i``, ``a href`` …)
around source words as ``benchmarks/html_agreement.py`` tags them; the others stay plain text (the torch
engine only: HTML needs word alignments). CTranslate2 runs with ``--lenpen-style fairseq --early-stop beam``
(the search it has), server and nmt-generate alike. Everything stays on 127.0.0.1; every run stops by itself.

The clients are plain asyncio HTTP/1.1 over keep-alive connections (a few lines, no client library) so
that the load generator takes as little of the machine's CPU as possible from the server it measures.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
#: the search CTranslate2 can run: it divides by |Y|^alpha and stops when --beam hypotheses have finished
ENGINE_FLAGS = {"torch": [], "ctranslate2": ["--lenpen-style", "fairseq", "--early-stop", "beam"]}
#: seed of which requests are HTML and of their tags
HTML_SEED = 1


def load_sentences(n: int) -> list[str]:
    data = pathlib.Path(os.environ.get("NMT_TOOLKIT_TEST_DATA", REPO.parent / "shared" / "data")) / "multi30k"
    path = data / "test_2016_flickr.en"
    if not path.is_file():
        sys.exit(f"serve_load: no Multi30k test set at {path} (set NMT_TOOLKIT_TEST_DATA)")
    lines = path.read_text(encoding="utf-8").splitlines()
    return [lines[i % len(lines)] for i in range(n)]


def request_bodies(sentences: list[str], html_share: float) -> list[bytes]:
    """One /translate body per sentence: ``html_share`` of them (the same ones for the same share) as HTML with
    inline elements around some words, the rest plain."""
    sys.path.insert(0, str(REPO / "tests"))
    from html_check import tagged

    rng, counter = random.Random(HTML_SEED), [0]
    html = set(rng.sample(range(len(sentences)), round(html_share * len(sentences))))
    bodies = []
    for i, sentence in enumerate(sentences):
        fields = ({"q": tagged(sentence, rng, counter), "format": "html"} if i in html else
                  {"q": sentence, "format": "text"})
        bodies.append(json.dumps({**fields, "source": "en", "target": "de"}).encode())
    return bodies


def data_argument(args) -> list[str]:
    """``--data``, unless ``--path`` holds its own dictionaries (a model folder, a CTranslate2 export): the
    programs then run as a deployment runs them, nmt-generate on its text route through an export."""
    return [args.data] if args.data else []


def start_server(args, engine: str, batching: bool):
    workers = ["--decode-workers", str(args.decode_workers)] if args.decode_workers else []
    # --cache-size 0: every request is decoded (the warm-up sends sentences the measured load sends again)
    command = [str(BIN / "nmt-serve"), *data_argument(args), "--path", args.path, "--cpu", "--threads",
               str(args.threads), "--engine", engine, "--port", "0", "--batching" if batching else "--no-batching",
               "--max-wait-ms", str(args.max_wait_ms), "--cache-size", "0", *workers, *ENGINE_FLAGS[engine],
               *args.search.split(), *args.extra]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        found = re.search(r"serving .+ on http://([\d.]+):(\d+) \(engine", line)
        if found:  # from now on stderr is read (and dropped) by a thread, so the server never blocks on it
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, found.group(1), int(found.group(2))
    sys.exit(f"serve_load: nmt-serve ended with {proc.wait()} before serving")


async def request(reader, writer, host: str, body: bytes, path: str = "/translate") -> bytes:
    writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    answer = await reader.readexactly(length)
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {answer[:200]!r}")
    return answer


async def load(host: str, port: int, bodies: list[bytes], clients: int) -> list[float]:
    """Send every request body once, ``clients`` at a time (closed loop); the latency of each request, in s."""
    queue = list(reversed(bodies))
    latencies: list[float] = []

    async def client():
        reader, writer = await asyncio.open_connection(host, port)
        while queue:
            body = queue.pop()
            started = time.perf_counter()
            await request(reader, writer, host, body)
            latencies.append(time.perf_counter() - started)
        writer.close()

    await asyncio.gather(*(client() for _ in range(min(clients, len(bodies)))))
    return latencies


def batch_size(host: str, port: int) -> tuple[float, float]:
    import urllib.request

    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30).read().decode()
    values = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(nmt_serve_batch_sentences_(?:sum|count)) (\S+)$",
                                                                   text, re.M)}
    return values.get("nmt_serve_batch_sentences_sum", 0.0), values.get("nmt_serve_batch_sentences_count", 0.0)


def cpu_seconds(pid: int) -> float:
    """The user + system CPU time process ``pid`` has used (Linux /proc): a server's work apart from the
    machine's other load, which moves its requests/s."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(args, engine: str, batching: bool, bodies: list[bytes], html_share: float) -> dict:
    proc, host, port = start_server(args, engine, batching)
    try:
        asyncio.run(load(host, port, bodies[:64], args.clients))  # warm-up: kernels, allocator, caches
        alone = asyncio.run(load(host, port, bodies[:50], 1))
        before, cpu = batch_size(host, port), cpu_seconds(proc.pid)
        started = time.perf_counter()
        latencies = sorted(asyncio.run(load(host, port, bodies, args.clients)))
        wall = time.perf_counter() - started
        after, cpu = batch_size(host, port), cpu_seconds(proc.pid) - cpu
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(120)
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"engine": engine, "batching": batching, "html_share": html_share, "clients": args.clients,
            "requests": len(latencies),
            "requests_per_s": round(len(latencies) / wall, 2), "p50_ms": round(q[49] * 1000, 1),
            "p99_ms": round(q[98] * 1000, 1), "mean_ms": round(statistics.fmean(latencies) * 1000, 1),
            "mean_batch_sentences": round((after[0] - before[0]) / max(1.0, after[1] - before[1]), 2),
            "server_cpu_ms_per_request": round(cpu * 1000 / len(latencies), 2),
            "alone_p50_ms": round(statistics.median(alone) * 1000, 1), "exit_status": status,
            "load_average": os.getloadavg()[0]}


def offline(args, engine: str, sentences: list[str]) -> dict:
    """nmt-generate on the same sentences: its own sentences/s line (decoding time, model load excluded)."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".en", delete=False) as f:
        f.write("\n".join(sentences) + "\n")
    try:
        out = subprocess.run([str(BIN / "nmt-generate"), *data_argument(args), "--path", args.path, "--input",
                              f.name, "--cpu", "--threads", str(args.threads), "--engine", engine,
                              *ENGINE_FLAGS[engine], *args.search.split(), *(["--quiet"] if args.quiet else [])],
                             capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    found = re.search(r"translated (\d+) sentences .* \(([\d.]+) sentences/s", out.stderr)
    if not found:
        sys.exit(f"serve_load: nmt-generate failed: {out.stderr[-500:]}")
    return {"engine": engine, "offline_nmt_generate_sentences_per_s": float(found.group(2)),
            "sentences": int(found.group(1)), "load_average": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="the data-bin (not needed for a model folder or a CTranslate2 export)")
    parser.add_argument("--path", required=True)
    parser.add_argument("--engines", default="torch,ctranslate2")
    parser.add_argument("--modes", default="on,off", help="batching modes to run, in this order each round")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--max-wait-ms", type=float, default=20.0)
    parser.add_argument("--decode-workers", type=int, help="nmt-serve's --decode-workers [default: its own]")
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="the offline nmt-generate with --quiet (no lines "
                                                             "printed, no per-token scores: what the server computes)")
    parser.add_argument("--search", default="", help="generation flags for the servers and nmt-generate alike, "
                                                     "e.g. '--max-len-a 0 --max-len-b 200'")
    parser.add_argument("--html-shares", default="0", help="shares of the requests sent as format html, each "
                                                           "run in turn every round, e.g. 0,0.1")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more nmt-serve flags (last)")
    args = parser.parse_args()
    sentences = load_sentences(args.requests)
    shares = [float(share) for share in args.html_shares.split(",")]
    if any(not 0 <= share <= 1 for share in shares):
        sys.exit("serve_load: --html-shares are fractions from 0 to 1")
    if any(shares) and "ctranslate2" in args.engines.split(","):
        sys.exit("serve_load: HTML requests need word alignments, which the CTranslate2 engine gives none of")
    bodies = {share: request_bodies(sentences, share) for share in shares}
    for engine in args.engines.split(","):
        for _ in range(args.rounds):
            if args.offline:
                print(json.dumps(offline(args, engine, sentences)), flush=True)
            for mode in args.modes.split(","):
                for share in shares:
                    print(json.dumps(measure(args, engine, mode == "on", bodies[share], share)), flush=True)


if __name__ == "__main__":
    main()

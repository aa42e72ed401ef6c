"""Beam-search speed on synthetic WMT-like sources: the static-shape search (CUDA graphs) against the dynamic one,
in float32, fp16 and bf16; one JSON line.

    python benchmarks/gpu_generate.py                                   # H100: transformer_base shape, 3,003 sentences
    python benchmarks/gpu_generate.py --device cpu --threads 16 --searches dynamic --precisions fp32   # CPU figure
    python benchmarks/gpu_generate.py --device cpu --arch transformer_tiny --vocab 1000 --sentences 48 \\
        --max-tokens 400 --repeats 1                                    # smoke test (seconds)

Sources: ``--sentences`` (3,003, newstest2014's size) of random tokens whose lengths (EOS included) are drawn
like newstest's — a gamma distribution of shape 3 and mean ``--mean-length`` 27, clipped to 2..250 — sorted by
length and batched by ``--max-tokens`` padded source tokens, as nmt-generate batches a test set. The model has
the shape of ``--arch`` (shared embeddings, ``--vocab`` 32,768 symbols) and *random weights*: the speed of a
step does not depend on the weights, but a random model never chooses EOS, so its outputs are cut at
``--max-len-a`` × source length + ``--max-len-b`` (1.0 and 0 by default: real outputs are about as long as
their sources), which makes every sentence decode about as many steps as a trained model's would. The
agreement of the two searches' hypotheses is reported too (``same_hypotheses``), but a random model has near-ties
that a trained one does not: check the acceptance's "identical hypotheses" with nmt-generate on a trained
checkpoint (docs/benchmarks.md).

Each (search, precision) decodes the whole set ``--repeats`` times; ``sentences_per_s`` is the best pass after
the first (the first records the CUDA graphs, ``first_pass_s``), every pass ending with a device synchronisation;
``peak_memory_gb`` is the CUDA allocator's peak over the passes (the static search keeps its buffers per shape).
On the CPU the batches are decoded as nmt-generate decodes them there (linear layers packed for oneDNN, several
batches at once: generation/cpu.py, generation/parallel.py). ``--profile-batches N`` (CUDA) runs torch.profiler
over the first N batches of one more pass and reports kernel launches, graph launches, host and device time.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import sys
import time

import numpy as np
import torch

from nmt_toolkit import registry
from nmt_toolkit.data.batching import batch_by_size
from nmt_toolkit.generation.beam_search import SequenceGenerator
from nmt_toolkit.generation.config import GenerationConfig
from nmt_toolkit.models.summary import SizedDictionary, build_for_dry_run
from nmt_toolkit.models.transformer import TransformerConfig

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def synthetic_batches(n: int, vocab: int, mean_length: float, max_tokens: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.gamma(3.0, mean_length / 3.0, n).round().astype(int), 2, 250)
    order = np.argsort(lengths, kind="stable")
    batches = []
    for idx in batch_by_size(order, lengths, max_tokens=max_tokens):
        lens = torch.as_tensor(lengths[idx])
        src = torch.full((len(idx), int(lens.max())), 1, dtype=torch.long)
        for row, length in enumerate(lens.tolist()):
            src[row, : length - 1] = torch.as_tensor(rng.integers(4, vocab, length - 1))
            src[row, length - 1] = 2
        batches.append((src, lens))
    return batches


def decode_pass(generator, batches, device, workers: int) -> tuple[float, list]:
    from nmt_toolkit.generation.parallel import decode_batches

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    outs = [r for _, r in decode_batches(batches, lambda b: generator.generate(b[0].to(device), b[1].to(device)),
                                         workers)]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, [h[0]["tokens"].tolist() for out in outs for h in out]


def profile(generator, batches, device, table_path=None, title="") -> dict:
    """Kernel launches and host/device time of ``batches`` (graphs already recorded); with ``table_path``, the
    operators by device time are appended there as torch.profiler's table."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        seconds, _ = decode_pass(generator, batches, device, 1)
    counts = {e.key: e.count for e in prof.key_averages()}
    launches = sum(c for k, c in counts.items() if "LaunchKernel" in k)
    graphs = sum(c for k, c in counts.items() if "GraphLaunch" in k)
    device_us = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0))
                    for e in prof.key_averages())
    if table_path:
        with open(table_path, "a", encoding="utf-8") as f:
            f.write(f"## {title}: {len(batches)} batches, {launches} kernel launches, {graphs} graph launches\n")
            f.write(prof.key_averages().table(sort_by="self_device_time_total", row_limit=25,
                                              max_name_column_width=60) + "\n")
    return {"batches": len(batches), "kernel_launches": launches, "graph_launches": graphs,
            "wall_ms": round(seconds * 1e3, 1), "device_ms": round(device_us / 1e3, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="transformer_base")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sentences", type=int, default=3003)
    p.add_argument("--mean-length", type=float, default=27.0)
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=8192)
    p.add_argument("--max-len-a", type=float, default=1.0)
    p.add_argument("--max-len-b", type=int, default=0)
    p.add_argument("--searches", default="static,dynamic", help="comma-separated: static, dynamic")
    p.add_argument("--precisions", default=None, help="comma-separated: fp32, fp16, bf16 [CUDA: all; CPU: fp32]")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--check-interval", type=int, default=4, help="--static-check-interval")
    p.add_argument("--profile-batches", type=int, default=None, help="CUDA: profile this many batches [2]")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--profile-table", default=None, metavar="FILE", help="append torch.profiler's tables here")
    p.add_argument("--jsonl", action="store_true",
                   help="print one JSON line per (search, precision) instead of one record (the record goes to stderr)")
    args = p.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    precisions = (args.precisions or ("fp32,fp16,bf16" if device.type == "cuda" else "fp32")).split(",")
    searches = args.searches.split(",")
    registry.import_builtin_components()
    cfg = TransformerConfig()
    registry.ARCHITECTURES.get(args.arch).obj(cfg)
    cfg.share_all_embeddings = True
    torch.manual_seed(args.seed)
    base = build_for_dry_run("transformer", cfg, args.vocab, device="cpu").eval()
    vocab = SizedDictionary(args.vocab)
    batches = synthetic_batches(args.sentences, args.vocab, args.mean_length, args.max_tokens, args.seed)
    workers = 1
    if device.type == "cpu":
        from nmt_toolkit.generation.parallel import auto_workers

        workers = auto_workers(len(batches), torch.get_num_threads())
    results, hyps, prof = [], {}, None
    for precision in precisions:
        model = copy.deepcopy(base).to(device, DTYPES[precision])
        if device.type == "cpu" and precision == "fp32":
            from nmt_toolkit.generation.cpu import optimize_for_cpu

            optimize_for_cpu(model)
        for search in searches:
            gen = SequenceGenerator([model], vocab, GenerationConfig(
                beam=args.beam, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
                static_search="on" if search == "static" else "off", static_check_interval=args.check_interval))
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            times = []
            for _ in range(max(1, args.repeats)):
                seconds, tokens = decode_pass(gen, batches, device, workers)
                times.append(seconds)
            hyps[search, precision] = tokens
            best = min(times[1:]) if len(times) > 1 else times[0]
            n_tokens = sum(len(t) for t in tokens)
            row = {"search": search, "precision": precision, "sentences_per_s": round(args.sentences / best, 1),
                   "tokens_per_s": round(n_tokens / best), "seconds": round(best, 3),
                   "first_pass_s": round(times[0], 3)}
            if device.type == "cuda":
                row["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 2)
            if search == "static":
                static = gen._static
                row["step_shapes"] = len(static.shapes)
                row["graphs"] = sum(getattr(plan.graphs, "captures", 0) for plan in static.plans.values())
            results.append(row)
            n_prof = args.profile_batches if args.profile_batches is not None else 2
            if device.type == "cuda" and n_prof > 0 and precision == precisions[0]:
                prof = prof or {}
                prof[search] = profile(gen, batches[:n_prof], device, args.profile_table,
                                       f"{args.arch} {search} {precision} beam {args.beam}")
            gen.release()
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    rate = {(r["search"], r["precision"]): r["sentences_per_s"] for r in results}
    ratios = {}
    for precision in precisions:
        if ("static", precision) in rate and ("dynamic", precision) in rate:
            ratio = rate["static", precision] / rate["dynamic", precision]
            ratios[f"static_over_dynamic_{precision}"] = round(ratio, 2)
    for search in searches:
        for precision in ("fp16", "bf16"):
            if (search, precision) in rate and (search, "fp32") in rate:
                ratios[f"{search}_{precision}_over_fp32"] = round(rate[search, precision] / rate[search, "fp32"], 2)
    same = {}
    for precision in precisions:
        if ("static", precision) in hyps and ("dynamic", precision) in hyps:
            a, b = hyps["static", precision], hyps["dynamic", precision]
            same[precision] = round(sum(x == y for x, y in zip(a, b)) / len(a), 4)
    record = {"benchmark": "gpu_generate", "arch": args.arch, "weights": "random (outputs cut at the length limit)",
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else
              f"cpu ({torch.get_num_threads()} threads, {workers} decode workers)",
              "torch": torch.__version__, "vocab": args.vocab, "sentences": args.sentences,
              "mean_source_tokens": round(float(sum(int(l.sum()) for _, l in batches)) / args.sentences, 1),
              "batches": len(batches), "max_tokens": args.max_tokens, "beam": args.beam,
              "max_len": [args.max_len_a, args.max_len_b], "results": results, "ratios": ratios,
              "same_hypotheses": same, "profile": prof}
    if not args.jsonl:
        print(json.dumps(record))
        return
    print(json.dumps(record), file=sys.stderr)
    for line in figure_lines(record, args, hyps):
        print(json.dumps(line))


def cpu_model() -> str:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "cpu")


def figure_lines(record: dict, args, hyps: dict) -> list[dict]:
    """One object per measured (search, precision): the fields the GPU results files share."""
    on_cuda = not record["device"].startswith("cpu")
    lines = []
    for row in record["results"]:
        eager = hyps.get(("dynamic", row["precision"]))
        mine = hyps[row["search"], row["precision"]]
        same = None if row["search"] == "dynamic" or eager is None else sum(a == b for a, b in zip(mine, eager))
        lines.append({"benchmark": "gpu_decode", "date": datetime.date.today().isoformat(),
                      "model": f"{args.arch} shape, random weights", "engine": "torch", "dtype": row["precision"],
                      "search": "static (CUDA graphs)" if row["search"] == "static" else "dynamic (eager)",
                      "device": "cuda" if on_cuda else f"cpu ({torch.get_num_threads()} threads)",
                      "card": record["device"] if on_cuda else cpu_model(), "torch": record["torch"], "sentences": args.sentences,
                      "beam": args.beam, "max_tokens": args.max_tokens, "sentences_per_s": row["sentences_per_s"],
                      "tokens_per_s": row["tokens_per_s"], "first_pass_s": row["first_pass_s"],
                      "identical_to_eager": same, "peak_memory_gb": row.get("peak_memory_gb")})
    return lines


if __name__ == "__main__":
    main()

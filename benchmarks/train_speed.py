"""Training throughput on CPU: one JSON line with wps and peak RSS per config, and the matmul rate.

Runs the real training step (Trainer.train_step: label-smoothed criterion, gradient normalisation and
norm, fused Adam, inverse_sqrt schedule) on synthetic batches of ~``--max-tokens`` padded tokens
(sentences of ``--length`` tokens). ``efficiency`` = achieved FLOP/s (3 × forward FLOPs per target token
× wps) over the fp32 matrix-multiply rate measured in the same run. The allocator is set up as nmt-train
sets it (nmt_toolkit/allocator.py; ``NMT_TOOLKIT_MALLOC=system`` keeps glibc's defaults); ``malloc`` in
the output says which ran.

    python benchmarks/train_speed.py [--steps 6] [--configs small,base] [--profile]
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import torch

from nmt_toolkit import registry
from nmt_toolkit.allocator import keep_freed_memory
from nmt_toolkit.criterions.label_smoothed_cross_entropy import (LabelSmoothedCrossEntropyConfig,
                                                                 LabelSmoothedCrossEntropyCriterion)
from nmt_toolkit.models.summary import build_for_dry_run
from nmt_toolkit.models.transformer import TransformerConfig
from nmt_toolkit.optim.lr_schedulers import InverseSqrtConfig, InverseSqrtSchedule
from nmt_toolkit.optim.optimizers import AdamConfig, build_adam
from nmt_toolkit.training.trainer import Trainer

CONFIGS = {"small": "transformer_small", "base": "transformer_base"}



def matmul_gflops(n: int = 1024, repeats: int = 8) -> float:
    """fp32 matrix-multiply rate of this machine, printed beside the run as a reference for its speed."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    t = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    return 2 * n ** 3 * repeats / (time.perf_counter() - t) / 1e9

def batch(vocab: int, max_tokens: int, length: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    bsz = max_tokens // length
    src = torch.randint(4, vocab, (bsz, length), generator=g)
    tgt = torch.randint(4, vocab, (bsz, length), generator=g)
    src[:, -1] = tgt[:, -1] = 2
    prev = torch.cat([torch.full((bsz, 1), 2), tgt[:, :-1]], 1)
    return {"id": torch.arange(bsz), "nsentences": bsz, "ntokens": bsz * length,
            "net_input": {"src_tokens": src, "src_lengths": torch.full((bsz,), length), "prev_output_tokens": prev},
            "target": tgt}


def bench(arch: str, args) -> dict:
    registry.import_builtin_components()
    cfg = TransformerConfig()
    registry.ARCHITECTURES.get(arch).obj(cfg)
    cfg.share_all_embeddings = True
    torch.manual_seed(0)
    model = build_for_dry_run("transformer", cfg, args.vocab, device="cpu")
    crit = LabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyConfig(0.1), padding_idx=1)
    opt = build_adam(AdamConfig(adam_impl=args.adam_impl), model.parameters(), 5e-4)
    sched = InverseSqrtSchedule(InverseSqrtConfig(warmup_updates=4000), opt, 5e-4)
    trainer = Trainer(model, crit, opt, sched, torch.device("cpu"), clip_norm=args.clip_norm,
                      precision=args.precision if args.precision != "fp32" else None)
    trainer.set_num_updates(0)
    batches = [batch(args.vocab, args.max_tokens, args.length, s) for s in range(2)]
    for i in range(args.warmup):
        trainer.train_step([batches[i % 2]])
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.train_step([batches[0]])
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)
    tokens = 0
    t = time.perf_counter()
    for i in range(args.steps):
        trainer.train_step([batches[i % 2]])
        tokens += batches[i % 2]["ntokens"]
    elapsed = time.perf_counter() - t
    wps = tokens / elapsed
    flops = model.flops_per_target_token(args.length, args.length)
    return {"arch": arch, "params": sum(p.numel() for p in model.parameters()), "wps": round(wps, 1),
            "sec_per_step": round(elapsed / args.steps, 3), "achieved_gflops": round(3 * flops * wps / 1e9, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="small,base")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--length", type=int, default=32, help="tokens per sentence (source and target)")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--clip-norm", type=float, default=0.0)
    p.add_argument("--adam-impl", default="auto", choices=["auto", "fused", "foreach", "loop"])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="print a torch.profiler table per config on stderr")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="bf16 = autocast, as nmt-train --bf16 (AMX/AVX-512 BF16 CPUs run it several times faster)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    malloc = "kept" if keep_freed_memory() else "default"  # as nmt-train does (NMT_TOOLKIT_MALLOC=system: off)
    mm = matmul_gflops(1024, 10)
    results = {}
    for name in args.configs.split(","):
        r = bench(CONFIGS.get(name, name), args)
        r["efficiency"] = round(r["achieved_gflops"] / mm, 3)
        results[name] = r
    mm_after = matmul_gflops(1024, 10)
    print(json.dumps({"benchmark": "train_speed", "device": "cpu", "threads": torch.get_num_threads(),
                      "precision": args.precision, "malloc": malloc,
                      "max_tokens": args.max_tokens, "length": args.length, "vocab": args.vocab,
                      "matmul_gflops": round(max(mm, mm_after), 1), "results": results}))


if __name__ == "__main__":
    main()

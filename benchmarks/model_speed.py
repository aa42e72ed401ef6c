"""Forward+backward speed of transformer_base on ~4096 target tokens, against this machine's matmul rate.

Prints one JSON line: seconds per batch, achieved GFLOP/s of the model step (FLOPs counted by
``model.flops_per_target_token``, ×3 for forward+backward) and the fp32 matrix-multiply GFLOP/s measured in
the same run; the target is ratio ≥ 0.5. ``--profile`` prints the top operators to stderr;
``--decode`` adds incremental-decoding steps per second for a batch of beam-expanded sentences.

    python3 benchmarks/model_speed.py [--arch transformer_base] [--tokens 4096] [--steps 3] [--profile]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

import nmt_toolkit.models.transformer  # noqa: F401  (registers the architectures)
from nmt_toolkit.models.summary import build_for_dry_run
from nmt_toolkit.models.transformer import TransformerConfig
from nmt_toolkit.registry import ARCHITECTURES


def matmul_gflops(n: int = 2048, m: int = 512, k: int = 2048, seconds: float = 2.0) -> float:
    """fp32 GEMM rate on a shape like the model's largest layers ([tokens, d] @ [d, d_ff]).

    Returns (best single run, sustained mean over ``seconds``, per CPU-second) in GFLOP/s; the ratio uses the
    sustained mean, comparable with the model's multi-second step when other processes share the cores."""
    a, b = torch.randn(4 * n, m), torch.randn(m, k)
    a @ b
    best, runs, cpu = 0.0, 0, time.process_time()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        a @ b
        best = max(best, 2 * 4 * n * m * k / (time.perf_counter() - t) / 1e9)
        runs += 1
    work = runs * 2 * 4 * n * m * k / 1e9
    return best, work / (time.perf_counter() - start), work / (time.process_time() - cpu)


def build(arch: str, vocab: int) -> tuple[TransformerConfig, torch.nn.Module]:
    cfg = TransformerConfig()
    ARCHITECTURES.get(arch).obj(cfg)
    cfg.share_all_embeddings = True
    torch.manual_seed(0)
    return cfg, build_for_dry_run("transformer", cfg, vocab, device="cpu")


def train_step(model, src, prev, target):
    logits = model(src, None, prev)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1), ignore_index=1,
                           label_smoothing=0.1, reduction="sum")
    loss.backward()
    return loss


def decode_speed(arch: str, vocab: int, sentences: int = 8, beam: int = 4, src_len: int = 25, steps: int = 26):
    """Incremental decoder steps (with a beam reorder each step), as sentences/s of `steps` tokens."""
    _, model = build(arch, vocab)
    model.eval()
    src = torch.randint(4, vocab, (sentences, src_len))
    with torch.inference_mode():
        t = time.perf_counter()
        enc = model.forward_encoder(src, None)
        order = torch.arange(sentences).repeat_interleave(beam)
        enc = model.reorder_encoder_out(enc, order)
        prev = torch.full((sentences * beam, 1), 2)
        state = model.make_decoder_state(capacity=steps + 1)
        for _ in range(steps):
            logits, _ = model.forward_decoder(prev, enc, incremental_state=state)
            lprobs = F.log_softmax(logits[:, -1].float(), dim=-1)
            best = lprobs.argmax(-1, keepdim=True)
            model.reorder_incremental_state(state, torch.arange(sentences * beam).flip(0))
            prev = torch.cat([prev.flip(0), best.flip(0)], 1)
        return sentences / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="transformer_base")
    ap.add_argument("--vocab-size", type=int, default=37000)
    ap.add_argument("--tokens", type=int, default=4096, help="target tokens per batch")
    ap.add_argument("--length", type=int, default=25, help="source = target length")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--decode", action="store_true", help="also time incremental decoding (transformer_small)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg, model = build(args.arch, args.vocab_size)
    model.train()
    bsz = max(1, round(args.tokens / args.length))
    src = torch.randint(4, args.vocab_size, (bsz, args.length))
    prev = torch.randint(4, args.vocab_size, (bsz, args.length))
    prev[:, 0] = 2
    target = torch.randint(4, args.vocab_size, (bsz, args.length))
    tokens = bsz * args.length

    gemm_best, gemm, gemm_cpu = matmul_gflops(seconds=5.0)
    train_step(model, src, prev, target)  # warm-up
    model.zero_grad(set_to_none=True)
    times, cpu_times = [], []
    for _ in range(args.steps):
        t, c = time.perf_counter(), time.process_time()
        train_step(model, src, prev, target)
        times.append(time.perf_counter() - t)
        cpu_times.append(time.process_time() - c)
        model.zero_grad(set_to_none=True)
    step = min(times)
    flops = 3 * model.flops_per_target_token(args.length, args.length) * tokens
    achieved = flops / step / 1e9
    result = {
        "benchmark": "model_speed", "arch": args.arch, "vocab_size": args.vocab_size, "batch_sentences": bsz,
        "target_tokens": tokens, "src_len": args.length, "tgt_len": args.length, "threads": torch.get_num_threads(),
        "params": sum(p.numel() for p in model.parameters()),
        "fwd_bwd_s_per_batch": round(step, 4), "fwd_bwd_s_all": [round(t, 4) for t in times],
        "target_tokens_per_s": round(tokens / step, 1), "step_tflop": round(flops / 1e12, 4),
        "achieved_gflops": round(achieved, 1), "matmul_fp32_gflops": round(gemm, 1),
        "matmul_fp32_gflops_best": round(gemm_best, 1),
        "ratio": round(achieved / gemm, 3), "target_ratio": 0.5,
        # per CPU-second (robust when other processes share the cores): model vs GEMM
        "cpu_s_per_batch": round(min(cpu_times), 3),
        "ratio_per_cpu_second": round(flops / min(cpu_times) / 1e9 / gemm_cpu, 3),
        "load_average_1min": round(os.getloadavg()[0], 2), "torch": torch.__version__,
    }
    if args.decode:
        result["decode_small_beam4_sentences_per_s"] = round(decode_speed("transformer_small", 8000), 1)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_step(model, src, prev, target)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""Training throughput and MFU on one device, on synthetic WMT-like batches: one JSON line.

Sentence lengths are drawn like newstest's (a gamma distribution with mean ``--mean-length`` 27 tokens and
shape 3; the target 0.9-1.1 × the source), batched by ``--max-tokens`` of padded length as nmt-train does
(sorted by length, token-budget batches, shuffled), so the figures compare with published anchors (NVIDIA's
fairseq recipe: transformer_big, AMP, 10,240 tokens per GPU). The step is nmt-train's (Trainer.train_step:
label-smoothed loss, gradient normalisation, fused Adam, inverse_sqrt), with nmt-train's GPU path: batches
padded to ``--pad-to-multiple`` and pinned ahead, ``--compile`` (auto: on CUDA), no host read inside an update
(the statistics are read every ``--log-interval`` updates, as the training loop does). Throughput and MFU are
measured over updates ``--from``..``--to``; ``mfu`` divides the model FLOP/s (3 × forward FLOPs per target
token) by the device's dense peak for the dtype (nmt_toolkit/training/efficiency.py, or --peak-tflops).
``peak_memory_gb`` is torch's peak of allocated CUDA memory; ``compiled_graphs`` what torch.compile built.

    python benchmarks/gpu_train.py --arch transformer_big --precision bf16 --max-tokens 16384 --from 200 --to 400
    python benchmarks/gpu_train.py --arch transformer_base --precision tf32 --compile off
    python benchmarks/gpu_train.py --device cpu --arch transformer_tiny --max-tokens 2048 --from 2 --to 6   # smoke
"""
from __future__ import annotations

import argparse
import datetime
import json
import time

import numpy as np
import torch

from nmt_toolkit import registry
from nmt_toolkit.criterions.label_smoothed_cross_entropy import (LabelSmoothedCrossEntropyConfig,
                                                                 LabelSmoothedCrossEntropyCriterion)
from nmt_toolkit.data.batching import batch_by_size
from nmt_toolkit.models.summary import build_for_dry_run
from nmt_toolkit.models.transformer import TransformerConfig
from nmt_toolkit.optim.lr_schedulers import InverseSqrtConfig, InverseSqrtSchedule
from nmt_toolkit.optim.optimizers import AdamConfig, build_adam
from nmt_toolkit.training import efficiency
from nmt_toolkit.training.compile import pad_to_multiple, resolve_compile, resolve_pad_multiple
from nmt_toolkit.training.prefetch import pin
from nmt_toolkit.training.trainer import Trainer


def synthetic_batches(n_pairs: int, vocab: int, max_tokens: int, mean_length: float, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    src_len = np.clip(rng.gamma(3.0, mean_length / 3.0, n_pairs).round().astype(int), 2, 250)
    tgt_len = np.clip((src_len * rng.uniform(0.9, 1.1, n_pairs)).round().astype(int), 2, 250)
    order = np.lexsort((tgt_len, src_len))
    batches = batch_by_size(order, np.maximum(src_len, tgt_len), max_tokens, None, 8)
    out = []
    for idx in (batches[i] for i in rng.permutation(len(batches))):
        b, s, t = len(idx), int(src_len[idx].max()), int(tgt_len[idx].max())
        src = torch.full((b, s), 1, dtype=torch.long)
        tgt = torch.full((b, t), 1, dtype=torch.long)
        prev = torch.full((b, t), 1, dtype=torch.long)
        for row, i in enumerate(idx):
            ls, lt = int(src_len[i]), int(tgt_len[i])
            src[row, :ls] = torch.randint(4, vocab, (ls,))
            src[row, ls - 1] = 2
            words = torch.randint(4, vocab, (lt,))
            words[-1] = 2
            tgt[row, :lt] = words
            prev[row, 0], prev[row, 1:lt] = 2, words[:-1]
        out.append({"id": torch.as_tensor(idx), "nsentences": b, "ntokens": int(tgt_len[idx].sum()),
                    "net_input": {"src_tokens": src, "src_lengths": torch.as_tensor(src_len[idx]),
                                  "prev_output_tokens": prev}, "target": tgt})
    return out


def write_profile(trainer: Trainer, batches: list[dict], device: torch.device, path: str, title: str) -> None:
    """Where an update's time goes: torch.profiler over ``batches``, the operators by device time (self)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for batch in batches:
            trainer.train_step([batch])
        trainer.take_stats()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"## {title}: {len(batches)} updates\n")
        f.write(prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=60) + "\n")


def allow_only_sdpa(names: list[str]) -> None:
    """Make the trainer's attention context allow only these SDPA back ends (names of SDPBackend)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from nmt_toolkit.training import trainer as trainer_module

    backends = [getattr(SDPBackend, name.strip()) for name in names]
    trainer_module.sdpa_backends = lambda device: sdpa_kernel(backends)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="transformer_big")
    p.add_argument("--device", default="cuda")
    p.add_argument("--precision", default="bf16", choices=["fp32", "tf32", "bf16", "fp16"],
                   help="tf32: float32 with TF32 matmuls")
    p.add_argument("--compile", default="auto", choices=["auto", "on", "off"], help="auto: on CUDA")
    p.add_argument("--pad-to-multiple", type=int, default=None, help="default: 8 when compiling on CUDA, else 1")
    p.add_argument("--max-tokens", type=int, default=16384)
    p.add_argument("--mean-length", type=float, default=27.0)
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--from", dest="start", type=int, default=200)
    p.add_argument("--to", dest="end", type=int, default=400)
    p.add_argument("--log-interval", type=int, default=100, help="read the statistics every N updates")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--sdpa", default=None, metavar="BACKENDS",
                   help="the SDPA kernels training may use instead of device_policy's, e.g. EFFICIENT_ATTENTION,MATH "
                        "(an experiment: decides which kernels the compiled graph calls)")
    p.add_argument("--profile-table", default=None, metavar="FILE",
                   help="after the timed updates, profile 10 more with torch.profiler and write its table here")
    args = p.parse_args()
    if args.precision == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    device = torch.device(args.device)
    if args.sdpa:
        allow_only_sdpa(args.sdpa.split(","))
    registry.import_builtin_components()
    cfg = TransformerConfig()
    registry.ARCHITECTURES.get(args.arch).obj(cfg)
    cfg.share_all_embeddings = True
    torch.manual_seed(0)
    model = build_for_dry_run("transformer", cfg, args.vocab, device="cpu").to(device)
    precision = args.precision if args.precision in ("bf16", "fp16") else None
    compiling = resolve_compile(args.compile, device)
    multiple = resolve_pad_multiple(args.pad_to_multiple, compiling, device)
    crit = LabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyConfig(0.1), padding_idx=1)
    opt = build_adam(AdamConfig(), model.parameters(), 7e-4)
    trainer = Trainer(model, crit, opt, InverseSqrtSchedule(InverseSqrtConfig(warmup_updates=4000), opt, 7e-4),
                      device, precision=precision, compile_model=compiling)
    trainer.set_num_updates(0)
    n_pairs = max(2000, int(args.max_tokens / args.mean_length * 2.5 * 64))
    batches = synthetic_batches(n_pairs, args.vocab, args.max_tokens, args.mean_length, seed=1)
    batches = [pad_to_multiple(b, multiple, 1, 1) for b in batches]
    if device.type == "cuda":  # what the prefetcher does on nmt-train's thread
        batches = [pin(b) for b in batches]
        torch.cuda.reset_peak_memory_stats(device)
    tokens = sentences = skipped = 0
    t0 = time.perf_counter()
    warmup_s = None
    for step in range(args.end):
        if step == args.start:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            warmup_s = time.perf_counter() - t0
            t0, tokens, sentences = time.perf_counter(), 0, 0
        batch = batches[step % len(batches)]
        trainer.train_step([batch])
        tokens += batch["ntokens"]
        sentences += batch["nsentences"]
        if args.log_interval > 0 and (step + 1) % args.log_interval == 0:
            skipped += sum(values is None for values in trainer.take_stats())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - t0
    skipped += sum(values is None for values in trainer.take_stats())
    if args.profile_table:
        write_profile(trainer, batches[args.end % len(batches):][:10] or batches[:10], device, args.profile_table,
                      f"{args.arch} {args.precision} max_tokens={args.max_tokens} compile={compiling}")
    wps = tokens / elapsed
    mean_len = tokens / max(sentences, 1)
    flops = 3 * model.flops_per_target_token(int(round(mean_len)), int(round(mean_len)))
    tflops = flops * wps / 1e12
    peak = efficiency.peak_tflops(device, precision, args.peak_tflops)
    ratio = efficiency.mfu(tflops * 1e3, peak)
    record = {"benchmark": "gpu_train", "date": datetime.date.today().isoformat(), "arch": args.arch,
              "dtype": efficiency.compute_dtype(precision) if device.type == "cuda" else args.precision,
              "device": torch.cuda.get_device_name(device)
              if device.type == "cuda" else "cpu", "precision": efficiency.compute_dtype(precision)
              if device.type == "cuda" else args.precision, "max_tokens": args.max_tokens,
              "compile": compiling, "pad_to_multiple": multiple, "sdpa": args.sdpa, "torch": torch.__version__,
              "updates": [args.start, args.end], "target_tokens_per_s": round(wps), "model_tflops": round(tflops, 2),
              "peak_tflops": peak, "mfu": None if ratio is None else round(ratio, 4),
              "peak_memory_gb": round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 2)
              if device.type == "cuda" else None,
              "compiled_graphs": trainer.compiled_graphs(), "skipped_updates": skipped,
              "seconds_before_from": None if warmup_s is None else round(warmup_s, 1)}
    print(json.dumps(record))


if __name__ == "__main__":
    main()

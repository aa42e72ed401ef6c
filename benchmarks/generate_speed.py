"""Beam-search speed on real sentences: sentences/s and target tokens/s, and the ratio to --score-reference.

    python benchmarks/generate_speed.py [--sentences 1000] [--max-tokens 4096 | --batch-size 64] [--beam 4] [--threads 2]
                                        [--archs transformer_small,transformer_base] [--checkpoint ck.pt --data DIR]
                                        [--repeats 3] [--decode-workers N] [--profile]
                                        [--device cuda [--dtype float16|bfloat16]]

Source sentences: the Multi30k 2016 test set of ../shared/data (NMT_TOOLKIT_TEST_DATA), encoded through a joint
sentencepiece model (8k) learned by the preprocess library in a temporary folder. Models: random weights of
the named architectures (``transformer_small`` = 3+3 layers, 256/1024/4 heads; ``transformer_base``), unless
``--checkpoint`` gives a trained one. A random model never chooses EOS, so its hypotheses would all run to
the maximum length; the benchmark therefore decodes with max length = source length (``--max-len-a 1
--max-len-b 0``), which matches the length of real German outputs of English sources closely, and reports
tokens/s next to sentences/s. Batches are length-sorted and cut as nmt-generate cuts them: by default at
4,096 padded source tokens (its default ``--max-tokens``), or at ``--batch-size`` sentences (fairseq's
``--batch-size``); the scoring pass uses the same batches, and both run as many batches at once as
nmt-generate would (``--decode-workers``; its default rule). Prints one JSON line; ``cpu_seconds`` / ``sentences_per_cpu_s`` (process CPU time over all
threads) stay meaningful on a machine shared with other jobs, where wall-clock numbers do not; with
``--repeats N`` every timing is the median of N runs, and ``cpu_ratio_to_score_reference`` compares CPU times.
``flop_ratio_to_score_reference`` (matrix-multiply FLOPs counted by torch, untimed passes) is the time ratio
the decode would have at the scoring pass's FLOP rate; ``decode_gflops_per_s`` / ``score_reference_gflops_per_s``
show how far from it each runs. ``--device cuda`` times the same on a GPU (one batch at a time, as
nmt-generate decodes there; every timing ends with a device synchronisation); ``--dtype`` casts the model as
nmt-generate's ``--fp16``/``--bf16`` do.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKED = [True]  # --no-cpu-packed-linear sets False


def load_sentences(n: int):
    data = pathlib.Path(os.environ.get("NMT_TOOLKIT_TEST_DATA", REPO.parent / "shared" / "data")) / "multi30k"
    if not data.is_dir():
        sys.exit(f"generate_speed: no Multi30k data at {data} (set NMT_TOOLKIT_TEST_DATA)")
    return data, (data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[:n]


def build_codec(data: pathlib.Path, folder: str):
    from nmt_toolkit.data.subword import learn_sentencepiece, load_codec

    prefix = os.path.join(folder, "spm")
    learn_sentencepiece([str(data / "train.en"), str(data / "train.de")], prefix, 8000, threads=2)
    return load_codec("sentencepiece", prefix + ".model")


def make_batches(src_ids, pad: int, batch_size=None, max_tokens=None):
    """Length-sorted batches as nmt-generate makes them: at most ``batch_size`` sentences and at most
    ``max_tokens`` padded source tokens each (either budget may be None)."""
    import numpy as np

    from nmt_toolkit.data.batching import batch_by_size

    lengths_all = np.array([len(ids) for ids in src_ids], dtype=np.int64)
    order = np.argsort(lengths_all, kind="stable")
    batches = []
    for idx in batch_by_size(order, lengths_all, max_tokens, batch_size):
        lengths = torch.as_tensor(lengths_all[idx])
        src = torch.full((len(idx), int(lengths.max())), pad, dtype=torch.long)
        for row, i in enumerate(idx.tolist()):
            src[row, : len(src_ids[i])] = torch.as_tensor(src_ids[i], dtype=torch.long)
        batches.append((src, lengths))
    return batches


def random_model(arch: str, d):
    from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel
    from nmt_toolkit.registry import ARCHITECTURES

    cfg = TransformerConfig()
    ARCHITECTURES.get(arch).obj(cfg)
    cfg.dropout = 0.0
    cfg.share_all_embeddings = True
    torch.manual_seed(0)
    return TransformerModel.build_model(cfg, d, d).eval()


def count_flops(gen, batches, targets):
    """Matrix-multiply FLOPs (torch's FlopCounterMode: mm, addmm, bmm, attention, and the packed
    oneDNN products of generation/cpu.py) of one untimed decode
    and one untimed scoring pass. Their ratio is what the time ratio would be if both ran at the same
    FLOP rate; the time ratio over it is the decode's efficiency loss (small per-step matrices, cache
    reorders, top-k, Python per step)."""
    from torch.utils.flop_counter import FlopCounterMode

    from nmt_toolkit.generation.cpu import flop_formulas

    with FlopCounterMode(display=False, custom_mapping=flop_formulas()) as counter:
        for src, lengths in batches:
            gen.generate(src, lengths)
    decode = counter.get_total_flops()
    with FlopCounterMode(display=False, custom_mapping=flop_formulas()) as counter:
        for (src, lengths), tgt in zip(batches, targets):
            gen.score_reference(src, lengths, tgt)
    return decode, counter.get_total_flops()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(model, d, batches, beam: int, max_len_a: float, max_len_b: int, profile: bool = False,
          early_stop: str = "bound", repeats: int = 1, with_flops: bool = True, workers: int = 1):
    from nmt_toolkit.generation.beam_search import SequenceGenerator
    from nmt_toolkit.generation.config import GenerationConfig
    from nmt_toolkit.generation.parallel import decode_batches

    gen = SequenceGenerator([model], d, GenerationConfig(beam=beam, max_len_a=max_len_a, max_len_b=max_len_b,
                                                         lenpen=0.6, early_stop=early_stop))
    device = next(model.parameters()).device
    if device.type == "cpu" and PACKED[0]:  # as nmt-generate does (--cpu-packed-linear, on by default)
        from nmt_toolkit.generation.cpu import optimize_for_cpu

        optimize_for_cpu(model)
    gen.generate(*batches[len(batches) // 2])  # warm-up
    walls, cpus = [], []
    for _ in range(max(1, repeats)):
        outputs = []
        c0 = time.process_time()
        _sync(device)
        t0 = time.perf_counter()
        for _, out in decode_batches(batches, lambda b: gen.generate(*b), workers):
            outputs.append(out)
        _sync(device)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    t_gen, cpu_gen = statistics.median(walls), statistics.median(cpus)
    n_sent = sum(len(o) for o in outputs)
    n_tok = sum(len(h[0]["tokens"]) for o in outputs for h in o)
    targets = [torch.nn.utils.rnn.pad_sequence([h[0]["tokens"] for h in o], batch_first=True,
                                               padding_value=d.pad()).to(device) for o in outputs]
    refs, ref_cpus = [], []
    for _ in range(max(1, repeats)):
        c0 = time.process_time()
        _sync(device)
        t0 = time.perf_counter()
        for _ in decode_batches(list(zip(batches, targets)), lambda b: gen.score_reference(*b[0], b[1]), workers):
            pass
        _sync(device)
        refs.append(time.perf_counter() - t0)
        ref_cpus.append(time.process_time() - c0)
    t_ref, cpu_ref = statistics.median(refs), statistics.median(ref_cpus)
    flops = count_flops(gen, batches, targets) if with_flops else None
    result = {"sentences_per_s": round(n_sent / t_gen, 2), "target_tokens_per_s": round(n_tok / t_gen, 1),
              "seconds": round(t_gen, 2),
              "cpu_seconds": round(cpu_gen, 2), "sentences_per_cpu_s": round(n_sent / cpu_gen, 2), "score_reference_seconds": round(t_ref, 3),
              "ratio_to_score_reference": round(t_gen / t_ref, 2),
              "cpu_ratio_to_score_reference": round(cpu_gen / cpu_ref, 2), "target_tokens": n_tok,
              "repeats": max(1, repeats), "seconds_runs": [round(t, 2) for t in walls],
              "cpu_seconds_runs": [round(t, 2) for t in cpus]}
    if flops:
        decode, score = flops
        result.update({"decode_gflop": round(decode / 1e9, 1), "score_reference_gflop": round(score / 1e9, 1),
                       "flop_ratio_to_score_reference": round(decode / score, 2),
                       "decode_gflops_per_s": round(decode / 1e9 / t_gen, 1),
                       "score_reference_gflops_per_s": round(score / 1e9 / t_ref, 1)})
    if profile:
        from torch.profiler import ProfilerActivity, profile as tprofile

        with tprofile(activities=[ProfilerActivity.CPU]) as prof:
            for src, lengths in batches[: max(1, len(batches) // 4)]:
                gen.generate(src, lengths)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)
    return result


def _workers(args, batches) -> int:
    """nmt-generate's own rule (--decode-workers, or its default for these batches on this device)."""
    from nmt_toolkit.generation.config import GenerationConfig
    from nmt_toolkit.generation.translator import Engine, decode_workers

    args.decode_workers = decode_workers(args.decode_workers, GenerationConfig(), Engine(device=torch.device(args.device)),
                                         len(batches))
    return args.decode_workers


def _on_device(model, batches, args):
    """The model (cast to ``--dtype``) and the batches on ``--device``."""
    device = torch.device(args.device)
    model = model.to(device=device, dtype=getattr(torch, args.dtype))
    return model, [(src.to(device), lengths.to(device)) for src, lengths in batches]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=None, help="sentences per batch (fairseq's --batch-size)")
    p.add_argument("--max-tokens", type=int, default=None, help="padded source tokens per batch; without either "
                   "option, 4096 (nmt-generate's default batching)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--archs", default="transformer_small,transformer_base")
    p.add_argument("--checkpoint", help="a trained checkpoint (with --data, its data-bin) instead of random weights")
    p.add_argument("--data", help="data-bin of --checkpoint")
    p.add_argument("--max-len-a", type=float, default=None)
    p.add_argument("--max-len-b", type=int, default=None)
    p.add_argument("--early-stop", default="bound", choices=("bound", "beam", "never"))
    p.add_argument("--repeats", type=int, default=1, help="time the decode and the scoring this many times; "
                   "report the medians (wall and CPU)")
    p.add_argument("--decode-workers", type=int, default=None, help="batches decoded (and scored) at once, as "
                   "nmt-generate --decode-workers; default: nmt-generate's choice for these batches")
    p.add_argument("--profile", action="store_true", help="print a torch.profiler table to stderr")
    p.add_argument("--no-flops", action="store_true", help="skip the (untimed) FLOP-counting passes")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"),
                   help="cast the model (nmt-generate --fp16 / --bf16; GPU only)")
    p.add_argument("--no-cpu-packed-linear", action="store_true", help="decode with torch's own linear kernels "
                   "(nmt-generate's --no-cpu-packed-linear)")
    args = p.parse_args(argv)
    PACKED[0] = not args.no_cpu_packed_linear
    if args.batch_size is None and args.max_tokens is None:
        args.max_tokens = 4096
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("generate_speed: --device cuda but torch sees no GPU")
    if args.dtype != "float32" and args.device != "cuda":
        sys.exit(f"generate_speed: --dtype {args.dtype} needs --device cuda (as nmt-generate's --fp16/--bf16)")
    torch.set_num_threads(args.threads)
    from nmt_toolkit import registry
    from nmt_toolkit.data.dictionary import Dictionary

    registry.import_builtin_components()
    data, lines = load_sentences(args.sentences)
    report = {"benchmark": "generate_speed", "beam": args.beam, "batch_size": args.batch_size,
              "max_tokens": args.max_tokens, "decode_workers": args.decode_workers,
              "threads": torch.get_num_threads(), "device": args.device, "dtype": args.dtype,
              "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None, "early_stop": args.early_stop,
              "load_average_1min": round(os.getloadavg()[0], 2), "sentences": len(lines), "models": {}}
    if args.checkpoint:
        from nmt_toolkit.loading import load_models
        from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask

        task = TranslationTask.setup_task(TranslationConfig(data=args.data))
        models, _ = load_models([args.checkpoint], task.src_dict, task.tgt_dict)
        codec = task.subword()
        ids = [task.src_dict.encode_tokens(p) for p in codec.encode_pieces_batch(lines)]
        batches = make_batches(ids, task.src_dict.pad(), args.batch_size, args.max_tokens)
        model, batches = _on_device(models[0], batches, args)
        a = 1.0 if args.max_len_a is None else args.max_len_a
        b = 50 if args.max_len_b is None else args.max_len_b
        report["models"]["checkpoint"] = {"weights": "trained", "path": args.checkpoint, "max_len": f"{a}*src+{b}",
                                          **bench(model, task.tgt_dict, batches, args.beam, a, b, args.profile,
                                                args.early_stop, args.repeats, not args.no_flops,
                                                _workers(args, batches))}
    else:
        with tempfile.TemporaryDirectory() as tmp:
            codec = build_codec(data, tmp)
        d = Dictionary()
        for i in range(codec.sp.get_piece_size()):
            d.add_symbol(codec.sp.id_to_piece(i))
        d.pad_to_multiple_(8)
        ids = [d.encode_tokens(p) for p in codec.encode_pieces_batch(lines)]
        cpu_batches = make_batches(ids, d.pad(), args.batch_size, args.max_tokens)
        a = 1.0 if args.max_len_a is None else args.max_len_a
        b = 0 if args.max_len_b is None else args.max_len_b
        for arch in args.archs.split(","):
            model, batches = _on_device(random_model(arch, d), cpu_batches, args)
            report["models"][arch] = {"weights": "random", "vocab": len(d), "max_len": f"{a}*src+{b}",
                                      **bench(model, d, batches, args.beam, a, b, args.profile, args.early_stop,
                                                args.repeats, not args.no_flops, _workers(args, batches))}
    report["decode_workers"] = args.decode_workers  # resolved once the batches were known
    print(json.dumps(report))


if __name__ == "__main__":
    main()

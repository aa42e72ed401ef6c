"""CTranslate2 alone on a CTranslate2 export: what a deployment without this toolkit runs, the reference that
``ct2_overhead.py`` compares nmt-generate with. Reads raw lines, prints one translation per line.

    python benchmarks/raw_ctranslate2.py EXPORT INPUT [--threads 2] [--layout intra|inter] [--beam 4]
        [--lenpen 0.6] [--max-len 256] [--batch-size 64]

``--layout intra``: one replica on ``--threads`` threads (CTranslate2's usual ``intra_threads``); ``inter``:
``--threads`` replicas of one thread each (``inter_threads``), the layout nmt-generate takes on the CPU.
"""
import argparse
import sys

import ctranslate2
import sentencepiece

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("export")
p.add_argument("input")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--layout", choices=("intra", "inter"), default="intra")
p.add_argument("--beam", type=int, default=4)
p.add_argument("--lenpen", type=float, default=0.6)
p.add_argument("--max-len", type=int, default=256)
p.add_argument("--batch-size", type=int, default=64)
args = p.parse_args()

spm = sentencepiece.SentencePieceProcessor(model_file=f"{args.export}/spm.model")
with open(args.input, encoding="utf-8") as f:
    lines = f.read().splitlines()
inter, intra = (1, args.threads) if args.layout == "intra" else (args.threads, 1)
translator = ctranslate2.Translator(args.export, device="cpu", inter_threads=inter, intra_threads=intra)
results = translator.translate_batch(spm.encode(lines, out_type=str), beam_size=args.beam,
                                     length_penalty=args.lenpen, max_decoding_length=args.max_len,
                                     max_batch_size=args.batch_size)
sys.stdout.write("".join(spm.decode(r.hypotheses[0]) + "\n" for r in results))

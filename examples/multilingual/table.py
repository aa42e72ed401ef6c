"""The table run.sh prints: sacreBLEU per direction, the multilingual model against the bilingual ones.

    python table.py WORKDIR REFPREFIX --pairs en-de ... --zero-shot de-fr ... --updates U

Reads WORKDIR/multi/hyp.<pair>.txt and WORKDIR/bi-<pair>/hyp.<pair>.txt (detokenized, one line per source
line) and scores each against REFPREFIX.<target language> with sacreBLEU's default corpus BLEU (13a), as
`sacrebleu REF -i HYP -b` does. The bar: the multilingual BLEU at most 2.0 below the bilingual one.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import sacrebleu

BAR = 2.0


def corpus_bleu(hyp_file: pathlib.Path, ref_file: pathlib.Path) -> float:
    hyps = hyp_file.read_text(encoding="utf-8").splitlines()
    refs = ref_file.read_text(encoding="utf-8").splitlines()
    if len(hyps) != len(refs):
        sys.exit(f"table.py: {hyp_file}: {len(hyps)} hypotheses for {len(refs)} references in {ref_file}")
    return round(sacrebleu.corpus_bleu(hyps, [refs]).score, 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=pathlib.Path)
    parser.add_argument("refprefix")
    parser.add_argument("--pairs", nargs="+", required=True)
    parser.add_argument("--zero-shot", nargs="*", default=[])
    parser.add_argument("--updates", type=int, required=True)
    args = parser.parse_args(argv)
    work = args.workdir

    def ref(pair: str) -> pathlib.Path:
        return pathlib.Path(f"{args.refprefix}.{pair.split('-')[1]}")

    print(f"BLEU on {pathlib.Path(args.refprefix).name} (sacreBLEU, detokenized): one multilingual model, "
          f"{args.updates} updates; bilingual models {args.updates // len(args.pairs)} updates each")
    print()
    print(f"| direction | multilingual | bilingual | difference | within {BAR} or better |")
    print("|---|---|---|---|---|")
    missed = []
    for pair in args.pairs:
        multi = corpus_bleu(work / "multi" / f"hyp.{pair}.txt", ref(pair))
        bi = corpus_bleu(work / f"bi-{pair}" / f"hyp.{pair}.txt", ref(pair))
        ok = multi >= bi - BAR
        if not ok:
            missed.append(pair)
        print(f"| {pair} | {multi:.1f} | {bi:.1f} | {multi - bi:+.1f} | {'yes' if ok else 'NO'} |")
    for pair in args.zero_shot:
        multi = corpus_bleu(work / "multi" / f"hyp.{pair}.txt", ref(pair))
        print(f"| {pair} (zero-shot) | {multi:.1f} | – | – | – |")
    print()
    print(f"missed the bar: {', '.join(missed)}" if missed else "every direction within the bar")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The table of multilingual_parity.sh: per-direction validation nll of fairseq and ours (each seed, their mean,
the % difference), BLEU per direction (mean over seeds), the share of fairseq-generate's hypotheses that our
nmt-generate reproduces from fairseq's converted checkpoint, and OK/FAIL against the parity bar (nll within
3 %, BLEU within 1.0, identity >= 99 %).

fairseq's numbers come from WORKDIR/fairseq-<seed>/ when they are there, else from --fairseq-json (default: the
recorded multilingual_fairseq.json beside this file, which keeps them by run length: --max-update picks them);
--record FILE writes WORKDIR's fairseq numbers there under --max-update.
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PAIRS = ("en-de", "de-en", "en-fr", "fr-en")
NLL_BAR, BLEU_BAR, IDENTITY_BAR = 0.03, 1.0, 0.99


def read_json(path):
    if not os.path.isfile(path) or not os.path.getsize(path):
        return None
    with open(path, encoding="utf-8") as f:
        return {k: v for k, v in json.load(f).items() if k != "_"}


def our_nll(train_log):
    """The last valid.<pair> nll_loss nmt-train logged for each direction."""
    if not os.path.isfile(train_log):
        return None
    found = {}
    with open(train_log, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"valid\.(\w+-\w+) \|.*\| nll_loss ([0-9.]+)", line)
            if m:
                found[m.group(1)] = float(m.group(2))
    return found or None


def fairseq_side(work, seeds, recorded, max_update):
    nll = {s: read_json(os.path.join(work, f"fairseq-{s}", "nll.json")) for s in seeds}
    bleu = {s: read_json(os.path.join(work, f"fairseq-{s}", "bleu.json")) for s in seeds}
    if all(nll.values()):
        return {"nll": nll, "bleu": bleu}, "this run"
    if recorded is None:
        sys.exit(f"multilingual_report.py: no fairseq results in {work} and no recorded file")
    with open(recorded, encoding="utf-8") as f:
        runs = json.load(f)
    if str(max_update) not in runs:
        sys.exit(f"multilingual_report.py: {recorded} has fairseq's numbers for {', '.join(sorted(runs))} updates, "
                 f"not {max_update}")
    saved = runs[str(max_update)]
    return {"nll": {s: saved["nll"].get(s) for s in seeds}, "bleu": {s: saved["bleu"].get(s) for s in seeds}}, recorded


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def identity(work, pairs, seed):
    shares = {}
    for pair in pairs:
        ours = os.path.join(work, "imported", f"hyp.{pair}.txt")
        theirs = os.path.join(work, f"fairseq-{seed}", f"hyp.{pair}.txt")
        if os.path.isfile(ours) and os.path.isfile(theirs):
            a, b = (open(p, encoding="utf-8").read().splitlines() for p in (ours, theirs))
            if a and len(a) == len(b):
                shares[pair] = (sum(x == y for x, y in zip(a, b)), len(b))
    return shares


def train_windows(path, fairseq):
    """(loss, words per batch, sentences per batch) of every train_inner line: each window of --log-interval
    updates. fairseq writes ``loss=8.785, ... wpb=3687.4, bsz=230.8``, nmt-train ``loss 8.785 | ... | wpb ...``."""
    if not os.path.isfile(path):
        return []
    sep = "=" if fairseq else " "
    found = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if "train_inner" in line:
                values = dict(re.findall(rf"\b(loss|wpb|bsz){sep}([0-9.]+)", line))
                found.append(tuple(float(values[k]) for k in ("loss", "wpb", "bsz")))
    return found


def print_train_windows(work, seed):
    """Training loss window by window, side by side: both systems read batches of the same sizes (the same
    batches), so the curves are comparable before validation."""
    theirs = train_windows(os.path.join(work, f"fairseq-{seed}", "train.log"), True)
    ours = train_windows(os.path.join(work, f"nmt-{seed}", "train.log"), False)
    if not theirs or not ours:
        return
    print(f"seed {seed}, training loss per log window: window | fairseq | ours | diff | same batch sizes")
    for n, (t, o) in enumerate(zip(theirs, ours)):
        print(f"{n + 1} | {t[0]:.3f} | {o[0]:.3f} | {100 * (o[0] / t[0] - 1):+.1f}% | {t[1:] == o[1:]}")


def fmt(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--seeds", nargs="+", default=["1", "2"])
    ap.add_argument("--identity-pairs", nargs="+", default=["en-de", "de-en"])
    ap.add_argument("--fairseq-json", default=os.path.join(HERE, "multilingual_fairseq.json"))
    ap.add_argument("--max-update", type=int, default=1200, help="the run's length (which recorded numbers apply)")
    ap.add_argument("--record", metavar="FILE", help="write this run's fairseq numbers to FILE")
    args = ap.parse_args()
    theirs, source = fairseq_side(args.work, args.seeds, args.fairseq_json, args.max_update)
    if args.record:
        runs = {}
        if os.path.isfile(args.record):
            with open(args.record, encoding="utf-8") as f:
                runs = json.load(f)
        runs[str(args.max_update)] = theirs
        with open(args.record, "w", encoding="utf-8") as f:
            json.dump(runs, f, indent=1, sort_keys=True)
            f.write("\n")
    ours = {"nll": {s: our_nll(os.path.join(args.work, f"nmt-{s}", "train.log")) for s in args.seeds},
            "bleu": {s: read_json(os.path.join(args.work, f"nmt-{s}", "bleu.json")) for s in args.seeds}}
    ok = True
    print(f"fairseq's numbers: {source}; seeds {' '.join(args.seeds)}; {args.max_update} updates")
    print("direction | nll fairseq (seeds; mean) | nll ours (seeds; mean) | diff | BLEU fairseq | BLEU ours | diff")
    for pair in PAIRS:
        cols = []
        for side in (theirs, ours):
            per_seed = [(side["nll"][s] or {}).get(pair) for s in args.seeds]
            cols.append((per_seed, mean(per_seed), mean([(side["bleu"][s] or {}).get(pair) for s in args.seeds])))
        (fs, fm, fb), (ns, nm, nb) = cols
        nll_diff = None if None in (fm, nm) else nm / fm - 1
        bleu_diff = None if None in (fb, nb) else nb - fb
        ok &= nll_diff is not None and abs(nll_diff) <= NLL_BAR and bleu_diff is not None and abs(bleu_diff) <= BLEU_BAR
        print(f"{pair} | {' '.join(map(fmt, fs))}; {fmt(fm)} | {' '.join(map(fmt, ns))}; {fmt(nm)} | "
              f"{'-' if nll_diff is None else f'{100 * nll_diff:+.1f}%'} | {fmt(fb, 2)} | {fmt(nb, 2)} | "
              f"{'-' if bleu_diff is None else f'{bleu_diff:+.2f}'}")
    for seed in args.seeds:
        print_train_windows(args.work, seed)
    shares = identity(args.work, args.identity_pairs, args.seeds[0])
    for pair, (same, total) in shares.items():
        print(f"fairseq seed {args.seeds[0]}'s checkpoint, {pair}: nmt-generate = fairseq-generate on {same} of "
              f"{total} sentences ({100 * same / total:.1f}%)")
        ok &= same >= IDENTITY_BAR * total
    if not shares:
        print("identity: not measured (no fairseq checkpoint decoded in this folder)")
    bars = f"nll within {100 * NLL_BAR:.0f}%, BLEU within {BLEU_BAR}"
    print(("OK" if ok else "FAIL") + f": {bars}" + (f", identity >= {100 * IDENTITY_BAR:.0f}%" if shares else
                                                    " (identity not measured)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Filter a parallel corpus by length and length ratio, as Moses' ``clean-corpus-n.perl`` does.

    python3 clean_corpus.py IN_PREFIX L1 L2 OUT_PREFIX MIN MAX [--ratio 1.5] [--unescape] [--max-lines N]

reads ``IN_PREFIX.L1`` / ``IN_PREFIX.L2`` and writes the kept pairs to ``OUT_PREFIX.L1`` / ``OUT_PREFIX.L2``.
A pair is dropped when either side has fewer than MIN or more than MAX whitespace-separated words, or
when one side is more than ``--ratio`` times longer than the other (in words), exactly the rules of
clean-corpus-n.perl (which fairseq's WMT14 recipe runs with ``-ratio 1.5 … 1 250``). Like that script it
also squeezes runs of spaces and strips the ends of each line.

``--unescape`` undoes the XML escapes that the Moses tokenizer writes (``&apos;`` ``&quot;`` ``&amp;`` …),
for corpora distributed Moses-tokenized (the CI sample) that a sentencepiece model should see as text.
"""
from __future__ import annotations

import argparse
import re
import sys

MOSES_ESCAPES = [("&bar;", "|"), ("&#124;", "|"), ("&lt;", "<"), ("&gt;", ">"), ("&bra;", "["), ("&ket;", "]"),
                 ("&#91;", "["), ("&#93;", "]"), ("&quot;", '"'), ("&apos;", "'"), ("&amp;", "&")]
_SPACES = re.compile(r"\s+")


def unescape(line: str) -> str:
    for escaped, char in MOSES_ESCAPES:  # &amp; last, so "&amp;quot;" becomes "&quot;", as Moses' deescaper
        line = line.replace(escaped, char)
    return line


def keep(src_words: int, tgt_words: int, min_len: int, max_len: int, ratio: float) -> bool:
    """clean-corpus-n.perl's test for one pair of word counts."""
    if src_words < min_len or tgt_words < min_len or src_words > max_len or tgt_words > max_len:
        return False
    if src_words / tgt_words > ratio or tgt_words / src_words > ratio:
        return False
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("in_prefix")
    parser.add_argument("l1")
    parser.add_argument("l2")
    parser.add_argument("out_prefix")
    parser.add_argument("min_len", type=int)
    parser.add_argument("max_len", type=int)
    parser.add_argument("--ratio", type=float, default=9.0, help="maximum length ratio (Moses' default 9)")
    parser.add_argument("--unescape", action="store_true", help="undo Moses XML escapes (&apos; …)")
    parser.add_argument("--max-lines", type=int, default=0, help="stop after this many kept pairs (0: all)")
    args = parser.parse_args(argv)

    names = [f"{args.in_prefix}.{args.l1}", f"{args.in_prefix}.{args.l2}"]
    try:
        inputs = [open(name, encoding="utf-8", errors="strict", newline="\n") for name in names]
    except OSError as err:
        print(f"clean_corpus.py: error: cannot read {err.filename}: {err.strerror}", file=sys.stderr)
        return 1
    outputs = [open(f"{args.out_prefix}.{lang}", "w", encoding="utf-8") for lang in (args.l1, args.l2)]
    read = kept = 0
    with inputs[0], inputs[1], outputs[0], outputs[1]:
        for number, (a, b) in enumerate(zip(*inputs), start=1):
            read = number
            a = _SPACES.sub(" ", a).strip()
            b = _SPACES.sub(" ", b).strip()
            if args.unescape:
                a, b = unescape(a), unescape(b)
            if not keep(len(a.split()), len(b.split()), args.min_len, args.max_len, args.ratio):
                continue
            outputs[0].write(a + "\n")
            outputs[1].write(b + "\n")
            kept += 1
            if args.max_lines and kept >= args.max_lines:
                break
        else:
            rest = [f.readline() for f in inputs]
            if any(rest):
                longer = names[0] if rest[0] else names[1]
                print(f"clean_corpus.py: error: {names[0]} and {names[1]} have different line counts "
                      f"({longer} is longer, after line {read})", file=sys.stderr)
                return 1
    print(f"clean_corpus.py: input {read} pairs, kept {kept} ({read - kept} dropped): "
          f"{args.out_prefix}.{{{args.l1},{args.l2}}}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

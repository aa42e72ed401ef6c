"""nmt-generate --format html: each --input line an HTML text (``generation/html_lines.py``), every line's
sentences decoded together in nmt-generate's batches with their alignments, then one block of lines per input
line: S- (the line), H-/D- (the line's HTML translated), P-, and with --print-alignment A- (its words)."""
from __future__ import annotations

import logging
import os
import sys
import time

from nmt_toolkit.cli.generate_output import open_output

logger = logging.getLogger("nmt_toolkit.generate")


def _decode(translator, io, ids: list, desc: str) -> dict[int, list[dict]]:
    """Each sentence's hypotheses (with alignments) by its index in ``ids``; an empty one has none."""
    from tqdm import tqdm

    from nmt_toolkit.generation.translator import decode_workers

    nonempty = [i for i, x in enumerate(ids) if len(x) > 1]  # an empty sentence holds its EOS alone
    found: dict[int, list[dict]] = {}
    if not nonempty:
        return found
    itr = translator.batches(translator.task.build_dataset_for_inference([ids[i] for i in nonempty]))
    workers = decode_workers(io.decode_workers, translator.gen, translator.engine, len(itr))
    for sample, hyps in tqdm(translator.decode(itr, need_attn=True, workers=workers), total=len(itr), desc=desc,
                             file=sys.stderr, disable=None, leave=False):
        for row, sid in enumerate(sample["id"].tolist()):
            found[nonempty[sid]] = hyps[row]
    return found


def generate_html(translator, io) -> int:
    from nmt_toolkit.data.lines import read_lines
    from nmt_toolkit.generation.html_lines import HtmlLines
    from nmt_toolkit.generation.output import OrderedPrinter, html_lines, printable

    what = f"--input {io.input}"
    raw = read_lines(io.input, what)
    read = HtmlLines(translator, raw, what)
    ids = read.encode()
    subset = os.path.basename(io.input) if io.input != "-" else "stdin"
    out = open_output(io, subset)
    start = time.perf_counter()
    found = _decode(translator, io, ids, f"generate {subset}")
    printer = OrderedPrinter(None if io.quiet else out)
    for sid, (line, hyps) in enumerate(zip(raw, read.hypotheses(found))):
        printer.add(sid, [printable(hyps[0].html)] if io.plain else
                    [f"S-{sid}\t{printable(line)}", *html_lines(sid, hyps, io.print_alignment)])
    printer.close()
    elapsed = time.perf_counter() - start
    logger.info("translated %d lines (%d sentences) in %.1fs (%.2f sentences/s)", len(raw), len(ids), elapsed,
                len(ids) / max(elapsed, 1e-9))
    out.close()
    return 0

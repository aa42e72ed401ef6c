"""nmt-interactive: translate raw text from stdin (or --input) as it arrives, in buffered batches.

\b
    echo "A man is riding a bike." | nmt-interactive data-bin/m30k --path ck/averaged.pt
    nmt-interactive data-bin/m30k --path ck/averaged.pt --plain < raw.en > out.de

Each line is encoded with the data-bin's subword model (unknown pieces become <unk>), translated in batches
of --buffer-size lines, and printed as fairseq-interactive does: S-, H-, D-, P- lines per sentence, ids
counting input lines from 0. ``--plain`` prints only the detokenized translation, one line per input line
(for pipes). An empty line gives an empty translation. A line longer than the model's source positions
(or --max-source-positions) ends the run with an error naming it, after the lines before it were printed:
a cut line would print a wrong translation. Control characters other than tab are printed escaped
(``\\x1b``), so an input cannot drive the terminal or split an output line.
"""
from __future__ import annotations

import itertools
import logging
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from nmt_toolkit.cli.decoding import (DecodeDeviceConfig, InputFormatConfig, constrained_translator, h_bpe_symbol,
                                      load_translator, refuse_with_html, task_groups)
from nmt_toolkit.config import CommonConfig, Group, build_command, option
from nmt_toolkit.generation.config import GenerationConfig
from nmt_toolkit.generation.terminology import TerminologyConfig

logger = logging.getLogger("nmt_toolkit.interactive")

#: below this many lines a buffer, the search runs on one thread unless --threads says otherwise: a few
#: sentences are too little work to share, and a search split over threads waits at each of its operations
#: for the thread another process has pushed off its core (100 lines one at a time, the parity model, 2
#: cores: 8.5-9.2 s on 2 threads against 9.5-10.1 s on 1 idle; 28.9-29.6 s against 10.2 s beside one busy
#: process; docs/benchmarks.md)
ONE_THREAD_BELOW = 8


@dataclass
class InteractiveIOConfig(DecodeDeviceConfig, InputFormatConfig):
    input: str = option("-", "read raw text from this file ('-': stdin)", metavar="FILE")
    buffer_size: int = option(1, "translate this many lines at a time (1: answer each line at once; below 8 lines "
                                 "the search runs on one thread unless --threads is given)", low=1)
    plain: bool = option(False, "print only the detokenized translation, one line per input line")
    remove_bpe: Optional[str] = option(None, "undo subword segmentation in H- lines too: '@@ ', 'sentencepiece' "
                                             "or 'auto'", metavar="SYMBOL")
    print_alignment: bool = option(False, "print A- lines (argmax of the encoder-decoder attention)")


def interactive(configs: dict) -> int:
    from nmt_toolkit.data.lines import iter_lines

    gen: GenerationConfig = configs["generation"]
    io: InteractiveIOConfig = configs["io"]
    if gen.score_reference or gen.prefix_size:
        from nmt_toolkit.errors import UsageError

        raise UsageError("--score-reference and --prefix-size need references; use nmt-generate")
    refuse_with_html(io, gen, configs["terminology"])
    if io.threads is None and io.buffer_size < ONE_THREAD_BELOW:
        io.threads = 1
    need_attn = io.print_alignment or io.format == "html"
    translator, terms = constrained_translator(load_translator(configs, need_attn=need_attn), gen,
                                               configs["terminology"])
    what = "stdin" if io.input == "-" else f"--input {io.input}"
    source = iter_lines(io.input, None if io.input == "-" else f"--input {io.input}")
    next_id = 0
    while True:
        chunk = list(itertools.islice(source, max(1, io.buffer_size)))
        if not chunk:
            break
        if io.format == "html":
            lines = _html_buffer(translator, io, chunk, what, next_id)
        else:
            chunk, phrases, results = _translate_buffer(translator, io, terms, chunk, what, next_id)
            lines = _buffer_lines(translator, io, chunk, results, next_id, phrases)
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
        next_id += len(chunk)
    return 0


def _translate_buffer(translator, io: InteractiveIOConfig, terms, chunk: list[str], what: str, next_id: int):
    """One buffer as one batch: ``(sources, their constraints as text or None, results by line)``. With
    --constraints each line is the source and, after TABs, the phrases its translation must contain; --glossary
    and --keep add the phrases found in the source (``terms``)."""
    ids_of_phrases = None
    chunk, phrases = terms.split(chunk, what, first=next_id + 1)
    # a buffer is one batch of --buffer-size lines, so only the positions limit a line
    ids = translator.encode(chunk, what, first=next_id + 1, budget=False)
    if phrases is not None:
        ids_of_phrases = translator.encode_constraints(phrases, ids, what, first=next_id + 1)
    nonempty = [i for i, x in enumerate(ids) if len(x) > 1]
    results: dict[int, list] = {}
    if nonempty:
        sample = translator.collate([ids[i] for i in nonempty])
        wanted = None if ids_of_phrases is None else [ids_of_phrases[i] for i in nonempty]
        results = dict(zip(nonempty, translator.translate_batch(sample, need_attn=io.print_alignment,
                                                                constraints=wanted)))
    return chunk, phrases, results


def _html_buffer(translator, io: InteractiveIOConfig, chunk: list[str], what: str, next_id: int) -> list[str]:
    """One buffer of HTML lines (``generation/html_lines.py``), all their sentences as one batch: the printed
    lines, S-/H-/D-/P-(/A-) per line or with --plain the rendered HTML alone."""
    from nmt_toolkit.generation.html_lines import HtmlLines
    from nmt_toolkit.generation.output import html_lines, printable

    read = HtmlLines(translator, chunk, what, first=next_id + 1)
    ids = read.encode(budget=False)  # a buffer is one batch: only the positions limit a sentence
    nonempty = [i for i, x in enumerate(ids) if len(x) > 1]
    found = {}
    if nonempty:
        found = dict(zip(nonempty, translator.translate_batch(translator.collate([ids[i] for i in nonempty]),
                                                               need_attn=True)))
    lines = []
    for i, (raw, hyps) in enumerate(zip(chunk, read.hypotheses(found))):
        lines += [printable(hyps[0].html)] if io.plain else \
            [f"S-{next_id + i}\t{printable(raw)}", *html_lines(next_id + i, hyps, io.print_alignment)]
    return lines


def _buffer_lines(translator, io: InteractiveIOConfig, chunk: list[str], results: dict, next_id: int,
                  phrases: Optional[list] = None) -> list[str]:
    """The printed lines of one buffer: S-/(C-/)H-/D-/P-(/A-) per line, or with --plain the translation
    alone."""
    from nmt_toolkit.generation.output import hypothesis_lines, printable

    tgt_dict, detok = translator.task.tgt_dict, translator.detokenize
    h_bpe = h_bpe_symbol(io, translator.task)
    lines = []
    for i, raw in enumerate(chunk):
        sid = next_id + i
        if i not in results:  # an empty line: an empty translation
            lines.append("" if io.plain else f"S-{sid}\t\nH-{sid}\t0.0\t\nD-{sid}\t0.0\t\nP-{sid}\t")
            continue
        if io.plain:
            lines.append(printable(detok(tgt_dict.string(results[i][0]["tokens"]))))
        else:
            lines.append(f"S-{sid}\t{printable(raw)}")
            lines.extend(f"C-{sid}\t{printable(c)}" for c in (phrases[i] if phrases else ()))
            lines.extend(hypothesis_lines(sid, results[i], tgt_dict, detok, h_bpe, io.print_alignment))
    return lines


def groups(argv: Sequence[str] = ()):
    return [Group("common", CommonConfig), *task_groups(argv),
            Group("generation", GenerationConfig, "generation options"),
            Group("terminology", TerminologyConfig, "terminology options"),
            Group("io", InteractiveIOConfig, "input/output options")]


def run(argv=None, prog: str = "nmt-interactive") -> int:
    from nmt_toolkit.cli.common import load_plugins, run_cli

    def make(args):
        load_plugins(args)
        return build_command(prog, groups(args), interactive, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()

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
from typing import Optional

from nmt_toolkit.cli.generate import DecodeDeviceConfig
from nmt_toolkit.config import CommonConfig, Group, build_command, option
from nmt_toolkit.generation.config import GenerationConfig

logger = logging.getLogger("nmt_toolkit.interactive")


@dataclass
class InteractiveIOConfig(DecodeDeviceConfig):
    input: str = option("-", "read raw text from this file ('-': stdin)", metavar="FILE")
    buffer_size: int = option(1, "translate this many lines at a time (1: answer each line at once)", low=1)
    plain: bool = option(False, "print only the detokenized translation, one line per input line")
    remove_bpe: Optional[str] = option(None, "undo subword segmentation in H- lines too: '@@ ', 'sentencepiece' "
                                             "or 'auto'", metavar="SYMBOL")
    print_alignment: bool = option(False, "print A- lines (argmax of the encoder-decoder attention)")


def interactive(configs: dict) -> int:
    import torch

    from nmt_toolkit.cli.generate import _h_bpe_symbol, encode_lines, setup, source_limit
    from nmt_toolkit.generation.output import hypothesis_lines, printable

    gen: GenerationConfig = configs["generation"]
    io: InteractiveIOConfig = configs["io"]
    if gen.score_reference or gen.prefix_size:
        from nmt_toolkit.errors import UsageError

        raise UsageError("--score-reference and --prefix-size need references; use nmt-generate")
    io.attention_plot = None
    task, generator, detok, device = setup(configs)
    codec = task.subword()
    limit = source_limit(task, generator.model.max_positions()[0], budget=False)  # batches: --buffer-size lines
    what = "stdin" if io.input == "-" else f"--input {io.input}"
    h_bpe = _h_bpe_symbol(io, task)
    pad = task.src_dict.pad()
    next_id = 0
    from nmt_toolkit.data.lines import iter_lines

    source = iter_lines(io.input, None if io.input == "-" else f"--input {io.input}")
    out = sys.stdout
    while True:
        chunk = list(itertools.islice(source, max(1, io.buffer_size)))
        if not chunk:
            break
        ids = encode_lines(chunk, task, codec, limit, what, first_line=next_id + 1)
        nonempty = [i for i, x in enumerate(ids) if len(x) > 1]
        results: dict[int, list] = {}
        if nonempty:
            lengths = torch.tensor([len(ids[i]) for i in nonempty])
            src = torch.full((len(nonempty), int(lengths.max())), pad, dtype=torch.long)
            for row, i in enumerate(nonempty):
                src[row, : len(ids[i])] = torch.from_numpy(ids[i].astype("int64"))
            hyps = generator.generate(src.to(device), lengths.to(device), need_attn=io.print_alignment)
            results = dict(zip(nonempty, hyps))
        lines = []
        for i, raw in enumerate(chunk):
            sid = next_id + i
            if i not in results:  # an empty line: an empty translation
                lines.append("" if io.plain else f"S-{sid}\t\nH-{sid}\t0.0\t\nD-{sid}\t0.0\t\nP-{sid}\t")
                continue
            if io.plain:
                lines.append(printable(detok(task.tgt_dict.string(results[i][0]["tokens"]))))
            else:
                lines.append(f"S-{sid}\t{printable(raw)}")
                lines.extend(hypothesis_lines(sid, results[i], task.tgt_dict, detok, h_bpe, io.print_alignment))
        out.write("\n".join(lines) + "\n")
        out.flush()
        next_id += len(chunk)
    return 0


def groups():
    from nmt_toolkit.registry import TASKS

    return [Group("common", CommonConfig), Group("task", TASKS.get("translation").config, "data options"),
            Group("generation", GenerationConfig, "generation options"),
            Group("io", InteractiveIOConfig, "input/output options")]


def run(argv=None, prog: str = "nmt-interactive") -> int:
    from nmt_toolkit.cli.common import load_plugins, run_cli

    def make(args):
        load_plugins(args)
        return build_command(prog, groups(), interactive, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()

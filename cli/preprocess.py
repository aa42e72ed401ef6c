"""``nmt-preprocess``: text files → data-bin/ (dictionaries, subword model, .bin/.idx shards, preprocess.json).

Thin: the options are :class:`~nmt_toolkit.data.binarize.PreprocessConfig`; the work is
:func:`nmt_toolkit.data.binarize.preprocess`. Progress goes to stderr, a summary to stdout.
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

import click

from nmt_toolkit.config import CommonConfig, Group, build_command
from nmt_toolkit.data.binarize import PreprocessConfig, preprocess, summary_lines

HELP = """Binarize parallel text for training: build the dictionaries (optionally after learning a joint
sentencepiece or subword-nmt model), write fairseq-compatible .bin/.idx files and preprocess.json into
--destdir. Input files are PREFIX.<source-lang> and PREFIX.<target-lang>, one sentence per line."""


def make_command(argv: Sequence[str], prog: str = "nmt-preprocess") -> click.Command:
    groups = [Group("common", CommonConfig, "Common options"), Group("preprocess", PreprocessConfig, "Preprocessing options")]

    def run_configs(configs) -> int:
        record = preprocess(configs["preprocess"], command=[prog, *argv])
        for line in summary_lines(record):
            click.echo(line)
        click.echo(f"wrote {configs['preprocess'].destdir}")
        return 0

    return build_command(prog, groups, run_configs, HELP)


def run(argv: Optional[Sequence[str]] = None, prog: str = "nmt-preprocess") -> int:
    from nmt_toolkit.cli.common import import_user_dir_of, run_cli

    args = list(sys.argv[1:] if argv is None else argv)

    def make(a):
        # preprocessing uses no registered component: only a --user-dir plugin is imported (no torch, fast start)
        import_user_dir_of(a)
        return make_command(a, prog)

    return run_cli(prog, make, args)


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()

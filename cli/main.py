"""``nmt <program> …``: one click group over the separate programs (``nmt train`` = ``nmt-train``)."""
from __future__ import annotations

import importlib
import sys

import click

#: subcommand name → module under nmt_toolkit.cli that defines ``run(argv, prog)``
PROGRAMS = {
    "preprocess": ("preprocess", "Binarize parallel text into data-bin/ (dictionaries, .bin/.idx shards)."),
    "train": ("train", "Train a model on a data-bin/ folder."),
    "generate": ("generate", "Translate a binarized split or a text file with beam search."),
    "interactive": ("interactive", "Translate raw text from stdin as it arrives."),
    "average-checkpoints": ("average_checkpoints", "Average the parameters of several checkpoints."),
    "score": ("score", "BLEU/chrF (sacreBLEU), tokenized BLEU, PARSEVAL F1."),
    "export": ("export", "Write a checkpoint as a CTranslate2 model, a fairseq checkpoint, a model folder or a Hugging Face Marian model."),
    "convert": ("convert", "Convert a fairseq checkpoint or a Hugging Face Marian model into one of ours."),
    "serve": ("serve", "Serve translations over HTTP (LibreTranslate-compatible API, web page, metrics)."),
    "translate-file": ("translate_file", "Translate a document (.txt, .html, .docx, .odt, .odp, .pptx, .srt), "
                                         "its formatting kept."),
}


class _Programs(click.Group):
    def list_commands(self, ctx):
        return list(PROGRAMS)

    def get_command(self, ctx, name):
        if name not in PROGRAMS:
            return None
        module_name, summary = PROGRAMS[name]

        @click.command(name, help=summary, short_help=summary, add_help_option=False,
                       context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
        @click.pass_context
        def forward(inner_ctx):
            module = importlib.import_module(f"nmt_toolkit.cli.{module_name}")
            inner_ctx.exit(module.run(list(inner_ctx.args), prog=f"nmt {name}"))

        return forward


@click.group(cls=_Programs, context_settings={"help_option_names": ["-h", "--help"]})
def nmt():
    """nmt_toolkit: the Transformer of "Attention Is All You Need", fairseq-style.

    Each subcommand is also installed as its own program (nmt train = nmt-train).
    """


def run(argv, prog: str = "nmt") -> int:
    try:  # without standalone mode click returns the forwarded program's exit status instead of raising it
        code = nmt.main(args=list(argv), prog_name=prog, standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        print(f"{prog}: error: {exc.format_message()}", file=sys.stderr)
        return 2
    return code if isinstance(code, int) else 0


def main() -> None:
    sys.exit(nmt.main(prog_name="nmt", standalone_mode=True))


if __name__ == "__main__":
    main()

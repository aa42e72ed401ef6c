"""nmt-translate-file: translate a document and keep its formatting.

\b
    nmt-translate-file --path model-folder/ report.docx -o report.de.docx
    nmt-translate-file data-bin/m30k --path ck/averaged.pt slides.pptx -o slides.de.pptx

DATA, the data-bin, is needed only for a checkpoint: a single positional argument is INPUT. The format
comes from INPUT's extension: .txt, .html/.htm, .docx, .odt, .odp, .pptx, .srt (the [documents] extra
installs their libraries); OUTPUT has the same one. Each paragraph is translated whole,
and its formatted runs (bold, italic, links, fonts) get the words their words were translated into, by the
model's word alignment; tables, headers and footers, notes, styles, images and subtitle timings are kept
(docs/generation-and-scoring.md, "Documents"). The output is written only when the whole document is
translated; an existing one is replaced only with --overwrite, and only when it is a document of the format.
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from nmt_toolkit.cli.decoding import DecodeDeviceConfig, load_translator, task_groups
from nmt_toolkit.config import CommonConfig, Group, build_command, option
from nmt_toolkit.documents import DocumentConfig
from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.generation.config import GenerationConfig

logger = logging.getLogger("nmt_toolkit.translate_file")


@dataclass
class TranslateFileConfig(DecodeDeviceConfig):
    input: Optional[str] = option(None, "the document to translate (its extension names its format)",
                                  positional=True, metavar="INPUT")
    output: Optional[str] = option(None, "where to write the translated document (the input's extension)",
                                   metavar="FILE", output="file", short="-o")
    overwrite: bool = option(False, "replace --output if it exists and is a document of the same format")


def translate_file(configs: dict) -> int:
    from nmt_toolkit.documents import read_document
    from nmt_toolkit.documents.formats import format_of
    from nmt_toolkit.outputs import claim_file, replace_file

    cfg: TranslateFileConfig = configs["io"]
    gen: GenerationConfig = configs["generation"]
    if gen.score_reference or gen.prefix_size:
        raise UsageError("--score-reference and --prefix-size need references; use nmt-generate")
    _inputs(cfg, configs["task"])
    extension = format_of(cfg.input, f"INPUT {cfg.input}")
    shown = f"--output {cfg.output}"
    limits: DocumentConfig = configs["documents"]
    claim_file(cfg.output, cfg.overwrite, shown, lambda path: _is_document(path, limits), f"a {extension} document")
    data = _read(cfg.input)
    translator = load_translator(configs, need_attn=False)
    document = read_document(cfg.input, data, translator.task.cfg.source_lang or "en", limits, f"INPUT {cfg.input}")
    refusal = translator.alignment_refusal() if document.needs_alignment else None
    if refusal:
        raise UsageError(f"INPUT {cfg.input}: {extension} documents place their runs by word alignments: {refusal}")
    logger.info("translating %d sentences of %s", len(document.sentences), cfg.input)
    translated = document.render(_translate(translator, document) if document.sentences else [])
    replace_file(cfg.output, lambda handle: handle.write(translated), "the translated document")
    logger.info("wrote %s", cfg.output)
    return 0


def _inputs(cfg: TranslateFileConfig, task) -> None:
    """INPUT and --output given, with the same extension, not the same file. With one positional argument,
    it is INPUT (a model folder needs no DATA)."""
    if cfg.input is None and task.data is not None:
        cfg.input, task.data = task.data, None
    if not cfg.input:
        raise UsageError("INPUT is required (the document to translate)")
    if not cfg.output:
        raise UsageError("--output (-o) is required (where to write the translated document)")
    wanted = os.path.splitext(cfg.input)[1].lower()
    if os.path.splitext(cfg.output)[1].lower() != wanted:
        raise UsageError(f"--output {cfg.output}: must have INPUT's extension ({wanted or 'none'}): the translated "
                         f"document is in INPUT's format")
    if os.path.exists(cfg.output) and os.path.exists(cfg.input) and os.path.samefile(cfg.input, cfg.output):
        raise UsageError(f"--output {cfg.output}: is INPUT; write the translation to another file")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise DataError(f"INPUT {path}: cannot read it ({exc.strerror or exc})") from None


def _is_document(path: str, limits: DocumentConfig) -> bool:
    """Whether ``path`` is a document of its extension's format (what --overwrite may replace)."""
    from nmt_toolkit.documents import read_document
    from nmt_toolkit.errors import NmtError

    try:
        read_document(path, _read(path), "en", limits)
    except NmtError:
        return False
    return True


def _translate(translator, document) -> list:
    """The document's sentences translated: with their alignments where its runs or tags are placed by them."""
    from nmt_toolkit.markup.placement import Aligned

    if document.needs_alignment:
        return translator.translate_aligned(document.sentences)
    return [Aligned(t.text) if t.hypotheses else None for t in translator.translate(document.sentences)]


def groups(argv: Sequence[str] = ()):
    return [Group("common", CommonConfig), *task_groups(argv),
            Group("generation", GenerationConfig, "generation options"),
            Group("documents", DocumentConfig, "document limits"),
            Group("io", TranslateFileConfig, "input/output options")]


def run(argv=None, prog: str = "nmt-translate-file") -> int:
    from nmt_toolkit.cli.common import load_plugins, run_cli

    def make(args):
        load_plugins(args)
        return build_command(prog, groups(args), translate_file, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()

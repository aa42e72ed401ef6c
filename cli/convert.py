"""nmt-convert: a fairseq checkpoint → one of ours, or a Hugging Face Marian (OPUS-MT) or M2M-100 model → a
model folder.

\b
    nmt-convert --from fairseq --path wmt16.en-de.joined-dict.transformer/model.pt --output ck/imported.pt
    nmt-train data-bin/wmt16 --restore-file ck/imported.pt --reset-optimizer --reset-lr-scheduler \\
        --reset-dataloader --reset-meters <the model flags nmt-convert prints> ...
    nmt-convert --from marian --path opus-mt-en-de --output opus-mt-en-de.nmt
    nmt-generate --path opus-mt-en-de.nmt --input raw.en
    nmt-convert --from m2m100 --path m2m100_418M --output m2m100.nmt
    nmt-generate --path m2m100.nmt --input raw.en --source-lang en --target-lang de

With --from marian, --path is a MarianMTModel folder (config.json, model.safetensors or pytorch_model.bin,
vocab.json, source.spm, target.spm, tokenizer_config.json) and --output becomes a model folder; see
docs/pretrained-models.md. With --from m2m100, --path is an M2M100ForConditionalGeneration folder (M2M-100 or
NLLB-200: config.json, model.safetensors or pytorch_model.bin, sentencepiece.bpe.model, tokenizer_config.json,
vocab.json for M2M100Tokenizer) and --output a multilingual model folder (every language of its tokenizer).

The checkpoint is read without fairseq and without running pickled code (a restricted unpickler: tensors,
containers, argparse.Namespace and omegaconf trees only). The model options are taken from the file's
``cfg.model`` or ``args``; options our transformer cannot reproduce are refused by name. nmt-generate
reads fairseq checkpoints directly too (--path model.pt). See docs/migrating-from-fairseq.md.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from typing import Any, Callable, Optional

from nmt_toolkit.config import CommonConfig, Group, build_command, option


@dataclass(frozen=True)
class Importer:
    """One format nmt-convert reads: what ``--path`` names, whether the result is a model folder (else our
    checkpoint), why the direction options do not apply (None: they do), and the call that imports it."""

    reads: str
    folder: bool
    no_direction: Optional[str]
    load: Callable[[Any], Any]  # ConvertConfig → ImportedModel


def _fairseq(cfg):
    from nmt_toolkit.importers.fairseq import import_fairseq

    return import_fairseq(cfg.path)


def _marian(cfg):
    from nmt_toolkit.importers.marian import import_marian

    return import_marian(cfg.path, cfg.source_lang, cfg.target_lang, cfg.target_lang_tag)


def _m2m100(cfg):
    from nmt_toolkit.importers.m2m100 import import_m2m100

    return import_m2m100(cfg.path)


IMPORTERS = {
    "fairseq": Importer("the fairseq checkpoint", False, "a checkpoint takes its languages from the data-bin it is "
                                                         "trained or decoded with", _fairseq),
    "marian": Importer("the MarianMTModel folder", True, None, _marian),
    "m2m100": Importer("the M2M100ForConditionalGeneration folder", True, "a multilingual model: nmt-generate "
                       "takes the direction with --source-lang and --target-lang", _m2m100),
}


@dataclass
class ConvertConfig:
    """Which checkpoint to convert, from which format, and where to write ours."""

    from_format: str = option("fairseq", "the checkpoint's format: a fairseq checkpoint file, or a Hugging Face "
                                          "MarianMTModel or M2M100ForConditionalGeneration folder",
                               choices=tuple(IMPORTERS), flag="--from")
    path: Optional[str] = option(None, "the checkpoint (fairseq) or folder (marian, m2m100) to convert",
                                 metavar="PATH")
    output: Optional[str] = option(None, "our checkpoint (fairseq) or model folder (marian, m2m100) to write "
                                         "(atomically; an existing one is replaced only with --overwrite)",
                                   metavar="PATH", output="path")
    overwrite: bool = option(False, "replace --output if it is an earlier checkpoint (fairseq) or model folder "
                                    "(marian, m2m100) that holds nothing else")
    source_lang: Optional[str] = option(None, "--from marian: the source language [default: tokenizer_config.json's]")
    target_lang: Optional[str] = option(None, "--from marian: the target language [default: tokenizer_config.json's]")
    target_lang_tag: Optional[str] = option(None, "--from marian: the folder's default target-language token of "
                                                  "a multilingual model (e.g. >>fra<<)", metavar="TAG")


def model_flags(model_cfg: dict) -> list[str]:
    """The nmt-train flags that rebuild this model with `--arch transformer_base` (whose preset is the
    dataclass defaults): every field that differs from them."""
    from nmt_toolkit.models.transformer import TransformerConfig

    flags = []
    for f in fields(TransformerConfig):
        value, default = model_cfg.get(f.name), f.default
        if value == default:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "")
        else:
            flags += [flag, str(value)]
    return [f for f in flags if f]


def convert(configs: dict) -> int:
    """The same steps for every format: the options checked and --output claimed before anything is read,
    then one import and one write."""
    from nmt_toolkit.errors import UsageError
    from nmt_toolkit.importers.imported_model import claim_output

    cfg: ConvertConfig = configs["convert"]
    importer = IMPORTERS[cfg.from_format]
    if not cfg.path or not cfg.output:
        raise UsageError(f"--path ({importer.reads}) and --output ({'our model folder' if importer.folder else 'ours'})"
                         f" are required")
    for flag, value in (("--source-lang", cfg.source_lang), ("--target-lang", cfg.target_lang),
                        ("--target-lang-tag", cfg.target_lang_tag)):
        if value is not None and importer.no_direction:
            raise UsageError(f"{flag}: not with --from {cfg.from_format} ({importer.no_direction})")
    output = claim_output(cfg.output, importer.folder, cfg.overwrite, f"--output {cfg.output}")
    model = importer.load(cfg)
    model.write(output, cfg.overwrite)
    report(model, cfg.output)
    return 0


def report(model, output: str) -> None:
    """The log line of what was written; for a checkpoint also the nmt-train flags that rebuild its model, on
    stdout."""
    import logging

    log = logging.getLogger("nmt_toolkit.convert")
    if not model.is_folder:
        flags = " ".join(["--arch", "transformer_base", *model_flags(model.model_config)])
        log.info("wrote %s; nmt-train rebuilds this model with: %s", output, flags)
        print(flags)
    elif model.multilingual:
        languages = model.multilingual["languages"]
        log.info("wrote multilingual model folder %s (%d languages: %s; %d symbols)", output, len(languages),
                 " ".join(languages), len(model.src_dict))
    else:
        tags = model.tags
        log.info("wrote model folder %s (%s→%s, %d/%d symbols%s)", output, model.source_lang, model.target_lang,
                 len(model.src_dict), len(model.tgt_dict), f"; target-language tags: {' '.join(tags[:10])}" if tags else "")


def groups():
    return [Group("common", CommonConfig), Group("convert", ConvertConfig, "conversion options")]


def run(argv=None, prog: str = "nmt-convert") -> int:
    from nmt_toolkit.cli.common import load_plugins, run_cli

    def make(args):
        load_plugins(args)
        return build_command(prog, groups(), convert, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()

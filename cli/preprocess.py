"""``nmt-preprocess``: text files → data-bin/ (dictionaries, subword model, .bin/.idx shards, preprocess.json).

Thin: the options are :class:`~nmt_toolkit.data.binarize.PreprocessConfig`; the work is
:func:`nmt_toolkit.data.binarize.preprocess`. Progress goes to stderr, a summary to stdout.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional, Sequence

import click

from nmt_toolkit.config import CommonConfig, Group, build_command, option
from nmt_toolkit.data.binarize import PreprocessConfig, preprocess, summary_lines

HELP = """Binarize parallel text for training: build the dictionaries (optionally after learning a joint
sentencepiece or subword-nmt model), write fairseq-compatible .bin/.idx files and preprocess.json into
--destdir. Input files are PREFIX.<source-lang> and PREFIX.<target-lang>, one sentence per line."""


@dataclass
class ModelFolderConfig:
    model_folder: Optional[str] = option(
        None, "binarize for fine-tuning this model folder (nmt-train --finetune-from-model): its languages, "
              "dictionaries and subword model, as --source-lang/--target-lang, --srcdict/--tgtdict and "
              "--bpe/--bpe-model would give them", metavar="FOLDER")


def folder_options(folder) -> dict:
    """The preprocessing options a model folder stands for (a target subword model of its own included)."""
    kind, paths = folder.codec_kind, folder.subword_paths
    src_file, tgt_file = folder.dict_files
    target = paths.get("target") if paths.get("target") != paths.get("source") else None
    return {"source_lang": folder.source_lang, "target_lang": folder.target_lang, "srcdict": src_file,
            "tgtdict": tgt_file, "joined_dictionary": folder.src_dict == folder.tgt_dict, "bpe": kind,
            "bpe_model": paths.get("source"), "bpe_model_target": target, "target_lang_tag": folder.target_lang_tag}


def check_folder_options(cfg: PreprocessConfig, wanted: dict, folder_path: str) -> None:
    """A flag that contradicts the folder would binarize for another model: refuse it by name."""
    from nmt_toolkit.errors import UsageError

    for key, value in wanted.items():
        if getattr(cfg, key) != value:
            flag = "--" + key.replace("_", "-")
            raise UsageError(f"{flag} {getattr(cfg, key)}: contradicts --model-folder {folder_path} ({value}); "
                             f"drop it, the folder sets it")


def _read_folder(path: str):
    from nmt_toolkit.errors import DataError
    from nmt_toolkit.model_folder import read_model_folder

    try:
        return read_model_folder(path)
    except DataError as exc:
        raise DataError(f"--model-folder {exc}") from None


def make_command(argv: Sequence[str], prog: str = "nmt-preprocess") -> click.Command:
    from nmt_toolkit.config import peek_options

    groups = [Group("common", CommonConfig, "Common options"), Group("preprocess", PreprocessConfig, "Preprocessing options"),
              Group("folder", ModelFolderConfig, "Starting from a model folder")]
    path = peek_options(argv, ["model_folder"])["model_folder"]
    wanted = folder_options(_read_folder(path)) if path else {}

    def preset(configs) -> None:
        for key, value in wanted.items():
            setattr(configs["preprocess"], key, value)

    def run_configs(configs) -> int:
        check_folder_options(configs["preprocess"], wanted, path)
        if configs["preprocess"].lang_pairs is not None:  # several directions into one data-bin
            from nmt_toolkit.data import multilingual

            record = multilingual.preprocess_pairs(configs["preprocess"], command=[prog, *argv])
            lines = multilingual.summary_lines(record)
        else:
            lines = summary_lines(preprocess(configs["preprocess"], command=[prog, *argv]))
        for line in lines:
            click.echo(line)
        click.echo(f"wrote {configs['preprocess'].destdir}")
        return 0

    return build_command(prog, groups, run_configs, HELP, preset=preset)


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

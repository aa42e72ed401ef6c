"""nmt-export: write a trained checkpoint as a model for an inference engine (CTranslate2) or for fairseq.

\b
    nmt-export --path ck/averaged.pt --format ctranslate2 --quantization int8 --output-dir m30k-ct2
    nmt-export data-bin/m30k --path ck/averaged.pt --output-dir m30k-ct2     # dictionaries of this data-bin
    nmt-generate data-bin/m30k --path m30k-ct2 --engine ctranslate2 --lenpen-style fairseq --early-stop beam
    nmt-export data-bin/m30k --path ck/averaged.pt --format fairseq --output-dir m30k-fairseq
    fairseq-generate data-bin/m30k --path m30k-fairseq/checkpoint.pt --beam 4 --lenpen 0.6
    nmt-export data-bin/m30k --path ck/averaged.pt --format folder --output-dir m30k-model
    nmt-generate --path m30k-model --input raw.en                       # no data-bin: the folder has it all
    nmt-export --path m30k-model --format marian --output-dir m30k-hf    # MarianMTModel.from_pretrained(...)

The folder holds CTranslate2's model.bin, config.json and vocabularies, the data-bin's dict.<lang>.txt and
subword model (sentencepiece .model or BPE codes) beside them, and nmt_export.json (what was exported).
With --format fairseq the folder holds checkpoint.pt (fairseq 0.12's layout, read by fairseq-generate and
CTranslate2's fairseq converter), the dictionaries and nmt_export.json; see docs/migrating-from-fairseq.md.
With --format marian the folder is a Hugging Face MarianMTModel with its MarianTokenizer files (the model
must be post-norm with --sinusoid-layout marian and a sentencepiece model); see docs/pretrained-models.md.
DATA defaults to the data-bin recorded in the checkpoint. Needs the [ct2] extra: pip install 'nmt_toolkit[ct2]'.
See docs/deployment.md.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional

from nmt_toolkit.config import CommonConfig, Group, build_command, option
from nmt_toolkit.export.ctranslate2 import QUANTIZATIONS
from nmt_toolkit.loading import model_task, open_model
from nmt_toolkit.outputs import FolderOutput


@dataclass
class ExportConfig:
    """What to export, to which engine's format, and where."""

    path: Optional[str] = option(None, "the checkpoint (or model folder) to export", metavar="FILE")
    format: str = option("ctranslate2", "the engine's model format (folder: a self-contained model folder for "
                                        "--path with no data-bin; marian: a Hugging Face MarianMTModel folder)",
                         choices=("ctranslate2", "fairseq", "folder", "marian"))
    quantization: str = option("none", "weight type of the exported model: none keeps float32; int8 and int16 "
                                       "quantize the weights; float16/bfloat16 halve them (GPU engines); int8_float16: "
                                       "int8 weights, float16 activations", choices=QUANTIZATIONS)
    output_dir: Optional[str] = option(None, "folder to write: new or empty (an earlier export of the same format "
                                             "with --overwrite)", metavar="DIR", output="folder")
    overwrite: bool = option(False, "replace --output-dir if it is an earlier export of the same format, and holds "
                                    "nothing else")


def export(configs: dict) -> int:
    import logging

    from nmt_toolkit.errors import UsageError
    from nmt_toolkit.export.ctranslate2 import export as export_ct2

    cfg: ExportConfig = configs["export"]
    if not cfg.path:
        raise UsageError("--path is required (the checkpoint to export)")
    if not cfg.output_dir:
        raise UsageError("--output-dir is required")
    output = FolderOutput(cfg.output_dir, _output_kind(cfg.format), cfg.overwrite, f"--output-dir {cfg.output_dir}")
    model = open_model(cfg.path)  # read once: the data-bin, the task and the weights come from it
    task = model_task(_data_options(configs["task"], model), model, direction="none")
    if task.multilingual and cfg.format in ("fairseq", "marian"):
        raise UsageError(f"--format {cfg.format}: {cfg.path} is a multilingual model ({', '.join(task.langs)}); it "
                         f"exports as --format folder or ctranslate2, which keep its language tokens")
    if cfg.format == "folder":
        return _export_folder(cfg, model, task, output)
    if cfg.format == "marian":
        return _export_marian(cfg, model, task, output)
    if cfg.format == "fairseq":
        from nmt_toolkit.export.fairseq import export as export_fairseq

        if cfg.quantization != "none":
            raise UsageError("--quantization applies to --format ctranslate2 only; fairseq checkpoints are float32")
        record = export_fairseq(model, task, output)
        logging.getLogger("nmt_toolkit.export").info("wrote %s (fairseq checkpoint, %s positions)",
                                                      record["fairseq_checkpoint"], record["positions"])
        return 0
    record = export_ct2(model, task, output, cfg.quantization)
    logging.getLogger("nmt_toolkit.export").info(
        "wrote %s (CTranslate2 %s, quantization %s, %d positions%s)", cfg.output_dir, record["ctranslate2_version"],
        cfg.quantization, record["max_positions"],
        f"; languages {', '.join(record['languages'])}" if record.get("task") else "")
    return 0


def _data_options(task_cfg, model):
    """``task_cfg`` with the data folder ``model`` needs: a model folder is its own; a checkpoint given without
    DATA names the data-bin it was trained on."""
    from nmt_toolkit.errors import UsageError

    if not task_cfg.data and model.folder is not None:  # the folder holds its dictionaries and subword models
        task_cfg.data = model.path
    if not task_cfg.data:
        recorded = model.config.get("task")
        recorded = recorded if isinstance(recorded, dict) else {}
        if not recorded.get("data"):
            raise UsageError(f"{model.path}: the checkpoint records no data-bin folder; give it as DATA")
        task_cfg.data = recorded["data"]
        task_cfg.source_lang = task_cfg.source_lang or recorded.get("source_lang")
        task_cfg.target_lang = task_cfg.target_lang or recorded.get("target_lang")
    return task_cfg


def _output_kind(fmt: str):
    """What an earlier export of ``fmt`` looks like on disk (what --overwrite may replace)."""
    if fmt == "ctranslate2":
        from nmt_toolkit.export.ctranslate2 import CTRANSLATE2_FOLDER as kind
    elif fmt == "fairseq":
        from nmt_toolkit.export.fairseq import FAIRSEQ_FOLDER as kind
    elif fmt == "marian":
        from nmt_toolkit.export.marian import MARIAN_FOLDER as kind
    else:
        from nmt_toolkit.model_folder import MODEL_FOLDER as kind
    return kind


def _export_folder(cfg: ExportConfig, model, task, output) -> int:
    import logging

    from nmt_toolkit.errors import UsageError
    from nmt_toolkit.export.folder import export as export_folder

    if cfg.quantization != "none":
        raise UsageError("--quantization applies to --format ctranslate2 only; a model folder holds float32 weights")
    record = export_folder(model, task, output)
    languages = (f"{record['source_lang']}→{record['target_lang']}" if record["source_lang"] else
                 f"languages {', '.join(record['languages'])}")
    logging.getLogger("nmt_toolkit.export").info("wrote %s (model folder, %s, subword %s)", cfg.output_dir,
                                                  languages, record["subword"])
    return 0


def _export_marian(cfg: ExportConfig, model, task, output) -> int:
    import logging

    from nmt_toolkit.errors import UsageError
    from nmt_toolkit.export.marian import export as export_marian

    if cfg.quantization != "none":
        raise UsageError("--quantization applies to --format ctranslate2 only; a Marian folder holds float32 weights")
    record = export_marian(model, task, output)
    logging.getLogger("nmt_toolkit.export").info("wrote %s (Hugging Face Marian, %s→%s, decoding starts from %s)",
                                                  cfg.output_dir, record["source_lang"], record["target_lang"],
                                                  record["decoder_start"])
    return 0


def groups():
    from nmt_toolkit.registry import TASKS

    return [Group("common", CommonConfig), Group("task", TASKS.get("translation").config, "data options"),
            Group("export", ExportConfig, "export options")]


def run(argv=None, prog: str = "nmt-export") -> int:
    from nmt_toolkit.cli.common import load_plugins, run_cli

    def make(args):
        load_plugins(args)
        return build_command(prog, groups(), export, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()

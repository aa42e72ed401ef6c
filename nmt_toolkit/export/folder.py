"""A checkpoint and the data-bin (or model folder) it was trained on → a self-contained model folder.

The model is loaded through the checkpoint loading path first, so a checkpoint trained on other dictionaries,
a damaged one or one with non-finite weights is refused before anything is written; the folder then holds
exactly the weights that decode (``nmt_toolkit/model_folder.py`` describes its files). A training run writes
the weights it holds in memory with :func:`write_folder`, with no file to read back. A multilingual model
(``--task translation_multi_simple_epoch``) keeps its languages, directions and tag options.
"""
from __future__ import annotations

from typing import Optional

from nmt_toolkit.model_folder import MODEL_FOLDER, scheme_of_codec, write_model_folder
from nmt_toolkit.outputs import as_output


def export(checkpoint, task, output_dir, overwrite: bool = False, made_by: Optional[str] = None,
           target_lang_tag: Optional[str] = None) -> dict:
    """Write ``checkpoint`` (with ``task``'s dictionaries and subword models) as a model folder at
    ``output_dir`` (a path, or an output a program claimed already); returns what was written (the
    manifest's main entries). ``checkpoint``: a path, or the model :func:`~nmt_toolkit.loading.open_model` read
    already."""
    from nmt_toolkit.loading import as_opened, load_models
    from nmt_toolkit.checkpoints import task_dictionaries

    output_dir = as_output(output_dir, MODEL_FOLDER, overwrite)  # refused before the model is read
    src, tgt, langs, _ = task_dictionaries(task)
    opened = as_opened(checkpoint)
    checkpoint = opened.path
    models, configs = load_models([opened], src, tgt, task.dictionary_files(), langs=langs)
    return write_folder(output_dir, task, configs[0], models[0].state_dict(),
                        made_by or f"nmt-export --path {checkpoint}", target_lang_tag)


def write_folder(output_dir, task, config: dict, state_dict: dict, made_by: str,
                 target_lang_tag: Optional[str] = None) -> dict:
    """Write the model of ``config`` (a checkpoint's plain config) with the weights ``state_dict``, which were
    trained or checked against ``task``'s dictionaries, as a model folder at ``output_dir`` (a path, or an
    output a program claimed already) with ``task``'s subword models; returns the manifest's main entries."""
    from nmt_toolkit.checkpoints import task_dictionaries

    src, tgt, langs, _ = task_dictionaries(task)
    kind, files = task.subword_files()
    arch = (config.get("components") or {}).get("arch") or config["components"]["model"]
    if target_lang_tag is None:
        target_lang_tag = task.default_target_lang_tag()
    multilingual = task.multilingual_record()
    if multilingual:
        langs = (None, None)  # any two of its languages
    write_model_folder(output_dir, arch=arch, model_config=config.get("model") or {}, state_dict=state_dict,
                       src_dict=src, tgt_dict=tgt, source_lang=langs[0], target_lang=langs[1],
                       subword_scheme=scheme_of_codec(kind), subword_files=files, target_lang_tag=target_lang_tag,
                       made_by=made_by, multilingual=multilingual)
    return {"path": str(output_dir), "arch": arch, "source_lang": langs[0], "target_lang": langs[1],
            "languages": multilingual["languages"] if multilingual else list(langs), "subword": scheme_of_codec(kind)}

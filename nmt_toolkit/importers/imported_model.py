"""What every importer returns: a foreign model read, converted and checked, with nothing written yet.

The importers have the shape of CTranslate2's converters (load, validate, write): ``import_<format>(path,
…)`` reads the foreign files, converts them, runs the loader's checks on the result and returns one
:class:`ImportedModel`; :meth:`ImportedModel.write` is the one call that writes it. A model that comes with
its dictionaries and subword models (Marian, M2M-100) becomes a model folder; one without them (a fairseq
checkpoint: its dictionaries are in the data-bin it was trained on) becomes one of our checkpoints.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.data.language_codes import language_tags
from nmt_toolkit.model_folder import MULTILINGUAL_TASK


@dataclass
class ImportedModel:
    """One imported model in memory. ``origin`` says what was imported (``format``, ``path``; for fairseq its
    ``arch`` too): a checkpoint records it as ``imported_from``, a model folder as ``made_by``."""

    origin: dict
    model_config: dict  # the fields of TransformerConfig
    state_dict: dict  # under our parameter names
    arch: str = "transformer"
    src_dict: Optional[Dictionary] = None  # None: no dictionaries, written as a checkpoint
    tgt_dict: Optional[Dictionary] = None
    source_lang: Optional[str] = None
    target_lang: Optional[str] = None
    subword_scheme: str = "none"
    subword_files: dict = field(default_factory=dict)  # role → file to copy into the folder
    target_lang_tag: Optional[str] = None
    multilingual: Optional[dict] = None  # a multilingual folder's record (model_folder.write_model_folder)
    task_options: Optional[dict] = None  # a multilingual checkpoint's task options

    @property
    def is_folder(self) -> bool:
        """Written as a model folder (it has its dictionaries), else as a checkpoint."""
        return self.src_dict is not None

    @property
    def made_by(self) -> str:
        return f"nmt-convert --from {self.origin['format']} --path {self.origin['path']}"

    @property
    def tags(self) -> list[str]:
        """The target-language tags of the source dictionary (``>>fra<<``: what --target-lang-tag picks from)."""
        return language_tags(self.src_dict.symbols) if self.src_dict is not None else []

    def checkpoint(self) -> dict:
        """The model as one of our checkpoints: ``model``, ``version``, ``config`` (``components``, the model
        options, ``imported_from``, and a multilingual model's task options)."""
        from nmt_toolkit.checkpoints import VERSION

        config = {"components": {"model": "transformer", "arch": self.arch}, "model": self.model_config,
                  "imported_from": self.origin}
        if self.task_options is not None:  # decoding sets up the multilingual task from these
            config["components"]["task"] = MULTILINGUAL_TASK
            config["task"] = self.task_options
        return {"model": self.state_dict, "version": VERSION, "config": config}

    def write(self, output, overwrite: bool = False) -> None:
        """Write the model at ``output`` (a path, or an output :func:`claim_output` claimed): a model folder,
        staged and swapped in, or a checkpoint file replaced atomically."""
        from nmt_toolkit.checkpoints import save_checkpoint
        from nmt_toolkit.model_folder import write_model_folder

        if not self.is_folder:
            save_checkpoint(self.checkpoint(), os.fspath(output))
            return
        write_model_folder(output, arch=self.arch, model_config=self.model_config, state_dict=self.state_dict,
                           src_dict=self.src_dict, tgt_dict=self.tgt_dict, source_lang=self.source_lang,
                           target_lang=self.target_lang, subword_scheme=self.subword_scheme,
                           subword_files=self.subword_files, target_lang_tag=self.target_lang_tag,
                           made_by=self.made_by, overwrite=overwrite, multilingual=self.multilingual)


def claim_output(path: str, folder: bool, overwrite: bool, shown: str):
    """The output an import will write, refused now, before anything is read, when it may not be: a model
    folder replaces only an earlier model folder, a checkpoint only an earlier checkpoint file, and either
    only with ``overwrite``. Returns what :meth:`ImportedModel.write` takes."""
    from nmt_toolkit.checkpoints import is_checkpoint_file
    from nmt_toolkit.model_folder import MODEL_FOLDER
    from nmt_toolkit.outputs import FolderOutput, claim_file

    if folder:
        return FolderOutput(path, MODEL_FOLDER, overwrite, shown)
    claim_file(path, overwrite, shown, is_checkpoint_file, "a checkpoint")
    return path

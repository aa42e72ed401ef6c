"""A model path → what it holds, read once; checkpoints → models, rebuilt from their stored configs.

:func:`open_model` is the one way every program opens a ``--path``: one of our checkpoints, a fairseq
checkpoint (converted on the fly), a model folder or an nmt-export CTranslate2 folder, each file read once.
What it returns (:class:`OpenedModel`) is what the task is chosen from (:func:`model_task`) and what
:func:`load_models`, the Translator and the exporters take, so that no program reads a model file twice.

Decoding (``generation/``) and exporting (``export/``) both start from a checkpoint, so the loading sits
below both of them: neither package imports the other to get a model. It reads fairseq files through
``importers/fairseq.py`` (the weight renaming, one direction only) and our files through
``checkpoints.py``.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.export_record import read_export
from nmt_toolkit.model_folder import MULTILINGUAL_TASK, ModelFolder, is_model_folder, read_model_folder
from nmt_toolkit.models.state_dict_checks import check_shapes, check_values


@dataclass(frozen=True)
class OpenedModel:
    """What :func:`open_model` read at ``path``. ``state`` is shaped as our checkpoints are (``model``,
    ``config``, ``version``, ``dictionaries``) for a checkpoint of ours or fairseq's and for a model folder;
    ``folder`` is the model folder as read (manifest, config, dictionaries, subword models); ``export`` is a
    CTranslate2 export's ``nmt_export.json``, whose weights only CTranslate2 reads."""

    path: str
    state: Optional[dict] = None
    folder: Optional[ModelFolder] = None
    export: Optional[dict] = None

    @property
    def config(self) -> dict:
        """The checkpoint's plain config (``{}`` for a CTranslate2 export)."""
        config = (self.state or {}).get("config")
        return config if isinstance(config, dict) else {}

    @property
    def task_name(self) -> str:
        """The task the model was trained with."""
        if self.export is not None:
            return MULTILINGUAL_TASK if isinstance(self.export.get("task"), dict) else "translation"
        components = self.config.get("components")
        return str((components if isinstance(components, dict) else {}).get("task") or "translation")

    def task_options(self) -> Optional[dict]:
        """The options of the multilingual task the model records (its directions, tags), or None for a model of
        any other task."""
        if self.export is not None:
            recorded = self.export.get("task")
        else:
            recorded = self.config.get("task") if self.task_name == MULTILINGUAL_TASK else None
        return dict(recorded) if isinstance(recorded, dict) else None

    def checkpoint(self) -> dict:
        """The checkpoint-shaped state; a CTranslate2 export has none of ours: one line saying what reads it."""
        if self.state is None:
            raise DataError(f"{self.path}: a CTranslate2 export (nmt_export.json) holds no weights of ours; decode it "
                            f"with --engine ctranslate2, or give the checkpoint or model folder it was exported from")
        return self.state


def open_model(path: str) -> OpenedModel:
    """Read the model at ``path`` once: a model folder (manifest, config, dictionaries and weights), a folder
    written by ``nmt-export --format ctranslate2`` (its record; CTranslate2 reads the weights), one of our
    checkpoints or a fairseq checkpoint converted on the fly. A file that is none of them keeps our loader's
    error; a pickle naming a class that a checkpoint never holds (a planted ``__reduce__``) is refused by name."""
    if is_model_folder(path):
        folder = read_model_folder(path)
        return OpenedModel(path, state=folder.checkpoint(), folder=folder)
    if os.path.isdir(path):
        record = read_export(path)
        if record is None or record.get("format") != "ctranslate2":
            raise DataError(f"--path {path}: not a folder written by nmt-export --format ctranslate2 (no "
                            f"nmt_export.json), nor a model folder (no manifest.json)")
        return OpenedModel(path, export=record)
    return OpenedModel(path, state=_read_checkpoint_file(path))


def as_opened(model: Union[str, "OpenedModel"]) -> OpenedModel:
    """``model`` itself when it was opened already, else the path opened (:func:`open_model`)."""
    return model if isinstance(model, OpenedModel) else open_model(model)


def model_task(cfg, opened: OpenedModel, direction: str = "named", task: Optional[str] = None):
    """The task that reads ``opened`` with the data options ``cfg`` (a :class:`TranslationConfig`, or the
    multilingual task's config where a program took that task's flags, as fairseq-generate does).

    A model trained with ``--task translation_multi_simple_epoch`` gets that task with the language options it
    records; a flag of that task that contradicts them is refused, naming it. ``direction``: ``named`` decodes
    ``cfg.source_lang`` → ``cfg.target_lang`` (both required); ``any`` decodes the first trained direction when
    none is named (a server serves every direction of the one loaded model); ``none`` sets up no direction
    (an export keeps every language). Any other model gets the translation task. ``task``: the task named on
    the command line (``--task``), refused when it is not the one the model was trained with. A model folder
    given as the data folder is set up from what ``opened`` read, not read again."""
    from nmt_toolkit.tasks.translation import TranslationTask

    if task is not None and task != opened.task_name:
        raise UsageError(f"--task {task}: {opened.path} was trained with --task {opened.task_name}")
    here = bool(cfg.data) and _same_path(cfg.data, opened.path)  # the model is its own data folder
    folder = opened.folder if here else None
    recorded = opened.task_options()
    if recorded is None:
        return TranslationTask.setup_task(cfg, folder, export=opened.export if here else None)
    from nmt_toolkit.tasks.multilingual import MultilingualTranslationTask

    options = _multilingual_options(cfg, recorded, opened.path)
    export = opened.export if here else None
    if direction == "none":
        return MultilingualTranslationTask.setup_task(options, folder, export)
    pairs = options.lang_pairs
    if direction == "any" and pairs and not (options.source_lang and options.target_lang):
        source, target = pairs.split(",")[0].split("-")  # else the task's own error names what is missing
        options.source_lang, options.target_lang = options.source_lang or source, options.target_lang or target
    return MultilingualTranslationTask.setup_decoding(options, folder, export)


def _multilingual_options(cfg, recorded: dict, path: str):
    """The multilingual task's config: the data options of ``cfg`` with the language options ``recorded``.
    Where ``cfg`` is that task's config already (its flags were given, as fairseq-generate takes them), a flag
    given with another value than its default must agree with what the model records; those that do not are
    one line naming them. A ``--lang-dict`` listing the model's languages in the model's order is used in place
    of the file the training run read (which may be gone)."""
    from nmt_toolkit.tasks.multilingual import MultilingualConfig
    from nmt_toolkit.tasks.translation import TranslationConfig

    data_options = {f.name for f in dataclasses.fields(TranslationConfig)}
    values = {name: getattr(cfg, name) for name in data_options}
    contradictions = []
    for f in dataclasses.fields(MultilingualConfig):
        if f.name in data_options:
            continue
        given = getattr(cfg, f.name) if isinstance(cfg, MultilingualConfig) else f.default
        if f.name not in recorded:  # the model does not say (a model folder records no sampling options)
            values[f.name] = given
            continue
        own = f.default if recorded[f.name] is None else recorded[f.name]
        values[f.name] = own
        if given == f.default or _agree(f.name, given, own, recorded):
            values[f.name] = given if f.name == "lang_dict" and given is not None else own
            continue
        flag = "--" + f.name.replace("_", "-")
        contradictions.append((flag if given is True else f"{flag} {given}") +
                              (f" (trained without {flag})" if own in (False, None) else f" (trained with {flag} {own})"))
    if contradictions:
        raise UsageError(f"{path}: {', '.join(contradictions)}: not the model's own options; leave "
                         f"{'it' if len(contradictions) == 1 else 'them'} out (the model's are used)")
    return MultilingualConfig(**values)


def _agree(name: str, given: Any, own: Any, recorded: dict) -> bool:
    """Whether a multilingual option given on the command line says what the model's recorded ``own`` says:
    the same value, the same directions in another order, or a ``--lang-dict`` listing the same languages in
    the same order (the recorded file unread when gone: the dictionary's fingerprint decides then)."""
    from nmt_toolkit.data.lang_pairs import languages, parse_lang_pairs
    from nmt_toolkit.tasks.multilingual import read_lang_dict

    if given == own:
        return True
    if name == "lang_pairs":
        return set(parse_lang_pairs(given)) == set(parse_lang_pairs(own))
    if name != "lang_dict":
        return False
    if not recorded.get("lang_pairs"):
        return False
    used = sorted(languages(parse_lang_pairs(recorded["lang_pairs"])))
    if own is not None and not os.path.isfile(own):
        return True
    return read_lang_dict(given, used) == (read_lang_dict(own, used) if own is not None else used)


def _same_path(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _read_checkpoint_file(path: str) -> dict:
    """One of our checkpoints, or a fairseq checkpoint converted on the fly."""
    from nmt_toolkit.importers import fairseq_pickle
    from nmt_toolkit.importers.fairseq import converted, is_fairseq_checkpoint
    from nmt_toolkit.checkpoints import is_torchscript_archive, load_checkpoint as load_ours

    try:
        return load_ours(path)
    except DataError as ours:
        if not os.path.isfile(path) or is_torchscript_archive(path):
            raise
        try:
            state = fairseq_pickle.read(path)
        except DataError as theirs:
            if "refusing to load" in str(theirs):
                raise theirs from None
            raise ours from None
        if not is_fairseq_checkpoint(state):
            raise ours from None
    return converted(state, path)


def load_models(sources: Sequence[Union[str, OpenedModel]], src_dict, tgt_dict, dict_files: Sequence[str] = (),
                device: Optional[torch.device] = None, langs: Sequence[Optional[str]] = (None, None)
                ) -> tuple[list[nn.Module], list[dict]]:
    """Rebuild the models of ``sources`` (paths, or models opened already by :func:`open_model`; a path is
    opened here, one at a time) from their stored configs and load their weights.

    Every checkpoint loads with ``weights_only=True``; a missing, truncated or foreign file is one error line
    naming it. A checkpoint that records other dictionaries or another direction than ``dict_files`` and
    ``langs`` (the data-bin's) is refused by name before its model is built. So is one whose tensor shapes
    differ from what its stored config builds (compared before the weights are copied, while the model's
    parameters are allocated but not yet written, so a config edited to a huge width takes no memory): a
    vocabulary-sized difference is a "wrong dictionary" error naming both, others an edited or mixed file.
    Returns ``(models, configs)``.
    """
    from nmt_toolkit.checkpoints import check_dictionaries

    models, configs = [], []
    for source in sources:
        opened = as_opened(source)
        path, state = opened.path, opened.checkpoint()
        check_dictionaries(state, path, src_dict, tgt_dict, tuple(langs),
                           tuple(dict_files) if len(dict_files) == 2 else (None, None))
        config = state["config"]
        if not isinstance(config, dict) or not isinstance(config.get("components"), dict) \
                or "model" not in config["components"]:
            raise DataError(f"{path}: the checkpoint's config has no components.model entry (not written by nmt-train?)")
        weights = state["model"]
        model = _unfilled_model(config, src_dict, tgt_dict, path)
        check_shapes(path, model.state_dict(), weights, config, src_dict, tgt_dict, dict_files)
        check_values(path, model.state_dict(), weights)
        model.load_state_dict(weights)
        model.eval()
        if device is not None:
            model.to(device)
        models.append(model)
        configs.append(config)
    return models, configs


def _unfilled_model(config: dict, src_dict, tgt_dict, path: str) -> nn.Module:
    """The model of ``config`` with its parameters allocated but not initialised: the checkpoint's weights
    replace every one of them (the load is strict), and until then their pages are never written, so a
    config edited to a huge width costs address space, not memory, before the shape check refuses it."""
    from nmt_toolkit.models import build_model_from_config_dict

    try:
        with _SkipParameterInit():
            return build_model_from_config_dict(config, src_dict, tgt_dict, what=path)
    except RuntimeError as exc:  # the allocator refuses a size beyond the machine's memory
        if "allocate" not in str(exc):
            raise
        raise DataError(f"{path}: the configuration stored with it builds a model too large for this machine's "
                        f"memory ({str(exc).splitlines()[0]}): an edited or mixed file, or a larger machine "
                        "needed") from None


_RANDOM_FILLS = frozenset(getattr(torch.Tensor, name) for name in (
    "normal_", "uniform_", "bernoulli_", "cauchy_", "exponential_", "geometric_", "log_normal_", "random_"))


class _SkipParameterInit(TorchFunctionMode):
    """While active, ``torch.nn.init`` functions and in-place random fills on a parameter (or a view of one)
    do nothing. Initialising a model that is about to receive a checkpoint draws millions of random numbers
    only to overwrite them, and writes every page of memory before the shapes are checked. Other tensors
    (a positional table computed at build time) are made as usual."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _RANDOM_FILLS or (getattr(func, "__module__", None) == "torch.nn.init"
                                     and func.__name__.endswith("_")):  # the in-place initialisers
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, nn.Parameter) or isinstance(getattr(target, "_base", None), nn.Parameter):
                return target
        return func(*args, **kwargs)

"""Checkpoint files → models: ours, or fairseq's converted on the fly, rebuilt from their stored configs.

Decoding (``generation/``) and exporting (``export/``) both start from a checkpoint file, so the loading
sits below both of them: neither package imports the other to get a model. It reads fairseq files through
``importers/fairseq.py`` (the weight renaming, one direction only) and our files through
``checkpoints.py``.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from nmt_toolkit.errors import DataError
from nmt_toolkit.models.state_dict_checks import check_shapes, check_values


def load_any_checkpoint(path: str) -> dict:
    """One of our checkpoints, a model folder (its safetensors weights and config, shaped as a checkpoint),
    or a fairseq checkpoint converted on the fly (``nmt-generate --path`` accepts all three). A file that is
    none of them keeps our loader's error; a pickle naming a class that a checkpoint never holds (a planted
    ``__reduce__``) is refused by name."""
    from nmt_toolkit.importers import fairseq_pickle
    from nmt_toolkit.importers.fairseq import converted, is_fairseq_checkpoint
    from nmt_toolkit.model_folder import is_model_folder, read_model_folder
    from nmt_toolkit.checkpoints import is_torchscript_archive, load_checkpoint as load_ours

    if is_model_folder(path):
        return read_model_folder(path).checkpoint()
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


def load_models(paths: Sequence[str], src_dict, tgt_dict, dict_files: Sequence[str] = (),
                  device: Optional[torch.device] = None, langs: Sequence[Optional[str]] = (None, None)
                  ) -> tuple[list[nn.Module], list[dict]]:
    """Rebuild the models of ``paths`` from their stored configs and load their weights.

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
    for path in paths:
        state = load_any_checkpoint(path)  # ours, or fairseq's converted on the fly
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

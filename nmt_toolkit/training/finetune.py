"""``nmt-train --finetune-from-model FOLDER``: the model options come from the folder, not from flags.

The folder's model config takes the place of the ``--arch`` preset (so ``--help`` and ``--dump-config``
show it); a flag or ``--config`` key that sets an architecture option to another value is refused by name,
since the folder's weights fit only its own architecture. Dropout rates are training settings and may change.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from nmt_toolkit.errors import UsageError


def folder_arch(folder, given_arch: Optional[str]) -> str:
    """The ``--arch`` of a fine-tuning run: the folder's. A folder that records a model name instead of a
    preset takes any preset of that model (the folder's config replaces the preset's values)."""
    from nmt_toolkit.registry import ARCHITECTURES

    components = folder.config["components"]
    arch, model = components.get("arch"), components["model"]
    presets = [name for name in ARCHITECTURES.names() if ARCHITECTURES.get(name).parent == model]
    if not presets:
        raise UsageError(f"--finetune-from-model {folder.path}: its model {model!r} is not registered here "
                         f"(a plugin's? give its --user-dir)")
    allowed = [arch] if arch in ARCHITECTURES else presets
    if given_arch and given_arch not in allowed:
        raise UsageError(f"--arch {given_arch}: the model folder {folder.path} holds a {arch or model} model; "
                         f"drop --arch, the architecture comes from the folder")
    return given_arch or allowed[0]


def apply_folder_model(model_cfg, folder) -> None:
    """Set every model option of ``model_cfg`` to the folder's value (in place of the preset)."""
    from nmt_toolkit.config import from_dict

    stored = from_dict(type(model_cfg), folder.config["model"], what=f"{folder.path}: config.json model")
    for field in dataclasses.fields(model_cfg):
        setattr(model_cfg, field.name, getattr(stored, field.name))


def check_model_options(model_cfg, folder) -> None:
    """Refuse options that contradict the folder's architecture, naming the first one and both values."""
    from nmt_toolkit.config import flag_name, from_dict

    stored = from_dict(type(model_cfg), folder.config["model"], what=f"{folder.path}: config.json model")
    for field in dataclasses.fields(model_cfg):
        if "dropout" in field.name:
            continue
        mine, theirs = getattr(model_cfg, field.name), getattr(stored, field.name)
        if mine != theirs:
            raise UsageError(f"{flag_name(field)} {mine}: the model folder {folder.path} was trained with "
                             f"{theirs}; drop it, the architecture comes from the folder")

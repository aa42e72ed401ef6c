"""Models are found by name; a model class builds itself from its config dataclass and the dictionaries.

A checkpoint stores the model's registry name (``config["components"]["model"]``) and its config as a
plain dict (``config["model"]``), so :func:`build_model_from_config_dict` rebuilds it with no pickled
classes involved.
"""
from __future__ import annotations

from typing import Any

from nmt_toolkit.config import from_dict
from nmt_toolkit.registry import MODELS


def build_model(model_name: str, cfg: Any, src_dict, tgt_dict):
    """Instantiate the registered model ``model_name`` from its config and the task's dictionaries."""
    return MODELS.get(model_name).obj.build_model(cfg, src_dict, tgt_dict)


def build_model_from_config_dict(config: dict, src_dict, tgt_dict, what: str = "checkpoint"):
    """Rebuild a model from a checkpoint's plain-dict configuration."""
    model_name = config["components"]["model"]
    entry = MODELS.get(model_name)
    cfg = from_dict(entry.config, config.get("model", {}), what=f"{what}: model config")
    return entry.obj.build_model(cfg, src_dict, tgt_dict)

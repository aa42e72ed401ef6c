"""Checkpoint averaging (section 6.1: the last 5 checkpoints for base models, the last 20 for big ones).

Parameters are summed in float64 and divided once, then stored in each tensor's original dtype. Only the
model weights are averaged: the optimizer and scheduler states are dropped, the configuration of the first
checkpoint is kept, so the output generates directly and loads with ``torch.load(weights_only=True)``.
"""
from __future__ import annotations

import os
import re
from typing import Optional, Sequence

import torch

from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.checkpoints import load_checkpoint, save_checkpoint
from nmt_toolkit.data.dictionary import fingerprint_mismatch
from nmt_toolkit.training.state import TrainState

_UPDATE_NAME = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")
_EPOCH_NAME = re.compile(r"^checkpoint(\d+)\.pt$")


def select_checkpoints(folder: str, num_epoch_checkpoints: int = 0, num_update_checkpoints: int = 0,
                       upper_bound: Optional[int] = None) -> list[str]:
    """The last N ``checkpoint<epoch>.pt`` (by epoch) or ``checkpoint_<epoch>_<updates>.pt`` (by updates)."""
    if bool(num_epoch_checkpoints) == bool(num_update_checkpoints):
        raise UsageError("with a folder in --inputs give exactly one of --num-epoch-checkpoints N and "
                         "--num-update-checkpoints N")
    if not os.path.isdir(folder):
        raise UsageError(f"--inputs {folder}: not a folder")
    pattern, n = (_UPDATE_NAME, num_update_checkpoints) if num_update_checkpoints else (_EPOCH_NAME, num_epoch_checkpoints)
    found = []
    for name in os.listdir(folder):
        m = pattern.match(name)
        if m:
            number = int(m.group(m.lastindex))
            if upper_bound is None or number <= upper_bound:
                found.append((number, name))
    found.sort()
    kind = "checkpoint_<epoch>_<updates>.pt" if num_update_checkpoints else "checkpoint<epoch>.pt"
    if len(found) < n:
        raise DataError(f"{folder}: asked for the last {n} {kind} files but found {len(found)}"
                        + (f" (<= {upper_bound})" if upper_bound is not None else ""))
    return [os.path.join(folder, name) for _, name in found[-n:]]


def average_checkpoints(paths: Sequence[str]) -> dict:
    """A checkpoint dict whose ``model`` is the element-wise mean of the given checkpoints' models."""
    if not paths:
        raise UsageError("no checkpoints to average")
    first = load_checkpoint(paths[0])
    ref = first["model"]
    _check_finite(paths[0], ref)
    sums: dict[str, torch.Tensor] = {}
    for key, value in ref.items():
        if not isinstance(value, torch.Tensor):
            raise DataError(f"{paths[0]}: model entry {key!r} is not a tensor")
        sums[key] = value.double().clone() if value.is_floating_point() else value.clone()
    for path in paths[1:]:
        other = load_checkpoint(path)
        _check_same_dictionaries(first, paths[0], other, path)
        model = other["model"]
        _check_finite(path, model)
        missing = [k for k in ref if k not in model]
        extra = [k for k in model if k not in ref]
        if missing or extra:
            what = f"lacks tensor {missing[0]!r}" if missing else f"has an extra tensor {extra[0]!r}"
            raise DataError(f"{path}: {what} compared with {paths[0]}; checkpoints of different models cannot "
                            "be averaged")
        for key, value in model.items():
            if value.shape != ref[key].shape:
                raise DataError(f"{path}: tensor {key!r} has shape {tuple(value.shape)} but {paths[0]} has "
                                f"{tuple(ref[key].shape)}")
            if value.is_floating_point():
                sums[key] += value.double()
            elif not torch.equal(value, ref[key]):
                raise DataError(f"{path}: integer tensor {key!r} differs from {paths[0]} and cannot be averaged")
    n = float(len(paths))
    averaged = {k: (s / n).to(ref[k].dtype) if ref[k].is_floating_point() else s for k, s in sums.items()}
    out = {"model": averaged, "config": first["config"], "version": first.get("version", 1),
           "averaged_from": [os.path.abspath(p) for p in paths]}
    if isinstance(first.get("dictionaries"), dict):
        out["dictionaries"] = first["dictionaries"]
    position = TrainState.position_of(first.get("train_state"))
    if position is not None:  # keep where training was, drop RNG states and iterator positions
        out["train_state"] = position
    return out


def _check_finite(path: str, model: dict) -> None:
    """One diverged checkpoint turns the whole average into NaN: refuse it by name instead."""
    for key, value in model.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            raise DataError(f"{path}: tensor {key!r} holds {bad} non-finite values (NaN or inf): the run diverged "
                            "or the file is damaged; leave this checkpoint out of the average")


def _check_same_dictionaries(first: dict, first_path: str, other: dict, path: str) -> None:
    """Checkpoints trained on other dictionaries (or the other direction) have weights for other symbols:
    their mean is no model at all, whatever the shapes say."""
    a, b = first.get("dictionaries"), other.get("dictionaries")
    if not isinstance(a, dict) or not isinstance(b, dict):
        return
    for side in ("source", "target"):
        problem = fingerprint_mismatch(a.get(side), b.get(side))
        if problem or (a.get(side) or {}).get("lang") != (b.get(side) or {}).get("lang"):
            raise DataError(f"{path}: trained on other dictionaries than {first_path} (the {side} side differs"
                            f"{': ' + problem if problem else ' in language'}); average checkpoints of one run")


def write_average(paths: Sequence[str], output: str) -> dict:
    """Average ``paths`` and write the result atomically to ``output``."""
    state = average_checkpoints(paths)
    save_checkpoint(state, output)
    return state

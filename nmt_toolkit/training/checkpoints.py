"""Checkpoint files (DESIGN §4): plain dicts of tensors and values, written atomically.

Keys: ``model``, ``optimizer``, ``lr_scheduler``, ``scaler``, ``config`` (plain nested dict, see
``cli/train.py``), ``train_state`` (epoch, num_updates, iterator position, best metric, patience counter,
RNG states as tensors), ``version``. Names: ``checkpoint<epoch>.pt``, ``checkpoint_<epoch>_<updates>.pt``,
``checkpoint_last.pt``, ``checkpoint_best.pt``, and ``checkpoint.best_<metric>_<value>.pt`` for
``--keep-best-checkpoints``.
"""
from __future__ import annotations

import glob
import os
import re
import tempfile
from typing import Any, Optional

import torch

from nmt_toolkit.errors import DataError

VERSION = 1
KEYS = ("model", "config", "version")


def save_checkpoint(state: dict, path: str) -> None:
    """Write ``state`` to ``path`` atomically: temp file in the same folder, fsync, ``os.replace``.

    A crash mid-write leaves the previous file at ``path`` untouched (at worst a stray ``.tmp`` file).
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def copy_checkpoint(src: str, dst: str) -> None:
    """Atomically copy (hard link when possible) one checkpoint file to another name."""
    folder = os.path.dirname(os.path.abspath(dst))
    tmp = os.path.join(folder, f".{os.path.basename(dst)}.{os.getpid()}.link")
    try:
        os.link(src, tmp)
    except OSError:
        import shutil
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def load_checkpoint(path: str, map_location: Any = "cpu") -> dict:
    """Load a checkpoint with ``weights_only=True``; a missing, truncated or foreign file is a DataError."""
    if not os.path.exists(path):
        raise DataError(f"{path}: no such checkpoint")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, foreign pickle, unsafe globals, ...
        raise DataError(f"{path}: not a readable nmt_toolkit checkpoint ({_load_failure_reason(exc)})") from exc
    if not isinstance(state, dict) or any(k not in state for k in KEYS):
        missing = [k for k in KEYS if not isinstance(state, dict) or k not in state]
        raise DataError(f"{path}: not an nmt_toolkit checkpoint (missing {', '.join(missing)})")
    return state


# --------------------------------------------------------------------------- names and cleanup


def epoch_name(epoch: int) -> str:
    return f"checkpoint{epoch}.pt"


def update_name(epoch: int, updates: int) -> str:
    return f"checkpoint_{epoch}_{updates}.pt"


def best_k_name(metric: str, value: float) -> str:
    return f"checkpoint.best_{metric}_{value:.4f}.pt"


def _remove(paths) -> None:
    for p in paths:
        try:
            os.remove(p)
        except FileNotFoundError:
            pass


def cleanup(save_dir: str, keep_last_epochs: int = -1, keep_interval_updates: int = -1,
            keep_best_checkpoints: int = -1, maximize: bool = False) -> None:
    """Delete old checkpoints beyond the ``--keep-*`` limits (a negative limit keeps everything)."""
    if keep_interval_updates >= 0:
        pat = re.compile(r"checkpoint_(\d+)_(\d+)\.pt$")
        found = sorted(((int(m.group(2)), p) for p in glob.glob(os.path.join(save_dir, "checkpoint_*_*.pt"))
                        if (m := pat.search(os.path.basename(p)))), reverse=True)
        _remove(p for _, p in found[keep_interval_updates:])
    if keep_last_epochs >= 0:
        pat = re.compile(r"checkpoint(\d+)\.pt$")
        found = sorted(((int(m.group(1)), p) for p in glob.glob(os.path.join(save_dir, "checkpoint*.pt"))
                        if (m := pat.fullmatch(os.path.basename(p)))), reverse=True)
        _remove(p for _, p in found[keep_last_epochs:])
    if keep_best_checkpoints >= 0:
        pat = re.compile(r"checkpoint\.best_.+_(-?[\d.]+)\.pt$")
        found = sorted(((float(m.group(1)), p) for p in glob.glob(os.path.join(save_dir, "checkpoint.best_*.pt"))
                        if (m := pat.search(os.path.basename(p)))), reverse=maximize)
        _remove(p for _, p in found[keep_best_checkpoints:])


def last_checkpoint(save_dir: str, restore_file: Optional[str] = None) -> Optional[str]:
    """The file to resume from: ``--restore-file`` (relative to save_dir unless absolute) or checkpoint_last.pt."""
    name = restore_file or "checkpoint_last.pt"
    path = name if os.path.isabs(name) or os.path.exists(name) else os.path.join(save_dir, name)
    if os.path.exists(path):
        return path
    if restore_file and restore_file != "checkpoint_last.pt":
        raise DataError(f"--restore-file {restore_file}: no such checkpoint")
    return None


def _load_failure_reason(exc: Exception) -> str:
    """A short reason for a failed ``torch.load``: torch's own messages run to paragraphs of advice."""
    text = str(exc)
    if "Weights only load failed" in text or "Unsupported global" in text or "UnpicklingError" in type(exc).__name__:
        return "not a zip archive of tensors and plain values: truncated, or saved by another program"
    if "zip" in text.lower() or "central directory" in text or isinstance(exc, EOFError):
        return "truncated or corrupt archive"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"{type(exc).__name__}: {first[:120]}"

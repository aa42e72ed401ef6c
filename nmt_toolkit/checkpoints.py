"""Checkpoint files: plain dicts of tensors and values, written atomically.

Keys: ``model``, ``optimizer``, ``lr_scheduler``, ``scaler``, ``config`` (plain nested dict, see
``cli/train.py``), ``train_state`` (:class:`~nmt_toolkit.training.state.TrainState`: epoch, num_updates,
iterator position, best metric, patience counter, RNG states as tensors), ``dictionaries`` (what the model was trained on: :func:`dictionaries_record`),
``version``. Names: ``checkpoint<epoch>.pt``, ``checkpoint_<epoch>_<updates>.pt``,
``checkpoint_last.pt``, ``checkpoint_best.pt``, and ``checkpoint.best_<metric>_<value>.pt`` for
``--keep-best-checkpoints``; :func:`checkpoint_names` picks those a save writes.
"""
from __future__ import annotations

import glob
import math
import os
import re
import shutil
import zipfile
from typing import Any, Optional

import torch

from nmt_toolkit import outputs
from nmt_toolkit.data.dictionary import fingerprint_mismatch
from nmt_toolkit.errors import DataError, UsageError, check_format_version
from nmt_toolkit.outputs import TEMP_SUFFIX

VERSION = 1
KEYS = ("model", "config", "version")


def save_checkpoint(state: dict, path: str) -> None:
    """Write ``state`` to ``path`` atomically: a crash mid-write leaves an earlier file whole, at worst with a
    stray ``*.tmp`` beside it, which :func:`remove_stale_temp_files` deletes at the next start."""
    outputs.replace_file(path, lambda handle: torch.save(state, handle), "the checkpoint")


def copy_checkpoint(src: str, dst: str) -> None:
    """Copy one checkpoint file to another name, atomically.

    A real copy, never a hard link: ``checkpoint_last.pt``, ``checkpoint_best.pt`` and ``checkpoint_E_U.pt``
    must stay independent files, so that copying another file over one of them (restoring by hand) or a
    damaged write of one leaves the others as they were (fairseq copies too).
    """
    def write(handle):
        with open(src, "rb") as source:
            shutil.copyfileobj(source, handle, 1 << 20)

    outputs.replace_file(dst, write, "the checkpoint")


def remove_stale_temp_files(save_dir: str) -> list[str]:
    """Delete the temp files a killed save left in ``save_dir`` (``checkpoint*.pt.*.tmp``); returns them.

    Called once at the start of training, before anything is written: no save of this run is under way.
    Hidden ``.NAME.pt.*.link`` files go too: a save that hard-linked its copies left them when killed, a save
    dir may still hold some, and nothing else would ever delete them.
    """
    stale = [p for p in glob.glob(os.path.join(glob.escape(save_dir), "*.pt.*" + TEMP_SUFFIX))
             if os.path.isfile(p)]
    stale += glob.glob(os.path.join(glob.escape(save_dir), ".*.pt.*.link"))
    _remove(stale)
    return stale


TORCHSCRIPT_REFUSAL = ("a TorchScript archive (a program with code, not a checkpoint of weights); refusing to "
                       "open it: load only checkpoints written by nmt-train or fairseq")


def is_torchscript_archive(path: str) -> bool:
    """A zip written by ``torch.jit.save``: it holds program code (``code/``, ``constants.pkl``), and torch
    hands such a file to torch's TorchScript loader, which runs the code's ``__setstate__`` while loading. Every
    program refuses one before torch sees it."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(n.endswith("constants.pkl") or "/code/" in n for n in archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def is_checkpoint_file(path: str) -> bool:
    """A file ``torch.save`` wrote (a zip archive holding ``data.pkl``), not a TorchScript program: what
    ``--overwrite`` may replace where a program writes a checkpoint. Read without unpickling anything."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
    return any(n.endswith("/data.pkl") for n in names) and not is_torchscript_archive(path)


def load_checkpoint(path: str, map_location: Any = "cpu") -> dict:
    """Load a checkpoint with ``weights_only=True``; a missing, truncated or foreign file is a DataError."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such checkpoint" if not os.path.exists(path) else f"{path}: not a file")
    if is_torchscript_archive(path):
        raise DataError(f"{path}: {TORCHSCRIPT_REFUSAL}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, foreign pickle, unsafe globals, ...
        raise DataError(f"{path}: not a readable nmt_toolkit checkpoint ({_load_failure_reason(exc)})") from exc
    if not isinstance(state, dict) or any(k not in state for k in KEYS):
        missing = [k for k in KEYS if not isinstance(state, dict) or k not in state]
        raise DataError(f"{path}: not an nmt_toolkit checkpoint (missing {', '.join(missing)})")
    check_format_version(state["version"], VERSION, path, "checkpoint format")
    return state


# --------------------------------------------------------------------------- what a checkpoint was trained on


def dictionaries_record(src_dict, tgt_dict, source_lang: Optional[str], target_lang: Optional[str]) -> dict:
    """The ``dictionaries`` entry of a checkpoint: each side's :meth:`~nmt_toolkit.data.dictionary.Dictionary.fingerprint`
    with the language it stands for."""
    return {"source": {"lang": source_lang, **src_dict.fingerprint()},
            "target": {"lang": target_lang, **tgt_dict.fingerprint()}}


def check_dictionaries(state: dict, what: str, src_dict, tgt_dict, langs=(None, None), dict_files=(None, None)) -> None:
    """Refuse a checkpoint trained on other dictionaries or the other language direction, by name.

    ``what`` names the checkpoint, ``dict_files`` the data-bin's dictionary files. A checkpoint that records no
    dictionaries (fairseq's record none) passes: the tensor shape check remains.
    """
    recorded = state.get("dictionaries") if isinstance(state, dict) else None
    if not isinstance(recorded, dict):
        return
    mine = dictionaries_record(src_dict, tgt_dict, *langs)
    pair = tuple((recorded.get(side) or {}).get("lang") for side in ("source", "target"))
    if None not in pair and None not in langs and tuple(langs) != pair:
        raise DataError(f"{what}: trained to translate {pair[0]}→{pair[1]}, but the data-bin is {langs[0]}→{langs[1]}; "
                        f"use a {pair[0]}→{pair[1]} data-bin (or --source-lang {pair[0]} --target-lang {pair[1]})")
    for side, file in zip(("source", "target"), dict_files):
        problem = fingerprint_mismatch(recorded.get(side), mine[side])
        if problem:
            where = file or f"the data-bin's {side} dictionary"
            raise DataError(f"{what}: wrong dictionary: the checkpoint's {side} dictionary differs from {where} "
                            f"({problem}); use the data-bin the model was trained on")


def task_dictionaries(task) -> tuple:
    """``(src_dict, tgt_dict, langs, dict_files)`` of a translation task, as :func:`check_dictionaries` takes them."""
    langs = (task.cfg.source_lang, task.cfg.target_lang)
    return task.source_dictionary, task.target_dictionary, langs, task.dictionary_files()


def check_task_dictionaries(state: dict, what: str, task) -> None:
    """:func:`check_dictionaries` against the data-bin of ``task``."""
    check_dictionaries(state, what, *task_dictionaries(task))


def task_dictionaries_record(task) -> dict:
    src, tgt, langs, _ = task_dictionaries(task)
    return dictionaries_record(src, tgt, *langs)


def check_data_position(position: int, batches_per_epoch: int, path: str, data: str) -> None:
    """A checkpoint saved after batch ``position`` of its epoch, resumed on data with fewer batches per epoch
    (a smaller data-bin, a larger --max-tokens), would end the epoch at once and train nothing: refuse it
    rather than guess where the new data should start."""
    if position > batches_per_epoch:
        raise DataError(f"{path}: saved after batch {position} of its epoch, but the data-bin {data} gives "
                        f"{batches_per_epoch} batches per epoch (other data, or other --max-tokens); resume on "
                        "the data it was trained on, or add --reset-dataloader to start the epoch afresh")


def check_optimizer(state: dict, path: str, optimizer: str, reset_optimizer: bool) -> None:
    """Resuming another optimizer's state (adam's moments into sgd) fails deep inside torch with a KeyError;
    refuse it by name with the two ways out."""
    if reset_optimizer or not state.get("optimizer"):
        return
    saved = ((state.get("config") or {}).get("components") or {}).get("optimizer")
    if saved and saved != optimizer:
        raise UsageError(f"--optimizer {optimizer}: {path} holds the state of the {saved} optimizer; resume with "
                         f"--optimizer {saved}, or add --reset-optimizer to start {optimizer} afresh from its weights")


def check_finite_for_save(weights: dict, metric: Optional[float], save_dir: str, updates: int) -> None:
    """A diverged run (NaN or infinite weights, or validation metric) must not overwrite checkpoint_last.pt
    and checkpoint_best.pt with garbage: stop before the save, keeping every checkpoint already written."""
    what = None
    if metric is not None and not math.isfinite(metric):
        what = f"the validation metric is {metric}"
    else:
        for key, tensor in weights.items():
            if torch.is_tensor(tensor) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                what = f"tensor {key!r} holds NaN or inf"
                break
    if what:
        raise DataError(f"--save-dir {save_dir}: not saving update {updates}: {what} (the training diverged); "
                        "stopped, the checkpoints saved before are kept: resume from them with a lower --lr")


# --------------------------------------------------------------------------- names and cleanup


def epoch_name(epoch: int) -> str:
    return f"checkpoint{epoch}.pt"


def update_name(epoch: int, updates: int) -> str:
    return f"checkpoint_{epoch}_{updates}.pt"


def best_k_name(metric: str, value: float) -> str:
    return f"checkpoint.best_{metric}_{value:.4f}.pt"


def checkpoint_names(ck, epoch: int, updates: int, end_of_epoch: bool, update_checkpoint: bool,
                     metric: Optional[float], best: Optional[float]) -> list[str]:
    """The files one save writes, in order (the first is written, the others are copies of it): one table
    from conditions to names, as fairseq's ``checkpoint_conds``.

    ``update_checkpoint``: the save is due by ``--save-interval-updates``/``--save-interval-minutes``
    (``--no-epoch-checkpoints`` leaves those on, as in fairseq). ``metric`` is this update's validation
    metric (``None``: not validated) and ``best`` the best so far; equal, this update is the best.
    """
    is_best = metric is not None and metric == best
    conds = [
        (lambda: epoch_name(epoch),
         end_of_epoch and not ck.no_epoch_checkpoints and epoch % ck.save_interval == 0),
        (lambda: update_name(epoch, updates), update_checkpoint),
        (lambda: "checkpoint_best.pt", is_best),
        (lambda: best_k_name(ck.best_checkpoint_metric, metric), is_best and ck.keep_best_checkpoints > 0),
        (lambda: "checkpoint_last.pt", not ck.no_last_checkpoints),
    ]
    return [name() for name, wanted in conds if wanted]


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
    """The file to resume from, or None for a fresh start.

    A bare file name (the default ``checkpoint_last.pt``) means ``save_dir/NAME``, as in fairseq: never a
    file of that name in the current directory. A path with a folder part is taken as given. A missing
    default starts afresh; a missing ``--restore-file`` the user named is an error.
    """
    name = restore_file or "checkpoint_last.pt"
    path = name if os.path.dirname(name) else os.path.join(save_dir, name)
    if os.path.exists(path):
        return path
    if restore_file and restore_file != "checkpoint_last.pt":
        raise DataError(f"--restore-file {restore_file}: no such checkpoint ({path})")
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


#: what nmt-train writes into --save-dir; a folder holding one of these is an earlier save dir. A log file
#: too: `nmt-train … > ck/train.log` creates it before nmt-train starts (and nmt-train never removes it)
SAVE_DIR = outputs.OutputKind("a folder of checkpoints (--save-dir)",
                              markers=("checkpoint*.pt", "config.yaml", ".nmt-train.lock", "*.pt.*" + TEMP_SUFFIX,
                                       "*.log"))


def prepare_save_dir(save_dir: str) -> None:
    """Create ``--save-dir`` and make sure files can be written there, before any training is done: a path
    that is a file, a folder that cannot be written, a protected place or a non-empty folder of someone
    else's is a one-line error now, instead of a traceback (or worse) at the first save after hours."""
    outputs.claim_folder(save_dir, SAVE_DIR, f"--save-dir {save_dir}")


def write_text_atomically(path: str, text: str) -> None:
    """``config.yaml`` and friends: the same atomic write as checkpoints, so a full disk leaves the old file."""
    outputs.write_text(path, text)

"""Resuming a run: the checkpoint's weights and optimizer into the trainer, its data position into the
iterator. What the checkpoint says about the run itself is read once, as a :class:`TrainState`."""
from __future__ import annotations

import logging
from typing import Any, Optional

from nmt_toolkit.data.dictionary import fingerprint_mismatch
from nmt_toolkit.errors import DataError
from nmt_toolkit.model_folder import read_model_folder
from nmt_toolkit import checkpoints as ckpt_io
from nmt_toolkit.training.state import TrainState

logger = logging.getLogger("nmt_toolkit.train")


def resume(trainer, task, ck, optimizer_name: str, device, stored_config: dict,
           progress) -> tuple[Optional[str], TrainState]:
    """Load ``checkpoint_last.pt`` (or ``--restore-file``) into ``trainer``; returns the file (``None``: a
    fresh start) and its training state (a fresh one without a checkpoint).

    The update count comes back with the optimizer's state; with ``--reset-optimizer`` or
    ``--reset-lr-scheduler`` it is set through the schedule, which then starts at that update's lr.
    """
    path = ckpt_io.last_checkpoint(ck.save_dir, ck.restore_file)
    if path is None:
        if ck.finetune_from_model:
            start_from_model_folder(trainer, task, ck.finetune_from_model, progress)
        trainer.set_num_updates(0)
        return None, TrainState()
    state = ckpt_io.load_checkpoint(path, map_location=device)
    ckpt_io.check_task_dictionaries(state, path, task)
    ckpt_io.check_optimizer(state, path, optimizer_name, ck.reset_optimizer)
    trainer.load_state_dict(state, ck.reset_optimizer, ck.reset_lr_scheduler, path,
                            hint=model_options_hint(state.get("config"), stored_config.get("model")))
    train_state = TrainState.from_dict(state.get("train_state"))
    if not ck.reset_optimizer and not ck.reset_lr_scheduler:
        trainer.num_updates = train_state.num_updates
    else:
        trainer.set_num_updates(train_state.num_updates)
    progress.message(f"resumed from {path} at update {trainer.num_updates}")
    return path, train_state


def start_from_model_folder(trainer, task, folder_path: str, progress) -> None:
    """``--finetune-from-model``: the folder's weights, nothing else (the optimizer, LR schedule, counters and
    data position start afresh). The data-bin must hold the folder's dictionaries: ids of another vocabulary
    would train the embeddings of other words."""
    folder = read_model_folder(folder_path)
    check_finetune_dictionaries(folder, task)
    trainer.load_state_dict(folder.checkpoint(), reset_optimizer=True, reset_lr_scheduler=True,
                            path=f"--finetune-from-model {folder_path}",
                            hint="the architecture comes from the folder: drop the model flags")
    progress.message(f"fine-tuning from the model folder {folder_path} ({folder.source_lang}→{folder.target_lang})")


def check_finetune_dictionaries(folder, task) -> None:
    """The data-bin's languages and dictionaries against the folder's, one line naming both when they differ."""
    src, tgt, langs, files = ckpt_io.task_dictionaries(task)
    where = f"--finetune-from-model {folder.path}"
    if tuple(langs) != (folder.source_lang, folder.target_lang):
        raise DataError(f"{where}: translates {folder.source_lang}→{folder.target_lang}, but the data-bin "
                                f"{task.cfg.data} is {langs[0]}→{langs[1]}")
    for side, mine, theirs, file in (("source", src, folder.src_dict, files[0]),
                                     ("target", tgt, folder.tgt_dict, files[1])):
        problem = fingerprint_mismatch(theirs.fingerprint(), mine.fingerprint())
        if problem:
            raise DataError(f"{where}: the folder's {side} dictionary differs from {file} ({problem}); "
                                    f"build the data-bin with nmt-preprocess --model-folder {folder.path}")


def restore_data_position(epoch_itr, train_state: TrainState, ck, world_size: int, path: Optional[str],
                          data: str) -> None:
    """Continue the epoch where the checkpoint left it (unless ``--reset-dataloader``), on any world size."""
    if not train_state.iterator or ck.reset_dataloader:
        return
    saved_shards = world_size if train_state.num_shards is None else train_state.num_shards  # not always recorded
    epoch_itr.load_state_dict(reshard(train_state.iterator, saved_shards, world_size))
    ckpt_io.check_data_position(epoch_itr.iterations_in_epoch, len(epoch_itr), path, data)


def reshard(iterator_state: dict, saved_shards: int, shards: int) -> dict:
    """The data position of a checkpoint for another world size.

    ``iterations_in_epoch`` counts one rank's batches; rank r of N reads the epoch's batches r, r+N, ...,
    so k iterations on N ranks consumed the first k*N batches. On M ranks that is k*N/M iterations (rounded
    down: at most M-1 batches are seen twice), so resuming 2 ranks as 1 process with --update-freq 2 gives
    the run that never stopped.
    """
    if saved_shards == shards or not iterator_state.get("iterations_in_epoch"):
        return iterator_state
    consumed = int(iterator_state["iterations_in_epoch"]) * saved_shards
    if consumed % shards:
        logger.warning("resuming %d ranks from a checkpoint of %d: %d batches of this epoch are read again",
                       shards, saved_shards, consumed % shards)
    return {**iterator_state, "iterations_in_epoch": consumed // shards}


def model_options_hint(saved: Any, current: Any) -> str:
    """``the checkpoint was trained with --embed-dim 64 (now 32)``: the model options that differ."""
    saved = saved.get("model") if isinstance(saved, dict) else None
    if not isinstance(saved, dict) or not isinstance(current, dict):
        return "check --arch and the model flags"
    diff = [f"--{k.replace('_', '-')} {saved[k]} (now {current[k]})" for k in current
            if k in saved and saved[k] != current[k]]
    if not diff:
        return "check --arch and the model flags"
    return "the checkpoint was trained with " + ", ".join(diff)

"""Where a run writes, claimed before any work: every output checked at once, then ``--save-dir`` prepared and
locked for the whole run by exactly one process.

Which process holds the lock: a single process; the parent of the ranks ``--distributed-world-size`` spawns
(each spawned rank inherits it: :data:`LOCK_HELD_ENV` names the parent and the folder in the rank's
environment, set by :func:`nmt_toolkit.training.launch.launch` in the child only); or rank 0 under torchrun,
the only rank that writes. The holder prepares the folder once (created, probed for writing) and removes the
temporary files a killed save left there, before any rank trains.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterator, Optional

logger = logging.getLogger("nmt_toolkit.train")

#: in a spawned rank's environment: "<parent pid>:<save dir>", the lock its parent holds for it
LOCK_HELD_ENV = "NMT_TRAIN_SAVE_DIR_LOCKED_BY"


def check_outputs(configs: dict[str, Any]) -> None:
    """Every place the run will write, refused now if it must be (nothing is written yet): --save-dir,
    --tensorboard-logdir, --save-model-folder."""
    from nmt_toolkit.checkpoints import SAVE_DIR
    from nmt_toolkit.outputs import check_folder
    from nmt_toolkit.training.final_folder import model_folder_output
    from nmt_toolkit.training.progress import TENSORBOARD_LOGS

    ck, logdir = configs["checkpoint"], configs["logging"].tensorboard_logdir
    if not ck.no_save:
        check_folder(ck.save_dir, SAVE_DIR, f"--save-dir {ck.save_dir}")
    if logdir:
        check_folder(logdir, TENSORBOARD_LOGS, f"--tensorboard-logdir {logdir}")
    model_folder_output(ck)


@contextlib.contextmanager
def save_dir_lock(ck, info) -> Iterator[Optional[str]]:
    """Hold ``--save-dir``'s lock for the ``with`` block, so that a second nmt-train on it is refused; the
    holder prepares the folder first. Yields the value of :data:`LOCK_HELD_ENV` for the ranks this process
    spawns (None where it holds no lock: --no-save, a spawned rank, a torchrun rank other than 0)."""
    from nmt_toolkit import locking
    from nmt_toolkit.checkpoints import prepare_save_dir, remove_stale_temp_files

    save_dir = os.path.abspath(ck.save_dir)
    inherited = os.environ.get(LOCK_HELD_ENV) == f"{os.getppid()}:{save_dir}"
    if ck.no_save or inherited or (info is not None and not info.is_master):
        yield None
        return
    prepare_save_dir(ck.save_dir)
    with locking.exclusive(os.path.join(save_dir, ".nmt-train.lock"), f"--save-dir {ck.save_dir}", "nmt-train"):
        for stale in remove_stale_temp_files(ck.save_dir):  # no save of this run is under way yet
            logger.info("removed %s, left by a save that was interrupted", stale)
        yield f"{os.getpid()}:{save_dir}"

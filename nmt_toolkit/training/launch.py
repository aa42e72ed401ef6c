"""nmt-train's run as a whole: the options checked together with every output, ``--save-dir`` held, and the
training run in this process, or in the ranks ``--distributed-world-size`` starts on this machine.

A spawned rank re-enters the program (``relaunch(*args)``: nmt-train with the same argv) instead of being
handed the parsed options. That keeps one path from the command line to :func:`.train_loop.run_training` for
a local rank and a torchrun rank alike (plugins, presets, YAML and every check run the same way in each),
at the cost of parsing the options once more per rank. The rank learns that its parent holds the save dir's
lock from its environment (:data:`.save_dir.LOCK_HELD_ENV`), set here in the child process only.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from nmt_toolkit.errors import UsageError


def check_run(configs: dict[str, Any]) -> None:
    """What can be refused before anything is written: a missing data folder, options that contradict each
    other, and every output the run would write."""
    from nmt_toolkit.training.options import check_together
    from nmt_toolkit.training.save_dir import check_outputs

    task_cfg = configs.get("task")
    if task_cfg is not None and hasattr(task_cfg, "data") and not task_cfg.data:
        raise UsageError("missing the data folder (nmt-train DATA-BIN ...), or use --dry-run --vocab-size V")
    check_together(configs["optimization"], configs["checkpoint"], configs["eval_bleu"].eval_bleu)
    check_outputs(configs)


def launch(configs: dict[str, Any], relaunch: Callable[..., int], args: Sequence = ()) -> int:
    """Train, holding ``--save-dir`` for the whole run: here (one process, or this rank of torchrun's), or
    in ``--distributed-world-size`` local ranks, each running ``relaunch(*args)``. Returns the exit status."""
    from nmt_toolkit.training import distributed
    from nmt_toolkit.training.components import uses_cuda
    from nmt_toolkit.training.save_dir import save_dir_lock
    from nmt_toolkit.training.train_loop import run_training

    info = distributed.env_info()
    world = configs["distributed"].distributed_world_size
    with save_dir_lock(configs["checkpoint"], info) as held:
        if info is None and world > 1:
            if uses_cuda(configs["optimization"]):
                distributed.check_local_gpus(world)  # before any process starts
            return distributed.spawn(_spawned_rank, world, (held, relaunch, tuple(args)))
        return run_training(configs, info)


def _spawned_rank(held, relaunch: Callable[..., int], args: tuple) -> int:
    """A spawned rank's entry: the parent's lock named in this process's environment, then the program."""
    from nmt_toolkit.training.save_dir import LOCK_HELD_ENV

    if held is not None:
        os.environ[LOCK_HELD_ENV] = held
    return relaunch(*args)

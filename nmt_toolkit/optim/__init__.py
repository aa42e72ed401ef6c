"""Optimizers and learning-rate schedules, found by name (``--optimizer``, ``--lr-scheduler``)."""
from __future__ import annotations

from typing import Any

from nmt_toolkit.registry import LR_SCHEDULERS, OPTIMIZERS


def build_optimizer(name: str, cfg: Any, params, lr: float):
    """A torch optimizer over ``params`` built by the registered factory ``name``."""
    return OPTIMIZERS.get(name).obj(cfg, params, lr)


def build_lr_scheduler(name: str, cfg: Any, optimizer, lr: float, total_updates: int = 0):
    """The registered schedule ``name``; it sets ``optimizer``'s lr at every ``step_update``.
    ``total_updates`` is --max-update (0: unlimited), for schedules whose length defaults to the run's."""
    cls = LR_SCHEDULERS.get(name).obj
    return cls(cfg, optimizer, default_lr(name) if lr is None else lr, total_updates=total_updates)


def default_lr(scheduler_name: str) -> float:
    """``--lr`` when the user gave none: the schedule's own ``default_lr`` (noam: 1.0, a scale), else 5e-4."""
    return float(getattr(LR_SCHEDULERS.get(scheduler_name).obj, "default_lr", 5e-4))

"""Linear warmup, then linear decay to a fraction of the peak (the "triangular" schedule of BERT-style
recipes), as an LR scheduler plugin.

A scheduler subclasses :class:`nmt_toolkit.optim.lr_schedulers.Scheduler` and implements ``lr_at(step)``
(the lr of update ``step + 1``; ``step`` counts optimizer updates from 0); the base class applies it to the
optimizer and saves/restores its state for exact resume.
"""
from __future__ import annotations

from dataclasses import dataclass

from nmt_toolkit.config import option
from nmt_toolkit.errors import UsageError
from nmt_toolkit.optim.lr_schedulers import Scheduler
from nmt_toolkit.registry import register_lr_scheduler


@dataclass
class LinearDecayConfig:
    decay_warmup_updates: int = option(1000, "updates of linear warmup from 0 to --lr")
    decay_total_updates: int = option(0, "update at which the decay ends (default: --max-update)")
    decay_final_lr_scale: float = option(0.0, "the lr at the end, as a fraction of --lr")


@register_lr_scheduler("linear_decay", LinearDecayConfig)
class LinearDecaySchedule(Scheduler):
    def __init__(self, cfg: LinearDecayConfig, optimizer, lr: float, total_updates: int = 0):
        super().__init__(cfg, optimizer, lr, total_updates)  # total_updates: --max-update (0: unlimited)
        if cfg.decay_warmup_updates < 0 or not 0.0 <= cfg.decay_final_lr_scale <= 1.0:
            raise UsageError("--decay-warmup-updates must be >= 0 and --decay-final-lr-scale in [0, 1]")

    def lr_at(self, step: int) -> float:
        warmup = self.cfg.decay_warmup_updates
        step += 1
        if warmup > 0 and step <= warmup:
            return self.base_lr * step / warmup
        final = self.base_lr * self.cfg.decay_final_lr_scale
        total = self.cfg.decay_total_updates or self.total_updates
        if total <= warmup:  # no decay length known: constant after warmup
            return self.base_lr
        frac = min(1.0, (step - warmup) / (total - warmup))
        return self.base_lr + (final - self.base_lr) * frac

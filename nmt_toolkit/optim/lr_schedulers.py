"""Learning-rate schedules. Each counts optimizer updates (after accumulation) and is resumable.

A scheduler is built as ``cls(cfg, optimizer, lr, total_updates=N)`` where ``lr`` is ``--lr`` and ``N`` is
``--max-update`` (0: no limit), the length of schedules whose period defaults to the run's; ``step_update(num_updates)``
sets and returns the lr for the *next* update (called with 0 before the first one, as fairseq does);
``step(epoch, val_loss)`` is called at the end of every epoch. ``state_dict`` holds plain values only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from nmt_toolkit.config import option
from nmt_toolkit.errors import UsageError
from nmt_toolkit.registry import register_lr_scheduler


class Scheduler:
    def __init__(self, cfg, optimizer, lr: float, total_updates: int = 0):
        self.cfg, self.optimizer, self.base_lr = cfg, optimizer, lr
        self.total_updates = total_updates or 0  # --max-update: the run's length, 0 when unlimited
        self.lr = lr
        self.num_updates = 0

    def lr_at(self, step: int) -> float:
        raise NotImplementedError

    def _set(self, lr: float) -> float:
        self.lr = lr
        if self.optimizer is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        return lr

    def step_update(self, num_updates: int) -> float:
        self.num_updates = num_updates
        return self._set(self.lr_at(num_updates))

    def step(self, epoch: int, val_loss: Optional[float] = None) -> float:
        return self.lr

    def get_lr(self) -> float:
        return self.lr

    def state_dict(self) -> dict:
        return {"lr": self.lr, "num_updates": self.num_updates}

    def load_state_dict(self, state: dict) -> None:
        self.num_updates = int(state.get("num_updates", 0))
        self._set(float(state.get("lr", self.lr)))


@dataclass
class FixedConfig:
    warmup_updates: int = option(0, "linear warmup from 0 over this many updates, then the constant --lr", low=0)


@register_lr_scheduler("fixed", FixedConfig)
class FixedSchedule(Scheduler):
    def lr_at(self, step: int) -> float:
        w = self.cfg.warmup_updates if self.cfg else 0
        if w > 0 and step < w:
            return self.base_lr * (step + 1) / w
        return self.base_lr


@dataclass
class NoamConfig:
    warmup_updates: int = option(4000, "warmup_steps of eq. 3", low=1)
    model_dim: Optional[int] = option(None, "d_model of eq. 3 (default: the model's --embed-dim)", low=1)


@register_lr_scheduler("noam", NoamConfig)
class NoamSchedule(Scheduler):
    """Eq. 3: lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5), times ``--lr`` as a scale.

    ``step`` counts from 1 (the first update); ``step_update(n)`` sets the lr for update n+1.
    """

    default_lr = 1.0  # --lr scales eq. 3; unset, the schedule is the paper's exactly

    def lr_at(self, step: int) -> float:
        return self.base_lr * noam(step + 1, self.model_dim, self.cfg.warmup_updates)

    @property
    def model_dim(self) -> int:
        if not self.cfg.model_dim:
            raise UsageError("--lr-scheduler noam: --model-dim is not set (and the model did not provide it)")
        return self.cfg.model_dim


def noam(step: int, d_model: int, warmup: int) -> float:
    """Eq. 3 of the paper, exactly."""
    step = max(step, 1)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@dataclass
class InverseSqrtConfig:
    warmup_updates: int = option(4000, "linear warmup from --warmup-init-lr to --lr over this many updates", low=0)
    warmup_init_lr: float = option(-1.0, "initial lr of the warmup (default: 0 if --lr > 0)", low=0, also=(-1.0,))


@register_lr_scheduler("inverse_sqrt", InverseSqrtConfig)
class InverseSqrtSchedule(Scheduler):
    """fairseq's inverse_sqrt: lr rises linearly to --lr over warmup, then decays as lr·sqrt(warmup/step)."""

    def lr_at(self, step: int) -> float:
        w = self.cfg.warmup_updates
        init = self.cfg.warmup_init_lr if self.cfg.warmup_init_lr >= 0 else (0.0 if self.base_lr > 0 else self.base_lr)
        if step < w:
            return init + step * (self.base_lr - init) / w
        return self.base_lr * w ** 0.5 * step ** -0.5 if w > 0 else self.base_lr * max(step, 1) ** -0.5


@dataclass
class CosineConfig:
    warmup_updates: int = option(0, "linear warmup updates before the cosine decay", low=0)
    min_lr: float = option(0.0, "lr at the end of the cosine period", low=0)
    cosine_period_updates: int = option(0, "length of the cosine decay in updates (default: --max-update)", low=0)


@register_lr_scheduler("cosine", CosineConfig)
class CosineSchedule(Scheduler):
    def lr_at(self, step: int) -> float:
        w = self.cfg.warmup_updates
        if step < w:
            return self.base_lr * (step + 1) / w
        period = self.cfg.cosine_period_updates or self.total_updates
        if period <= w:
            return self.base_lr
        t = min((step - w) / (period - w), 1.0)
        return self.cfg.min_lr + 0.5 * (self.base_lr - self.cfg.min_lr) * (1 + math.cos(math.pi * t))


@dataclass
class PlateauConfig:
    lr_shrink: float = option(0.5, "multiply the lr by this when the validation loss stops improving",
                              low=0, low_open=True, high=1)
    lr_patience: int = option(0, "epochs without improvement before shrinking", low=0)
    lr_threshold: float = option(1e-4, "relative improvement that counts", low=0, high=1, high_open=True)


@register_lr_scheduler("reduce_lr_on_plateau", PlateauConfig)
class PlateauSchedule(Scheduler):
    def __init__(self, cfg, optimizer, lr: float, total_updates: int = 0):
        super().__init__(cfg, optimizer, lr, total_updates)
        self.best: Optional[float] = None
        self.bad_epochs = 0

    def lr_at(self, step: int) -> float:
        return self.lr

    def step(self, epoch: int, val_loss: Optional[float] = None) -> float:
        if val_loss is None:
            return self.lr
        if self.best is None or val_loss < self.best * (1 - self.cfg.lr_threshold):
            self.best, self.bad_epochs = val_loss, 0
        else:
            self.bad_epochs += 1
            if self.bad_epochs > self.cfg.lr_patience:
                self.bad_epochs = 0
                self._set(self.lr * self.cfg.lr_shrink)
        return self.lr

    def state_dict(self) -> dict:
        return {**super().state_dict(), "best": self.best, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.best, self.bad_epochs = state.get("best"), int(state.get("bad_epochs", 0))

"""One optimizer update over ``--update-freq`` micro-batches, data-parallel and in mixed precision.

Loss normalisation (fairseq semantics): each micro-batch back-propagates its *summed* loss; after the
last one the sample sizes (target tokens) of all micro-batches on all ranks are all-reduced and the
gradients are multiplied by ``world_size / total`` (DDP has already averaged them over ranks). So 2 ranks
× 1 batch and 1 rank × ``--update-freq 2`` compute the same update. Gradient all-reduce runs only on
the last micro-batch (``no_sync`` on the others). Gradient norm and clipping see unscaled gradients.
"""
from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, Optional

import torch

from nmt_toolkit.errors import NmtError
from nmt_toolkit.modules.attention import sdpa_backends
from nmt_toolkit.training import distributed
from nmt_toolkit.training.state import get_rng_state

logger = logging.getLogger(__name__)

_STAT_KEYS = ("sample_size", "loss", "nll_loss", "ntokens", "nsentences")


def move_to(sample: Any, device: torch.device) -> Any:
    if torch.is_tensor(sample):
        return sample.to(device, non_blocking=True)
    if isinstance(sample, dict):
        return {k: move_to(v, device) for k, v in sample.items()}
    if isinstance(sample, (list, tuple)):
        return type(sample)(move_to(v, device) for v in sample)
    return sample


def _total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    if not grads:
        return torch.zeros(())
    if hasattr(torch.nn.utils, "get_total_norm"):
        return torch.nn.utils.get_total_norm(grads, 2.0, foreach=True)
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


def describe_mismatch(expected: dict, found: dict) -> str:
    """Which tensors differ between the model built from the options and a checkpoint, in one line.

    ``"encoder.embed_tokens.weight is [40, 64] in the checkpoint but [40, 32] with these options (and 11
    more shapes)"``; missing and unexpected names likewise. Empty when they fit.
    """
    shapes = [k for k in expected if k in found and tuple(found[k].shape) != tuple(expected[k].shape)]
    missing = [k for k in expected if k not in found]
    unexpected = [k for k in found if k not in expected]
    parts = []
    if shapes:
        k = shapes[0]
        more = f" (and {len(shapes) - 1} more shapes)" if len(shapes) > 1 else ""
        parts.append(f"{k} is {list(found[k].shape)} in the checkpoint but {list(expected[k].shape)} with these "
                     f"options{more}")
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        parts.append(f"the checkpoint lacks {missing[0]}{more}")
    if unexpected:
        more = f" and {len(unexpected) - 1} more" if len(unexpected) > 1 else ""
        parts.append(f"the checkpoint has {unexpected[0]}{more}, which these options do not build")
    return "; ".join(parts)


class Trainer:
    """Holds model, criterion, optimizer, LR schedule and loss scaler; ``train_step`` does one update."""

    def __init__(self, model: torch.nn.Module, criterion, optimizer: torch.optim.Optimizer, lr_scheduler,
                 device: torch.device, *, clip_norm: float = 0.0, precision: Optional[str] = None,
                 fp16_init_scale: float = 128.0, fp16_scale_window: int = 2000, min_loss_scale: float = 1e-4,
                 max_skipped_updates: int = 10, world_size: int = 1, ddp_device_ids=None):
        self.model = model
        self.criterion = criterion
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.device = device
        self.clip_norm = clip_norm
        self.precision = precision  # None | "fp16" | "bf16"
        self.min_loss_scale = min_loss_scale
        self.max_skipped_updates = max_skipped_updates
        self.world_size = world_size
        self.num_updates = 0
        self.skipped_in_a_row = 0
        self.params = [p for p in model.parameters() if p.requires_grad]
        if precision == "fp16":  # nmt-train allows it on CUDA only (train_loop); the scaler itself runs on CPU too
            self.scaler = torch.amp.GradScaler(device.type, init_scale=fp16_init_scale,
                                               growth_interval=fp16_scale_window)
        else:
            self.scaler = None
        if world_size > 1:
            from torch.nn.parallel import DistributedDataParallel
            self.wrapped = DistributedDataParallel(model, device_ids=ddp_device_ids, broadcast_buffers=False,
                                                   gradient_as_bucket_view=True)
        else:
            self.wrapped = model
        self.last_rng_state: Optional[dict] = None
        self._dummy: Optional[dict] = None

    # ------------------------------------------------------------------ helpers

    def autocast(self):
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        if self.precision == "fp16":
            return torch.autocast(self.device.type, dtype=torch.float16)
        return contextlib.nullcontext()

    def get_lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def loss_scale(self) -> Optional[float]:
        return float(self.scaler.get_scale()) if self.scaler is not None else None

    # ------------------------------------------------------------------ training

    def train_step(self, samples: list[dict]) -> Optional[dict]:
        """One update over ``samples`` (the micro-batches of this rank); returns summed logging values,
        or None when the update was skipped (non-finite gradients, or an fp16 overflow)."""
        self.wrapped.train()
        stats = []
        last = len(samples) - 1
        for i, sample in enumerate(samples):
            dummy = not sample  # a rank's filler batch at the end of an epoch: {} (see data/batching.py)
            if dummy:
                if self._dummy is None:
                    continue
                sample = self._dummy
            else:
                sample = move_to(sample, self.device)
                self._dummy = sample
            no_sync = self.world_size > 1 and i < last
            with (self.wrapped.no_sync() if no_sync else contextlib.nullcontext()):
                with self.autocast(), sdpa_backends(self.device):
                    loss, sample_size, log = self.criterion(self.wrapped, sample)
                if dummy:  # still join the gradient all-reduce, contributing nothing
                    loss, log = loss * 0.0, {}
                if self.scaler is not None:
                    self.scaler.scale(loss).backward()
                else:
                    loss.backward()
            stats.append(torch.stack([torch.as_tensor(log.get(k, 0), dtype=torch.float64, device=self.device)
                                      for k in _STAT_KEYS]))
        if not stats:
            stats.append(torch.zeros(len(_STAT_KEYS), dtype=torch.float64, device=self.device))
        total = torch.stack(stats).sum(0) if len(stats) > 1 else stats[0]
        distributed.all_reduce_sum(total)
        values = dict(zip(_STAT_KEYS, total.tolist()))  # the one host sync of the update
        sample_size = values["sample_size"]

        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.params if p.grad is not None]
        if sample_size > 0 and grads:
            torch._foreach_mul_(grads, self.world_size / sample_size)
        if self.clip_norm > 0:
            gnorm = torch.nn.utils.clip_grad_norm_(self.params, self.clip_norm, foreach=True)
        else:
            gnorm = _total_norm(grads)
        gnorm = float(gnorm)
        values["gnorm"] = gnorm
        values["clip"] = float(self.clip_norm > 0 and gnorm > self.clip_norm)

        if self.scaler is not None:
            scale_before = self.scaler.get_scale()
            self.scaler.step(self.optimizer)  # skips the step itself when unscale_ found inf/nan
            self.scaler.update()
            overflow = self.scaler.get_scale() < scale_before or not math.isfinite(gnorm)
            self.optimizer.zero_grad(set_to_none=True)
            if overflow:
                scale = self.scaler.get_scale()
                logger.info("gradient overflow: skipping the update; loss scale reduced to %g", scale)
                if scale < self.min_loss_scale:
                    raise NmtError(f"the fp16 loss scale fell to {scale:g} (below --min-loss-scale "
                                   f"{self.min_loss_scale:g}): the loss keeps overflowing; try --bf16, a lower "
                                   "--lr or --clip-norm")
                return None
            values["loss_scale"] = self.scaler.get_scale()
        else:
            if not math.isfinite(gnorm) or not math.isfinite(values["loss"]):
                self.optimizer.zero_grad(set_to_none=True)
                self.skipped_in_a_row += 1
                logger.warning("non-finite loss or gradient (loss %s, gnorm %s) at update %d: update skipped "
                               "(%d in a row)", values["loss"], gnorm, self.num_updates + 1, self.skipped_in_a_row)
                if self.skipped_in_a_row >= self.max_skipped_updates:
                    raise NmtError(f"{self.skipped_in_a_row} non-finite updates in a row (--max-skipped-updates "
                                   f"{self.max_skipped_updates}): training diverged; lower --lr, add --clip-norm "
                                   "or use a longer warmup")
                return None
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.skipped_in_a_row = 0
        values["lr"] = self.get_lr()
        self.set_num_updates(self.num_updates + 1)
        return values

    def set_num_updates(self, n: int) -> None:
        self.num_updates = n
        self.lr_scheduler.step_update(n)

    @torch.no_grad()
    def valid_step(self, sample: dict) -> dict:
        """Summed loss statistics of one validation batch (not reduced over ranks)."""
        self.model.eval()
        if not sample:
            return {k: 0.0 for k in _STAT_KEYS}
        sample = move_to(sample, self.device)
        with self.autocast(), sdpa_backends(self.device):
            _, _, log = self.criterion(self.model, sample)
        return {k: float(log.get(k, 0)) for k in _STAT_KEYS}

    def snapshot_rng(self) -> None:
        """Remember the RNG states right after an update, before validation touches anything."""
        self.last_rng_state = get_rng_state(self.device)

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else {},
        }

    def load_state_dict(self, state: dict, reset_optimizer: bool = False, reset_lr_scheduler: bool = False,
                        path: str = "checkpoint", hint: str = "check --arch and the model flags") -> None:
        """Restore a checkpoint; a model of other shapes is a one-line error naming them, then ``hint``."""
        mismatch = describe_mismatch(self.model.state_dict(), state["model"])
        if mismatch:
            raise NmtError(f"{path}: the model in the checkpoint does not match the options: {mismatch}; {hint}")
        self.model.load_state_dict(state["model"], strict=True)
        if not reset_optimizer and state.get("optimizer"):
            self.optimizer.load_state_dict(state["optimizer"])
        if not reset_lr_scheduler and state.get("lr_scheduler"):
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])

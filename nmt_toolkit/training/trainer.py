"""One optimizer update over ``--update-freq`` micro-batches, data-parallel and in mixed precision.

Loss normalisation (fairseq semantics): each micro-batch back-propagates its *summed* loss; after the
last one the sample sizes (target tokens) of all micro-batches on all ranks are all-reduced and the
gradients are multiplied by ``world_size / total`` (DDP has already averaged them over ranks). So 2 ranks
× 1 batch and 1 rank × ``--update-freq 2`` compute the same update. Gradient all-reduce runs only on
the last micro-batch (``no_sync`` on the others). Gradient norm and clipping see unscaled gradients.

The host never reads the device inside an update (a read waits for the GPU to finish everything queued, and
then the GPU waits for the host): the sample size divides the gradients as a tensor, clipping and the
non-finite check stay on the device, fused Adam skips a non-finite update in its kernel (torch.amp's
``found_inf``), and the update's statistics wait in :class:`~nmt_toolkit.training.step_stats.PendingRows`
until the loop calls :meth:`Trainer.take_stats` (once per ``--log-interval``). A skipped update counts as an
update (``num_updates`` and the learning-rate schedule advance), as in torch.amp's recipe and Megatron.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Optional

import torch
from torch.nn.parallel import DistributedDataParallel

from nmt_toolkit.errors import NmtError
from nmt_toolkit.device_policy import sdpa_backends
from nmt_toolkit.models.state_dict_checks import shape_differences
from nmt_toolkit.training import distributed
from nmt_toolkit.training.compile import compile_criterion, compile_for_training
from nmt_toolkit.training.state import get_rng_state
from nmt_toolkit.training.step_stats import STAT_KEYS as _STAT_KEYS, PendingRows, summed_stats

logger = logging.getLogger(__name__)


def move_to(sample: Any, device: torch.device) -> Any:
    if torch.is_tensor(sample):
        return sample.to(device, non_blocking=True)
    if isinstance(sample, dict):
        return {k: move_to(v, device) for k, v in sample.items()}
    if isinstance(sample, (list, tuple)):
        return type(sample)(move_to(v, device) for v in sample)
    return sample


def _total_norm(grads: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    if not grads:
        return torch.zeros((), device=device)
    if hasattr(torch.nn.utils, "get_total_norm"):
        return torch.nn.utils.get_total_norm(grads, 2.0, foreach=True)
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


def describe_mismatch(expected: dict, found: dict) -> str:
    """Which tensors differ between the model built from the options and a checkpoint, in one line.

    ``"encoder.embed_tokens.weight is [40, 64] in the checkpoint but [40, 32] with these options (and 11
    more shapes)"``; missing and unexpected names likewise. Empty when they fit.
    """
    differences = shape_differences(expected, found)
    shapes = [(k, got, want) for k, got, want in differences.differing if got is not None]
    missing = [k for k, got, _ in differences.differing if got is None]
    unexpected = differences.unexpected
    parts = []
    if shapes:
        k, got, want = shapes[0]
        more = f" (and {len(shapes) - 1} more shapes)" if len(shapes) > 1 else ""
        parts.append(f"{k} is {list(got)} in the checkpoint but {list(want)} with these options{more}")
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
                 max_skipped_updates: int = 10, world_size: int = 1, ddp_device_ids=None,
                 compile_model: bool = False, bucket_cap_mb: Optional[float] = None):
        self.model = model  # the plain module: validation, checkpoints (no ``_orig_mod.`` prefixes)
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
        # the optimizer skips a step itself when told (torch.amp's found_inf); else the host decides
        self.skips_on_device = bool(getattr(optimizer, "_step_supports_amp_scaling", False))
        self.compile_counter = None
        module = model
        if compile_model:  # the model for training (validation keeps the plain module) and the criterion's loss;
            # DDP wraps the compiled module (torch's recommendation)
            module, self.compile_counter = compile_for_training(model)
            compile_criterion(criterion, self.compile_counter)
        if world_size > 1:
            self.wrapped = DistributedDataParallel(module, device_ids=ddp_device_ids, broadcast_buffers=False,
                                                   gradient_as_bucket_view=True,
                                                   bucket_cap_mb=bucket_cap_mb or distributed.bucket_cap_mb(model))
        else:
            self.wrapped = module
        self.pending = PendingRows()
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

    def compiled_graphs(self) -> Optional[int]:
        """How many graphs torch.compile built so far (None without ``--compile``)."""
        return None if self.compile_counter is None else self.compile_counter.graphs

    # ------------------------------------------------------------------ training

    def train_step(self, samples: list[dict]) -> None:
        """One update over ``samples`` (the micro-batches of this rank), without reading the device.

        Its statistics stay on the device until :meth:`take_stats`. An update whose loss or gradient is not
        finite (or an fp16 overflow) is skipped by the optimizer on the device, and still counts as an update
        (``num_updates`` and the LR schedule advance), as in torch.amp's recipe."""
        self.wrapped.train()
        logs = []
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
            logs.append(log)
        total = distributed.all_reduce_sum(summed_stats(logs, self.device))

        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # also records its own overflow check for update()
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:  # divide by the total sample size (× world size: DDP averaged over ranks); no read
            size = total[0]
            torch._foreach_mul_(grads, torch.where(size > 0, self.world_size / size, torch.ones_like(size)))
        if self.clip_norm > 0:
            gnorm = torch.nn.utils.clip_grad_norm_(self.params, self.clip_norm, foreach=True)
        else:
            gnorm = _total_norm(grads, self.device)
        clipped = gnorm > self.clip_norm if self.clip_norm > 0 else torch.zeros_like(gnorm, dtype=torch.bool)
        found_inf = (~(torch.isfinite(gnorm) & torch.isfinite(total[1]))).to(torch.float32)
        self._optimizer_step(found_inf)
        if self.scaler is not None:
            self.scaler.update()  # halves the scale after an overflow, grows it after a clean window
        self.optimizer.zero_grad(set_to_none=True)
        scale = self.scaler._get_scale_async() if self.scaler is not None else torch.zeros((), device=self.device)
        row = torch.cat([total, torch.stack([t.to(torch.float64) for t in (gnorm.detach(), clipped, found_inf, scale)])])
        self.pending.add(self.num_updates + 1, row)
        self.set_num_updates(self.num_updates + 1)

    def _optimizer_step(self, found_inf: torch.Tensor) -> None:
        """The optimizer's step, skipped when ``found_inf`` (float32, 0 or 1) is 1.

        Optimizers with torch.amp's interface (``_step_supports_amp_scaling``: fused Adam/AdamW/SGD) read
        ``found_inf`` in their kernel: parameters, moments and the step count stay as they were (the count
        is raised, then lowered by ``found_inf``), with no read on the host. Others (``--adam-impl
        foreach|loop``, SGD) take the slow path: the host reads the flag, one stall per update."""
        if self.skips_on_device:
            self.optimizer.found_inf = found_inf
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.found_inf
        elif not bool(found_inf):  # the slow path's read
            self.optimizer.step()

    def take_stats(self) -> list[Optional[dict]]:
        """The statistics of every update since the last call, oldest first (one read of the device): a dict
        like the criterion's logging output plus ``gnorm``, ``clip`` (and ``loss_scale`` with fp16), or None
        for a skipped update. The rules on skipped updates are checked here: ``--max-skipped-updates``
        non-finite updates in a row, or an fp16 loss scale below ``--min-loss-scale``, raise NmtError."""
        out: list[Optional[dict]] = []
        for update, row in self.pending.drain():
            if row["skipped"]:
                out.append(None)
                self._skipped(update, row)
                continue
            self.skipped_in_a_row = 0
            values = {k: row[k] for k in _STAT_KEYS + ("gnorm", "clip")}
            if self.scaler is not None:
                values["loss_scale"] = row["loss_scale"]
            out.append(values)
        return out

    def _skipped(self, update: int, row: dict) -> None:
        if self.scaler is not None:
            scale = row["loss_scale"]
            logger.info("gradient overflow at update %d: update skipped; loss scale reduced to %g", update, scale)
            if scale < self.min_loss_scale:
                raise NmtError(f"the fp16 loss scale fell to {scale:g} (below --min-loss-scale "
                               f"{self.min_loss_scale:g}): the loss keeps overflowing; try --bf16, a lower "
                               "--lr or --clip-norm")
            return
        self.skipped_in_a_row += 1
        logger.warning("non-finite loss or gradient (loss %s, gnorm %s) at update %d: update skipped "
                       "(%d in a row)", row["loss"], row["gnorm"], update, self.skipped_in_a_row)
        if self.skipped_in_a_row >= self.max_skipped_updates:
            raise NmtError(f"{self.skipped_in_a_row} non-finite updates in a row (--max-skipped-updates "
                           f"{self.max_skipped_updates}): training diverged; lower --lr, add --clip-norm "
                           "or use a longer warmup")

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

"""The pieces a training run is made of, built from the configs: device, task, model, criterion, optimizer,
LR schedule and the :class:`Trainer` that steps them, and the data (training batches, validation splits)."""
from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch

from nmt_toolkit.criterions import build_criterion
from nmt_toolkit.errors import NmtError
from nmt_toolkit.models import build_model
from nmt_toolkit.optim import build_lr_scheduler, build_optimizer, default_lr
from nmt_toolkit.optim.lr_schedulers import NoamConfig
from nmt_toolkit.registry import TASKS
from nmt_toolkit.training import distributed
from nmt_toolkit.training.compile import pad_to_multiple, resolve_compile, resolve_pad_multiple
from nmt_toolkit.training.trainer import Trainer
from nmt_toolkit.training.valid_bleu import BleuValidator


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def uses_cuda(opt) -> bool:
    """Training runs on GPUs whenever torch sees one, unless --cpu."""
    return torch.cuda.is_available() and not opt.cpu


def device_for(opt, info: distributed.DistInfo) -> torch.device:
    if uses_cuda(opt):
        distributed.check_local_gpus(info.local_rank + 1)
        torch.cuda.set_device(info.local_rank)
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


def precision_of(prec) -> Optional[str]:
    if prec.fp16 or prec.amp:
        if prec.bf16:
            raise NmtError("--fp16/--amp and --bf16 are exclusive; choose one")
        return "fp16"
    return "bf16" if prec.bf16 else None


def backend_note(info: distributed.DistInfo) -> str:
    """`` (nccl)``: the process group's backend, when there is one (one process runs without any)."""
    import torch.distributed as dist

    if info.world_size > 1 and dist.is_available() and dist.is_initialized():
        return f" ({dist.get_backend()})"
    return ""


@dataclass
class Components:
    task: Any
    model: torch.nn.Module
    optimizer: Any
    lr_scheduler: Any
    trainer: Trainer
    compiling: bool
    prepare: Optional[Callable]  # pads each batch to --pad-to-multiple (None: no padding)


def build_lr_schedule(configs: dict[str, Any], optimizer, lr: float):
    """The LR schedule with what it takes from the run: the noam schedule's d_model defaults to the model's
    --embed-dim (recorded in the config, so the checkpoint says which it used), and every schedule learns
    --max-update, the length of schedules whose period defaults to the run's."""
    sched_cfg = configs.get("lr_scheduler")
    if isinstance(sched_cfg, NoamConfig) and not sched_cfg.model_dim:
        sched_cfg.model_dim = getattr(configs["model"], "embed_dim", None)
    return build_lr_scheduler(configs["components"].lr_scheduler, sched_cfg, optimizer, lr,
                              total_updates=configs["optimization"].max_update)


def build_components(configs: dict[str, Any], device: torch.device, info: distributed.DistInfo) -> Components:
    comp, opt, prec = configs["components"], configs["optimization"], configs["precision"]
    task = TASKS.get(comp.task).obj.setup_task(configs["task"])
    model = build_model(comp.model, configs["model"], task.source_dictionary, task.target_dictionary).to(device)
    criterion = build_criterion(comp.criterion, configs.get("criterion"), task)
    lr = default_lr(comp.lr_scheduler) if opt.lr is None else opt.lr
    optimizer = build_optimizer(comp.optimizer, configs.get("optimizer"), model.parameters(), lr)
    lr_scheduler = build_lr_schedule(configs, optimizer, lr)
    compiling = resolve_compile(opt.compile, device)
    trainer = Trainer(model, criterion, optimizer, lr_scheduler, device, clip_norm=opt.clip_norm,
                      precision=precision_of(prec), fp16_init_scale=prec.fp16_init_scale,
                      fp16_scale_window=prec.fp16_scale_window, min_loss_scale=prec.min_loss_scale,
                      max_skipped_updates=opt.max_skipped_updates, world_size=info.world_size,
                      ddp_device_ids=[info.local_rank] if device.type == "cuda" else None,
                      compile_model=compiling, bucket_cap_mb=configs["distributed"].bucket_cap_mb or None)
    multiple = resolve_pad_multiple(opt.pad_to_multiple, compiling, device)
    prepare = None if multiple == 1 else functools.partial(
        pad_to_multiple, multiple=multiple, src_pad=task.source_dictionary.pad(), tgt_pad=task.target_dictionary.pad(),
        max_positions=model.max_positions() if hasattr(model, "max_positions") else (None, None))
    return Components(task, model, optimizer, lr_scheduler, trainer, compiling, prepare)


def describe(configs: dict[str, Any], parts: Components, device, info) -> list[str]:
    """The model summary and the one line naming every component, logged at the start."""
    from nmt_toolkit.models.summary import model_summary

    comp, prec = configs["components"], configs["precision"]
    return [model_summary(parts.model, configs["model"]),
            f"task {comp.task} | criterion {comp.criterion} | optimizer {comp.optimizer} "
            f"({type(parts.optimizer).__name__}) | lr scheduler {comp.lr_scheduler} | device {device} | "
            f"world size {info.world_size}{backend_note(info)} | precision {precision_of(prec) or 'fp32'}"
            f"{' | torch.compile' if parts.compiling else ''}"]


def load_data(configs: dict[str, Any], parts: Components, seed: int, info, device, epoch: int):
    """``(epoch_itr, valid_splits, bleu)``: the training split's batch iterator at ``epoch`` (data whose every
    pair is too long is refused by name), the validation splits loaded, and the --eval-bleu decoder (or
    ``None``)."""
    task, opt = parts.task, configs["optimization"]
    if configs.get("corpora") is not None:  # train, train1, … by weight; a multilingual task's directions
        task.sample_corpora(opt.train_subset, configs["corpora"], seed)
    task.load_dataset(opt.train_subset, epoch=epoch)
    valid_splits = [] if opt.disable_validation else [s for s in opt.valid_subset.split(",") if s]
    valid_splits = task.validation_splits(valid_splits)  # a multilingual task adds each direction's split
    for split in valid_splits:
        task.load_dataset(split)
    bleu_cfg = configs.get("eval_bleu")
    bleu = BleuValidator(bleu_cfg, task, parts.model, device, seed) if valid_splits and bleu_cfg and \
        bleu_cfg.eval_bleu else None
    epoch_itr = task.get_batch_iterator(split=opt.train_subset, seed=seed, num_shards=info.world_size,
                                        shard_id=info.rank, epoch=epoch)
    if not epoch_itr.batches:
        budget = getattr(configs.get("task"), "max_tokens", None)
        limits = task.dataset(opt.train_subset).limits_exceeded(task.max_positions(), budget) or \
            ["--max-source-positions/--max-target-positions/--max-tokens"]
        raise NmtError(f"{opt.train_subset}: no training batches: every pair was skipped as longer than "
                       f"{' or '.join(limits)} allows (see the warning above); raise "
                       + "/".join(limit.split()[0] for limit in limits))
    return epoch_itr, valid_splits, bleu

"""The training run: epochs, validation, checkpoints, patience, preemption, logging.

``run_training(configs, components)`` is what ``nmt-train`` calls in every process. ``configs`` maps group
names to dataclass instances (``common, components, task, model, criterion, optimizer, lr_scheduler,
optimization, checkpoint, distributed, precision, logging``).
"""
from __future__ import annotations

import functools
import logging
import math
import os
import random
import signal
import time
from typing import Any, Optional

import numpy as np
import torch

from nmt_toolkit.config import dump_yaml, to_dict
from nmt_toolkit.criterions import build_criterion, derived_metrics
from nmt_toolkit.errors import NmtError
from nmt_toolkit.models import build_model
from nmt_toolkit.optim import build_lr_scheduler, build_optimizer, default_lr
from nmt_toolkit.registry import TASKS
from nmt_toolkit.training.efficiency import peak_tflops
from nmt_toolkit.training import checkpoints as ckpt_io
from nmt_toolkit.training import distributed
from nmt_toolkit.training.progress import Meter, ProgressLogger, train_stats
from nmt_toolkit.training.compile import pad_to_multiple, resolve_compile, resolve_pad_multiple
from nmt_toolkit.training.prefetch import Prefetcher
from nmt_toolkit.training.state import set_rng_state
from nmt_toolkit.training.stopping import StopFlag, StopVote
from nmt_toolkit.training.trainer import Trainer
from nmt_toolkit.training.valid_bleu import BleuValidator, bleu_from_stats

logger = logging.getLogger("nmt_toolkit.train")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _grouped(itr, n: int):
    chunk = []
    for batch in itr:
        chunk.append(batch)
        if len(chunk) == n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def uses_cuda(opt) -> bool:
    """Training runs on GPUs whenever torch sees one, unless --cpu."""
    return torch.cuda.is_available() and not opt.cpu


def _device(opt, info: distributed.DistInfo) -> torch.device:
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


def config_dict(configs: dict[str, Any]) -> dict:
    """The plain config stored in checkpoints: every group, with ``components`` naming the model."""
    return to_dict(configs)


def _reshard(iterator_state: dict, saved_shards: int, shards: int) -> dict:
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


def _model_options_hint(saved: Any, current: Any) -> str:
    """``the checkpoint was trained with --embed-dim 64 (now 32)``: the model options that differ."""
    saved = saved.get("model") if isinstance(saved, dict) else None
    if not isinstance(saved, dict) or not isinstance(current, dict):
        return "check --arch and the model flags"
    diff = [f"--{k.replace('_', '-')} {saved[k]} (now {current[k]})" for k in current
            if k in saved and saved[k] != current[k]]
    if not diff:
        return "check --arch and the model flags"
    return "the checkpoint was trained with " + ", ".join(diff)


def _backend_note(info: distributed.DistInfo) -> str:
    """`` (nccl)``: the process group's backend, when there is one (one process runs without any)."""
    import torch.distributed as dist

    if info.world_size > 1 and dist.is_available() and dist.is_initialized():
        return f" ({dist.get_backend()})"
    return ""


def run_training(configs: dict[str, Any], info: Optional[distributed.DistInfo] = None) -> int:
    info = info or distributed.DistInfo()
    comp, opt, ck, prec, lg = (configs[k] for k in ("components", "optimization", "checkpoint", "precision", "logging"))
    device = _device(opt, info)
    if info.world_size > 1:
        distributed.init_process_group(info, distributed.choose_backend(configs["distributed"].distributed_backend,
                                                                         device), configs["distributed"].distributed_timeout)
    finished = False
    try:
        code = _train(configs, comp, opt, ck, prec, lg, device, info)
        finished = True
        return code
    finally:
        distributed.destroy(finished)


def _train(configs, comp, opt, ck, prec, lg, device, info) -> int:
    seed = configs["common"].seed
    if precision_of(prec) == "fp16" and device.type != "cuda":
        raise NmtError("--fp16/--amp needs a CUDA device; use --bf16 on CPU")
    if info.is_master and not ck.no_save:  # before any work: a bad --save-dir fails now, not at the first save
        ckpt_io.prepare_save_dir(ck.save_dir)
        for stale in ckpt_io.remove_stale_temp_files(ck.save_dir):
            logger.info("removed %s, left by a save that was interrupted", stale)
    seed_everything(seed)
    fmt = "simple" if lg.no_progress_bar and lg.log_format == "tqdm" else lg.log_format
    progress = ProgressLogger(fmt, tensorboard_logdir=lg.tensorboard_logdir,
                              enabled=info.is_master and fmt != "none")
    task = TASKS.get(comp.task).obj.setup_task(configs["task"])
    model = build_model(comp.model, configs["model"], task.source_dictionary, task.target_dictionary).to(device)
    criterion = build_criterion(comp.criterion, configs.get("criterion"), task)
    lr = default_lr(comp.lr_scheduler) if opt.lr is None else opt.lr
    optimizer = build_optimizer(comp.optimizer, configs.get("optimizer"), model.parameters(), lr)
    sched_cfg = configs.get("lr_scheduler")
    if sched_cfg is not None and hasattr(sched_cfg, "model_dim") and not sched_cfg.model_dim:
        sched_cfg.model_dim = getattr(configs["model"], "embed_dim", None)
    lr_scheduler = build_lr_scheduler(comp.lr_scheduler, sched_cfg, optimizer, lr)
    if hasattr(lr_scheduler, "total_updates"):
        lr_scheduler.total_updates = opt.max_update
    compiling = resolve_compile(opt.compile, device)
    trainer = Trainer(model, criterion, optimizer, lr_scheduler, device, clip_norm=opt.clip_norm,
                      precision=precision_of(prec), fp16_init_scale=prec.fp16_init_scale,
                      fp16_scale_window=prec.fp16_scale_window, min_loss_scale=prec.min_loss_scale,
                      max_skipped_updates=opt.max_skipped_updates, world_size=info.world_size,
                      ddp_device_ids=[info.local_rank] if device.type == "cuda" else None,
                      compile_model=compiling, bucket_cap_mb=configs["distributed"].bucket_cap_mb or None)

    from nmt_toolkit.models.summary import model_summary
    progress.message(model_summary(model, configs["model"]))
    progress.message(f"task {comp.task} | criterion {comp.criterion} | optimizer {comp.optimizer} "
                     f"({type(optimizer).__name__}) | lr scheduler {comp.lr_scheduler} | device {device} | "
                     f"world size {info.world_size}{_backend_note(info)} | precision {precision_of(prec) or 'fp32'}"
                     f"{' | torch.compile' if compiling else ''}")
    stored_config = config_dict(configs)
    dictionaries = ckpt_io.task_dictionaries_record(task)

    # ---------------------------------------------------------------- resume
    path = ckpt_io.last_checkpoint(ck.save_dir, ck.restore_file)
    train_state: dict = {}
    if path is not None:
        state = ckpt_io.load_checkpoint(path, map_location=device)
        ckpt_io.check_task_dictionaries(state, path, task)
        ckpt_io.check_optimizer(state, path, comp.optimizer, ck.reset_optimizer)
        trainer.load_state_dict(state, ck.reset_optimizer, ck.reset_lr_scheduler, path,
                                hint=_model_options_hint(state.get("config"), stored_config.get("model")))
        train_state = state.get("train_state", {})
        if not ck.reset_optimizer and not ck.reset_lr_scheduler:
            trainer.num_updates = int(train_state.get("num_updates", 0))
        else:
            trainer.set_num_updates(int(train_state.get("num_updates", 0)))
        progress.message(f"resumed from {path} at update {trainer.num_updates}")
    else:
        trainer.set_num_updates(0)

    epoch = 1 if ck.reset_dataloader else int(train_state.get("epoch", 1))
    task.load_dataset(opt.train_subset, epoch=epoch)
    valid_subsets = [] if opt.disable_validation else [s for s in opt.valid_subset.split(",") if s]
    for split in valid_subsets:
        task.load_dataset(split)
    bleu_cfg = configs.get("eval_bleu")
    bleu = BleuValidator(bleu_cfg, task, model, device, seed) if valid_subsets and bleu_cfg and bleu_cfg.eval_bleu \
        else None
    epoch_itr = task.get_batch_iterator(split=opt.train_subset, seed=seed, num_shards=info.world_size,
                                        shard_id=info.rank, epoch=epoch)
    if not epoch_itr.batches:
        budget = getattr(configs.get("task"), "max_tokens", None)
        limits = task.dataset(opt.train_subset).limits_exceeded(task.max_positions(), budget) or \
            ["--max-source-positions/--max-target-positions/--max-tokens"]
        raise NmtError(f"{opt.train_subset}: no training batches: every pair was skipped as longer than "
                       f"{' or '.join(limits)} allows (see the warning above); raise "
                       + "/".join(limit.split()[0] for limit in limits))
    if train_state.get("iterator") and not ck.reset_dataloader:
        saved_shards = int(train_state.get("num_shards", info.world_size))  # older checkpoints: not recorded
        epoch_itr.load_state_dict(_reshard(train_state["iterator"], saved_shards, info.world_size))
        ckpt_io.check_data_position(epoch_itr.iterations_in_epoch, len(epoch_itr), path, configs["task"].data)
    if info.is_master and not ck.no_save:  # after the resume and the data: a run refused above keeps its config.yaml
        # `nmt-train --config config.yaml` repeats the run: every group, and of the common options the seed
        ckpt_io.write_text_atomically(os.path.join(ck.save_dir, "config.yaml"),
                                      dump_yaml({k: v for k, v in configs.items() if k != "common"},
                                                extra={"common": {"seed": seed}}))

    best = train_state.get("best")
    bad_validations = int(train_state.get("patience_counter", 0))
    interval_meter, epoch_meter = Meter(), Meter()
    if train_state.get("meters") and not ck.reset_meters:
        interval_meter.load_state_dict(train_state["meters"].get("interval", {}))
        epoch_meter.load_state_dict(train_state["meters"].get("epoch", {}))
    wall_before = float(train_state.get("wall", 0.0))
    start = time.perf_counter()
    last_save_time = time.perf_counter()
    peak = peak_tflops(device, precision_of(prec), lg.peak_tflops) if info.is_master else None

    def wall() -> float:
        return wall_before + time.perf_counter() - start

    def better(value: float) -> bool:
        if best is None:
            return True
        return value > best if ck.maximize_best_checkpoint_metric else value < best

    last_valid_loss: Optional[float] = None  # the first split's loss at the latest validation

    def validate(count_for_best: bool = True) -> Optional[float]:
        """Loss statistics of every validation split (BLEU too on the first, with --eval-bleu); returns the
        first split's --best-checkpoint-metric."""
        nonlocal last_valid_loss
        first = None
        for index, split in enumerate(valid_subsets):
            itr = task.get_batch_iterator(split=split, seed=seed, num_shards=info.world_size, shard_id=info.rank,
                                          epoch=1, shuffle=False)
            with_bleu = bleu is not None and index == 0
            if with_bleu:
                bleu.start()
            sums = torch.zeros(5, dtype=torch.float64)
            for sample in itr.next_epoch_itr(shuffle=False):
                out = trainer.valid_step(sample)
                sums += torch.tensor([out[k] for k in ("sample_size", "loss", "nll_loss", "ntokens", "nsentences")],
                                     dtype=torch.float64)
                if with_bleu:
                    bleu.add(sample)
            if info.world_size > 1:
                sums = distributed.all_reduce_sum(sums.to(device)).cpu()
            agg = dict(zip(("sample_size", "loss", "nll_loss", "ntokens", "nsentences"), sums.tolist()))
            m = derived_metrics(agg)
            m["wps"] = 0.0
            stats = {"epoch": epoch_itr.epoch, "loss": round(m["loss"], 4), "nll_loss": round(m["nll_loss"], 4),
                     "ppl": round(m["ppl"], 2), "num_updates": trainer.num_updates}
            if with_bleu:
                counts = bleu.stats()
                if info.world_size > 1:
                    counts = distributed.all_reduce_sum(counts.to(device)).cpu()
                m["bleu"] = bleu_from_stats(counts)
                stats["bleu"] = round(m["bleu"], 2)
                if bleu.sample_line():
                    progress.message(bleu.sample_line())
            if index == 0:
                last_valid_loss = m["loss"]
            if index == 0 and count_for_best:
                metric = m[ck.best_checkpoint_metric]  # a known name: CheckpointConfig.validate, check_together
                first = metric
                stats[f"best_{ck.best_checkpoint_metric}"] = round(metric if better(metric) else best, 4)
            progress.print(stats, tag=split if split.startswith("valid") else f"valid_{split}",
                           step=trainer.num_updates)
        return first

    def save(end_of_epoch: bool, val: Optional[float], reason_updates: bool) -> None:
        nonlocal last_save_time
        if ck.no_save or not info.is_master:
            return
        e, n = epoch_itr.epoch, trainer.num_updates
        state = trainer.state_dict()
        ckpt_io.check_finite_for_save(state["model"], val, ck.save_dir, n)
        state["config"] = stored_config
        state["version"] = ckpt_io.VERSION
        state["dictionaries"] = dictionaries
        state["train_state"] = {
            "epoch": e, "num_updates": n, "iterator": epoch_itr.state_dict(), "num_shards": info.world_size,
            "best": best, "patience_counter": bad_validations,
            "rng": trainer.last_rng_state, "wall": wall(),
            "meters": {"interval": interval_meter.state_dict(), "epoch": epoch_meter.state_dict()},
        }
        names = []
        if end_of_epoch and not ck.no_epoch_checkpoints and e % ck.save_interval == 0:
            names.append(ckpt_io.epoch_name(e))
        if reason_updates:  # --no-epoch-checkpoints leaves update checkpoints on, as in fairseq
            names.append(ckpt_io.update_name(e, n))
        if val is not None and val == best:
            names.append("checkpoint_best.pt")
            if ck.keep_best_checkpoints > 0:
                names.append(ckpt_io.best_k_name(ck.best_checkpoint_metric, val))
        if not ck.no_last_checkpoints:
            names.append("checkpoint_last.pt")
        if not names:
            return
        first = os.path.join(ck.save_dir, names[0])
        ckpt_io.save_checkpoint(state, first)
        for name in names[1:]:
            ckpt_io.copy_checkpoint(first, os.path.join(ck.save_dir, name))
        ckpt_io.cleanup(ck.save_dir, ck.keep_last_epochs, ck.keep_interval_updates,
                        ck.keep_best_checkpoints, ck.maximize_best_checkpoint_metric)
        last_save_time = time.perf_counter()
        logger.info("saved %s (epoch %d, %d updates)", ", ".join(names), e, n)

    def log_stats(meter: Meter) -> dict:
        return train_stats(meter, trainer.get_lr(), trainer.loss_scale(), model, peak, info.world_size, wall())

    if valid_subsets and opt.validate_at_start and path is None and trainer.num_updates == 0:
        validate(count_for_best=False)  # eval mode, no RNG drawn: the run continues exactly as without it
    stop = StopFlag()
    stop.install()
    vote = StopVote(device, info.world_size)  # under DDP every rank stops at the same update
    max_update = opt.max_update or math.inf
    max_epoch = opt.max_epoch or math.inf
    multiple = resolve_pad_multiple(opt.pad_to_multiple, compiling, device)
    prepare = None if multiple == 1 else functools.partial(
        pad_to_multiple, multiple=multiple, src_pad=task.source_dictionary.pad(), tgt_pad=task.target_dictionary.pad(),
        max_positions=model.max_positions() if hasattr(model, "max_positions") else (None, None))
    graphs_logged = [0]

    def absorb() -> None:
        """The updates' statistics, read from the device (Trainer.take_stats: the one host read, and where the
        skipped-update rules are checked), into the meters one update at a time."""
        for values in trainer.take_stats():
            for meter in (interval_meter, epoch_meter):
                if values is None:
                    meter.add({"skipped": 1.0}, count=0)
                else:
                    meter.add(values)

    def log_graphs(final: bool = False) -> None:
        graphs = trainer.compiled_graphs()
        if graphs is not None and (graphs != graphs_logged[0] or final):
            graphs_logged[0] = graphs
            progress.message(f"torch.compile: {graphs} graphs compiled " +
                             ("in all" if final else f"by update {trainer.num_updates}"))

    progress.set_budget(opt.max_update, opt.max_epoch, opt.stop_time_hours, trainer.num_updates, wall())
    reason = None
    try:
        while reason is None:
            if epoch_itr.epoch > max_epoch or (epoch_itr.epoch == max_epoch and epoch_itr.end_of_epoch()):
                reason = f"reached --max-epoch {opt.max_epoch}"
                break
            if trainer.num_updates >= max_update:
                reason = f"reached --max-update {opt.max_update}"
                break
            itr = epoch_itr.next_epoch_itr(shuffle=True)
            if train_state.get("rng") is not None and not ck.reset_dataloader:
                set_rng_state(train_state.pop("rng"))  # the exact RNG stream of the interrupted run
            progress.start_epoch(epoch_itr.epoch, len(epoch_itr) if hasattr(epoch_itr, "__len__") else None,
                                 initial=getattr(epoch_itr, "iterations_in_epoch", 0))
            end_of_epoch = False
            with Prefetcher(itr, prepare, device) as batches:  # collated, padded and pinned ahead on a thread
                for samples in _grouped(batches, opt.update_freq):
                    trainer.train_step(samples)  # no read of the device inside
                    progress.advance(len(samples), trainer.num_updates)  # host counts only
                    n = trainer.num_updates  # a skipped update counts too
                    end_of_epoch = not epoch_itr.has_next() if hasattr(epoch_itr, "has_next") else epoch_itr.end_of_epoch()
                    if lg.log_interval > 0 and n % lg.log_interval == 0:
                        absorb()
                        progress.log(log_stats(interval_meter), tag="train_inner", step=n)
                        interval_meter.reset()
                        log_graphs()
                    time_up, signalled = vote.vote(opt.stop_time_hours > 0 and wall() > opt.stop_time_hours * 3600,
                                                   stop.signum is not None)
                    stop_now = None
                    if n >= max_update:
                        stop_now = f"reached --max-update {opt.max_update}"
                    elif time_up:
                        stop_now = f"reached --stop-time-hours {opt.stop_time_hours}"
                    elif signalled:
                        stop_now = f"received {signal.Signals(stop.signum).name}" if stop.signum is not None \
                            else "another rank stopped"
                    by_updates = ck.save_interval_updates > 0 and n % ck.save_interval_updates == 0
                    by_minutes = ck.save_interval_minutes > 0 and time.perf_counter() - last_save_time >= ck.save_interval_minutes * 60
                    do_validate = bool(valid_subsets) and not signalled and (
                        (end_of_epoch and epoch_itr.epoch % opt.validate_interval == 0)
                        or (opt.validate_interval_updates > 0 and n % opt.validate_interval_updates == 0)
                        or (stop_now is not None and stop_now.startswith("reached")))
                    do_save = end_of_epoch or by_updates or by_minutes or stop_now is not None
                    if do_validate or do_save:
                        trainer.snapshot_rng()
                        absorb()  # the meters saved with the checkpoint hold every update so far
                    val = None
                    if do_validate:
                        val = validate()
                        if val is not None:
                            if better(val):
                                best, bad_validations = val, 0
                                do_save = True  # checkpoint_best.pt now, not only if a save happens to follow
                            else:
                                bad_validations += 1
                            if ck.patience >= 0 and bad_validations >= ck.patience > 0 and stop_now is None:
                                stop_now = (f"early stop: {ck.best_checkpoint_metric} did not improve for "
                                            f"{ck.patience} validations (--patience)")
                                do_save = True  # the run ends here: checkpoint_last.pt is this update
                    if do_save:
                        save(end_of_epoch and (epoch_itr.epoch % ck.save_interval == 0), val,
                             by_updates or by_minutes)
                    if stop_now is not None:
                        reason = stop_now
                        break
                    if end_of_epoch:
                        break
            progress.end_epoch()
            if end_of_epoch:
                absorb()
                stats = log_stats(epoch_meter)
                stats["epoch"] = epoch_itr.epoch
                progress.print(stats, tag="train", step=trainer.num_updates)
                epoch_meter.reset()
                # reduce_lr_on_plateau reads this epoch's validation loss (not the best metric: a BLEU, or
                # the best of earlier validations, would read as a loss that never rose); None: not validated
                lr_scheduler.step(epoch_itr.epoch, last_valid_loss if val is not None else None)
            if reason is None and not end_of_epoch:
                reason = "the data iterator ended"
        absorb()  # the skipped-update rules see the last updates too
        log_graphs(final=True)
    finally:
        stop.restore()
        progress.close()
    if info.is_master:
        msg = f"done training: {reason}; {trainer.num_updates} updates in {wall():.0f}s"
        if stop.signum is not None:
            msg += f"; checkpoint_last.pt saved in {ck.save_dir}, run the same command to resume"
        progress.message(msg) if progress.enabled else logger.info(msg)
    return 0

"""The training run: epochs of updates, and after each update the decision to validate, save or stop.

``run_training(configs, info)`` is what ``nmt-train`` calls in every process. ``configs`` maps group names
to dataclass instances (``common, components, task, model, criterion, optimizer, lr_scheduler,
optimization, checkpoint, distributed, precision, logging``). The steps live in their own modules:
building the pieces (:mod:`.components`), resuming (:mod:`.resume`), validating (:mod:`.validation`), the
rules for validating, saving and stopping (:mod:`.decisions`), checkpoint names (:mod:`.checkpoints`),
the checkpoint's training state (:class:`.state.TrainState`) and ``--save-model-folder``, written from the
weights in memory once the ranks have parted (:mod:`.final_folder`); this module runs them in order.
"""
from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any, Optional

from nmt_toolkit.config import dump_yaml, to_dict
from nmt_toolkit.errors import NmtError
from nmt_toolkit import checkpoints as ckpt_io
from nmt_toolkit.training import distributed
from nmt_toolkit.training.components import (Components, build_components, describe, device_for,
                                             load_data, precision_of, seed_everything)
from nmt_toolkit.training.decisions import Decision, Patience, UpdateFacts, after_validation, decide, limit_reached
from nmt_toolkit.training.efficiency import peak_tflops
from nmt_toolkit.training.final_folder import WrittenWeights, save_model_folder
from nmt_toolkit.training.prefetch import Prefetcher
from nmt_toolkit.training.progress import Meter, ProgressLogger, train_stats
from nmt_toolkit.training.resume import restore_data_position, resume
from nmt_toolkit.training.state import TrainState, set_rng_state
from nmt_toolkit.training.stopping import StopFlag, StopVote
from nmt_toolkit.training.validation import Validator

logger = logging.getLogger("nmt_toolkit.train")


def _grouped(itr, n: int):
    chunk = []
    for batch in itr:
        chunk.append(batch)
        if len(chunk) == n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def run_training(configs: dict[str, Any], info: Optional[distributed.DistInfo] = None) -> int:
    info = info or distributed.DistInfo()
    device = device_for(configs["optimization"], info)
    if info.world_size > 1:
        distributed.init_process_group(info, distributed.choose_backend(configs["distributed"].distributed_backend,
                                                                         device), configs["distributed"].distributed_timeout)
    finished = False
    try:
        run = _start(configs, device, info)
        code = run.run()
        finished = True
    finally:
        distributed.destroy(finished)
    ck = configs["checkpoint"]
    if code == 0 and ck.save_model_folder and info.is_master:  # once the ranks have parted
        save_model_folder(ck, run.parts.task, run.stored_config, run.written)
    return code


def _write_config(configs: dict[str, Any], ck, info) -> None:
    """``config.yaml``: `nmt-train --config config.yaml` repeats the run (every group, and of the common
    options the seed). Written after the resume and the data, so a run refused there keeps its config.yaml."""
    if info.is_master and not ck.no_save:
        seed = configs["common"].seed
        ckpt_io.write_text_atomically(os.path.join(ck.save_dir, "config.yaml"),
                                      dump_yaml({k: v for k, v in configs.items() if k != "common"},
                                                extra={"common": {"seed": seed}}))


def _start(configs: dict[str, Any], device, info) -> TrainingRun:
    """Everything before the first update: the pieces built, the resume, the data, config.yaml and the
    validation at start. (``--save-dir`` is prepared once, before this, by whoever holds its lock:
    :mod:`.save_dir`.)"""
    seed, ck, lg = configs["common"].seed, configs["checkpoint"], configs["logging"]
    if precision_of(configs["precision"]) == "fp16" and device.type != "cuda":
        raise NmtError("--fp16/--amp needs a CUDA device; use --bf16 on CPU")
    seed_everything(seed)
    fmt = "simple" if lg.no_progress_bar and lg.log_format == "tqdm" else lg.log_format
    progress = ProgressLogger(fmt, tensorboard_logdir=lg.tensorboard_logdir,
                              enabled=info.is_master and fmt != "none")
    parts = build_components(configs, device, info)
    for line in describe(configs, parts, device, info):
        progress.message(line)
    stored_config = to_dict(configs)  # the plain config stored in checkpoints: every group
    path, state = resume(parts.trainer, parts.task, ck, configs["components"].optimizer, device, stored_config,
                         progress)
    epoch = 1 if ck.reset_dataloader else state.epoch
    epoch_itr, valid_splits, bleu = load_data(configs, parts, seed, info, device, epoch)
    restore_data_position(epoch_itr, state, ck, info.world_size, path, configs["task"].data)
    _write_config(configs, ck, info)
    validator = Validator(parts.task, parts.trainer, progress, valid_splits, ck, seed, info, device, bleu)
    run = TrainingRun(configs, parts, progress, epoch_itr, validator, state, stored_config, device, info)
    if valid_splits and configs["optimization"].validate_at_start and path is None and parts.trainer.num_updates == 0:
        validator(epoch_itr.epoch, run.patience.best, count_for_best=False)  # eval mode: no RNG drawn
    return run


class TrainingRun:
    """The epochs of one run, from the state it resumed (or started) at until a stop rule ends it.

    It owns what changes while training and goes into the checkpoint: the best metric and patience, the
    train meters, the wall clock and the time of the last save.
    """

    def __init__(self, configs, parts: Components, progress, epoch_itr, validator: Validator, state: TrainState,
                 stored_config: dict, device, info):
        self.opt, self.ck, self.lg = configs["optimization"], configs["checkpoint"], configs["logging"]
        self.parts, self.trainer, self.progress = parts, parts.trainer, progress
        self.epoch_itr, self.validator, self.device, self.info = epoch_itr, validator, device, info
        self.stored_config, self.dictionaries = stored_config, ckpt_io.task_dictionaries_record(parts.task)
        self.patience = Patience(state.best, state.patience_counter)
        self.interval_meter, self.epoch_meter = Meter(), Meter()
        if state.meters and not self.ck.reset_meters:
            self.interval_meter.load_state_dict(state.meters.get("interval", {}))
            self.epoch_meter.load_state_dict(state.meters.get("epoch", {}))
        self.pending_rng = state.rng if not self.ck.reset_dataloader else None  # the interrupted run's RNG stream
        self.wall_before = state.wall
        self.start = self.last_save_time = time.perf_counter()
        self.peak = peak_tflops(device, precision_of(configs["precision"]), self.lg.peak_tflops) \
            if info.is_master else None
        self.graphs_logged = 0
        self.stop = StopFlag()
        self.vote = StopVote(device, info.world_size)  # under DDP every rank stops at the same update
        self.written = WrittenWeights(bool(self.ck.save_model_folder), self.ck.save_dir)  # --save-model-folder's

    def wall(self) -> float:
        """Training seconds, those before the resume included."""
        return self.wall_before + time.perf_counter() - self.start

    def run(self) -> int:
        self.stop.install()
        self.progress.set_budget(self.opt.max_update, self.opt.max_epoch, self.opt.stop_time_hours,
                                 self.trainer.num_updates, self.wall())
        reason = None
        try:
            while reason is None:
                reason = limit_reached(self.epoch_itr.epoch, self.epoch_itr.end_of_epoch(),
                                       self.trainer.num_updates, self.opt)
                if reason is None:
                    reason = self.epoch()
            self.absorb()  # the skipped-update rules see the last updates too
            self.log_graphs(final=True)
        finally:
            self.stop.restore()
            self.progress.close()
        self.finish(reason)
        return 0

    def epoch(self) -> Optional[str]:
        """Train until the epoch ends or a stop rule fires; returns the reason to stop (``None``: go on)."""
        itr = self.epoch_itr.next_epoch_itr(shuffle=True)
        if self.pending_rng is not None:
            set_rng_state(self.pending_rng)
            self.pending_rng = None
        self.progress.start_epoch(self.epoch_itr.epoch, len(self.epoch_itr) if hasattr(self.epoch_itr, "__len__")
                                  else None, initial=getattr(self.epoch_itr, "iterations_in_epoch", 0))
        reason, end_of_epoch, metric = None, False, None
        with Prefetcher(itr, self.parts.prepare, self.device) as batches:  # collated, padded, pinned ahead
            for samples in _grouped(batches, self.opt.update_freq):
                end_of_epoch = self.train_step(samples)
                reason, metric = self.after_update(end_of_epoch)
                if reason is not None or end_of_epoch:
                    break
        self.progress.end_epoch()
        if end_of_epoch:
            self.end_epoch(metric)
        elif reason is None:
            reason = "the data iterator ended"
        return reason

    def train_step(self, samples) -> bool:
        """One update (no read of the device inside), logged every --log-interval; returns end of epoch."""
        self.trainer.train_step(samples)
        self.progress.advance(len(samples), self.trainer.num_updates)  # host counts only
        n = self.trainer.num_updates  # a skipped update counts too
        itr = self.epoch_itr
        end_of_epoch = not itr.has_next() if hasattr(itr, "has_next") else itr.end_of_epoch()
        if self.lg.log_interval > 0 and n % self.lg.log_interval == 0:
            self.absorb()
            self.progress.log(self.train_stats(self.interval_meter), tag="train_inner", step=n)
            self.interval_meter.reset()
            self.log_graphs()
        return end_of_epoch

    def after_update(self, end_of_epoch: bool) -> tuple[Optional[str], Optional[float]]:
        """Validate, save and stop as :func:`decide` rules; returns the stop reason and the metric."""
        time_up, signalled = self.vote.vote(
            self.opt.stop_time_hours > 0 and self.wall() > self.opt.stop_time_hours * 3600,
            self.stop.signum is not None)
        facts = UpdateFacts(num_updates=self.trainer.num_updates, epoch=self.epoch_itr.epoch,
                            end_of_epoch=end_of_epoch, time_up=time_up, signalled=signalled,
                            signal_name=None if self.stop.signum is None else signal.Signals(self.stop.signum).name,
                            seconds_since_save=time.perf_counter() - self.last_save_time,
                            can_validate=bool(self.validator.splits))
        decision = decide(facts, self.ck, self.opt)
        if decision.validate or decision.save:
            self.trainer.snapshot_rng()
            self.absorb()  # the meters saved with the checkpoint hold every update so far
        metric = None
        if decision.validate:
            metric = self.validator(self.epoch_itr.epoch, self.patience.best)
            decision, self.patience = after_validation(decision, metric, self.patience, self.ck)
        if decision.save:
            self.save(decision, end_of_epoch, metric)
        return decision.stop, metric

    def train_state(self) -> TrainState:
        return TrainState(
            epoch=self.epoch_itr.epoch, num_updates=self.trainer.num_updates, iterator=self.epoch_itr.state_dict(),
            num_shards=self.info.world_size, best=self.patience.best,
            patience_counter=self.patience.bad_validations, rng=self.trainer.last_rng_state, wall=self.wall(),
            meters={"interval": self.interval_meter.state_dict(), "epoch": self.epoch_meter.state_dict()})

    def save(self, decision: Decision, end_of_epoch: bool, metric: Optional[float]) -> None:
        """Write the checkpoint files :func:`checkpoints.checkpoint_names` chooses (one write, then copies),
        then delete those beyond the --keep-* limits. A NaN weight or metric stops the run instead."""
        ck = self.ck
        if ck.no_save or not self.info.is_master:
            return
        e, n = self.epoch_itr.epoch, self.trainer.num_updates
        state = self.trainer.state_dict()
        ckpt_io.check_finite_for_save(state["model"], metric, ck.save_dir, n)
        state["config"] = self.stored_config
        state["version"] = ckpt_io.VERSION
        state["dictionaries"] = self.dictionaries
        state["train_state"] = self.train_state().to_dict()
        names = ckpt_io.checkpoint_names(ck, e, n, end_of_epoch, decision.update_checkpoint, metric,
                                         self.patience.best)
        if not names:
            return
        first = os.path.join(ck.save_dir, names[0])
        ckpt_io.save_checkpoint(state, first)
        for name in names[1:]:
            ckpt_io.copy_checkpoint(first, os.path.join(ck.save_dir, name))
        self.written.saved(names, state["model"])
        ckpt_io.cleanup(ck.save_dir, ck.keep_last_epochs, ck.keep_interval_updates,
                        ck.keep_best_checkpoints, ck.maximize_best_checkpoint_metric)
        self.last_save_time = time.perf_counter()
        logger.info("saved %s (epoch %d, %d updates)", ", ".join(names), e, n)

    def end_epoch(self, metric: Optional[float]) -> None:
        """The epoch's ``train`` line, and the LR schedule's end-of-epoch step.

        reduce_lr_on_plateau reads this epoch's validation loss (not the best metric: a BLEU, or the best of
        earlier validations, would read as a loss that never rose); ``None`` when the epoch's last update
        was not validated."""
        self.absorb()
        stats = self.train_stats(self.epoch_meter)
        stats["epoch"] = self.epoch_itr.epoch
        self.progress.print(stats, tag="train", step=self.trainer.num_updates)
        self.epoch_meter.reset()
        self.parts.lr_scheduler.step(self.epoch_itr.epoch, self.validator.last_loss if metric is not None else None)

    def absorb(self) -> None:
        """The updates' statistics, read from the device (Trainer.take_stats: the one host read, and where the
        skipped-update rules are checked), into the meters one update at a time."""
        for values in self.trainer.take_stats():
            for meter in (self.interval_meter, self.epoch_meter):
                if values is None:
                    meter.add({"skipped": 1.0}, count=0)
                else:
                    meter.add(values)

    def train_stats(self, meter: Meter) -> dict:
        return train_stats(meter, self.trainer.get_lr(), self.trainer.loss_scale(), self.parts.model, self.peak,
                           self.info.world_size, self.wall())

    def log_graphs(self, final: bool = False) -> None:
        """How many graphs torch.compile has built (a growing count means recompiles), when it changes."""
        graphs = self.trainer.compiled_graphs()
        if graphs is not None and (graphs != self.graphs_logged or final):
            self.graphs_logged = graphs
            self.progress.message(f"torch.compile: {graphs} graphs compiled " +
                                  ("in all" if final else f"by update {self.trainer.num_updates}"))

    def finish(self, reason: str) -> None:
        if not self.info.is_master:
            return
        msg = f"done training: {reason}; {self.trainer.num_updates} updates in {self.wall():.0f}s"
        if self.stop.signum is not None:
            msg += f"; checkpoint_last.pt saved in {self.ck.save_dir}, run the same command to resume"
        self.progress.message(msg) if self.progress.enabled else logger.info(msg)

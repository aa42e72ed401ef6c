"""Validation during training: the loss statistics of every validation split, and BLEU with --eval-bleu."""
from __future__ import annotations

from typing import Optional

import torch

from nmt_toolkit.criterions import derived_metrics
from nmt_toolkit.training import distributed
from nmt_toolkit.training.decisions import is_better
from nmt_toolkit.training.valid_bleu import bleu_from_stats

_SUMS = ("sample_size", "loss", "nll_loss", "ntokens", "nsentences")


class Validator:
    """Runs the validation splits in eval mode (no RNG drawn: a validation leaves the training run as it was).

    Under DDP every rank validates its shard and the sums are all-reduced, so every rank sees the same
    metric. ``last_loss`` is the first split's loss at the latest validation (what reduce_lr_on_plateau
    reads at the end of an epoch).
    """

    def __init__(self, task, trainer, progress, splits: list[str], ck, seed: int, info, device, bleu=None):
        self.task, self.trainer, self.progress = task, trainer, progress
        self.splits, self.ck, self.seed, self.info, self.device = splits, ck, seed, info, device
        self.bleu = bleu
        self.last_loss: Optional[float] = None

    def __call__(self, epoch: int, best: Optional[float], count_for_best: bool = True) -> Optional[float]:
        """Validate every split and log it; returns the first split's --best-checkpoint-metric (``None`` when
        not ``count_for_best``: a validation at the start reports the model, it does not compete)."""
        first = None
        for index, split in enumerate(self.splits):
            # the first split, and each of a multilingual task's directions (valid.en-de, ...)
            with_bleu = self.bleu is not None and (index == 0 or self.task.bleu_on_every_split)
            metrics = self._metrics(split, with_bleu)
            stats = {"epoch": epoch, "loss": round(metrics["loss"], 4), "nll_loss": round(metrics["nll_loss"], 4),
                     "ppl": round(metrics["ppl"], 2), "num_updates": self.trainer.num_updates}
            if with_bleu:
                stats["bleu"] = round(metrics["bleu"], 2)
                if self.bleu.sample_line():
                    self.progress.message(self.bleu.sample_line())
            if index == 0:
                self.last_loss = metrics["loss"]
            if index == 0 and count_for_best:
                name = self.ck.best_checkpoint_metric  # a known name: CheckpointConfig.validate, check_together
                first = metrics[name]
                better = is_better(first, best, self.ck.maximize_best_checkpoint_metric)
                stats[f"best_{name}"] = round(first if better else best, 4)
            self.progress.print(stats, tag=split if split.startswith("valid") else f"valid_{split}",
                                step=self.trainer.num_updates)
        return first

    def _metrics(self, split: str, with_bleu: bool) -> dict:
        """The summed criterion outputs of one split (all ranks) as metrics, BLEU too ``with_bleu``."""
        itr = self.task.get_batch_iterator(split=split, seed=self.seed, num_shards=self.info.world_size,
                                           shard_id=self.info.rank, epoch=1, shuffle=False)
        if with_bleu:
            self.bleu.start()
        sums = torch.zeros(len(_SUMS), dtype=torch.float64)
        for sample in itr.next_epoch_itr(shuffle=False):
            out = self.trainer.valid_step(sample)
            sums += torch.tensor([out[k] for k in _SUMS], dtype=torch.float64)
            if with_bleu:
                self.bleu.add(sample)
        if self.info.world_size > 1:
            sums = distributed.all_reduce_sum(sums.to(self.device)).cpu()
        metrics = derived_metrics(dict(zip(_SUMS, sums.tolist())))
        metrics["wps"] = 0.0
        if with_bleu:
            counts = self.bleu.stats()
            if self.info.world_size > 1:
                counts = distributed.all_reduce_sum(counts.to(self.device)).cpu()
            metrics["bleu"] = bleu_from_stats(counts)
        return metrics

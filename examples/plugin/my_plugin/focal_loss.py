"""Focal loss (Lin et al. 2017) for sequence models: ``-(1 - p_y)^γ · log p_y`` per target token, which
down-weights tokens the model already predicts well; γ = 0 is plain cross-entropy. Optional label smoothing
is mixed in as in the built-in ``label_smoothed_cross_entropy``.

A criterion is a callable ``criterion(model, sample) -> (loss_sum, sample_size, logging_output)``; the
logging output carries ``loss`` and ``nll_loss`` (natural-log sums: the trainer reports them in base 2),
``ntokens``, ``nsentences`` and ``sample_size``, like the built-ins.
"""
from __future__ import annotations

from dataclasses import dataclass

from nmt_toolkit.config import option
from nmt_toolkit.criterions.cross_entropy import target_log_probs
from nmt_toolkit.errors import UsageError
from nmt_toolkit.registry import register_criterion


@dataclass
class FocalCrossEntropyConfig:
    focal_gamma: float = option(1.0, "focusing parameter γ of the focal loss (0 = cross-entropy)")
    focal_label_smoothing: float = option(0.0, "label smoothing mixed into the focal loss (ε_ls)")


@register_criterion("focal_cross_entropy", FocalCrossEntropyConfig)
class FocalCrossEntropyCriterion:
    def __init__(self, cfg: FocalCrossEntropyConfig | None = None, task=None, padding_idx: int | None = None):
        self.cfg = cfg or FocalCrossEntropyConfig()
        if self.cfg.focal_gamma < 0:
            raise UsageError(f"--focal-gamma {self.cfg.focal_gamma}: expected a value >= 0")
        if not 0.0 <= self.cfg.focal_label_smoothing < 1.0:
            raise UsageError(f"--focal-label-smoothing {self.cfg.focal_label_smoothing}: expected a value in [0, 1)")
        if padding_idx is None:
            padding_idx = task.target_dictionary.pad() if task is not None else 1
        self.padding_idx = padding_idx

    def __call__(self, model, sample):
        lprobs, target = target_log_probs(model, sample)  # [N, V] fp32, [N]
        keep = target.ne(self.padding_idx)
        lp_target = lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        weight = (1.0 - lp_target.exp()).clamp(min=0.0) ** self.cfg.focal_gamma
        eps = self.cfg.focal_label_smoothing
        token_loss = -lp_target
        if eps > 0:
            eps_i = eps / (lprobs.size(-1) - 1)
            token_loss = (1.0 - eps - eps_i) * token_loss - eps_i * lprobs.sum(-1)
        loss = (weight * token_loss)[keep].sum()
        nll_loss = (-lp_target)[keep].sum()
        sample_size = sample["ntokens"]
        logging_output = {"loss": loss.detach(), "nll_loss": nll_loss.detach(), "ntokens": sample["ntokens"],
                          "nsentences": sample["target"].size(0), "sample_size": sample_size}
        return loss, sample_size, logging_output

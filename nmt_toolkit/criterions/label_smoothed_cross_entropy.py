"""Label-smoothed cross-entropy (section 5.4 of the paper, ε_ls = 0.1), with fairseq's formula.

For a target y and vocabulary size V, with ε spread over the V-1 wrong classes (fairseq ≥ 0.10)::

    eps_i = ε / (V - 1)
    loss  = (1 - ε - eps_i) · nll + eps_i · Σ_v (-log p_v)

which is the cross-entropy against the distribution q(y) = 1 - ε, q(v≠y) = ε / (V - 1).
Padding positions contribute nothing. One fp32 log_softmax, one gather and one sum per batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt_toolkit.config import option
from nmt_toolkit.criterions.cross_entropy import target_log_probs
from nmt_toolkit.registry import register_criterion


@dataclass
class LabelSmoothedCrossEntropyConfig:
    label_smoothing: float = option(0.1, "ε_ls: probability mass spread over the wrong classes (0 = plain CE)")
    sentence_avg: bool = option(False, "normalise the loss per sentence instead of per target token")


def label_smoothed_nll_loss(lprobs, target, epsilon: float, ignore_index: int | None = None):
    """Summed (loss, nll_loss) of ``lprobs`` [N, V] against ``target`` [N]; fairseq's eps/(V-1) form."""
    target = target.unsqueeze(-1)
    nll_loss = -lprobs.gather(dim=-1, index=target)
    smooth_loss = -lprobs.sum(dim=-1, keepdim=True)
    if ignore_index is not None:
        pad_mask = target.eq(ignore_index)
        nll_loss = nll_loss.masked_fill(pad_mask, 0.0)
        smooth_loss = smooth_loss.masked_fill(pad_mask, 0.0)
    nll_loss, smooth_loss = nll_loss.sum(), smooth_loss.sum()
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll_loss + eps_i * smooth_loss
    return loss, nll_loss


@register_criterion("label_smoothed_cross_entropy", LabelSmoothedCrossEntropyConfig)
class LabelSmoothedCrossEntropyCriterion:
    def __init__(self, cfg: LabelSmoothedCrossEntropyConfig | None = None, task=None,
                 padding_idx: int | None = None):
        self.cfg = cfg or LabelSmoothedCrossEntropyConfig()
        if not 0.0 <= self.cfg.label_smoothing < 1.0:
            from nmt_toolkit.errors import UsageError
            raise UsageError(f"--label-smoothing {self.cfg.label_smoothing}: expected a value in [0, 1)")
        if padding_idx is None:
            padding_idx = task.target_dictionary.pad() if task is not None else 1
        self.padding_idx = padding_idx

    def __call__(self, model, sample):
        lprobs, target = target_log_probs(model, sample)
        loss, nll_loss = label_smoothed_nll_loss(lprobs, target, self.cfg.label_smoothing, self.padding_idx)
        sample_size = sample["target"].size(0) if self.cfg.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.detach(),
            "nll_loss": nll_loss.detach(),
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output

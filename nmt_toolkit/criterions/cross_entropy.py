"""Plain token-level cross-entropy, padding ignored."""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F

from nmt_toolkit.config import option
from nmt_toolkit.registry import register_criterion


@dataclass
class CrossEntropyConfig:
    sentence_avg: bool = option(False, "normalise the loss per sentence instead of per target token")


def finish(loss, nll_loss, sample, sentence_avg: bool):
    """The criterion's return value: the summed loss, what it is normalised by, and the logged sums.

    ``sample_size`` is the number of target tokens (or sentences with ``--sentence-avg``); the trainer
    divides the gradients by its sum over micro-batches and ranks.
    """
    sample_size = sample["target"].size(0) if sentence_avg else sample["ntokens"]
    logging_output = {
        "loss": loss.detach(),
        "nll_loss": nll_loss.detach(),
        "ntokens": sample["ntokens"],
        "nsentences": sample["target"].size(0),
        "sample_size": sample_size,
    }
    return loss, sample_size, logging_output


def target_log_probs(model, sample):
    """Forward the model; return fp32 log-probabilities [N, V] and targets [N] (flattened)."""
    logits = model(**sample["net_input"])
    lprobs = F.log_softmax(logits.float(), dim=-1)
    return lprobs.view(-1, lprobs.size(-1)), sample["target"].reshape(-1)


@register_criterion("cross_entropy", CrossEntropyConfig)
class CrossEntropyCriterion:
    """Summed negative log-likelihood of the reference tokens (natural log; logging converts to base 2)."""

    def __init__(self, cfg: CrossEntropyConfig | None = None, task=None, padding_idx: int | None = None):
        self.cfg = cfg or CrossEntropyConfig()
        if padding_idx is None:
            padding_idx = task.target_dictionary.pad() if task is not None else 1
        self.padding_idx = padding_idx

    def __call__(self, model, sample):
        lprobs, target = target_log_probs(model, sample)
        loss = F.nll_loss(lprobs, target, ignore_index=self.padding_idx, reduction="sum")
        return finish(loss, loss, sample, self.cfg.sentence_avg)

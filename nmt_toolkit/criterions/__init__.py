"""Training criteria: ``criterion(model, sample) -> (loss_sum, sample_size, logging_output)``.

The loss is summed over the batch; the trainer divides gradients by the sample size all-reduced over
micro-batches and ranks. Logged values are in base 2 (fairseq's convention): ``loss``, ``nll_loss``
per token (or per sentence with ``--sentence-avg``) and ``ppl = 2 ** nll_loss``.
"""
from __future__ import annotations

import math
from typing import Any

from nmt_toolkit.registry import CRITERIA


def build_criterion(name: str, cfg: Any, task: Any = None):
    """Instantiate the registered criterion ``name`` with its config (None if it has no options)."""
    entry = CRITERIA.get(name)
    return entry.obj(cfg, task)


def derived_metrics(agg: dict) -> dict:
    """``loss``, ``nll_loss`` (base 2, per sample-size unit) and ``ppl`` from summed logging outputs."""
    sample_size = max(agg.get("sample_size", 0.0), 1.0)
    ntokens = max(agg.get("ntokens", 0.0), 1.0)
    out = {"loss": agg.get("loss", 0.0) / sample_size / math.log(2)}
    nll = agg.get("nll_loss", agg.get("loss", 0.0))
    out["nll_loss"] = nll / ntokens / math.log(2)
    out["ppl"] = 2 ** min(out["nll_loss"], 100.0)
    return out

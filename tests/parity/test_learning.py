"""The same short recipe learns as well here as in fairseq (real Multi30k, a CI-sized run).

The recipe and its data are tests/multi30k_tiny.py's (trained once a session by the
``multi30k_learning_run`` fixture). fairseq-fixed 0.12.3.1 on the same encoded text
(``fairseq_learning.sh``; README.md) reaches the validation nll in ``FAIRSEQ_VALID_NLL``; we must come
within 2 % of their mean.

Before fairseq's initialisation was adopted this run ended at 5.129 (seed 1; our seeds 1-3 now: 4.813,
4.907, 4.896): the bar (1.02 x 4.841 = 4.938) catches that regression.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import statistics

import pytest

#: fairseq-fixed 0.12.3.1, seeds 1, 2, 3: validation nll (base 2) after update 300 (README.md has the command)
FAIRSEQ_VALID_NLL = (4.830, 4.846, 4.848)
#: the joint dictionary nmt-preprocess builds for this sample; fairseq's numbers were made on its encoding
DICT_SHA256 = "056c8bc71b2afe77279ae2bbafbcca577331c9fde9fb73fdfde6a8b6c9837e05"


@pytest.mark.slow
def test_multi30k_recipe_reaches_fairseqs_validation_nll(multi30k_learning_run):
    run = multi30k_learning_run
    digest = hashlib.sha256((run.data / "dict.en.txt").read_bytes()).hexdigest()
    assert digest == DICT_SHA256, ("the sentencepiece model differs from the one fairseq's numbers were made with "
                                   "(a new sentencepiece?): regenerate them with tests/parity/fairseq_learning.sh")
    if os.environ.get("NMT_TOOLKIT_KEEP_LEARNING_BIN"):
        shutil.copytree(run.raw.parent, os.environ["NMT_TOOLKIT_KEEP_LEARNING_BIN"], dirs_exist_ok=True)
    valid = [r for r in run.log_rows if "valid_nll_loss" in r]
    assert valid and valid[-1].get("num_updates", 300) == 300, valid[-1:]
    ours = valid[-1]["valid_nll_loss"]
    theirs = statistics.mean(FAIRSEQ_VALID_NLL)
    print(f"valid nll after 300 updates: ours {ours:.3f}, fairseq {FAIRSEQ_VALID_NLL} (mean {theirs:.3f})")
    assert ours <= 1.02 * theirs, f"validation nll {ours:.3f} is more than 2 % above fairseq's {theirs:.3f}"

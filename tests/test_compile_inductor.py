"""``--compile``: the training step through torch.compile's inductor (C++ kernels on the CPU) equals the eager
step to float tolerance, and checkpoints hold the plain module's names.

Three SGD updates of a tiny model (dropout 0: inductor draws its own random numbers) on one batch shape, so
inductor compiles once (about 30 s of CPU time, most of it g++).
"""
import numpy as np
import pytest
import torch

from nmt_toolkit import registry
from nmt_toolkit.criterions import label_smoothed_cross_entropy as ls
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.data.pair_dataset import LanguagePairDataset
from nmt_toolkit.models.summary import build_for_dry_run
from nmt_toolkit.models.transformer import TransformerConfig
from nmt_toolkit.optim.lr_schedulers import InverseSqrtConfig, InverseSqrtSchedule
from nmt_toolkit.training.trainer import Trainer


def _batch():
    rng = np.random.RandomState(0)
    d = Dictionary()
    for i in range(20):
        d.add_symbol(f"w{i}")
    src = [np.append(rng.randint(4, 24, n), 2) for n in (7, 5, 3, 6)]
    tgt = [np.append(rng.randint(4, 24, n), 2) for n in (6, 7, 2, 4)]
    ds = LanguagePairDataset(src, [len(s) for s in src], d, tgt, [len(t) for t in tgt], d)
    return ds.collater([ds[i] for i in range(4)]), len(d)


def _trainer(vocab, compile_model):
    registry.import_builtin_components()
    cfg = TransformerConfig(encoder_layers=1, decoder_layers=1, embed_dim=16, ffn_embed_dim=32, attention_heads=2,
                            dropout=0.0)
    torch.manual_seed(0)
    model = build_for_dry_run("transformer", cfg, vocab, device="cpu")
    crit = ls.LabelSmoothedCrossEntropyCriterion(ls.LabelSmoothedCrossEntropyConfig(0.1), padding_idx=1)
    # SGD: Adam would turn the rounding noise of a zero gradient (the key bias: softmax ignores it) into ±lr
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sched = InverseSqrtSchedule(InverseSqrtConfig(warmup_updates=4), opt, 0.5)
    trainer = Trainer(model, crit, opt, sched, torch.device("cpu"), clip_norm=1.0, compile_model=compile_model)
    trainer.set_num_updates(0)
    return trainer


@pytest.mark.slow
def test_compiled_training_steps_equal_the_eager_ones():
    batch, vocab = _batch()
    eager, compiled = _trainer(vocab, False), _trainer(vocab, True)
    for _ in range(3):
        eager.train_step([batch])
        compiled.train_step([batch])
    # the loss over the vocabulary ran through the compiler too, as a region of its own
    assert compiled.criterion.loss_from_logits is not ls.fused_label_smoothed_nll_loss
    want, got = eager.take_stats(), compiled.take_stats()
    for w, g in zip(want, got):
        assert g["loss"] == pytest.approx(w["loss"], rel=1e-5) and g["nll_loss"] == pytest.approx(w["nll_loss"], rel=1e-5)
        assert g["gnorm"] == pytest.approx(w["gnorm"], rel=1e-4)
    a, b = eager.state_dict()["model"], compiled.state_dict()["model"]
    assert a.keys() == b.keys() and not any("_orig_mod" in k for k in b)  # checkpoints: the plain names
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6), k
    assert not torch.equal(a["decoder.output_projection.weight"], _trainer(vocab, False).model.state_dict()[
        "decoder.output_projection.weight"])  # the updates did move the weights
    assert compiled.compiled_graphs() == 2 and eager.compiled_graphs() is None  # the model's and the loss's

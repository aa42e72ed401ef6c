"""Parity with real fairseq, from numbers fairseq itself recorded (``make_fixtures.py``; see README.md).

fairseq's freshly initialised weights are copied into our model (:mod:`nmt_toolkit.importers.fairseq`), the
recorded batches are collated by our own collater (right-padded sources; fairseq left-pads them), and our
criterion, Adam, schedule and :class:`~nmt_toolkit.training.trainer.Trainer` run on them. No fairseq import:
these tests run in CI from the fixtures.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import torch

from nmt_toolkit.criterions import build_criterion
from nmt_toolkit.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyConfig
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.data.pair_dataset import collate
from nmt_toolkit.importers.fairseq import convert_state_dict
from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel
from nmt_toolkit.optim import build_lr_scheduler, build_optimizer
from nmt_toolkit.optim.lr_schedulers import InverseSqrtConfig
from nmt_toolkit.optim.optimizers import AdamConfig
from nmt_toolkit.training.trainer import Trainer

HERE = pathlib.Path(__file__).parent / "fixtures"
CONFIGS = {
    "postnorm_shared": dict(share_all_embeddings=True, sinusoid_layout="fairseq"),
    "prenorm_learned": dict(normalize_before=True, positional_embeddings="learned", max_positions=64,
                            share_decoder_input_output_embed=True),
}


def load(path: pathlib.Path):
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def dictionary() -> Dictionary:
    return Dictionary.load(str(HERE / "dict.txt"))


def our_batch(pairs: list, dictionary, order=None) -> dict:
    """Our collater's batch of the recorded pairs, in ``order`` (fairseq sorts by source length) if given."""
    order = range(len(pairs)) if order is None else [int(i) for i in order]
    return collate([{"id": i, "source": np.array(pairs[i]["source"]), "target": np.array(pairs[i]["target"])}
                    for i in order], dictionary.pad(), dictionary.eos())


@pytest.fixture(scope="module")
def raw_batches():
    return json.loads((HERE / "batches.json").read_text())


@pytest.fixture(scope="module")
def batches(dictionary, raw_batches):
    return [our_batch(b, dictionary) for b in raw_batches]


def build(name: str, dictionary: Dictionary) -> TransformerModel:
    cfg = TransformerConfig(encoder_layers=2, decoder_layers=2, embed_dim=32, ffn_embed_dim=64, attention_heads=4,
                            dropout=0.0, **CONFIGS[name])
    torch.manual_seed(0)
    model = TransformerModel.build_model(cfg, dictionary, dictionary)
    model.load_state_dict(convert_state_dict(load(HERE / name / "init.pt"), dictionary.pad()), strict=True)
    return model


def criterion(dictionary):
    return build_criterion("label_smoothed_cross_entropy", LabelSmoothedCrossEntropyConfig(label_smoothing=0.1),
                           type("Task", (), {"target_dictionary": dictionary})())


@pytest.mark.parametrize("name", list(CONFIGS))
def test_one_batch_outputs_loss_and_gradients_equal_fairseq(name, dictionary, raw_batches):
    ref = load(HERE / name / "batch.pt")
    model = build(name, dictionary)
    model.train()  # dropout is 0: training mode must still be exactly fairseq's function
    sample = our_batch(raw_batches[0], dictionary, ref["order"])
    net = sample["net_input"]
    enc = model.forward_encoder(net["src_tokens"], net["src_lengths"])
    real = net["src_tokens"].ne(dictionary.pad())
    torch.testing.assert_close(enc["encoder_out"][real], ref["encoder_out"], rtol=1e-5, atol=1e-5)
    logits = model.forward_decoder(net["prev_output_tokens"], enc)[0]
    keep = sample["target"].ne(dictionary.pad())
    torch.testing.assert_close(logits[keep], ref["logits"][keep], rtol=1e-5, atol=1e-5)

    loss, sample_size, log = criterion(dictionary)(model, sample)
    assert sample_size == ref["sample_size"] == log["ntokens"] == ref["ntokens"]
    assert float(loss) == pytest.approx(ref["loss"], rel=1e-5)
    assert float(log["nll_loss"]) == pytest.approx(ref["nll_loss"], rel=1e-5)

    loss.backward()
    expected = convert_state_dict(ref["grads"], dictionary.pad())  # the same renaming as the weights
    for our_name, param in model.named_parameters():
        want = expected[our_name]
        err = float((param.grad / sample_size - want).abs().max() / want.abs().max().clamp_min(1e-12))
        assert err < 1e-4, f"{our_name}: gradient differs from fairseq's by {err:.2e} (relative)"


def _trainer(model, dictionary, lr_steps=None):
    opt = build_optimizer("adam", AdamConfig(adam_betas="0.9,0.98", adam_eps=1e-8), model.parameters(), 3e-3)
    sched = build_lr_scheduler("inverse_sqrt", InverseSqrtConfig(warmup_updates=10), opt, 3e-3)
    trainer = Trainer(model, criterion(dictionary), opt, sched, torch.device("cpu"))
    trainer.set_num_updates(0)  # as nmt-train does before the first update
    return trainer


@pytest.mark.parametrize("name", list(CONFIGS))
def test_first_update_and_fifty_steps_follow_fairseq(name, dictionary, batches):
    ref = load(HERE / name / "steps.pt")
    record = ref["record"]
    model = build(name, dictionary)
    trainer = _trainer(model, dictionary)
    after_first = convert_state_dict(ref["after_first"], dictionary.pad())
    for step, want_lr in enumerate(record["lr"]):
        assert trainer.get_lr() == pytest.approx(want_lr, rel=1e-9, abs=1e-12), f"lr before update {step + 1}"
        trainer.train_step([batches[step % len(batches)]])
        values = trainer.take_stats()[-1]  # the update's statistics, read from the device
        assert values is not None
        assert values["sample_size"] == record["sample_size"][step]
        ours = values["loss"] / values["sample_size"]
        theirs = record["loss"][step] / record["sample_size"][step]
        assert ours == pytest.approx(theirs, abs=1e-3), f"update {step + 1}: loss per token {ours} vs fairseq {theirs}"
        if step == 0:
            state = model.state_dict()
            for key, want in after_first.items():
                err = float((state[key] - want).abs().max())
                assert err < 1e-5, f"{key} after the first update differs from fairseq's by {err:.2e}"
    first, last = record["loss"][0] / record["sample_size"][0], record["loss"][-1] / record["sample_size"][-1]
    assert last < first - 1.0, "the recorded run must learn something, or this test checks little"


def test_fairseq_initialisation_statistics_match():
    """Our fresh model draws every weight from the same distribution as fairseq's: compare per-tensor
    standard deviations and bounds with fairseq's recorded initial weights (a 300-symbol vocabulary,
    d=32, so each matrix has ≥ 1,024 draws)."""
    d = Dictionary.load(str(HERE / "dict.txt"))
    theirs = convert_state_dict(load(HERE / "postnorm_shared" / "init.pt"), d.pad())
    cfg = TransformerConfig(encoder_layers=2, decoder_layers=2, embed_dim=32, ffn_embed_dim=64, attention_heads=4,
                            share_all_embeddings=True, sinusoid_layout="fairseq")
    torch.manual_seed(5)
    ours = TransformerModel.build_model(cfg, d, d).state_dict()
    assert set(ours) == set(theirs)
    for key, want in theirs.items():
        got = ours[key]
        if want.numel() < 32:
            continue
        std_t, std_o = float(want.float().std()), float(got.float().std())
        if std_t == 0.0:
            assert std_o == 0.0, key
            continue
        assert abs(std_o / std_t - 1) < 0.25, f"{key}: std {std_o:.4f} vs fairseq {std_t:.4f}"
        assert abs(float(got.abs().max()) / float(want.abs().max()) - 1) < 0.35, key

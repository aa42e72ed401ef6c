"""--compile and --pad-to-multiple (training/compile.py): padding leaves loss and gradients unchanged, bucketing
bounds the shapes an epoch brings, and the compiled graphs stop growing after the first batches.

The graph count here uses dynamo's ``aot_eager`` backend behind the same counter (it traces forward and
backward as inductor would, without generating code); inductor itself is tested against the eager step in
tests/test_compile_inductor.py.
"""
import math

import pytest
import torch

from nmt_toolkit import registry
from nmt_toolkit.criterions import label_smoothed_cross_entropy as ls
from nmt_toolkit.models.summary import build_for_dry_run
from nmt_toolkit.models.transformer import TransformerConfig
from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask
from nmt_toolkit.training.compile import (compile_for_training, pad_to_multiple, resolve_compile,
                                          resolve_pad_multiple)
from tests.train_helpers import make_bin


@pytest.fixture(scope="module")
def epoch_batches(tmp_path_factory):
    """One epoch of nmt-train's batches of the tests' tiny data (300 pairs, --max-tokens 200)."""
    data = make_bin(tmp_path_factory.mktemp("tinyc"))
    task = TranslationTask.setup_task(TranslationConfig(data=data, max_tokens=200))
    task.load_dataset("train")
    itr = task.get_batch_iterator(split="train", seed=3, num_shards=1, shard_id=0, epoch=1)
    return list(itr.next_epoch_itr()), len(task.target_dictionary)


def _model(vocab, positions="sinusoidal", max_positions=1024):
    registry.import_builtin_components()
    cfg = TransformerConfig(encoder_layers=1, decoder_layers=1, embed_dim=16, ffn_embed_dim=32, attention_heads=2,
                            dropout=0.0, positional_embeddings=positions, max_positions=max_positions)
    torch.manual_seed(0)
    return build_for_dry_run("transformer", cfg, vocab, device="cpu")


def _loss_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    model.train()
    crit = ls.LabelSmoothedCrossEntropyCriterion(ls.LabelSmoothedCrossEntropyConfig(0.1), padding_idx=1)
    loss, sample_size, log = crit(model, batch)
    loss.backward()
    return float(loss.detach()), float(log["nll_loss"]), sample_size, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_padding_to_a_multiple_leaves_loss_and_gradients_unchanged(epoch_batches):
    batches, vocab = epoch_batches
    model = _model(vocab)
    checked = 0
    for batch in batches[:6]:
        padded = pad_to_multiple(batch, 8, 1, 1)
        if padded["target"].shape == batch["target"].shape and \
                padded["net_input"]["src_tokens"].shape == batch["net_input"]["src_tokens"].shape:
            continue
        checked += 1
        loss, nll, size, grads = _loss_and_grads(model, batch)
        p_loss, p_nll, p_size, p_grads = _loss_and_grads(model, padded)
        assert p_size == size and padded["ntokens"] == batch["ntokens"]
        assert p_loss == pytest.approx(loss, rel=1e-6) and p_nll == pytest.approx(nll, rel=1e-6)
        for name, g in grads.items():  # summed gradients: float rounding, relative to the tensor's scale
            assert float((p_grads[name] - g).abs().max()) <= 1e-5 * float(g.abs().max()), name
    assert checked >= 3


def test_padding_stops_at_the_learned_positional_table():
    batch = {"nsentences": 2, "ntokens": 5,
             "net_input": {"src_tokens": torch.tensor([[5, 6, 2], [5, 2, 1]]), "src_lengths": torch.tensor([3, 2]),
                           "prev_output_tokens": torch.tensor([[2, 7, 8, 9, 10, 11, 12, 13, 14]] * 2)},
             "target": torch.tensor([[7, 8, 9, 10, 11, 12, 13, 14, 2]] * 2)}
    out = pad_to_multiple(batch, 8, 1, 0, max_positions=(1024, 10))
    assert out["net_input"]["src_tokens"].tolist() == [[5, 6, 2, 1, 1, 1, 1, 1], [5, 2, 1, 1, 1, 1, 1, 1]]
    assert out["target"].shape == (2, 10) and out["target"][:, 9].tolist() == [0, 0]  # 9 → 10, not 16
    assert out["net_input"]["src_lengths"] is batch["net_input"]["src_lengths"] and out["ntokens"] == 5
    assert batch["target"].shape == (2, 9)  # the input batch is left as it was
    assert pad_to_multiple({}, 8, 1, 1) == {} and pad_to_multiple(batch, 1, 1, 1) is batch


def test_bucketing_bounds_the_shapes_of_an_epoch(epoch_batches):
    batches, _ = epoch_batches
    lengths = {(b["net_input"]["src_tokens"].size(1), b["target"].size(1)) for b in batches}
    padded = {(b["net_input"]["src_tokens"].size(1), b["target"].size(1))
              for b in (pad_to_multiple(b, 8, 1, 1) for b in batches)}
    longest_src = max(s for s, _ in lengths)
    longest_tgt = max(t for _, t in lengths)
    assert all(s % 8 == 0 and t % 8 == 0 for s, t in padded)
    assert len(padded) <= math.ceil(longest_src / 8) * math.ceil(longest_tgt / 8)
    assert len(padded) < len(lengths) / 2, (len(padded), len(lengths))


@pytest.mark.slow
def test_graphs_stop_growing_after_the_first_batches(epoch_batches):
    batches, vocab = epoch_batches
    model = _model(vocab)
    compiled, counter = compile_for_training(model, backend="aot_eager")
    crit = ls.LabelSmoothedCrossEntropyCriterion(ls.LabelSmoothedCrossEntropyConfig(0.1), padding_idx=1)
    shapes, graphs = set(), []
    compiled.train()
    for batch in batches:  # unpadded: the most shapes
        shapes.add(tuple(batch["target"].shape) + (batch["net_input"]["src_tokens"].size(1),))
        loss, _, _ = crit(compiled, batch)
        loss.backward()
        graphs.append(counter.graphs)
    assert len(batches) >= 12 and len(shapes) >= 10, len(shapes)  # many shapes came
    assert graphs[-1] <= 3, graphs  # a static graph, one with dynamic sizes, at most a size-1 specialisation
    assert graphs.index(graphs[-1]) < 5, graphs  # and no new graph after the first few batches
    assert set(model.state_dict()) == {k.replace("_orig_mod.", "") for k in compiled.state_dict()}


def test_compile_and_padding_defaults():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_compile("auto", cuda) and not resolve_compile("auto", cpu)
    assert resolve_compile("on", cpu) and not resolve_compile("off", cuda)
    assert resolve_pad_multiple(None, True, cuda) == 8 and resolve_pad_multiple(None, False, cuda) == 1
    assert resolve_pad_multiple(None, True, cpu) == 1 and resolve_pad_multiple(4, False, cpu) == 4

"""The training step without host reads: no sync inside an update, non-finite updates skipped on
the device, and the skipped-update rules applied when the host reads the statistics.

On the CPU a host sync cannot be seen directly, so every way Python reads a tensor's value is made to raise
while ``train_step`` runs: ``Tensor.item/tolist/numpy/__bool__/__float__/__int__/__index__``, and at the
dispatcher ``aten._local_scalar_dense`` / ``aten.is_nonzero`` (what C++ code reading a value goes through).
On CUDA, ``torch.cuda.set_sync_debug_mode("error")`` checks the same step for real.
"""
import contextlib
import copy
import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nmt_toolkit import registry
from nmt_toolkit.cli.train import run as train
from nmt_toolkit.criterions import label_smoothed_cross_entropy as ls
from nmt_toolkit.data.batching import EpochBatchIterator, batch_by_size
from nmt_toolkit.errors import NmtError
from nmt_toolkit.models.summary import build_for_dry_run
from nmt_toolkit.models.transformer import TransformerConfig
from nmt_toolkit.optim.lr_schedulers import InverseSqrtConfig, InverseSqrtSchedule
from nmt_toolkit.optim.optimizers import AdamConfig, build_adam
from nmt_toolkit.training.trainer import Trainer
from tests.train_helpers import random_pairs, TINY, make_bin

_READS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")


class _RefuseScalarReads(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default):
            raise AssertionError(f"host read inside an update: {func}")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def no_host_reads():
    def refuse(name):
        def read(self, *a, **k):
            raise AssertionError(f"host read inside an update: Tensor.{name}")
        return read

    with pytest.MonkeyPatch.context() as mp:
        for name in _READS:
            mp.setattr(torch.Tensor, name, refuse(name))
        with _RefuseScalarReads():
            yield


def _batches(n_pairs=120, seed=0):
    ds = random_pairs(n_pairs, seed, max_len=12)
    d = ds.src_dict
    order = ds.ordered_indices(seed=1)
    itr = EpochBatchIterator(ds, batch_by_size(order, ds.num_tokens_vec(), max_tokens=120), seed=3)
    return list(itr.next_epoch_itr()), len(d)


def _trainer(vocab, adam_impl="auto", **kw):
    registry.import_builtin_components()
    cfg = TransformerConfig(encoder_layers=1, decoder_layers=1, embed_dim=16, ffn_embed_dim=32, attention_heads=2)
    torch.manual_seed(0)
    model = build_for_dry_run("transformer", cfg, vocab, device="cpu")
    crit = ls.LabelSmoothedCrossEntropyCriterion(ls.LabelSmoothedCrossEntropyConfig(0.1), padding_idx=1)
    opt = build_adam(AdamConfig(adam_impl=adam_impl), model.parameters(), 1e-3)
    sched = InverseSqrtSchedule(InverseSqrtConfig(warmup_updates=4), opt, 1e-3)
    trainer = Trainer(model, crit, opt, sched, torch.device("cpu"), **kw)
    trainer.set_num_updates(0)
    return trainer


@pytest.mark.parametrize("kw, update_freq", [({}, 1), ({"clip_norm": 0.1, "precision": "bf16"}, 2),
                                             ({"clip_norm": 1.0, "precision": "fp16"}, 1)])
def test_train_step_reads_nothing_from_the_device(kw, update_freq):
    batches, vocab = _batches()
    trainer = _trainer(vocab, **kw)
    assert trainer.skips_on_device  # fused Adam: the skip decision stays on the device
    for step in range(3):
        with no_host_reads():
            trainer.train_step(batches[step * update_freq:(step + 1) * update_freq])
    stats = trainer.take_stats()  # the loop's read, outside the update
    assert len(stats) == 3 and all(s is not None for s in stats)
    want = [sum(b["ntokens"] for b in batches[i * update_freq:(i + 1) * update_freq]) for i in range(3)]
    assert [s["ntokens"] for s in stats] == want == [s["sample_size"] for s in stats]
    assert trainer.num_updates == 3


def test_the_guard_catches_a_read():
    """The guard is not blind: the reads the old trainer did each update raise under it."""
    x = torch.ones(3)
    for read in (lambda: x.sum().tolist(), lambda: float(x.sum()), lambda: bool(x.any()),
                 lambda: torch.ops.aten._local_scalar_dense(x[0])):
        with no_host_reads(), pytest.raises(AssertionError, match="host read"):
            read()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_train_step_does_not_synchronise_on_cuda():
    batches, vocab = _batches()
    trainer = _trainer(vocab, precision="bf16", clip_norm=1.0)
    trainer.model.cuda()
    trainer.device = torch.device("cuda")
    trainer.optimizer = build_adam(AdamConfig(), trainer.model.parameters(), 1e-3)
    trainer.lr_scheduler = InverseSqrtSchedule(InverseSqrtConfig(warmup_updates=4), trainer.optimizer, 1e-3)
    from nmt_toolkit.training.prefetch import pin
    batches = [pin(b) for b in batches[:4]]
    trainer.train_step([batches[0]])  # the first step allocates (cuBLAS, optimizer state)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for b in batches[1:]:
            trainer.train_step([b])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(s is not None for s in trainer.take_stats())


def _poisoned(trainer, calls):
    """The criterion's loss becomes NaN on the micro-batch calls listed (0-based)."""
    inner, seen = trainer.criterion, [0]

    def criterion(model, sample):
        loss, n, log = inner(model, sample)
        seen[0] += 1
        return (loss * float("nan"), n, log) if seen[0] - 1 in calls else (loss, n, log)

    trainer.criterion = criterion


def _adam_state(trainer):
    return {i: {k: v.clone() for k, v in s.items()} for i, s in enumerate(trainer.optimizer.state.values())}


@pytest.mark.parametrize("adam_impl", ["fused", "foreach"])
def test_a_nan_update_leaves_weights_and_adam_state_exactly_as_they_were(adam_impl):
    batches, vocab = _batches()
    trainer = _trainer(vocab, adam_impl=adam_impl)
    assert trainer.skips_on_device == (adam_impl == "fused")  # foreach Adam: the host-read slow path
    _poisoned(trainer, calls={1})
    trainer.train_step([batches[0]])  # a clean update: Adam has moments and a step count
    weights = copy.deepcopy(trainer.model.state_dict())
    state = _adam_state(trainer)
    trainer.train_step([batches[1]])  # NaN loss, NaN gradients
    assert all(torch.equal(weights[k], v) for k, v in trainer.model.state_dict().items())
    after = _adam_state(trainer)
    assert after.keys() == state.keys()
    for i in state:
        for k in state[i]:
            assert torch.equal(state[i][k], after[i][k]), (i, k)
    assert float(next(iter(after.values()))["step"]) == 1.0  # the step count was not advanced
    # the skipped update counts: update 2, and the schedule moved to its LR (warmup: 1e-3 * 2/4)
    assert trainer.num_updates == 2 and trainer.get_lr() == pytest.approx(1e-3 * 2 / 4)
    stats = trainer.take_stats()
    assert stats[0] is not None and stats[1] is None and trainer.skipped_in_a_row == 1
    trainer.train_step([batches[2]])  # clean again: Adam goes on from where it was
    assert float(next(iter(trainer.optimizer.state.values()))["step"]) == 2.0
    assert trainer.take_stats()[0] is not None and trainer.skipped_in_a_row == 0


def test_max_skipped_updates_is_checked_when_the_host_reads():
    batches, vocab = _batches()
    trainer = _trainer(vocab, max_skipped_updates=3)
    _poisoned(trainer, calls={0, 1, 2, 3, 4})
    for b in batches[:5]:
        trainer.train_step([b])  # nothing is read, nothing raises
    assert trainer.num_updates == 5
    with pytest.raises(NmtError, match=r"^3 non-finite updates in a row \(--max-skipped-updates 3\)"):
        trainer.take_stats()


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_bin(tmp_path_factory.mktemp("tinys"))


def _inner_lines(err):
    return [json.loads(line) for line in err.splitlines()
            if line.startswith("{") and json.loads(line)["tag"] == "train_inner"]


def _nan_on(monkeypatch, calls):
    orig, seen = ls.LabelSmoothedCrossEntropyCriterion.__call__, [0]

    def call(self, model, sample):
        loss, n, log = orig(self, model, sample)
        seen[0] += model.training
        return (loss * float("nan"), n, log) if model.training and seen[0] in calls else (loss, n, log)

    monkeypatch.setattr(ls.LabelSmoothedCrossEntropyCriterion, "__call__", call)
    return seen


def test_nmt_train_raises_at_the_log_interval(tiny_bin, tmp_path, monkeypatch, capfd):
    seen = _nan_on(monkeypatch, calls=set(range(1, 100)))
    args = [tiny_bin, *TINY, "--disable-validation", "--max-update", "20", "--save-dir", str(tmp_path)]
    rc = train([*args, "--max-skipped-updates", "3", "--log-interval", "5"])
    err = capfd.readouterr().err
    assert rc == 1 and "3 non-finite updates in a row (--max-skipped-updates 3)" in err
    assert seen[0] == 5  # the rule was checked when the host read the statistics, after update 5
    assert "at update 3: update skipped (3 in a row)" in err


def test_a_skipped_update_is_logged_and_counted(tiny_bin, tmp_path, monkeypatch, capfd):
    args = [tiny_bin, *TINY, "--disable-validation", "--max-update", "4", "--no-save"]
    assert train([*args, "--save-dir", str(tmp_path / "a")]) == 0
    every = _inner_lines(capfd.readouterr().err)  # --log-interval 1, nothing skipped
    _nan_on(monkeypatch, calls={2})
    assert train([*args, "--log-interval", "2", "--save-dir", str(tmp_path / "b")]) == 0
    err = capfd.readouterr().err
    lines = _inner_lines(err)
    assert [r["num_updates"] for r in lines] == [2, 4]  # update 2 was skipped and still counted
    assert lines[0]["train_inner_skipped"] == 1 and "train_inner_skipped" not in lines[1]
    assert lines[0]["train_inner_loss"] == every[0]["train_inner_loss"]  # the interval averages update 1 only
    assert "done training: reached --max-update 4; 4 updates" in err

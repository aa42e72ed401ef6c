"""fp16 dynamic loss scaling in the Trainer (torch.amp.GradScaler), on the CPU.

nmt-train allows --fp16 on CUDA only; the Trainer's scaler path is device-independent, so it is tested here
on the CPU with a one-layer model whose updates are worked out by hand: a skipped update leaves the weights
alone, halves the scale and still counts as an update (torch.amp's rule), ``--fp16-scale-window``
clean updates double it, a scale below ``--min-loss-scale`` stops with an error when the host reads the
updates' statistics (``take_stats``), and the scaler's state survives a checkpoint round trip.
"""
import pytest
import torch

from nmt_toolkit.errors import NmtError
from nmt_toolkit import checkpoints as C
from nmt_toolkit.training.trainer import Trainer

X = torch.tensor([[1.0, 2.0, -1.0, 0.5], [0.0, 1.0, 3.0, -2.0]])  # two "tokens"; sum over rows [1, 3, 2, -1.5]
LR = 0.125


class _LinearLoss:
    """loss = k * sum(model(x)): its gradient with respect to the weight is k * (column sums of x)."""

    def __call__(self, model, sample):
        y = model(sample["x"])
        loss = (y.float() * sample["k"]).sum()
        n = float(sample["x"].shape[0])
        return loss, n, {"loss": loss.detach(), "nll_loss": loss.detach(), "sample_size": n, "ntokens": n,
                         "nsentences": n}


class _NoSchedule:
    def step_update(self, n):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def _trainer(init_scale=1024.0, window=2, min_scale=1e-4):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.5, -0.25, 0.125, 1.0]]))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    return Trainer(model, _LinearLoss(), optimizer, _NoSchedule(), torch.device("cpu"), precision="fp16",
                   fp16_init_scale=init_scale, fp16_scale_window=window, min_loss_scale=min_scale)


def _sample(k):
    return {"x": X.clone(), "k": torch.tensor(k)}


def _expected_weight(w, k):
    """One SGD step by hand: gradient k * column sums of X, divided by the sample size (2 tokens)."""
    grad = [k * sum(row[j] for row in X.tolist()) / 2.0 for j in range(4)]
    return [wj - LR * gj for wj, gj in zip(w, grad)]


def _step(t, k):
    """One update; its statistics as the training loop reads them (None: skipped)."""
    t.train_step([_sample(k)])
    (values,) = t.take_stats()
    return values


def test_overflow_skips_the_update_and_halves_the_scale():
    t = _trainer(init_scale=1024.0)
    before = t.model.weight.detach().clone()
    # the layer's backward runs in fp16: k * scale * 3 = 3e7 > fp16's 65504, so its weight gradient is inf
    assert _step(t, 1e4) is None
    assert torch.equal(t.model.weight, before)
    assert t.num_updates == 1  # a skipped update still counts (and moves the LR schedule)
    assert t.loss_scale() == 512.0
    assert all(p.grad is None for p in t.model.parameters())  # nothing carried into the next update
    values = _step(t, 1.0)
    assert values is not None and t.num_updates == 2
    want = _expected_weight(before[0].tolist(), 1.0)
    assert t.model.weight[0].tolist() == pytest.approx(want, rel=1e-3)  # fp16 forward: ~3 significant digits
    assert values["loss_scale"] == 512.0
    # the logged sums: loss = k * sum(W x) over the two tokens = W . (1, 3, 2, -1.5) = 0.5 - 0.75 + 0.25 - 1.5
    assert values["loss"] == pytest.approx(-1.5, rel=1e-3) and values["sample_size"] == 2.0


def test_scale_doubles_after_a_window_of_clean_updates():
    t = _trainer(init_scale=8.0, window=2)
    scales = []
    for _ in range(5):
        assert _step(t, 1.0) is not None
        scales.append(t.loss_scale())
    assert scales == [8.0, 16.0, 16.0, 32.0, 32.0]


def test_scale_below_min_loss_scale_stops_with_an_error():
    t = _trainer(init_scale=1.0, min_scale=0.75)
    t.train_step([_sample(float("inf"))])  # no read of the device inside the update: no error yet
    assert t.num_updates == 1
    with pytest.raises(NmtError, match=r"fp16 loss scale fell to 0.5 \(below --min-loss-scale 0.75\)"):
        t.take_stats()  # what the training loop calls at --log-interval


def test_scaler_state_survives_a_checkpoint(tmp_path):
    a = _trainer(init_scale=1024.0, window=3)
    for k in (1e4, 1.0, 1.0):  # an overflow, then 2 of the 3 clean updates before the scale doubles
        _step(a, k)
    assert (a.loss_scale(), a.scaler.state_dict()["_growth_tracker"]) == (512.0, 2)
    C.save_checkpoint({**a.state_dict(), "config": {}, "version": 1}, str(tmp_path / "c.pt"))
    b = _trainer(init_scale=128.0, window=3)  # another --fp16-init-scale: the checkpoint's scaler wins
    b.load_state_dict(C.load_checkpoint(str(tmp_path / "c.pt")))  # weights_only=True
    assert b.scaler.state_dict() == a.scaler.state_dict()
    scales = []
    for k in (1.0, 1.0, 1e4, 1.0):
        ra, rb = _step(a, k), _step(b, k)
        assert (ra is None) == (rb is None)
        assert a.loss_scale() == b.loss_scale()
        scales.append(b.loss_scale())
    assert scales == [1024.0, 1024.0, 512.0, 512.0]  # the third clean update doubled it at once
    assert torch.equal(a.model.weight, b.model.weight)

"""Criteria against formulas written out independently (with padding)."""
import math

import torch

from nmt_toolkit.criterions import derived_metrics
from nmt_toolkit.criterions.cross_entropy import CrossEntropyCriterion
from nmt_toolkit.criterions.label_smoothed_cross_entropy import (LabelSmoothedCrossEntropyConfig,
                                                                 LabelSmoothedCrossEntropyCriterion)

PAD = 1


class _Logits(torch.nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, src_tokens, src_lengths, prev_output_tokens):
        return self.logits


def _sample(B=3, T=5, V=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g)
    target = torch.randint(4, V, (B, T), generator=g)
    target[0, 3:] = PAD
    target[2, 1:] = PAD
    ntokens = int(target.ne(PAD).sum())
    sample = {"net_input": {"src_tokens": None, "src_lengths": None, "prev_output_tokens": None},
              "target": target, "ntokens": ntokens, "nsentences": B, "id": torch.arange(B)}
    return _Logits(logits), sample, logits, target


def _direct(logits, target, eps):
    """Cross-entropy against q(y)=1-eps, q(v!=y)=eps/(V-1), summed over non-pad positions, by loops."""
    V = logits.size(-1)
    total = nll_total = 0.0
    for b in range(target.size(0)):
        for t in range(target.size(1)):
            y = int(target[b, t])
            if y == PAD:
                continue
            logp = torch.log_softmax(logits[b, t].double(), -1)
            q = torch.full((V,), eps / (V - 1), dtype=torch.float64)
            q[y] = 1 - eps
            total += float(-(q * logp).sum())
            nll_total += float(-logp[y])
    return total, nll_total


def label_smoothed_nll_loss(lprobs, target, epsilon: float, ignore_index: int | None = None):
    """Summed (loss, nll_loss) of ``lprobs`` [N, V] against ``target`` [N]: fairseq's own formula (a gather and a
    sum over the log-probabilities, eps/(V-1) on each wrong class), with autograd's gradient, the reference
    the fused and the compiled forms are checked against."""
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


def test_label_smoothing_equals_direct_formula_with_padding():
    model, sample, logits, target = _sample()
    crit = LabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyConfig(label_smoothing=0.1), padding_idx=PAD)
    loss, sample_size, log = crit(model, sample)
    want, want_nll = _direct(logits, target, 0.1)
    assert sample_size == sample["ntokens"]
    assert abs(float(loss) - want) < 1e-4 * max(1, abs(want))
    assert abs(float(log["nll_loss"]) - want_nll) < 1e-4 * max(1, abs(want_nll))


def test_zero_smoothing_is_cross_entropy_and_padding_ignored():
    model, sample, logits, target = _sample(seed=1)
    ls = LabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyConfig(label_smoothing=0.0), padding_idx=PAD)
    ce = CrossEntropyCriterion(padding_idx=PAD)
    a, _, _ = ls(model, sample)
    b, _, _ = ce(model, sample)
    _, want = _direct(logits, target, 0.0)
    assert abs(float(a) - want) < 1e-4 and abs(float(b) - want) < 1e-4
    # changing logits at padded positions changes nothing
    logits2 = logits.clone()
    logits2[2, 1:] += 100.0
    c, _, _ = ce(_Logits(logits2), sample)
    assert abs(float(c) - float(b)) < 1e-5


def test_metrics_are_base_2_and_ppl():
    agg = {"loss": 10 * math.log(2) * 3.0, "nll_loss": 10 * math.log(2) * 2.0, "ntokens": 10, "sample_size": 10}
    m = derived_metrics(agg)
    assert abs(m["loss"] - 3.0) < 1e-9 and abs(m["nll_loss"] - 2.0) < 1e-9 and abs(m["ppl"] - 4.0) < 1e-9


def test_fused_gradient_equals_autograd_reference():
    from nmt_toolkit.criterions.label_smoothed_cross_entropy import fused_label_smoothed_nll_loss

    _, _, logits, target = _sample(B=4, T=6, V=13, seed=2)
    a = logits.reshape(-1, 13).clone().double().requires_grad_()
    b = a.detach().clone().requires_grad_()
    la, na = fused_label_smoothed_nll_loss(a, target.reshape(-1), 0.1, PAD)
    lb, nb = label_smoothed_nll_loss(torch.log_softmax(b, -1), target.reshape(-1), 0.1, PAD)
    (2.5 * la).backward()
    (2.5 * lb).backward()
    assert torch.allclose(la, lb) and torch.allclose(na, nb)
    assert torch.allclose(a.grad, b.grad, atol=1e-10)
    assert a.grad.view(4, 6, 13)[2, 1:].abs().max() == 0  # padding rows get no gradient


def test_the_form_for_the_compiler_equals_the_gather_and_sum_reference():
    """label_smoothed_loss_for_compiler (log-sum-exp and row sums, the target picked by comparison) gives the
    loss, nll and gradient of fairseq's gather/sum formula on log_softmax, in float64 to rounding and, on bf16
    logits, a bf16 gradient within bf16's precision of the float32 one."""
    from nmt_toolkit.criterions.label_smoothed_cross_entropy import label_smoothed_loss_for_compiler

    _, _, logits, target = _sample(B=4, T=6, V=13, seed=3)
    for eps in (0.1, 0.0):
        a = logits.reshape(-1, 13).clone().double().requires_grad_()
        b = a.detach().clone().requires_grad_()
        la, na = label_smoothed_loss_for_compiler(a, target.reshape(-1), eps, PAD)
        lb, nb = label_smoothed_nll_loss(torch.log_softmax(b, -1), target.reshape(-1), eps, PAD)
        (2.5 * la).backward()
        (2.5 * lb).backward()
        assert torch.allclose(la, lb, rtol=1e-12) and torch.allclose(na, nb, rtol=1e-12) and not na.requires_grad
        assert torch.allclose(a.grad, b.grad, atol=1e-12)
        assert a.grad.view(4, 6, 13)[2, 1:].abs().max() == 0  # padding rows get no gradient
    half = (logits.reshape(-1, 13) * 3).to(torch.bfloat16).requires_grad_()
    full = half.detach().float().requires_grad_()
    label_smoothed_loss_for_compiler(half, target.reshape(-1), 0.1, PAD)[0].backward()
    label_smoothed_nll_loss(torch.log_softmax(full, -1), target.reshape(-1), 0.1, PAD)[0].backward()
    assert half.grad.dtype == torch.bfloat16
    assert torch.allclose(half.grad.float(), full.grad, atol=4e-3)


def test_half_precision_logits_are_converted_a_chunk_of_rows_at_a_time(monkeypatch):
    """bf16 logits reach float32 in chunks of rows (no second [N, V] float32 tensor at the loss's peak); the
    log-probabilities, loss and gradient are those of the whole conversion, bit for bit."""
    from nmt_toolkit.criterions import label_smoothed_cross_entropy as L

    torch.manual_seed(0)
    logits = (torch.randn(37, 50) * 3).to(torch.bfloat16)
    target = torch.randint(4, 50, (37,))
    target[:5] = 1
    whole = torch.log_softmax(logits.float(), dim=-1)
    monkeypatch.setattr(L, "_CHUNK_ELEMENTS", 50 * 8)  # 8 rows at a time: 5 chunks, the last one short
    assert torch.equal(L._log_softmax_fp32(logits), whole)
    got = [logits.clone().requires_grad_() for _ in range(2)]
    loss, nll = L.fused_label_smoothed_nll_loss(got[0], target, 0.1, 1)
    want_loss, want_nll = label_smoothed_nll_loss(torch.log_softmax(got[1].float(), dim=-1), target, 0.1, 1)
    assert torch.allclose(loss, want_loss, rtol=1e-6) and torch.allclose(nll, want_nll, rtol=1e-6)
    loss.backward()
    want_loss.backward()
    assert got[0].grad.dtype == torch.bfloat16
    assert torch.allclose(got[0].grad.float(), got[1].grad.float(), atol=1e-2)


def test_the_loss_on_bf16_logits_holds_one_float32_copy_at_its_peak(monkeypatch):
    """Count the bytes of the tensors the loss makes, alive at once, over its forward and backward (every
    op's outputs, freed when their storage dies): the float32 log-probabilities (4 bytes per logit) and the
    bf16 gradient (2), not a second float32 [N, V] tensor beside them (which made 8)."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from nmt_toolkit.criterions import label_smoothed_cross_entropy as L
    from nmt_toolkit.criterions.label_smoothed_cross_entropy import fused_label_smoothed_nll_loss

    class Alive(TorchDispatchMode):
        def __init__(self, known):
            super().__init__()
            self.bytes, self.peak, self.seen = 0, 0, set(known)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if torch.is_tensor(t) and t.untyped_storage().data_ptr() not in self.seen:
                    storage = t.untyped_storage()
                    self.seen.add(storage.data_ptr())
                    self.bytes += storage.nbytes()
                    self.peak = max(self.peak, self.bytes)
                    weakref.finalize(storage, self.free, storage.data_ptr(), storage.nbytes())
            return out

        def free(self, key, n):
            self.bytes -= n
            self.seen.discard(key)

    n, v = 512, 4000
    monkeypatch.setattr(L, "_CHUNK_ELEMENTS", 32 * v)  # as 16M elements are to a real batch's [N, V]
    logits = (torch.randn(n, v) * 3).to(torch.bfloat16).requires_grad_()
    target = torch.randint(4, v, (n,))
    with Alive({logits.untyped_storage().data_ptr()}) as alive:
        loss, _ = fused_label_smoothed_nll_loss(logits, target, 0.1, 1)
        loss.backward()
    assert 6.0 <= alive.peak / (n * v) < 6.2

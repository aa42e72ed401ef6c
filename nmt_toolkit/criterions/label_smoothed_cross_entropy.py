"""Label-smoothed cross-entropy (section 5.4 of the paper, ε_ls = 0.1), with fairseq's formula.

For a target y and vocabulary size V, with ε spread over the V-1 wrong classes (fairseq ≥ 0.10)::

    eps_i = ε / (V - 1)
    loss  = (1 - ε - eps_i) · nll + eps_i · Σ_v (-log p_v)

which is the cross-entropy against the distribution q(y) = 1 - ε, q(v≠y) = ε / (V - 1).
Padding positions contribute nothing. The training path (:class:`_FusedLabelSmoothedNLL`) never builds
the gather/sum backward graph: backward writes the gradient ``softmax(z) - q`` straight into one buffer
(exp of the saved log-probabilities), a few passes over [N, V] instead of a dozen. Under ``--compile`` the
criterion uses :func:`label_smoothed_loss_for_compiler` instead, which the compiler fuses further.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt_toolkit.config import check_ranges, option
from nmt_toolkit.registry import register_criterion
from nmt_toolkit.criterions.cross_entropy import finish


@dataclass
class LabelSmoothedCrossEntropyConfig:
    label_smoothing: float = option(0.1, "ε_ls: probability mass spread over the wrong classes (0 = plain CE)",
                                    low=0, high=1, high_open=True)
    sentence_avg: bool = option(False, "normalise the loss per sentence instead of per target token")


#: rows of half-precision logits turned into float32 at a time (about 64 MB per chunk at V = 32k)
_CHUNK_ELEMENTS = 16 * 2 ** 20


def _log_softmax_fp32(logits: torch.Tensor) -> torch.Tensor:
    """float32 log-probabilities of logits ``[N, V]``.

    Half-precision logits (bf16/fp16 autocast) are converted a chunk of rows at a time into the one float32
    output: converting them whole would hold a second ``[N, V]`` float32 tensor next to the output at the
    loss's peak (for transformer_big at 16k target tokens and V = 32k, 2 GB). Rows are independent, so the
    values are the same as the whole conversion's, bit for bit."""
    if logits.dtype in (torch.float32, torch.float64):
        return torch.log_softmax(logits, dim=-1)
    out = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    rows = max(1, _CHUNK_ELEMENTS // max(1, logits.size(-1)))
    for start in range(0, logits.size(0), rows):
        out[start:start + rows] = torch.log_softmax(logits[start:start + rows].float(), dim=-1)
    return out


class _FusedLabelSmoothedNLL(torch.autograd.Function):
    """Summed label-smoothed loss of logits [N, V] (any float dtype, computed in fp32) and its gradient.

    With eps_i = ε/(V-1) and p = softmax(z):  d loss/dz = softmax(z) - eps_i
    - (1 - ε - eps_i)·onehot(y)  (the coefficients of softmax sum to 1), zero on padding rows.
    """

    @staticmethod
    def forward(ctx, logits, target, epsilon: float, ignore_index: int):
        lprobs = _log_softmax_fp32(logits)
        V = lprobs.size(-1)
        keep = target.ne(ignore_index)
        nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        smooth = -lprobs.sum(-1)
        eps_i = epsilon / (V - 1)
        nll = nll.masked_fill(~keep, 0.0)
        smooth = smooth.masked_fill(~keep, 0.0)
        loss = (1.0 - epsilon - eps_i) * nll.sum() + eps_i * smooth.sum()
        ctx.save_for_backward(lprobs, target, keep)
        ctx.coef = (eps_i, 1.0 - epsilon - eps_i)
        ctx.dtype = logits.dtype
        nll_sum = nll.sum()
        ctx.mark_non_differentiable(nll_sum)  # logged only
        ctx.set_materialize_grads(False)
        return loss, nll_sum

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        lprobs, target, keep = ctx.saved_tensors
        eps_i, on_target = ctx.coef
        rows = keep.to(lprobs.dtype)
        grad = lprobs.exp_()  # p = softmax(z), in the saved buffer (backward runs once)
        if eps_i:
            grad.sub_(eps_i)
        grad.scatter_add_(-1, target.unsqueeze(-1), rows.new_full((rows.size(0), 1), -on_target))
        grad.mul_((rows * grad_loss).unsqueeze(-1))
        return grad.to(ctx.dtype), None, None, None


def fused_label_smoothed_nll_loss(logits, target, epsilon: float, ignore_index: int):
    """Summed (loss, nll_loss) of raw logits [N, V] vs target [N]; equal to fairseq's ``label_smoothed_nll_loss``
    (a gather and a sum over log_softmax) on their fp32 log-softmax, with a leaner backward."""
    return _FusedLabelSmoothedNLL.apply(logits, target, epsilon, ignore_index)


def label_smoothed_loss_for_compiler(logits, target, epsilon: float, ignore_index: int):
    """Summed (loss, nll_loss) of raw logits [N, V] vs target [N], the same function as
    :func:`fused_label_smoothed_nll_loss`, written in plain operations for torch.compile.

    Per row it needs only the log-sum-exp ``L``, the sum of the logits and the target's logit:
    ``nll = L - z_y`` and ``Σ_v -log p_v = V·L - Σ_v z_v``. The compiler fuses these into one reduction over
    the half-precision logits and the backward (``softmax(z) - eps_i - (1 - ε - eps_i)·onehot(y)``) into one
    element-wise pass writing the gradient in the logits' dtype: no float32 [N, V] tensor is stored, where
    the eager path keeps the float32 log-probabilities and makes six passes over them. The target's logit is
    selected by comparison rather than ``gather``, whose backward would scatter into a zero [N, V] buffer."""
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    vocab = z.size(-1)
    lse = torch.logsumexp(z, dim=-1)
    is_target = torch.arange(vocab, device=z.device) == target.unsqueeze(-1)
    z_target = torch.where(is_target, z, 0.0).sum(-1)
    keep = target.ne(ignore_index)
    nll = torch.where(keep, lse - z_target, 0.0).sum()
    smooth = torch.where(keep, vocab * lse - z.sum(-1), 0.0).sum()
    eps_i = epsilon / (vocab - 1)
    return (1.0 - epsilon - eps_i) * nll + eps_i * smooth, nll.detach()


@register_criterion("label_smoothed_cross_entropy", LabelSmoothedCrossEntropyConfig)
class LabelSmoothedCrossEntropyCriterion:
    def __init__(self, cfg: LabelSmoothedCrossEntropyConfig | None = None, task=None,
                 padding_idx: int | None = None):
        self.cfg = cfg or LabelSmoothedCrossEntropyConfig()
        check_ranges(self.cfg)  # a config built in code: the range its flag has
        if padding_idx is None:
            padding_idx = task.target_dictionary.pad() if task is not None else 1
        self.padding_idx = padding_idx
        self.loss_from_logits = fused_label_smoothed_nll_loss

    #: the loss in plain operations, for ``training.compile.compile_criterion`` to compile
    loss_for_compiler = staticmethod(label_smoothed_loss_for_compiler)

    def __call__(self, model, sample):
        logits = model(**sample["net_input"])
        loss, nll_loss = self.loss_from_logits(logits.view(-1, logits.size(-1)), sample["target"].reshape(-1),
                                               self.cfg.label_smoothing, self.padding_idx)
        return finish(loss, nll_loss, sample, self.cfg.sentence_avg)

"""CPU decoding back end: the linear layers of a model about to decode, through oneDNN with weights packed once;
a feed-forward block's ReLU applied inside its first product; the attention of a beam step written out.

Why. torch's ``F.linear`` on the CPU calls MKL's sgemm. A beam step multiplies a few hundred rows (fewer as
sentences finish) by the same weights again and again, and for such products oneDNN, given the weight
already reordered into its blocked layout, is faster: 1.1 to 1.8 times ``F.linear``'s rate on a beam step's
products, the most on the output projection (docs/benchmarks.md, "Notes"). The results agree with
``F.linear`` to float32 rounding (both are IEEE fp32 products, summed in another order).

When. :func:`optimize_for_cpu` is applied by nmt-generate and nmt-interactive to the models they load, once,
before decoding, when they decode on the CPU (``--cpu-packed-linear``, on by default; ``--no-cpu-packed-linear``
keeps torch's own kernels): it swaps every plain :class:`torch.nn.Linear` for a :class:`PackedLinear` (the
same parameters under the same names, so ``state_dict`` does not change), the first layer of a ReLU
feed-forward block for a :class:`PackedLinearReLU` (the block's own ReLU becomes the identity: one pass over
the [rows, d_ff] activations fewer), the decoder's output projection for a packed product, and every
attention's ``attention_kernel`` for :func:`explicit_attention`. It first checks that torch's private ops
exist *and* give ``F.linear``'s result (and with ReLU, ``F.relu`` of it) on a probe; otherwise it leaves the
model as it is. A packed layer takes the packed path only under
``torch.inference_mode()``, for float32 CPU tensors and products big enough to gain (:func:`_worth_packing`);
anything else (training, gradients, other dtypes or devices) is ``F.linear``. The model itself knows nothing of
this module.

Cost. Memory: one packed copy per weight (as much again as the weights, kept while the weight lives),
and oneDNN keeps a compiled primitive per row count it has seen (a bounded cache, 0.4-2 MB each): about
200 MB more at the peak of a 1,000-sentence decode (docs/benchmarks.md). Packing takes milliseconds and is
redone when the weight changes (its version counter moves on every in-place update). The layout is chosen
for a row count, and one packing serves all batch sizes: the row count it is chosen for made no measurable
difference at any row count.
"""
from __future__ import annotations

import functools
import logging
import threading
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

logger = logging.getLogger("nmt_toolkit.generation.cpu")

_PACK_FOR_ROWS = 64  # the row count oneDNN chooses the layout for (16..1024 measured alike)
_LARGE_WEIGHT = 1 << 17  # weight elements (in x out) from which a few rows already gain
_MIN_MULTIPLY_ADDS = 3 << 18  # rows x in x out below which MKL's lower call overhead wins
_MANY_ROWS = 256  # rows from which even a small weight gains
_packed: WeakIdKeyDictionary = WeakIdKeyDictionary()  # weight -> (its version key, packed copy)
_lock = threading.Lock()  # decode workers share one model: pack each weight once


def _pack(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_FOR_ROWS)


def _packed_product(x, packed, bias, post_op: str = "none"):
    """``x @ W^T + b`` with the weight packed; ``post_op="relu"`` applies ReLU as the result is written."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, post_op, [], "")


@functools.lru_cache(maxsize=1)
def packing_works() -> bool:
    """Whether torch's private oneDNN ops exist here and give ``F.linear``'s result (to float32 rounding) on
    a probe; checked once per process. They are private: a torch release may drop or change them."""
    try:
        if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
            return False
        gen = torch.Generator().manual_seed(0)
        x, w, b = (torch.randn(shape, generator=gen) for shape in ((64, 96), (80, 96), (80,)))
        with torch.inference_mode():
            got = _packed_product(x, _pack(w), b)
            got_relu = _packed_product(x, _pack(w), b, "relu")
        want = F.linear(x, w, b)
        return (got.shape == got_relu.shape == (64, 80) and torch.allclose(got, want, rtol=1e-4, atol=1e-4)
                and torch.allclose(got_relu, F.relu(want), rtol=1e-4, atol=1e-4))
    except (AttributeError, RuntimeError, TypeError):
        return False


def _worth_packing(rows: int, weight_elements: int) -> bool:
    """oneDNN pays ~15-30 µs per call where MKL pays ~5-15 µs: the packed product wins only from about
    0.8 M multiply-adds on a weight of at least 128 K elements (256 x 768 from 4 rows, 256 x 8008 from
    one), or for a smaller weight from 256 rows (measured on 1 and 2 threads; below that MKL is up to 3x
    faster, which is what a one-sentence ``nmt-interactive`` step of a tiny model would feel)."""
    if weight_elements >= _LARGE_WEIGHT:
        return rows * weight_elements >= _MIN_MULTIPLY_ADDS
    return rows >= _MANY_ROWS


def usable(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> bool:
    """Whether ``x @ weight.T (+ bias)`` takes the packed path (the conditions in the module docstring)."""
    return (torch.is_inference_mode_enabled() and torch.backends.mkldnn.enabled
            and x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32
            and weight.device.type == "cpu" and weight.dim() == 2 and x.dim() >= 2
            and (bias is None or bias.dtype == torch.float32)
            and _worth_packing(x.numel() // max(1, x.size(-1)), weight.numel()))


def _version_key(weight: torch.Tensor) -> tuple:
    version = 0 if weight.is_inference() else weight._version  # inference tensors keep no counter
    return weight.data_ptr(), version, tuple(weight.shape)


def _packed_weight(weight: torch.Tensor) -> torch.Tensor:
    key = _version_key(weight)
    cached = _packed.get(weight)
    if cached is not None and cached[0] == key:
        return cached[1]
    with _lock:
        cached = _packed.get(weight)
        if cached is None or cached[0] != key:
            cached = (key, _pack(weight))
            _packed[weight] = cached
    return cached[1]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
           relu: bool = False) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` (``relu``: followed by ReLU), packed where :func:`usable`; there the ReLU
    is applied in the same call, a pass over the [rows, d_ff] activations fewer."""
    if usable(x, weight, bias):
        return _packed_product(x, _packed_weight(weight), bias, "relu" if relu else "none")
    out = F.linear(x, weight, bias)
    return F.relu(out) if relu else out


class PackedLinear(nn.Linear):
    """An :class:`torch.nn.Linear` (the same ``weight`` and ``bias`` parameters) whose product is
    :func:`linear`."""

    @classmethod
    def of(cls, layer: nn.Linear) -> "PackedLinear":
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = layer.in_features, layer.out_features
        new.weight, new.bias = layer.weight, layer.bias
        new.train(layer.training)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


class PackedLinearReLU(PackedLinear):
    """A :class:`PackedLinear` followed by ReLU (:func:`linear` with ``relu``): it takes the place of a
    feed-forward block's first layer whose ReLU :func:`optimize_for_cpu` removed from the block."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, relu=True)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


_ONE_QUERY_MIN_SCORES = 1 << 12  # one query per row (a self-attention step): scores from which writing out wins
_MAX_QUERIES = 64  # queries per row up to which writing out wins at any size (a beam block, a short encoder)


def _explicit_wins(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Where eq. 1 written out beat SDPA's CPU kernel (docs/benchmarks.md, notes): one query per row from
    about 4,096 scores (below, the two are level or SDPA's single call is cheaper); 2 to 64 queries per row
    at every size (a beam's block of queries on its sentence's keys: 2-4x faster); not for long query
    sequences, where SDPA's blocked kernel avoids materialising the scores."""
    queries = q.size(-2)
    if queries == 1:
        return q.numel() // q.size(-1) * k.size(-2) >= _ONE_QUERY_MIN_SCORES
    return queries <= _MAX_QUERIES


def explicit_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """Eq. 1 written out, ``softmax(q k^T * scale, masked) v``, with SDPA's signature, for decoding on the CPU.

    Why. SDPA's CPU kernel (flash-style, blocked over queries) is tuned for long query sequences; a beam
    step has one query per row (the encoder–decoder attention a block of ``beam`` per sentence), and there
    two batched matrix products and a softmax are faster. Used under ``torch.inference_mode()`` for float32
    CPU tensors without dropout or ``is_causal``, where :func:`_explicit_wins`; anything else goes to SDPA.
    Results agree with SDPA to float32 rounding."""
    if (dropout_p or is_causal or not torch.is_inference_mode_enabled() or q.device.type != "cpu"
            or q.dtype != torch.float32 or not _explicit_wins(q, k)):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                              scale=scale)
    scale = scale if scale is not None else q.size(-1) ** -0.5
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(scale)
    if attn_mask is not None:
        scores.masked_fill_(~attn_mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class _PackedProjection:
    """The decoder's output projection ``x @ W^T (+ b)`` through :func:`linear` (a plain callable, not a module,
    so that the model's ``state_dict`` keeps its names)."""

    def __init__(self, decoder: nn.Module):
        self.decoder = decoder

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.decoder.output_weight(), getattr(self.decoder, "output_bias", None))


def optimize_for_cpu(model: nn.Module) -> bool:
    """Swap, in place and once before decoding, the plain linear layers of ``model`` for :class:`PackedLinear`,
    every decoder's output projection (a module with ``project`` and ``output_weight``) for a packed
    product, and every attention's kernel (``attention_kernel``) for :func:`explicit_attention`. Returns
    False, leaving the model unchanged, where :func:`packing_works` does not hold."""
    if not packing_works():
        logger.info("packed oneDNN linear layers unavailable or not matching F.linear here: torch's kernels")
        return False
    swapped = 0
    for module in list(model.modules()):
        if hasattr(module, "attention_kernel"):  # modules/attention.py's hook for a back end
            module.attention_kernel = explicit_attention
        fc1 = getattr(module, "fc1", None)  # modules/layers.py's FeedForward: fc2(dropout(activation(fc1(x))))
        if (type(fc1) is nn.Linear and getattr(module, "activation", None) in (F.relu, torch.relu)
                and not fc1._forward_hooks and not fc1._forward_pre_hooks):
            module.fc1, module.activation = PackedLinearReLU.of(fc1), _identity
            swapped += 1
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear and not child._forward_hooks and not child._forward_pre_hooks:
                setattr(module, name, PackedLinear.of(child))
                swapped += 1
        if callable(getattr(module, "output_weight", None)) and callable(getattr(module, "project", None)):
            module.project = _PackedProjection(module)
            swapped += 1
    logger.debug("packed oneDNN products for %d linear maps", swapped)
    return swapped > 0


def flop_formulas() -> dict:
    """``FlopCounterMode(custom_mapping=flop_formulas())`` counts the packed products as torch counts ``mm``
    (2 FLOPs per multiply-add), which it does not do by itself."""
    if not packing_works():
        return {}

    def linear_flops(x_shape, w_shape, *args, **kwargs) -> int:
        rows = 1
        for size in x_shape[:-1]:
            rows *= size
        return 2 * rows * x_shape[-1] * w_shape[0]

    return {torch.ops.mkldnn._linear_pointwise: linear_flops}  # FlopCounterMode keys by op packet

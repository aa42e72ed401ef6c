"""Linear layers at inference on the CPU: oneDNN's inner product with every weight packed once.

Why. torch's ``F.linear`` on the CPU calls MKL's sgemm. A beam step multiplies a few hundred rows (fewer as
sentences finish) by the same weights again and again, and for such products oneDNN, given the weight
already reordered into its blocked layout, is much faster: measured on the 2-core AMD EPYC (Zen 4,
AVX-512) machine, one thread, GFLOP/s of ``F.linear`` → packed oneDNN:

======================  =====================  ==========================================
rows × in → out          F.linear               packed
======================  =====================  ==========================================
256 × 256 → 8008         68–79                  97–102   (the output projection of a step)
128 × 256 → 8008         59–62                  94–98
32 × 256 → 8008          49                     89
256 × 256 → 768          97–99                  106–111
256 × 1024 → 256         96–98                  105–107
1088 × 256 → 1024        89                     101–105  (a scoring pass)
======================  =====================  ==========================================

and with two threads 109 → 202 GFLOP/s for the 256-row output projection. The results agree with
``F.linear`` to float32 rounding (both are IEEE fp32 products, summed in another order).

When. Only under ``torch.inference_mode()`` (nmt-generate, nmt-interactive, ``score_reference``), for
float32 CPU tensors, a plain :class:`torch.nn.Linear` (or a bare weight) without hooks, for products big
enough to gain (:func:`_worth_packing`), and while ``torch.backends.mkldnn`` is available and enabled
(``torch.backends.mkldnn.flags(enabled=False)``, or ``NMT_TOOLKIT_PACKED_LINEAR=0`` in the environment,
turns this off). Everything else, training included, calls the module as before.

Cost. Memory: one packed copy per weight (as much again as the weights, kept while the weight lives),
and oneDNN keeps a compiled primitive per row count it has seen (a bounded cache, 0.4-2 MB each): the
1,000-sentence benchmark of the small model peaked at 858 MB against 664 MB without packing, the
base-shaped one at 1,294 against 1,088 MB. Packing takes milliseconds and is redone when the weight changes
(its version counter moves on every in-place update). The layout is chosen for a row count; any hint from
16 to 1024 measured the same at every row count from 4 to 1088, so one packing serves all batch sizes.
"""
from __future__ import annotations

import os
import threading
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

_PACK_FOR_ROWS = 64  # the row count oneDNN chooses the layout for (16..1024 measured alike)
_LARGE_WEIGHT = 1 << 17  # weight elements (in x out) from which a few rows already gain
_MIN_MULTIPLY_ADDS = 3 << 18  # rows x in x out below which MKL's lower call overhead wins
_MANY_ROWS = 256  # rows from which even a small weight gains
_packed: WeakIdKeyDictionary = WeakIdKeyDictionary()  # weight -> (its version key, packed copy)
_lock = threading.Lock()  # decode workers share one model: pack each weight once


def _ops_available() -> bool:
    try:
        torch.ops.mkldnn._linear_pointwise.default
        torch.ops.mkldnn._reorder_linear_weight.default
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkldnn.is_available()


_AVAILABLE = _ops_available() and os.environ.get("NMT_TOOLKIT_PACKED_LINEAR", "1") != "0"


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
    return (_AVAILABLE and torch.backends.mkldnn.enabled and torch.is_inference_mode_enabled()
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
            cached = (key, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_FOR_ROWS))
            _packed[weight] = cached
    return cached[1]


def product(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
            relu: bool = False) -> torch.Tensor:
    """The packed product itself, for a caller that has checked :func:`usable`."""
    return torch.ops.mkldnn._linear_pointwise(x, _packed_weight(weight), bias, "relu" if relu else "none", [], "")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
           relu: bool = False) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` (then ReLU, fused, when ``relu``), packed where :func:`usable`."""
    if usable(x, weight, bias):
        return product(x, weight, bias, relu)
    y = F.linear(x, weight, bias)
    return y.relu_() if relu else y


def flop_formulas() -> dict:
    """``FlopCounterMode(custom_mapping=flop_formulas())`` counts the packed products as torch counts ``mm``
    (2 FLOPs per multiply-add), which it does not do by itself."""
    if not _AVAILABLE:
        return {}

    def linear_flops(x_shape, w_shape, *args, **kwargs) -> int:
        rows = 1
        for size in x_shape[:-1]:
            rows *= size
        return 2 * rows * x_shape[-1] * w_shape[0]

    return {torch.ops.mkldnn._linear_pointwise: linear_flops}  # FlopCounterMode keys by op packet


def apply(layer: nn.Module, x: torch.Tensor, relu: bool = False) -> torch.Tensor:
    """``layer(x)`` (then ReLU) for a linear sub-module: packed for a plain hook-free ``nn.Linear`` at
    inference, the module's own call otherwise (a plugin's replacement layer, registered hooks, training)."""
    if type(layer) is nn.Linear and not layer._forward_hooks and not layer._forward_pre_hooks \
            and usable(x, layer.weight, layer.bias):
        return product(x, layer.weight, layer.bias, relu)
    y = layer(x)
    return y.relu_() if relu else y

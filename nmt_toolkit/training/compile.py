"""``--compile``: torch.compile of the model for the training forward and backward, and shapes bucketed for it.

Applied once, from outside the model: :func:`compile_for_training` returns a compiled wrapper that the
trainer calls for the training forward; validation, decoding and checkpoints keep the plain module (its
``state_dict`` has no ``_orig_mod.`` prefixes). Under DDP the trainer wraps the *compiled* module in
DistributedDataParallel, as torch's documentation recommends ("apply torch.compile to the inner module
passed to the wrapper"): dynamo's DDP optimizer then splits the graph at gradient-bucket boundaries so the
all-reduce of one bucket overlaps the backward of the next.

Shapes: token batches have a new (batch size, source length, target length) almost every step. Left to
itself, dynamo recompiles once when a size changes and then treats that dimension as dynamic (torch's
default ``dynamic=None``), so the number of graphs settles after the first few shapes; a batch of one
sentence is specialised once more. :func:`pad_to_multiple` pads source and target lengths to a multiple of
``--pad-to-multiple`` N with pad tokens (default 8 on CUDA when compiling: tensor-core friendly widths, and
N times fewer length values for kernels and autotuning caches to see); padding changes no loss and no
gradient (padded target positions are ignored by the criterion, padded source positions masked).

Graph count: the backend is inductor behind a counter (:class:`CountingBackend`): dynamo hands a backend
one FX graph per compiled region — a new specialisation, the piece after a graph break, or a DDP bucket
split — so its calls are the number of graphs compiled. This uses only the public custom-backend contract
(``backend(gm, example_inputs) -> callable``); the inner backend is looked up by name in dynamo's registry.
"""
from __future__ import annotations

from typing import Optional

import torch


class CountingBackend:
    """A torch.compile backend that counts the graphs it compiles and hands them to ``inner``."""

    def __init__(self, inner: str = "inductor"):
        from torch._dynamo.backends.registry import lookup_backend

        self.inner_name = inner
        self.inner = lookup_backend(inner)
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs += 1
        return self.inner(gm, example_inputs)


def compile_for_training(model: torch.nn.Module, backend: str = "inductor") -> tuple[torch.nn.Module, CountingBackend]:
    """``(compiled, counter)``: ``torch.compile(model)`` (a wrapper module sharing the model's parameters; the
    model itself is left as it was) and the counter of the graphs it compiles."""
    counter = CountingBackend(backend)
    return torch.compile(model, backend=counter), counter


def compile_criterion(criterion, backend) -> None:
    """Compile the loss of a criterion that offers one written for the compiler (``loss_for_compiler``, plain
    operations with the signature of its ``loss_from_logits``); others are left as they are.

    The loss over the vocabulary is memory-bound: compiled, its reduction and its backward each become one
    pass over the [N, V] logits. It is a region of its own, after the model's, so the model's graph and its
    compilation cache are the same with and without it."""
    form = getattr(criterion, "loss_for_compiler", None)
    if form is not None:
        criterion.loss_from_logits = torch.compile(form, backend=backend)


def resolve_compile(choice: str, device: torch.device) -> bool:
    """``--compile auto|on|off``: auto compiles on CUDA and not on the CPU (where compilation costs minutes of
    a small machine for a modest gain)."""
    if choice == "on":
        return True
    if choice == "off":
        return False
    return device.type == "cuda"


def resolve_pad_multiple(value: Optional[int], compiling: bool, device: torch.device) -> int:
    """``--pad-to-multiple``: as given, else 8 when compiling on CUDA and 1 (no padding) otherwise."""
    if value is not None:
        return max(1, int(value))
    return 8 if compiling and device.type == "cuda" else 1


def _widen(tokens: torch.Tensor, width: int, pad: int) -> torch.Tensor:
    if tokens.size(1) >= width:
        return tokens
    extra = tokens.new_full((tokens.size(0), width - tokens.size(1)), pad)
    return torch.cat([tokens, extra], dim=1)


def _round_up(n: int, multiple: int, limit: Optional[int]) -> int:
    width = -(-n // multiple) * multiple
    return max(n, min(width, limit)) if limit else width


def pad_to_multiple(batch: dict, multiple: int, src_pad: int, tgt_pad: int,
                    max_positions: tuple[Optional[int], Optional[int]] = (None, None)) -> dict:
    """``batch`` (the collater's dict) with source and target lengths padded up to a multiple of ``multiple``,
    never beyond the model's ``max_positions`` (a learned positional table has no rows past them).

    ``src_tokens`` gets ``src_pad`` columns; ``prev_output_tokens`` and ``target`` get ``tgt_pad`` ones (the
    criterion ignores them). Lengths, ``ntokens`` and ``nsentences`` are unchanged. An empty batch (a rank's
    filler) is returned as it is."""
    if multiple <= 1 or not batch:
        return batch
    net = dict(batch["net_input"])
    src = net["src_tokens"]
    net["src_tokens"] = _widen(src, _round_up(src.size(1), multiple, max_positions[0]), src_pad)
    out = dict(batch)
    if batch.get("target") is not None:
        width = _round_up(batch["target"].size(1), multiple, max_positions[1])
        out["target"] = _widen(batch["target"], width, tgt_pad)
        if "prev_output_tokens" in net:
            net["prev_output_tokens"] = _widen(net["prev_output_tokens"], width, tgt_pad)
    out["net_input"] = net
    return out

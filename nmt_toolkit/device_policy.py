"""Which kernels and copies pay on which device: decided here, applied by the trainer and the search.

The model and its modules (``models/``, ``modules/``) are plain PyTorch and never ask what device they run
on; where a device needs another kernel or another way of copying, the code that drives the model (the
trainer, the beam search) applies the choice made here.
"""
from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def sdpa_backends(device: torch.device):
    """A context in which :func:`~torch.nn.functional.scaled_dot_product_attention` may use every CUDA
    kernel but cuDNN's (flash, memory-efficient, math); nothing changes on other devices.

    Why. Where torch prefers cuDNN's attention (half precision on Hopper GPUs), cuDNN builds an execution
    plan for every new shape, and token-based batches bring a new (batch, length) shape almost every step:
    half-precision training ran about ten times slower with cuDNN's attention allowed (docs/benchmarks.md,
    "Notes"). The trainer's forward passes and the generator run inside this context; it saves and restores
    torch's global switches, so code around it is unaffected."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def reorder_in_place(device: torch.device) -> bool:
    """Whether a decoder-cache reorder should copy only the rows that change, in place
    (``DecoderState.reorder_in_place``), and the beam search keep each hypothesis in its parent's row where it
    can. On the CPU most rows stay put from one step to the next, so copying the few that move is cheaper than
    a gather of every row. Elsewhere finding those rows costs a host synchronisation per step, and a gather of
    every row costs little."""
    return device.type == "cpu"

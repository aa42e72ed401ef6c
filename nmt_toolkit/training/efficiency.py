"""Model FLOP utilisation (MFU): achieved model FLOP/s over the device's dense matrix peak for the dtype.

The peak comes from ``--peak-tflops`` when given, else from a table of known GPUs (NVIDIA's published dense
figures, no sparsity), else from a timed 8192³ product in the training dtype on that GPU. On the CPU there
is no meaningful peak (vector units, turbo, shared cores), so the log shows GFLOP/s only and no ``mfu``:
a ratio above 1, which a small timed product made possible, reads as a bug.
"""
from __future__ import annotations

import time
from typing import Optional

import torch

#: dense TFLOP/s by (name substring, compute dtype): bf16/fp16 with fp32 accumulation, tf32, fp32
PEAK_TFLOPS = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 66.9},
    "H100 SXM": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 66.9},
    "H100 NVL": {"bf16": 835.0, "fp16": 835.0, "tf32": 417.5, "fp32": 60.0},
    "H100 PCIe": {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2},
    "H100": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 66.9},  # an unqualified name: SXM
    "A100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "L40S": {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6},
    "V100": {"fp16": 125.0, "fp32": 15.7},
}


def compute_dtype(precision: Optional[str]) -> str:
    """The matrix dtype a training step runs in: bf16, fp16, tf32 (float32 with TF32 matmuls) or fp32."""
    if precision in ("bf16", "fp16"):
        return precision
    return "tf32" if tf32_matmuls() else "fp32"


def tf32_matmuls() -> bool:
    """Whether float32 products run on TF32 tensor cores (torch's switches)."""
    return bool(torch.backends.cuda.matmul.allow_tf32) or torch.get_float32_matmul_precision() != "highest"


def table_peak_tflops(device_name: str, dtype: str) -> Optional[float]:
    for key, peaks in PEAK_TFLOPS.items():  # most specific names first
        if key in device_name:
            return peaks.get(dtype)
    return None


def measured_peak_tflops(device: torch.device, dtype: str, n: int = 8192, repeats: int = 10) -> float:
    """A timed ``n³`` product in ``dtype`` on a CUDA device (what a large GEMM reaches there)."""
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    a = torch.randn(n, n, device=device, dtype=torch_dtype)
    b = torch.randn(n, n, device=device, dtype=torch_dtype)
    torch.mm(a, b)
    torch.cuda.synchronize(device)
    t = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    torch.cuda.synchronize(device)
    return 2 * n ** 3 * repeats / (time.perf_counter() - t) / 1e12


def peak_tflops(device: torch.device, precision: Optional[str], override: Optional[float] = None) -> Optional[float]:
    """The dense peak to divide by, or None where MFU is not reported (the CPU)."""
    if override:
        return float(override)
    if device.type != "cuda":
        return None
    dtype = compute_dtype(precision)
    return table_peak_tflops(torch.cuda.get_device_name(device), dtype) or measured_peak_tflops(device, dtype)


def mfu(achieved_gflops: float, peak: Optional[float], world_size: int = 1) -> Optional[float]:
    """Achieved ÷ peak over all ranks, at most 1 (a higher value means the peak given was too low)."""
    if not peak:
        return None
    return min(achieved_gflops / (peak * 1e3 * world_size), 1.0)

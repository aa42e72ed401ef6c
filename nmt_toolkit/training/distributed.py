"""Data-parallel training: torchrun's environment or ``--distributed-world-size N`` local processes.

NCCL on CUDA, gloo on CPU. Rank 0 alone writes checkpoints and logs. A failing rank never leaves the
others hanging: process-group init and collectives have a timeout, the local spawner terminates every
process as soon as one exits with an error, and torchrun's agent does the same for its workers.
"""
from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
import torch.distributed as dist

from nmt_toolkit.errors import NmtError, UsageError


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_master(self) -> bool:
        return self.rank == 0


def env_info() -> Optional[DistInfo]:
    """The rank layout torchrun (or our spawner) put in the environment, else None."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        return DistInfo(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                        int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def choose_backend(backend: str, device: torch.device) -> str:
    if backend != "auto":
        return backend
    return "nccl" if device.type == "cuda" else "gloo"


def check_local_gpus(processes: int) -> None:
    """Local rank r trains on GPU r. More processes on a machine than GPUs would stop deep inside CUDA with
    "invalid device ordinal"; say what is wrong and what to do instead."""
    count = torch.cuda.device_count()
    if processes > count:
        raise UsageError(f"{processes} training processes on this machine need {processes} GPUs, but torch sees "
                         f"{count}: run at most {count} (--distributed-world-size or torchrun --nproc-per-node), "
                         f"or add --cpu to train on the CPU with gloo")


def init_process_group(info: DistInfo, backend: str, timeout_s: float = 300.0) -> None:
    """Join the process group (MASTER_ADDR/MASTER_PORT from the environment)."""
    if dist.is_initialized():
        return
    try:
        dist.init_process_group(backend=backend, rank=info.rank, world_size=info.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
    except Exception as exc:
        raise NmtError(f"rank {info.rank}: joining the process group ({backend}, "
                       f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}) failed: {exc}") from exc


def destroy(finished: bool = False) -> None:
    """Leave the process group; ``finished``: this rank's training ended normally, so wait for the others first.

    Two things keep a gloo process from dying at exit ("terminate called without an active exception", seen
    about once in eight two-rank runs on a loaded machine). The barrier: a rank that is done does not tear its
    connections down while rank 0 is still saving. The collection: DDP's reducer holds the process group
    through reference cycles, so without ``gc.collect()`` the C++ group outlives ``destroy_process_group`` and
    is destroyed during interpreter shutdown, when its worker threads can no longer be joined cleanly. A
    failed rank skips the barrier (the others may never reach it)."""
    if dist.is_available() and dist.is_initialized():
        if finished:
            barrier()
        import gc
        gc.collect()
        dist.destroy_process_group()


def bucket_cap_mb(model: torch.nn.Module, buckets: int = 16, low: float = 25.0, high: float = 100.0) -> float:
    """DDP's gradient bucket size for ``model`` (``--bucket-cap-mb 0``): its gradients in about ``buckets``
    pieces, each between ``low`` (torch's default) and ``high`` MB. Buckets are all-reduced while the
    backward pass goes on, so several are needed for overlap, and each should be large enough for NCCL to
    reach its bandwidth: transformer_base with a shared 37k vocabulary (about 240 MiB of float32 gradients)
    gets 25 MB buckets, about ten; transformer_big (about 800 MiB) 50 MB ones."""
    megabytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad) / 2 ** 20
    return float(min(max(megabytes / buckets, low), high))


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """In-place sum over ranks (no-op without a process group)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor


def barrier() -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _worker(local_rank: int, fn: Callable, world_size: int, port: int, args: tuple) -> None:
    os.environ.update({"RANK": str(local_rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world_size),
                       "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    code = fn(*args)
    if code:
        raise SystemExit(code)


def spawn(fn: Callable, world_size: int, args: Sequence = ()) -> int:
    """Run ``fn(*args)`` in ``world_size`` local processes with the torchrun environment set.

    Returns 0 when every rank succeeded; otherwise the surviving ranks are terminated and the first
    failing rank's exit status is returned (its own error message is already on stderr).
    """
    import torch.multiprocessing as mp

    port = free_port()
    try:
        mp.start_processes(_worker, args=(fn, world_size, port, tuple(args)), nprocs=world_size, join=True,
                           start_method="spawn")
    except mp.ProcessExitedException as exc:
        return exc.exit_code if exc.exit_code and exc.exit_code > 0 else 1
    except mp.ProcessRaisedException as exc:
        msg = str(exc).strip().splitlines()
        raise NmtError(f"a training process failed: {msg[-1] if msg else exc}") from None
    return 0

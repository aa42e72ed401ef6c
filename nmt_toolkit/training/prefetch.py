"""Batches collated, padded and pinned ahead of the trainer, on a background thread.

Why: collating a batch (numpy padding, tensors) and copying it to a GPU take host time in which, done in
the training loop, nothing new is queued for the GPU. :class:`Prefetcher` does that work for the next
``depth`` batches on one thread while the trainer runs: each batch is collated, padded to a multiple of
``--pad-to-multiple`` (training/compile.py), and on CUDA copied into pinned (page-locked) memory, from
which ``Trainer``'s ``non_blocking`` copy to the device runs asynchronously (a copy from ordinary memory
makes the host wait for the GPU).

Exact resume: the epoch iterator's position (saved in checkpoints) moves when the trainer *takes* a batch,
not when the thread prepares it (``_Epoch.collate_at`` / ``advance`` in data/batching.py), so a checkpoint
written after k updates resumes at batch k whatever was prefetched. An exception on the thread (a damaged
data file) is raised in the training loop, at the batch where it happened.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Optional

import torch

_END = object()


def pin(sample: Any) -> Any:
    """The same nested batch with every tensor in pinned memory."""
    if torch.is_tensor(sample):
        return sample.pin_memory()
    if isinstance(sample, dict):
        return {k: pin(v) for k, v in sample.items()}
    if isinstance(sample, (list, tuple)):
        return type(sample)(pin(v) for v in sample)
    return sample


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


class Prefetcher:
    """Iterate over an epoch (``data/batching.py``'s ``_Epoch``) with the next ``depth`` batches prepared.

    ``prepare(batch)`` runs on the thread after collation (padding; pinning when ``device`` is CUDA).
    Use as a context manager, or call :meth:`close` when leaving the epoch early, so the thread stops."""

    def __init__(self, epoch, prepare: Optional[Callable[[Any], Any]] = None, device: Optional[torch.device] = None,
                 depth: int = 2):
        self.epoch = epoch
        self.prepare = prepare
        self.device = device
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._work, name="nmt-prefetch", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the thread

    def _work(self) -> None:
        try:
            if self.device is not None and self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            for pos in range(self.epoch.n, len(self.epoch)):
                batch = self.epoch.collate_at(pos)
                if self.prepare is not None:
                    batch = self.prepare(batch)
                if self.device is not None and self.device.type == "cuda" and batch:
                    batch = pin(batch)
                if not self._put(batch):
                    return
            self._put(_END)
        except BaseException as exc:  # handed to the training loop, raised there
            self._put(_Failure(exc))

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    # ------------------------------------------------------------------ the consumer

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is _END:
            self._done = True
            self._thread.join()
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            self.close()
            raise item.exc
        self.epoch.advance()
        return item

    def __len__(self) -> int:
        return len(self.epoch)

    def has_next(self) -> bool:
        return self.epoch.has_next()

    def close(self) -> None:
        """Stop the thread (it may be blocked on a full queue) and wait for it."""
        self._stop.set()
        while True:  # unblock a put that is waiting
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

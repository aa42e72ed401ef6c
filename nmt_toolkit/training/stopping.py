"""Stopping a run cleanly: SIGINT/SIGTERM set a flag, and under DDP every rank stops at the same update.

A signal (preemption) or ``--stop-time-hours`` may reach one rank before another, so the ranks agree: each
update, every rank all-reduces its own wish to stop (a MAX over ``[time is up, signalled]``). Reading that
result at once would stall the host on the device every update; :class:`StopVote` reads it one update
later instead. On CUDA the result is copied into pinned host memory behind a CUDA event, and by the end of
the next update the event has long completed (the host waits only if it ran more than a whole update ahead
of the GPU). Every rank reads the same vote at the same update, so all stop at the same one, one update
after the first rank asked. One process needs no vote: it stops at once.
"""
from __future__ import annotations

import signal
from typing import Optional

import torch

from nmt_toolkit.training import distributed


class StopFlag:
    """SIGINT/SIGTERM set a flag; the loop finishes the current update, saves and exits 0."""

    def __init__(self):
        self.signum: Optional[int] = None
        self._old = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass

    def _handle(self, signum, frame):
        if self.signum is not None and signum == signal.SIGINT:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.signum = signum

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


class StopVote:
    """``vote(time_up, signalled)`` once per update on every rank; returns what any rank voted one update
    earlier (with one process: this update's own wishes)."""

    def __init__(self, device: torch.device, world_size: int):
        self.device = device
        self.world_size = world_size
        self._pending: Optional[tuple] = None  # (host tensor [2], CUDA event or None)

    def vote(self, time_up: bool, signalled: bool) -> tuple[bool, bool]:
        if self.world_size <= 1:
            return time_up, signalled
        wish = torch.zeros(2, device=self.device)  # filled by kernels: no copy from the host
        if time_up:
            wish[0].fill_(1.0)
        if signalled:
            wish[1].fill_(1.0)
        distributed.all_reduce_max(wish)
        if self.device.type == "cuda":
            host = torch.empty(2, pin_memory=True)
            host.copy_(wish, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            current = (host, event)
        else:  # gloo's all-reduce has finished: reading it costs nothing
            current = (wish, None)
        previous, self._pending = self._pending, current
        if previous is None:
            return False, False
        host, event = previous
        if event is not None:
            event.synchronize()
        a, b = host.tolist()
        return a > 0, b > 0

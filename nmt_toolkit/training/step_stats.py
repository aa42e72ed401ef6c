"""An update's statistics kept on the device until the host needs them (no stall inside an update).

Reading a CUDA tensor on the host (``.item()``, ``.tolist()``, ``float()``, ``if tensor:``) waits for every
kernel queued so far: the GPU then runs dry while the host prepares the next update. So the trainer never
reads inside an update. Each update leaves one float64 row on the device — the criterion's sums, all-reduced
over micro-batches and ranks (``sample_size, loss, nll_loss, ntokens, nsentences``), then ``gnorm``,
``clip`` (1 when clipped), ``skipped`` (1 when the optimizer step was skipped on the device) and the loss
scale after the update (fp16; 0 otherwise). :class:`PendingRows` queues the rows; :meth:`PendingRows.drain`
reads all of them in one transfer, which the training loop does once per ``--log-interval`` and where it
needs values anyway (end of epoch, validation, saving, stopping). The host then adds them to its meters one
update at a time, in order, as it did when it read every update: the logged numbers do not change.
"""
from __future__ import annotations

from typing import Sequence

import torch

#: the criterion's logged sums, in row order
STAT_KEYS = ("sample_size", "loss", "nll_loss", "ntokens", "nsentences")
#: what the trainer appends to them
ROW_KEYS = STAT_KEYS + ("gnorm", "clip", "skipped", "loss_scale")


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host tensor on ``device`` without a stall: pinned and copied asynchronously on CUDA (a copy
    from pageable memory waits for the stream)."""
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def summed_stats(logs: Sequence[dict], device: torch.device) -> torch.Tensor:
    """``[len(STAT_KEYS)]`` float64 on ``device``: the logged values of every micro-batch, summed.

    A value is either a number the host knows (token and sentence counts) or a tensor the device computed
    (the loss): numbers are summed on the host and sent in one asynchronous copy, tensors are summed on the
    device; neither is read back.
    """
    host = [0.0] * len(STAT_KEYS)
    on_device: dict[int, list] = {}
    for log in logs:
        for j, key in enumerate(STAT_KEYS):
            value = log.get(key, 0)
            if torch.is_tensor(value):
                on_device.setdefault(j, []).append(value.detach().to(device=device, dtype=torch.float64))
            else:
                host[j] += float(value)
    total = to_device(torch.tensor(host, dtype=torch.float64), device)
    if not on_device:
        return total
    parts = []
    for j in range(len(STAT_KEYS)):
        values = on_device.get(j)
        if values is None:
            parts.append(total[j])
        else:
            summed = values[0] if len(values) == 1 else torch.stack(values).sum()
            parts.append(summed if host[j] == 0.0 else total[j] + summed)
    return torch.stack(parts)


class PendingRows:
    """Rows of updates not yet read by the host, oldest first; ``drain`` reads them all in one transfer.

    Rows are stacked into blocks of ``block`` updates as they come (on the device, no read), so a loop that
    reads rarely (``--log-interval 0``) keeps a few tensors, not one per update.
    """

    def __init__(self, block: int = 256):
        self.block = block
        self.updates: list[int] = []
        self.blocks: list[torch.Tensor] = []
        self.rows: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self.updates)

    def add(self, update: int, row: torch.Tensor) -> None:
        self.updates.append(update)
        self.rows.append(row)
        if len(self.rows) >= self.block:
            self.blocks.append(torch.stack(self.rows))
            self.rows = []

    def drain(self) -> list[tuple[int, dict]]:
        """``[(update number, {ROW_KEYS: float})]`` of every pending update; the one host read."""
        if not self.updates:
            return []
        parts = self.blocks + ([torch.stack(self.rows)] if self.rows else [])
        table = (torch.cat(parts) if len(parts) > 1 else parts[0]).tolist()
        out = [(n, dict(zip(ROW_KEYS, row))) for n, row in zip(self.updates, table)]
        self.updates, self.blocks, self.rows = [], [], []
        return out

"""Several batches decoded at once on the CPU (CTranslate2's "inter_threads").

A beam step is many small operations: on two cores, torch's intra-op threads spend much of a step
waiting for each other (and stall when another process takes a core), while the same cores each running
its own batch on one thread stay busy — torch releases the GIL inside every operation, so the Python of
one batch runs while the other batch computes. Results come back in batch order. Each batch is decoded
exactly as on its own (its own incremental state); only the intra-op thread count differs.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


AUTO_MAX_WORKERS = 4


def auto_workers(num_batches: int, threads: int) -> int:
    """How many batches a CPU decode runs at once when the user does not say: one worker per intra-op
    thread (at most 4), as long as each has a batch. A batch split over several intra-op threads waits at
    every operation for the slowest of them, so when another process takes one of the cores, each of the
    hundreds of operations of a step waits for that thread to be scheduled again; one-thread workers on
    batches of their own never wait for each other (measured in docs/benchmarks.md, "On a shared machine")."""
    return max(1, min(threads, AUTO_MAX_WORKERS, num_batches))


def decode_batches(batches: Iterable[T], translate: Callable[[T], R], workers: int = 1) -> Iterator[tuple[T, R]]:
    """Yield ``(batch, translate(batch))`` in the order of ``batches``.

    With ``workers > 1``, that many batches are in flight on threads of their own, each with
    ``torch.get_num_threads() // workers`` (at least 1) intra-op threads; at most ``workers + 1`` batches
    are taken from ``batches`` ahead of the one being yielded. The thread count is restored afterwards.
    """
    if workers <= 1:
        for batch in batches:
            yield batch, translate(batch)
        return
    from concurrent.futures import ThreadPoolExecutor

    import torch  # here: auto_workers serves the CTranslate2 text route, which loads no torch

    total = torch.get_num_threads()
    per_worker = max(1, total // workers)

    def run(batch):
        torch.set_num_threads(per_worker)  # a thread's own OpenMP setting; cheap when unchanged
        return translate(batch)

    torch.set_num_threads(per_worker)
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="decode") as pool:
            pending: deque = deque()
            for batch in batches:
                pending.append((batch, pool.submit(run, batch)))
                if len(pending) > workers:
                    done, future = pending.popleft()
                    yield done, future.result()
            while pending:
                done, future = pending.popleft()
                yield done, future.result()
    finally:
        torch.set_num_threads(total)

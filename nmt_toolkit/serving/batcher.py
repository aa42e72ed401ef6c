"""Dynamic batching: the sentences of requests that arrive close together are decoded as one batch.

Requests wait in one queue. Each of ``workers`` batcher tasks takes the oldest request, then keeps taking
requests while they fit in ``max_batch_tokens`` source tokens, until ``max_wait`` seconds after the oldest
arrived or after the last batch finished, whichever is later (the clients just answered often send their
next request within that moment). The sentences taken are
grouped by what decodes them (language pair and search options), sorted by length and cut into batches whose
padded size fits the budget; keys that differ only in what a decode adds to its hypotheses (``share``: word
alignments) share batches, decoded under the key of the member that asks the most. Each batch decodes on the
worker's own thread, off the event loop, so the server keeps answering (``/health``) while it works. A
request whose caller went away (disconnected, timed out) is dropped before its sentences decode: it costs
nothing but its place in the queue. A batch already decoding is asked between search steps whether anyone
still wants it (``stop``): once every request of the batch is gone, or the batcher stops, the search ends at
its next step and frees the worker.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Optional, Sequence

from nmt_toolkit.serving.workers import DecodeThreads

#: decode(key, sentences as id arrays, stop) -> one result per sentence, in order; runs on a worker thread and
#: may give up (raise) when ``stop()`` becomes true
Decode = Callable[[Hashable, Sequence[Any], Callable[[], bool]], list]

#: key -> (the batch key it shares, what it asks of that batch's decode, ordered): sentences of one batch key
#: decode together under the key whose second part is greatest
Share = Callable[[Hashable], tuple[Hashable, Any]]

#: seconds :meth:`DynamicBatcher.stop` waits for a decode thread (one search step, or a CTranslate2 call that
#: cannot be interrupted and is then abandoned with the process)
STOP_WAIT = 1.0


@dataclass
class Job:
    """One request's sentences (encoded, non-empty) for one decoder; ``future`` gets their results in order."""

    key: Hashable
    ids: Sequence[Any]
    future: asyncio.Future
    arrived: float
    results: list = field(default_factory=list)
    left: int = 0

    @property
    def tokens(self) -> int:
        return sum(len(x) for x in self.ids)

    @property
    def wanted(self) -> bool:
        return not self.future.done()


class BatchObserver:
    """What the batcher reports (the metrics module implements it); the default ignores everything."""

    def dropped(self, sentences: int) -> None: ...

    def decoding(self, sentences: int) -> None: ...

    def failed(self, sentences: int) -> None: ...

    def stopped(self, sentences: int) -> None:
        """A batch whose search gave up: every request of it was gone (or the batcher stopped)."""

    def decoded(self, sentences: int, source_tokens: int, padded_tokens: int, results: list, seconds: float) -> None:
        ...


class DynamicBatcher:
    """See the module docstring. ``batching=False`` decodes one request at a time, each its own batches."""

    def __init__(self, decode: Decode, *, batching: bool = True, max_batch_tokens: int = 6000,
                 max_wait: float = 0.005, workers: int = 1, thread_setup: Optional[Callable[[], None]] = None,
                 observer: Optional[BatchObserver] = None, share: Optional[Share] = None):
        self.decode, self.batching, self.budget, self.max_wait = decode, batching, max_batch_tokens, max_wait
        self.share = share
        self.workers, self.thread_setup = workers, thread_setup
        self.observer = observer or BatchObserver()
        self._waiting: deque[Job] = deque()
        self._arrival: Optional[asyncio.Event] = None
        self._tasks: list[asyncio.Task] = []
        self._pool: Optional[DecodeThreads] = None
        self._last_done = 0.0  # when the last batch finished decoding (time.monotonic)
        self._closing = False  # read by the decode threads' stop checks

    @property
    def waiting_sentences(self) -> int:
        return sum(len(job.ids) for job in self._waiting if job.wanted)

    async def start(self) -> None:
        self._arrival = asyncio.Event()
        self._closing = False
        self._pool = DecodeThreads(self.workers, self.thread_setup)
        self._tasks = [asyncio.create_task(self._work(), name=f"batcher-{i}") for i in range(self.workers)]

    async def stop(self) -> None:
        """Cancel the batcher tasks (the server has answered every request by now), stop a search still
        running at its next step and free the threads, waiting for them at most :data:`STOP_WAIT` seconds."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.to_thread(pool.shutdown, True, cancel_futures=True, timeout=STOP_WAIT)

    def submit(self, key: Hashable, ids: Sequence[Any]) -> asyncio.Future:
        """Queue one request's sentences; the future resolves to their results in order (cancel it to drop
        the request)."""
        loop = asyncio.get_running_loop()
        job = Job(key, list(ids), loop.create_future(), time.monotonic(), [None] * len(ids), len(ids))
        if not job.ids:
            job.future.set_result([])
            return job.future
        self._waiting.append(job)
        self._arrival.set()
        return job.future

    # ------------------------------------------------------------------ the batcher tasks

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._take()
            for key, batch in plan_batches(jobs, self.budget, self.share):
                live = [(job, i) for job, i in batch if job.wanted]
                self._drop(len(batch) - len(live))
                if not live:
                    continue
                ids = [job.ids[i] for job, i in live]
                started = time.monotonic()
                self.observer.decoding(len(ids))
                stop = self._stop_check([job for job, _ in live])
                try:
                    results = await loop.run_in_executor(self._pool, self.decode, key, ids, stop)
                except Exception as exc:  # a decode that fails fails its requests, not the server
                    if stop():  # it gave up because nobody wants it any more
                        self.observer.stopped(len(ids))
                        continue
                    self.observer.failed(len(ids))
                    for job, _ in live:
                        if job.wanted:
                            job.future.set_exception(exc)
                    continue
                self._last_done = time.monotonic()
                self.observer.decoded(len(ids), sum(len(x) for x in ids), len(ids) * max(len(x) for x in ids),
                                      results, time.monotonic() - started)
                for (job, i), result in zip(live, results):
                    job.results[i] = result
                    job.left -= 1
                    if job.left == 0 and job.wanted:
                        job.future.set_result(job.results)

    def _stop_check(self, jobs: list[Job]) -> Callable[[], bool]:
        """What a decode thread asks between search steps: is nobody waiting for this batch any more?"""
        unique = list({id(job): job for job in jobs}.values())
        return lambda: self._closing or not any(job.wanted for job in unique)

    async def _take(self) -> list[Job]:
        """The next requests to decode: the oldest wanted one, and with batching those that join it in time."""
        first = await self._next_wanted()
        jobs, tokens = [first], first.tokens
        if not self.batching:
            return jobs
        # a closed loop of clients answers a batch with new requests a moment after it ends: wait for those
        # too, or the batches alternate between the requests that waited and those just answered
        deadline = max(first.arrived, self._last_done) + self.max_wait
        while tokens < self.budget:
            while self._waiting and not self._waiting[0].wanted:
                self._drop(len(self._waiting.popleft().ids))
            if self._waiting:
                if tokens + self._waiting[0].tokens > self.budget:
                    break
                job = self._waiting.popleft()
                jobs.append(job)
                tokens += job.tokens
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), remaining)
            except asyncio.TimeoutError:
                break
        return jobs

    async def _next_wanted(self) -> Job:
        while True:
            while not self._waiting:
                self._arrival.clear()
                await self._arrival.wait()
            job = self._waiting.popleft()
            if job.wanted:
                return job
            self._drop(len(job.ids))

    def _drop(self, sentences: int) -> None:
        if sentences:
            self.observer.dropped(sentences)


def plan_batches(jobs: list[Job], budget: int,
                 share: Optional[Share] = None) -> list[tuple[Hashable, list[tuple[Job, int]]]]:
    """The sentences of ``jobs`` as ``(key, [(job, sentence index)])`` batches: grouped by key (by shared key
    with ``share``), longest first, each batch as many sentences as keep ``sentences × longest length`` within
    ``budget`` (at least one); a batch's key is its members' own, or with ``share`` the one that asks most."""
    share = share or (lambda key: (key, 0))
    batches = []
    by_key = itertools.groupby(sorted(((share(job.key)[0], job, i) for job in jobs for i in range(len(job.ids))),
                                      key=lambda t: repr(t[0])), key=lambda t: repr(t[0]))

    def close(batch: list[tuple[Job, int]]) -> None:
        batches.append((max((job.key for job, _ in batch), key=lambda key: share(key)[1]), batch))

    for _, group in by_key:
        items = sorted(group, key=lambda t: -len(t[1].ids[t[2]]))
        current: list[tuple[Job, int]] = []
        for _, job, i in items:
            longest = len(current[0][0].ids[current[0][1]]) if current else len(job.ids[i])
            if current and (len(current) + 1) * longest > budget:
                close(current)
                current = []
            current.append((job, i))
        if current:
            close(current)
    return batches

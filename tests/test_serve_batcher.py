"""The dynamic batcher on its own: which sentences share a batch, in what order results come back, what is
never decoded. The decode function records its batches and answers each sentence with its own ids, so every
result can be checked against the request it belongs to."""
from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")

from nmt_toolkit.serving.batcher import DynamicBatcher  # noqa: E402


def _sentence(request: int, index: int, length: int) -> np.ndarray:
    return np.array([request * 1000 + index] * (length - 1) + [2])


class Recorder:
    def __init__(self):
        self.batches: list[tuple] = []

    def __call__(self, key, ids, stop):
        self.batches.append((key, [len(x) for x in ids]))
        return [int(x[0]) for x in ids]


def _run(batcher: DynamicBatcher, body):
    async def main():
        await batcher.start()
        try:
            return await body()
        finally:
            await batcher.stop()

    return asyncio.run(main())


def test_requests_that_arrive_together_share_a_batch_and_get_their_own_results_in_order():
    decode = Recorder()
    batcher = DynamicBatcher(decode, max_batch_tokens=1000, max_wait=0.05)

    async def body():
        requests = [[_sentence(r, i, 3 + (i * 7 + r) % 5) for i in range(r + 1)] for r in range(4)]
        futures = [batcher.submit("en-de", ids) for ids in requests]
        return await asyncio.gather(*futures)

    results = _run(batcher, body)
    assert results == [[r * 1000 + i for i in range(r + 1)] for r in range(4)]
    assert len(decode.batches) == 1 and len(decode.batches[0][1]) == 10
    assert decode.batches[0][1] == sorted(decode.batches[0][1], reverse=True)  # longest first


def test_the_token_budget_cuts_batches_by_padded_size_and_a_long_sentence_goes_alone():
    decode = Recorder()
    batcher = DynamicBatcher(decode, max_batch_tokens=20, max_wait=0.05)

    async def body():
        return await asyncio.gather(batcher.submit("k", [_sentence(0, i, 5) for i in range(3)]),
                                    batcher.submit("k", [_sentence(1, 0, 30), _sentence(1, 1, 4)]))

    assert _run(batcher, body) == [[0, 1, 2], [1000, 1001]]
    assert all(len(lengths) * max(lengths) <= 20 or len(lengths) == 1 for _, lengths in decode.batches)
    assert ("k", [30]) in decode.batches
    assert sorted(n for _, lengths in decode.batches for n in lengths) == [4, 5, 5, 5, 30]


def test_different_keys_never_share_a_batch():
    decode = Recorder()
    batcher = DynamicBatcher(decode, max_batch_tokens=1000, max_wait=0.05)

    async def body():
        return await asyncio.gather(batcher.submit(("en", "de", ()), [_sentence(0, 0, 4)]),
                                    batcher.submit(("en", "de", (("beam", 2),)), [_sentence(1, 0, 4)]),
                                    batcher.submit(("en", "de", ()), [_sentence(2, 0, 4)]))

    assert _run(batcher, body) == [[0], [1000], [2000]]
    assert sorted((key[2], len(lengths)) for key, lengths in decode.batches) == [((), 2), ((("beam", 2),), 1)]


def test_requests_wanting_alignments_share_a_batch_with_those_that_do_not():
    """The server's share rule: keys differing only in the alignment flag decode as one batch, under the key
    that asks for alignments; other search options still decode apart."""
    from nmt_toolkit.serving.translate import alignment_shared

    decode = Recorder()
    batcher = DynamicBatcher(decode, max_batch_tokens=1000, max_wait=0.05, share=alignment_shared)
    plain, html, beam2 = ((), False, False), ((), False, True), ((("beam", 2),), False, False)

    async def body():
        return await asyncio.gather(batcher.submit(("en", "de", plain), [_sentence(0, 0, 4), _sentence(0, 1, 6)]),
                                    batcher.submit(("en", "de", html), [_sentence(1, 0, 5)]),
                                    batcher.submit(("en", "de", beam2), [_sentence(2, 0, 4)]),
                                    batcher.submit(("en", "fr", html), [_sentence(3, 0, 4)]))

    assert _run(batcher, body) == [[0, 1], [1000], [2000], [3000]]
    assert sorted(decode.batches) == [(("en", "de", plain[:2] + (True,)), [6, 5, 4]), (("en", "de", beam2), [4]),
                                      (("en", "fr", html), [4])]


def test_without_batching_each_request_is_its_own_batch():
    decode = Recorder()
    batcher = DynamicBatcher(decode, batching=False, max_batch_tokens=1000, max_wait=0.05)

    async def body():
        return await asyncio.gather(*(batcher.submit("k", [_sentence(r, 0, 4), _sentence(r, 1, 4)]) for r in range(3)))

    assert _run(batcher, body) == [[0, 1], [1000, 1001], [2000, 2001]]
    assert [len(lengths) for _, lengths in decode.batches] == [2, 2, 2]


def test_a_cancelled_request_is_not_decoded():
    decode = Recorder()
    batcher = DynamicBatcher(decode, max_batch_tokens=1000, max_wait=0.05)

    async def body():
        gone = batcher.submit("k", [_sentence(0, 0, 9), _sentence(0, 1, 9)])
        kept = batcher.submit("k", [_sentence(1, 0, 4)])
        gone.cancel()
        return await kept

    assert _run(batcher, body) == [1000]
    assert decode.batches == [("k", [4])]


def test_a_failing_decode_fails_its_requests_and_the_batcher_goes_on():
    calls = []

    def decode(key, ids, stop):
        calls.append(key)
        if key == "bad":
            raise RuntimeError("out of memory")
        return [0] * len(ids)

    batcher = DynamicBatcher(decode, max_batch_tokens=1000, max_wait=0.0)

    async def body():
        with pytest.raises(RuntimeError, match="out of memory"):
            await batcher.submit("bad", [_sentence(0, 0, 4)])
        return await batcher.submit("good", [_sentence(1, 0, 4)])

    assert _run(batcher, body) == [0]
    assert calls == ["bad", "good"]


def test_a_decode_stops_once_nobody_wants_its_batch_and_the_worker_takes_the_next():
    """The decode asks ``stop()`` between its steps, as the search does: once the batch's only request is
    cancelled (timed out, client gone) it gives up, and the next request is decoded without waiting for it."""
    steps = []

    def decode(key, ids, stop=lambda: False):
        if key == "next":
            return [7] * len(ids)
        for _ in range(2000):  # 20 s if nobody stops it
            if stop():
                raise RuntimeError("stopped")
            steps.append(key)
            time.sleep(0.01)
        return [0] * len(ids)

    observer = Observer()
    batcher = DynamicBatcher(decode, max_batch_tokens=1000, max_wait=0.0, observer=observer)

    async def body():
        slow = batcher.submit("slow", [_sentence(0, 0, 4)])
        for _ in range(1000):
            if "slow" in steps:
                break
            await asyncio.sleep(0.01)
        slow.cancel()
        assert await batcher.submit("next", [_sentence(1, 0, 4)]) == [7]

    _run(batcher, body)
    assert steps.count("slow") < 500, "the cancelled batch decoded on"
    assert observer.calls == [("stopped", 1), ("decoded", 1)]


@pytest.mark.slow
def test_stop_returns_although_a_decode_does_not_listen():
    """A CTranslate2 call cannot be interrupted: stop() waits for it a bounded time and leaves its (daemon)
    thread behind instead of holding the process past the drain limit."""
    from nmt_toolkit.serving import batcher as module

    started = threading.Event()

    def decode(key, ids, stop=None):
        started.set()
        time.sleep(10)
        return [0] * len(ids)

    batcher = DynamicBatcher(decode, max_batch_tokens=1000, max_wait=0.0)

    async def main():
        await batcher.start()
        batcher.submit("k", [_sentence(0, 0, 4)])
        for _ in range(1000):
            if started.is_set():
                break
            await asyncio.sleep(0.01)
        begun = time.monotonic()
        await batcher.stop()
        return time.monotonic() - begun

    assert asyncio.run(main()) < getattr(module, "STOP_WAIT", 1.0) + 2
    busy = [t for t in threading.enumerate() if t.name.startswith("decode")]
    assert busy and all(t.daemon for t in busy)


class Observer:
    def __init__(self):
        self.calls = []

    def dropped(self, sentences):
        self.calls.append(("dropped", sentences))

    def decoding(self, sentences):
        pass

    def failed(self, sentences):
        self.calls.append(("failed", sentences))

    def stopped(self, sentences):
        self.calls.append(("stopped", sentences))

    def decoded(self, *args):
        self.calls.append(("decoded", args[0]))

"""The decode threads of a server: a :class:`concurrent.futures.Executor` whose threads are daemons.

A batch that is still decoding when the server stops must not keep the process alive past its drain limit.
The torch engine's search stops at its next step once told to (the batcher's stop check), but a CTranslate2
call cannot be interrupted, and :class:`~concurrent.futures.ThreadPoolExecutor`'s threads are joined when
the interpreter exits, however long their work takes. These are not: :meth:`DecodeThreads.shutdown` waits for
them at most ``timeout`` seconds, and a thread still busy then is abandoned with the process.
"""
from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from typing import Callable, Optional


class DecodeThreads(concurrent.futures.Executor):
    """``workers`` daemon threads taking calls in submission order; ``initializer`` runs first on each."""

    def __init__(self, workers: int, initializer: Optional[Callable[[], None]] = None, name: str = "decode"):
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._run, args=(initializer,), name=f"{name}-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((future, fn, args, kwargs))
        return future

    def _run(self, initializer: Optional[Callable[[], None]]) -> None:
        if initializer is not None:
            initializer()
        while True:
            call = self._calls.get()
            if call is None:
                return
            future, fn, args, kwargs = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # the caller's future carries it, as ThreadPoolExecutor does
                future.set_exception(exc)
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False, timeout: Optional[float] = None) -> bool:
        """No more calls: queued ones are cancelled (``cancel_futures``) or still run; with ``wait``, the threads
        are waited for, at most ``timeout`` seconds in all. True when every thread has ended."""
        if cancel_futures:
            while True:
                try:
                    call = self._calls.get_nowait()
                except queue.Empty:
                    break
                if call is not None:
                    call[0].cancel()
        for _ in self._threads:
            self._calls.put(None)
        if wait:
            deadline = None if timeout is None else time.monotonic() + timeout
            for thread in self._threads:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

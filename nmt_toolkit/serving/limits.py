"""Requests per minute per client, as LibreTranslate's ``--req-limit``: a token bucket for each client (its API
key when keys are in use, else its IP address), so one busy client is refused with 429 while the others keep
being served. The buckets live in this process (each worker of a multi-process setup counts on its own)."""
from __future__ import annotations

import math
import threading
import time
from typing import Callable, Optional

#: buckets kept before the full ones (clients idle for a minute or more) are forgotten: a bound on memory
#: that never forgets a client still being limited
PRUNE_AT = 10_000


class RateLimiter:
    """``per_minute`` requests a minute for each client, refilled evenly (a burst of ``per_minute`` at once,
    then one every ``60 / per_minute`` seconds); ``0`` is no limit. A client may have its own number (an API
    key's, from the keys file), ``0`` again meaning none."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic):
        self.per_minute, self.clock = per_minute, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens left, when they were counted)
        self._lock = threading.Lock()

    def take(self, client: str, per_minute: Optional[int] = None) -> Optional[float]:
        """Count one request of ``client``: None when it is within its limit, else the seconds until it is
        (its ``Retry-After``). ``per_minute``: the client's own limit instead of the server's."""
        limit = self.per_minute if per_minute is None else per_minute
        if limit <= 0:
            return None
        now, rate = self.clock(), limit / 60.0
        with self._lock:
            tokens, then = self._buckets.get(client, (float(limit), now))
            tokens = min(float(limit), tokens + (now - then) * rate)
            if tokens < 1.0:
                self._buckets[client] = (tokens, now)
                return (1.0 - tokens) / rate
            self._buckets[client] = (tokens - 1.0, now)
            if len(self._buckets) > PRUNE_AT:
                self._prune(now)
        return None

    def _prune(self, now: float) -> None:
        """Forget the buckets untouched for a minute: they have refilled, so their clients start afresh anyway."""
        self._buckets = {c: (t, w) for c, (t, w) in self._buckets.items() if now - w < 60.0}


def retry_after(seconds: float) -> int:
    """Whole seconds for a ``Retry-After`` header, never 0 (a client told 0 would retry at once, too early)."""
    return max(1, math.ceil(seconds))

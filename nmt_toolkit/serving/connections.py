"""Client connections: a cap on how many are open, and a time limit for sending a request.

uvicorn's HTTP/1.1 protocol (h11) waits for a request's head and body as long as the client keeps its
connection open, and accepts every connection: a client that sends a byte a minute ("slowloris"), or opens
thousands of connections, holds memory and file descriptors until the process can accept no more. The
protocol made here closes a connection whose request has not fully arrived ``client_timeout`` seconds after
the server began waiting for it (at connect, or after the previous answer), and closes at once a connection
beyond ``max_connections``. uvicorn's own ``timeout_keep_alive`` still closes idle connections sooner.
"""
from __future__ import annotations

import logging
import time

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("nmt_toolkit.serve")

#: seconds between two warnings about connections refused over the cap (a flood would fill the log)
WARN_EVERY = 10.0


def guarded_protocol(client_timeout: float, max_connections: int) -> type:
    """uvicorn's h11 protocol with the two limits (pass it as ``uvicorn.Config(http=...)``)."""
    warned = [-WARN_EVERY]

    class GuardedH11Protocol(H11Protocol):
        _timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                now = time.monotonic()
                if now - warned[0] >= WARN_EVERY:
                    warned[0] = now
                    logger.warning("a connection over the --max-connections %d open ones was closed (more may "
                                   "follow; this is said once every %g s)", max_connections, WARN_EVERY)
                transport.close()
                return
            self._watch()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch()

        def connection_lost(self, exc) -> None:
            self._cancel()
            super().connection_lost(exc)

        def _waiting(self) -> bool:
            """Whether the server is waiting for the client to send a request's head or the rest of its body."""
            return self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing()

        def _watch(self) -> None:
            if not self._waiting():
                self._cancel()
            elif self._timer is None:  # the deadline runs from when the wait began, whatever arrives since
                self._timer = self.loop.call_later(client_timeout, self._too_slow)

        def _cancel(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _too_slow(self) -> None:
            self._timer = None
            if self._waiting():
                self.transport.close()

    return GuardedH11Protocol

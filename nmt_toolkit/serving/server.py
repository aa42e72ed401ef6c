"""Running the application: bind the port first (a taken port is an error before minutes of loading), then
serve with uvicorn until SIGTERM or Ctrl-C. On SIGTERM uvicorn stops accepting connections and waits for the
requests in flight (their sentences still decode); then the batcher stops and :func:`serve` returns."""
from __future__ import annotations

import ipaddress
import logging
import signal
import socket
from typing import Callable, Mapping, Optional, Sequence, Union

from nmt_toolkit.errors import UsageError
from nmt_toolkit.serving.batcher import DynamicBatcher
from nmt_toolkit.serving.config import ServeConfig
from nmt_toolkit.serving.detect import LIBRARY, Detector
from nmt_toolkit.serving.metrics import ServerMetrics
from nmt_toolkit.serving.models import ModelPool, MultilingualModel, ServedModel
from nmt_toolkit.serving.translate import Service, alignment_shared

logger = logging.getLogger("nmt_toolkit.serve")

#: seconds a drain may take beyond the longest a request may wait: the connections still open then are
#: closed, and the batcher stops (waiting at most batcher.STOP_WAIT for a decode thread)
DRAIN_MARGIN = 4.0


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; a taken port or an unknown host is one error line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError(f"--host {host} --port {port}: cannot listen there ({exc.strerror})") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def build_service(models: Sequence[Union[ServedModel, MultilingualModel]], cfg: ServeConfig,
                  keys: Optional[Mapping[str, Optional[int]]] = None,
                  thread_setup: Optional[Callable[[], None]] = None, glossary=None,
                  keep=None, suggestions=None, documents=None) -> tuple[Service, ServerMetrics]:
    """The models behind a batcher with the configured limits, and the metrics that watch them; ``glossary``
    and ``keep`` the served terminology; ``suggestions`` the store of /suggest (None: refused); ``documents``
    the limits of /translate_file's documents."""
    metrics = ServerMetrics()
    pool = ModelPool(models)
    batcher = DynamicBatcher(pool.decode, batching=cfg.batching, max_batch_tokens=cfg.max_batch_tokens,
                             max_wait=cfg.max_wait_ms / 1000.0, workers=cfg.decode_workers or 1,
                             thread_setup=thread_setup, observer=metrics, share=alignment_shared)
    service = Service(pool, batcher, cfg, keys, glossary, keep, open_detector(list(pool.languages())),
                      suggestions, documents)
    metrics.watch_cache(service.cache)
    return service, metrics


def open_detector(languages: Sequence[str]) -> Optional[Detector]:
    """The language identifier of the served languages (/detect, source auto), or None when its library is
    missing: the server still translates, and those requests get a 400 that names the library."""
    try:
        detector = Detector(languages)
    except ImportError as exc:
        logger.warning("no language identification (/detect, source auto): %s (pip install %s)", exc, LIBRARY)
        return None
    logger.info("language identification (%s) for %s%s", LIBRARY, _listed(detector.languages),
                f"; not for {_listed(detector.unknown)}" if detector.unknown else "")
    return detector


def _listed(codes: Sequence[str]) -> str:
    """Codes for a log line: a model of hundreds of languages by their number."""
    if not codes:
        return "no served language"
    return ", ".join(codes) if len(codes) <= 12 else f"{len(codes)} languages"


def serve(service: Service, metrics: ServerMetrics, sock: socket.socket) -> None:
    """Serve on ``sock`` until SIGTERM (returns) or SIGINT (KeyboardInterrupt after the drain)."""
    import uvicorn

    from nmt_toolkit.serving.app import create_app

    from nmt_toolkit.serving.connections import guarded_protocol

    app = create_app(service, metrics)
    cfg = service.cfg
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                            http=guarded_protocol(cfg.client_timeout, cfg.max_connections),
                            timeout_graceful_shutdown=cfg.request_timeout + DRAIN_MARGIN)
    server = uvicorn.Server(config)
    host, port = sock.getsockname()[:2]
    if service.keys is None and not _loopback(host):
        logger.warning("listening on %s, beyond this machine, without --api-keys: anyone who reaches the port can "
                       "translate and keep the decoder busy; give --api-keys FILE and put TLS in front "
                       "(docs/serving.md)", host)
    shown = f"[{host}]" if ":" in host else host
    logger.info("serving %s on http://%s:%d (engine %s, batching %s)",
                ", ".join(m.name for m in service.pool.models), shown, port, service.pool.models[0].engine,
                "on" if service.cfg.batching else "off")
    # uvicorn re-raises the signal it stopped on once it has drained; a handler of ours makes that a no-op,
    # so SIGTERM ends the program with status 0 instead of killing it after the clean drain
    previous = signal.signal(signal.SIGTERM, _ignore)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
    logger.info("stopped")


def _ignore(signum, frame) -> None:
    return None


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False

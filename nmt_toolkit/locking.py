"""One writer per output folder: an advisory ``fcntl.flock`` on a small lock file.

Two runs writing one ``--save-dir`` (or one ``--destdir``) interleave their files and each rewrites what the
other recorded; the second run is refused instead. The lock file holds the owner's pid and host, so the
refusal can say who holds it. The kernel drops a ``flock`` when its process dies, so a lock left by a run
that crashed or was killed (kill -9 included) is no obstacle: the next run takes it over.

The file is removed on release. A run that opened the file just before the owner removed it would lock a
file no longer in the folder; after locking, the path is therefore checked to still name the locked file,
and the lock is taken again otherwise.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
from typing import Iterator, Optional

from nmt_toolkit.errors import DataError

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are not locked there
    fcntl = None

logger = logging.getLogger(__name__)

_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def owner_of(path: str) -> str:
    """``pid 1234 on host``: what the lock file says about its holder (its first line)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.readline().strip()
    except OSError:
        text = ""
    return text or "a process that has not written its id yet"


def _try_lock(path: str) -> Optional[int]:
    """An open descriptor of ``path`` holding its exclusive lock, or None when another process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:
            os.close(fd)
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the owner removed the file between our open and our lock: lock the new one


@contextlib.contextmanager
def exclusive(path: str, what: str, program: str) -> Iterator[None]:
    """Hold the lock file ``path`` for the ``with`` block, or refuse with a DataError naming ``what``.

    ``what`` is the option and folder as the user gave them (``--save-dir ckpt``); ``program`` names the
    kind of run that would hold the lock (``nmt-train``)."""
    if fcntl is None:
        yield
        return
    try:
        fd = _try_lock(path)
    except OSError as exc:
        if exc.errno in _UNSUPPORTED:  # a file system without flock (some network mounts): run unlocked
            logger.warning("%s: cannot lock %s (%s); nothing stops a second run from writing there too",
                           what, path, exc.strerror)
            yield
            return
        raise DataError(f"{what}: cannot create the lock file {path} ({exc.strerror})") from None
    if fd is None:
        raise DataError(f"{what}: in use by another {program} ({owner_of(path)}); wait for it to finish, "
                        f"or choose another folder")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode("utf-8"))
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # still locked: a waiting run re-checks the path after locking
        os.close(fd)

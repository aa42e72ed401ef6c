"""Keep freed memory in the process (glibc malloc) so that a training step does not page-fault its way
through fresh memory.

A training step allocates and frees the same large activations and gradients every update. glibc's
defaults hand such blocks back to the kernel: blocks over the mmap threshold (128 KiB, rising by itself
to at most 32 MiB) are unmapped when freed, and the top of the heap is trimmed once more than the trim
threshold is free there. The next step then touches the same amount of fresh memory, and every 4 KiB page
costs a page fault in the kernel: most of a short CPU training run's system time, which this module takes
away (docs/benchmarks.md, "Notes"). PyTorch's CPU tuning guide recommends a caching allocator (jemalloc,
tcmalloc) for the same reason; this reaches the same effect with glibc's own knobs and no extra dependency:
big blocks come from the heap and freed ones stay there for the next step. The cost is memory kept after a
peak (a few per cent more peak memory).

``nmt-train`` calls :func:`keep_freed_memory` once at start-up. ``nmt-generate`` does not: its decoding
steps reuse their large buffers already and measured no faster with it. Nothing happens when the user
chose an allocator setting of their own (``MALLOC_*`` or ``GLIBC_TUNABLES`` malloc variables, a
preloaded jemalloc/tcmalloc/mimalloc) or set ``NMT_TOOLKIT_MALLOC=system``.
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import Optional

logger = logging.getLogger("nmt_toolkit.allocator")

ENV = "NMT_TOOLKIT_MALLOC"
MMAP_THRESHOLD = 256 << 20  # blocks below this come from the heap, not from their own mapping
TRIM_THRESHOLD = 1 << 30  # the heap gives memory back only when more than this is free at its top
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
_USER_MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
_OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")


def _user_choice(environ) -> Optional[str]:
    """Why the user's own setting wins, or None when there is none."""
    value = environ.get(ENV, "").strip().lower()
    if value == "system":
        return f"{ENV}=system"
    if value not in ("", "keep"):
        logger.warning("%s=%s is neither 'keep' nor 'system'; keeping glibc's defaults", ENV, value)
        return f"{ENV}={value}"
    for name in _USER_MALLOC_ENV:
        if name in environ:
            return name
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES"
    preload = environ.get("LD_PRELOAD", "")
    for name in _OTHER_ALLOCATORS:
        if name in preload:
            return f"LD_PRELOAD {name}"
    return None


def _glibc_mallopt():
    """glibc's ``mallopt``, or None on another C library or system."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()  # glibc only (musl has no such function)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def keep_freed_memory(environ=None) -> bool:
    """Raise glibc's mmap and trim thresholds for this process (see the module docstring).

    Returns True when the thresholds were set; False when the user's own setting was kept or the C
    library is not glibc. Safe to call more than once."""
    environ = os.environ if environ is None else environ
    reason = _user_choice(environ)
    if reason is not None:
        logger.debug("malloc: leaving the allocator as configured (%s)", reason)
        return False
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if ok:
        logger.info("malloc: freed memory stays in the process (mmap threshold %d MiB, trim threshold %d MiB; "
                    "%s=system keeps glibc's defaults)", MMAP_THRESHOLD >> 20, TRIM_THRESHOLD >> 20, ENV)
    return ok

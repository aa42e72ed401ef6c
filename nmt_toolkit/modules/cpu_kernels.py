"""A CPU decoding step's attention and candidate selection as small C kernels (csrc/step_attention.c).

Why. After the linear layers (modules/packed_linear.py), the largest part of a beam step on the CPU was the
attention over the caches: measured on the 2-core reference machine, a small-model decode of 64-sentence
batches ran 23-30 % faster with the attention removed (projections kept). torch has no good kernel for
it: per sentence and head the step is a [beam, d_k] x [d_k, positions] product, so ``bmm`` runs hundreds of
tiny matrices at 5-10 GFLOP/s, with query/output transposes, a softmax pass, a masked product over the
other beams' keys (the beam layout of modules/attention.py) and strided cache writes around it; SDPA's CPU
kernel is 3-6 times slower at these shapes. The C kernel does each row's attention directly: its keys
and values, read once from a layout where each vector is contiguous, through its ancestry line.

How. The source is compiled on first use with the system's C compiler (``$CC`` or ``cc``, ``-O3
-march=native -ffp-contract=fast``: it runs where it is built, and the polynomials and dot products use fused
multiply-adds, which made the log-normaliser 30 % faster) into a shared library cached under
``$NMT_TOOLKIT_KERNEL_CACHE`` (default ``~/.cache/nmt_toolkit/kernels``), named by a hash of the
source, the flags and the machine's CPU flags, and loaded with ctypes (which releases the GIL during the
call, so decode workers run it side by side). It takes about a second, once per machine. The first build
tried has ``-fopenmp`` (when torch's GNU OpenMP runtime is loaded); where that does not link, the next one is single-threaded. Without a compiler
(logged at debug level), when every build fails (a warning), or with ``NMT_TOOLKIT_CPU_KERNELS=0`` the torch
code path runs instead: the same hypotheses, scores equal to float32 rounding.

Threads. An OpenMP build shares each call's sentences (attention) or rows (candidates) among
``torch.get_num_threads()`` threads of the process's OpenMP runtime, which is torch's own (the library
needs ``libgomp.so.1`` and the loader hands it the copy torch already loaded), so the threads that just ran
the step's matrix products run the attention too, and no second pool spins against them. A sentence or row
is computed by one thread exactly as in a serial call: the results do not depend on the thread count. On
the 2-core reference machine, one 215-sentence batch on two threads decoded in 1.16-1.20 s against
1.23-1.30 s with torch's batched attention (whose copies, masked products and separate softmax and top-k
passes the kernels skip). A build without OpenMP serves only one-thread decoding (nmt-generate's decode
workers); with several intra-op threads torch's path runs then.

When. Decoding steps only (``MultiheadAttention.step_self`` / ``step_cross``, and the beam search's
candidates), float32 CPU tensors under ``torch.inference_mode()``, with the thread condition above. The
choice is made when a cache is created and holds for its decode.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Optional

import torch

logger = logging.getLogger("nmt_toolkit.cpu_kernels")

ENV = "NMT_TOOLKIT_CPU_KERNELS"
CACHE_ENV = "NMT_TOOLKIT_KERNEL_CACHE"
SOURCE = pathlib.Path(__file__).with_name("csrc") / "step_attention.c"
FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-fopenmp-simd", "-ffp-contract=fast", "-std=c99")
OPENMP_FLAGS = FLAGS[:4] + ("-fopenmp",) + FLAGS[5:]  # first choice: the kernels share torch's intra-op threads
PORTABLE_FLAGS = ("-O3", "-fPIC", "-shared", "-std=c99", "-Wno-psabi")  # a compiler without -march=native (e.g. some clang)

_lock = threading.Lock()
_library: Optional[ctypes.CDLL] = None
_tried = False

_p, _i64, _f = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float


def _cpu_signature() -> str:
    """What -march=native depends on: the CPU's feature flags (Linux), else the platform's name."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    import platform

    return platform.platform() + platform.processor()


def _gnu_openmp_loaded() -> bool:
    """Whether GNU's OpenMP runtime is already in this process (torch's wheels bring it): only then may the
    kernels use OpenMP, sharing it, instead of loading a second runtime beside another (Intel's, LLVM's)."""
    try:
        return "libgomp" in pathlib.Path("/proc/self/maps").read_text()
    except OSError:
        return False


def _cache_dir() -> pathlib.Path:
    if os.environ.get(CACHE_ENV):
        return pathlib.Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "nmt_toolkit" / "kernels"


def _compile(compiler: list[str], flags: tuple, target: pathlib.Path) -> None:
    """Build into a temporary file beside ``target``, then rename: concurrent builders never see half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run([*compiler, *flags, "-o", tmp, str(SOURCE), "-lm"], check=True, capture_output=True,
                       timeout=120)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _build() -> Optional[ctypes.CDLL]:
    if os.environ.get(ENV, "1") == "0":
        logger.debug("C decoding kernels off (%s=0)", ENV)
        return None
    compiler = shlex.split(os.environ.get("CC", "")) or ["cc"]
    if shutil.which(compiler[0]) is None:
        logger.debug("C decoding kernels unavailable: no C compiler (%s)", compiler[0])
        return None
    source = SOURCE.read_bytes()
    errors = []
    for flags in ((OPENMP_FLAGS,) if _gnu_openmp_loaded() else ()) + (FLAGS, PORTABLE_FLAGS):
        digest = hashlib.sha256(source + repr((compiler, flags, _cpu_signature())).encode()).hexdigest()[:16]
        target = _cache_dir() / f"step_attention-{digest}.so"
        try:
            if not target.exists():
                _compile(compiler, flags, target)
            lib = ctypes.CDLL(str(target))
        except (OSError, subprocess.SubprocessError) as exc:
            detail = (getattr(exc, "stderr", b"") or b"").decode(errors="replace").strip()
            errors.append(f"{' '.join(compiler + list(flags))}: {exc} {detail[:300]}")
            logger.debug("C decoding kernels: build failed: %s", errors[-1])
            continue
        lib.nmt_self_step.argtypes = [_p, _i64, _p, _p, _i64, _i64, _p, _i64, _i64, _i64, _i64, _i64, _i64, _i64,
                                      _f, _p, _i64]
        lib.nmt_cross_step.argtypes = [_p, _i64, _p, _p, _p, _i64, _i64, _i64, _i64, _i64, _i64, _f, _p, _i64]
        lib.nmt_self_step.restype = lib.nmt_cross_step.restype = ctypes.c_int
        lib.nmt_row_logsumexp.argtypes = [_p, _i64, _i64, _i64, _p, _i64]
        lib.nmt_row_topk.argtypes = [_p, _i64, _i64, _i64, _i64, _p, _p, _i64]
        lib.nmt_row_logsumexp.restype = lib.nmt_row_topk.restype = None
        lib.nmt_openmp.argtypes = []
        lib.nmt_openmp.restype = ctypes.c_int
        lib.openmp = bool(lib.nmt_openmp())  # asked once: usable() runs for every new cache
        return lib
    logger.warning("the C decoding kernels failed to build (%s); decoding takes torch's slower code path "
                   "(%s=0 skips the build)", errors[-1].splitlines()[0][:200], ENV)
    return None


def library() -> Optional[ctypes.CDLL]:
    """The compiled kernels (built on the first call), or None when they cannot be had."""
    global _library, _tried
    if not _tried:
        with _lock:
            if not _tried:
                if sys.platform.startswith(("linux", "darwin")):
                    _library = _build()
                _tried = True
    return _library


def usable(x: torch.Tensor) -> bool:
    """Whether a decoding step on tensors like ``x`` (its activations, or the model's weights) takes the C
    kernels (see the module docstring)."""
    if not (x.device.type == "cpu" and x.dtype == torch.float32 and torch.is_inference_mode_enabled()):
        return False
    lib = library()
    return lib is not None and (torch.get_num_threads() == 1 or lib.openmp)


def _status(code: int) -> None:
    if code:
        raise MemoryError("C attention kernel: out of memory")


def _check(*tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.device.type != "cpu" or t.dtype not in (torch.float32, torch.int64) or not t.is_contiguous():
            raise ValueError(f"C attention kernel: a {t.dtype} {t.device} tensor of strides {t.stride()} "
                             "(needs contiguous float32/int64 CPU tensors)")


def self_step(qkv: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, ancestry: Optional[torch.Tensor],
              sents: int, w: int, pos: int, scaling: float) -> torch.Tensor:
    """Write step ``pos``'s keys and values (from ``qkv`` [rows, 2*H*d_k + H*d_v]) into the caches ``k_cache``
    [*, H, cap, beam, d_k] / ``v_cache`` [*, H, cap, beam, d_v] and return the attention output [rows, H*d_v]
    (see the kernel's comment for the layouts)."""
    _, heads, cap, beam, dk = k_cache.shape
    dv = v_cache.size(-1)
    rows = qkv.size(0)
    if qkv.stride(1) != 1 or rows != sents * w:
        raise ValueError("C attention kernel: qkv must be row-major with sents * w rows")
    _check(k_cache, v_cache, *(() if ancestry is None else (ancestry,)))
    out = qkv.new_empty(rows, heads * dv)
    _status(library().nmt_self_step(qkv.data_ptr(), qkv.stride(0), k_cache.data_ptr(), v_cache.data_ptr(), cap, beam,
                                    None if ancestry is None else ancestry.data_ptr(),
                                    0 if ancestry is None else ancestry.size(2), sents, w, heads, dk, dv, pos,
                                    scaling, out.data_ptr(), torch.get_num_threads()))
    return out


def cross_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Optional[torch.Tensor], w: int,
               scaling: float) -> torch.Tensor:
    """Encoder–decoder attention of one step: ``q`` [sents * w, H*d_k] against ``k`` [sents, H, S, d_k] /
    ``v`` [sents, H, S, d_v] with ``bias`` [sents, S] (0 or -inf) or None; returns [sents * w, H*d_v]."""
    sents, heads, src_len, dk = k.shape
    dv = v.size(-1)
    if q.stride(1) != 1 or q.size(0) != sents * w:
        raise ValueError("C attention kernel: q must be row-major with sents * w rows")
    _check(k, v, *(() if bias is None else (bias,)))
    out = q.new_empty(q.size(0), heads * dv)
    _status(library().nmt_cross_step(q.data_ptr(), q.stride(0), k.data_ptr(), v.data_ptr(),
                                     None if bias is None else bias.data_ptr(), sents, w, heads, dk, dv, src_len,
                                     scaling, out.data_ptr(), torch.get_num_threads()))
    return out


def _rows_view(x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2 or x.stride(1) != 1 or x.dtype != torch.float32 or x.device.type != "cpu":
        raise ValueError(f"C candidate kernels take a row-major float32 CPU matrix, got {x.dtype} {tuple(x.shape)} "
                         f"with strides {x.stride()}")
    return x


def row_logsumexp(x: torch.Tensor) -> torch.Tensor:
    """``torch.logsumexp(x, dim=1)`` of a [rows, V] float32 CPU matrix, in one read of it."""
    x = _rows_view(x)
    rows, width = x.shape
    out = x.new_empty(rows)
    library().nmt_row_logsumexp(x.data_ptr(), x.stride(0), width, rows, out.data_ptr(), torch.get_num_threads())
    return out


def row_topk(x: torch.Tensor, kk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x.topk(kk, dim=1)`` of a [rows, V] float32 CPU matrix (values descending; among equal values the
    lower column first), in one read of it."""
    x = _rows_view(x)
    rows, width = x.shape
    if not 0 < kk <= width:
        raise ValueError(f"row_topk: k={kk} for rows of {width}")
    values = x.new_empty(rows, kk)
    index = torch.empty(rows, kk, dtype=torch.long)
    library().nmt_row_topk(x.data_ptr(), x.stride(0), width, kk, rows, values.data_ptr(), index.data_ptr(),
                           torch.get_num_threads())
    return values, index

"""Reading fairseq checkpoints without fairseq and without running pickled code.

A fairseq checkpoint is a pickle: besides tensors it holds ``argparse.Namespace`` (``args``, fairseq ≤ 0.9
and the published 2018–2019 models; in 0.12 also ``cfg["model"]``) and, from fairseq 0.10 on, omegaconf
``DictConfig``/``ListConfig`` trees in ``cfg``. torch's weights-only loader refuses those classes, and its
unrestricted loader would run whatever a planted ``__reduce__`` names, or hand a TorchScript archive to
the TorchScript loader. :func:`read` instead reads torch's file layout itself and unpickles with an
allow-list: torch's tensor rebuilders, plain containers, ``Namespace``, numpy scalars, and
stand-ins for omegaconf's classes (never imported) and fairseq's choice enums (rebuilt as their string
value). Anything else is refused with a one-line error naming the class. :func:`plain` turns the result
into dicts, lists and scalars.
"""
from __future__ import annotations

import argparse
import collections
import os
import pickle
import zipfile
from typing import Any

import torch

from nmt_toolkit.errors import DataError
from nmt_toolkit.checkpoints import TORCHSCRIPT_REFUSAL

_TORCH = {("torch._utils", n) for n in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_parameter",
                                          "_rebuild_parameter_with_state")}
_PLAIN = {("collections", "OrderedDict"): collections.OrderedDict, ("collections", "defaultdict"): collections.defaultdict,
          ("argparse", "Namespace"): argparse.Namespace, ("builtins", "long"): int, ("builtins", "unicode"): str,
          **{("builtins", t.__name__): t for t in (dict, list, tuple, set, frozenset, str, int, float, bool,
                                                     bytes, object, complex, slice)}}
_OMEGACONF = ("omegaconf.dictconfig", "omegaconf.listconfig", "omegaconf.nodes", "omegaconf.base")


class OmegaConfNode:
    """Stands in for an omegaconf container or value node; keeps the pickled state for :func:`plain`."""

    def __init__(self, *args, **kwargs):
        self.state: dict = {}

    def __setstate__(self, state):
        self.state = state if isinstance(state, dict) else {"_val": state}


class _TypeRef:
    """Stands in for a type named in omegaconf metadata (``typing.Any``, an element type): never called."""

    def __init__(self, module: str, name: str):
        self.name = f"{module}.{name}"

    def __call__(self, *args, **kwargs):
        raise pickle.UnpicklingError(f"{self.name} may be named but not called")


def _enum_value(value=None, *rest):
    """fairseq's ChoiceEnum members (``ddp_backend``, ``dataset_impl`` …) come back as their string value."""
    return value


#: Python 2 module names that protocol-2 pickles still carry (omegaconf's own pickles use ``__builtin__``)
_PY2_NAMES = {"__builtin__": "builtins", "copy_reg": "copyreg"}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        module = _PY2_NAMES.get(module, module)
        if (module, name) in _TORCH:
            return super().find_class(module, name)
        if (module, name) in _PLAIN:
            return _PLAIN[(module, name)]
        if module == "torch" and name.endswith("Storage") and _storage_type(name) is not None:
            return _storage_type(name)
        if module in ("copyreg",) and name == "_reconstructor":
            return super().find_class(module, name)  # rebuilds only classes that pass this allow-list
        if module.startswith(_OMEGACONF):
            return OmegaConfNode
        if module == "typing" or module == "enum":
            return _TypeRef(module, name)
        if module.startswith("fairseq.dataclass"):  # ChoiceEnum members pickled as (class, (value,))
            return _enum_value
        if module in ("numpy.core.multiarray", "numpy._core.multiarray") and name == "scalar" \
                or module == "numpy" and name == "dtype":
            return super().find_class(module, name)
        if module in ("numpy.dtypes",) and name.endswith("DType"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a fairseq checkpoint holds only tensors, "
                                     "containers and configuration")


class _StorageType:
    """What a pickled ``torch.FloatStorage`` (…) name stands for here: only its element type."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype


def _storage_type(name: str):
    if name == "UntypedStorage":
        return _StorageType(torch.uint8)
    try:
        return _StorageType(torch.storage._get_dtype_from_pickle_storage_type(name))
    except KeyError:
        return None


def _typed(untyped: torch.UntypedStorage, dtype: torch.dtype):
    return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)


def _bytes_storage(data: bytes) -> torch.UntypedStorage:
    if not data:
        return torch.UntypedStorage(0)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).untyped_storage()


def _load_zip(path: str) -> Any:
    """torch's zip layout read by hand: ``<prefix>/data.pkl`` unpickled through the allow-list, each tensor's
    bytes from ``<prefix>/data/<key>``. Nothing in the archive is handed to torch.load or the TorchScript loader."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        if any(n.endswith("constants.pkl") or "/code/" in n for n in names):
            raise DataError(f"{path}: {TORCHSCRIPT_REFUSAL}")
        pickles = [n for n in names if n.count("/") == 1 and n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise DataError(f"{path}: not a readable fairseq checkpoint (a zip without one <name>/data.pkl)")
        prefix = pickles[0][:-len("data.pkl")]
        if prefix + "byteorder" in names and archive.read(prefix + "byteorder").strip() not in (b"little", b""):
            raise DataError(f"{path}: a big-endian checkpoint; convert it on the machine that wrote it")
        storages: dict = {}

        def persistent_load(pid):
            if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                    and isinstance(pid[1], _StorageType)):
                raise pickle.UnpicklingError(f"refusing to load persistent id {str(pid)[:60]}")
            key = str(pid[2])
            if key not in storages:
                storages[key] = _bytes_storage(archive.read(f"{prefix}data/{key}"))
            return _typed(storages[key], pid[1].dtype)

        with archive.open(pickles[0]) as handle:
            unpickler = _Unpickler(handle)
            unpickler.persistent_load = persistent_load
            return unpickler.load()


_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def _load_legacy(path: str) -> Any:
    """torch's format before zip files (torch.save(..., _use_new_zipfile_serialization=False)): pickles of a
    magic number, a protocol version, system info, the object, and the storage keys, then each storage's
    element count (int64) and bytes in that order."""
    with open(path, "rb") as handle:
        if _Unpickler(handle).load() != _LEGACY_MAGIC:
            raise DataError(f"{path}: not a readable fairseq checkpoint (neither a zip of tensors nor torch's "
                            "older format)")
        _Unpickler(handle).load()  # protocol version
        _Unpickler(handle).load()  # system info: endianness, sizes
        storages: dict = {}

        def persistent_load(pid):
            if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage"
                    and isinstance(pid[1], _StorageType)):
                raise pickle.UnpicklingError(f"refusing to load persistent id {str(pid)[:60]}")
            _, kind, key, _location, numel, view = pid
            if key not in storages:
                storages[key] = (torch.empty(int(numel), dtype=kind.dtype).untyped_storage(), kind.dtype)
            untyped, dtype = storages[key]
            if view is not None:
                _view_key, offset, size = view
                size_of = torch.empty(0, dtype=dtype).element_size()
                untyped = untyped[offset * size_of:(offset + size) * size_of]
            return _typed(untyped, kind.dtype)

        unpickler = _Unpickler(handle)
        unpickler.persistent_load = persistent_load
        result = unpickler.load()
        for key in _Unpickler(handle).load():
            untyped, dtype = storages[key]
            count = int.from_bytes(handle.read(8), "little")
            data = handle.read(count * torch.empty(0, dtype=dtype).element_size())
            if len(data) != untyped.nbytes():
                raise DataError(f"{path}: truncated checkpoint (tensor data ends early)")
            torch.empty(0, dtype=torch.uint8).set_(untyped).copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8)
                                                                   if data else torch.empty(0, dtype=torch.uint8))
    return result


def read(path: str) -> dict:
    """The checkpoint at ``path`` as plain dicts, lists, scalars and tensors; a DataError naming the file and
    the refused class for anything that is not.

    Read by hand, never through ``torch.load``: torch hands a TorchScript archive to the TorchScript loader, which
    runs the archive's code before any unpickler could refuse it."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such checkpoint")
    try:
        state = _load_zip(path) if zipfile.is_zipfile(path) else _load_legacy(path)
    except pickle.UnpicklingError as exc:
        raise DataError(f"{path}: {exc}") from None
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"{path}: not a readable fairseq checkpoint ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
    if not isinstance(state, dict):
        raise DataError(f"{path}: not a fairseq checkpoint (a {type(state).__name__}, not a dict)")
    return plain(state)


def plain(obj: Any) -> Any:
    """Namespaces and omegaconf stand-ins → dicts; containers walked; tensors and scalars kept."""
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, argparse.Namespace):
        return {k: plain(v) for k, v in vars(obj).items()}
    if isinstance(obj, OmegaConfNode):
        if "_content" in obj.state:
            content = obj.state["_content"]
            return plain(content) if isinstance(content, (dict, list, tuple)) else content
        return plain(obj.state.get("_val"))
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, _TypeRef):
        return obj.name
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalars
        try:
            return obj.item()
        except Exception:
            return obj
    return obj

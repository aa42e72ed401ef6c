"""Reading fairseq checkpoints without fairseq and without running pickled code.

A fairseq checkpoint is a pickle: besides tensors it holds ``argparse.Namespace`` (``args``, fairseq ≤ 0.9
and the published 2018–2019 models; in 0.12 also ``cfg["model"]``) and, from fairseq 0.10 on, omegaconf
``DictConfig``/``ListConfig`` trees in ``cfg``. ``torch.load(weights_only=True)`` refuses those classes, and
``weights_only=False`` would run whatever a planted ``__reduce__`` names. :func:`load` instead unpickles
with an allow-list: torch's tensor rebuilders, plain containers, ``Namespace``, numpy scalars, and
stand-ins for omegaconf's classes (never imported) and fairseq's choice enums (rebuilt as their string
value). Anything else is refused with a one-line error naming the class. :func:`plain` turns the result
into dicts, lists and scalars.
"""
from __future__ import annotations

import argparse
import collections
import os
import pickle
from typing import Any

import torch

from nmt_toolkit.errors import DataError

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


class _PickleModule:
    """What ``torch.load(pickle_module=…)`` needs: an ``Unpickler`` and ``load`` (legacy files)."""

    Unpickler = _Unpickler
    __name__ = "nmt_toolkit_restricted_pickle"

    @staticmethod
    def load(f, **kwargs):
        return _Unpickler(f, **kwargs).load()


def forced_weights_only() -> str | None:
    """The value of ``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` when it is set to one that torch.load obeys (torch's own
    test: 1, y, yes, true). torch.load then uses only its weights-only unpickler and refuses ours outright."""
    value = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0")
    return value if value.lower() in ("1", "y", "yes", "true") else None


def weights_only_note() -> str:
    """Why a fairseq checkpoint cannot be read under ``TORCH_FORCE_WEIGHTS_ONLY_LOAD``, and what to do."""
    return (f"TORCH_FORCE_WEIGHTS_ONLY_LOAD={forced_weights_only()} is set (torch.load then unpickles only "
            "tensors, and a fairseq checkpoint also holds its options as argparse/omegaconf objects); unset it to "
            "read fairseq checkpoints: they are read through an allow-list, so no pickled code runs either way")


def load(path: str) -> dict:
    """The checkpoint at ``path`` as plain dicts, lists, scalars and tensors; a DataError naming the file and
    the refused class for anything that is not."""
    if forced_weights_only() and os.path.isfile(path):
        raise DataError(f"{path}: cannot be read as a fairseq checkpoint: {weights_only_note()}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_PickleModule)
    except pickle.UnpicklingError as exc:
        raise DataError(f"{path}: {exc}") from None
    except FileNotFoundError:
        raise DataError(f"{path}: no such checkpoint") from None
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

"""Name → component registries, and plugin loading.

One :class:`Registry` class serves models, architectures, criteria, optimizers, LR schedulers and tasks.
Each entry pairs the registered object with the dataclass that declares its options, so the CLI can
offer exactly the options of the components the user selected.

Plugins are imported only from what the user names: a ``--user-dir`` path, or an installed
distribution that declares the entry-point group ``nmt_toolkit.plugins``.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from nmt_toolkit.errors import UsageError

ENTRY_POINT_GROUP = "nmt_toolkit.plugins"


def _where(obj: Any) -> str:
    """A human pointer to where ``obj`` was defined, for duplicate-name errors."""
    try:
        path = inspect.getsourcefile(obj) or "?"
        line = inspect.getsourcelines(obj)[1]
        return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', obj)} ({path}:{line})"
    except (TypeError, OSError):
        return repr(obj)


@dataclass
class Entry:
    name: str
    obj: Any
    config: Optional[type] = None  # the dataclass holding this component's options
    parent: Optional[str] = None  # for architectures: the model they configure


class Registry:
    """A named collection of components; ``flag`` is the CLI option that selects from it."""

    def __init__(self, kind: str, flag: str, builtin: tuple[str, ...] = ()):
        self.kind = kind
        self.flag = flag
        self._entries: dict[str, Entry] = {}
        #: the modules whose decorators register the built-in components of this kind, imported when the
        #: registry is first asked (a program imports only what it selects: nmt-generate on a CTranslate2
        #: export asks for tasks alone, and loads no model code and no torch)
        self._builtin = builtin

    def _import_builtin(self) -> None:
        while self._builtin:
            module, *rest = self._builtin
            importlib.import_module(module)
            self._builtin = tuple(rest)

    def register(self, name: str, config: Optional[type] = None, parent: Optional[str] = None) -> Callable:
        def decorator(obj):
            self.add(Entry(name, obj, config, parent))
            return obj

        return decorator

    def add(self, entry: Entry) -> None:
        old = self._entries.get(entry.name)
        if old is not None:
            if old.obj is entry.obj:
                return  # the same object imported twice (module reloaded under the same name)
            raise UsageError(
                f"duplicate {self.kind} name {entry.name!r}: defined by {_where(old.obj)} "
                f"and again by {_where(entry.obj)}"
            )
        self._entries[entry.name] = entry

    def get(self, name: str) -> Entry:
        self._import_builtin()
        try:
            return self._entries[name]
        except KeyError:
            raise UsageError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        self._import_builtin()
        choices = sorted(self._entries)
        close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"unknown {self.flag} {name}{hint} (choices: {', '.join(choices) or 'none registered'})"

    def __contains__(self, name: str) -> bool:
        self._import_builtin()
        return name in self._entries

    def names(self) -> list[str]:
        self._import_builtin()
        return sorted(self._entries)


_MODEL_MODULES = ("nmt_toolkit.models.transformer",)
MODELS = Registry("model", "--model", _MODEL_MODULES)
ARCHITECTURES = Registry("architecture", "--arch", _MODEL_MODULES)
CRITERIA = Registry("criterion", "--criterion", ("nmt_toolkit.criterions.cross_entropy",
                                                 "nmt_toolkit.criterions.label_smoothed_cross_entropy"))
OPTIMIZERS = Registry("optimizer", "--optimizer", ("nmt_toolkit.optim.optimizers",))
LR_SCHEDULERS = Registry("LR scheduler", "--lr-scheduler", ("nmt_toolkit.optim.lr_schedulers",))
TASKS = Registry("task", "--task", ("nmt_toolkit.tasks.translation", "nmt_toolkit.tasks.multilingual"))
REGISTRIES = (MODELS, ARCHITECTURES, CRITERIA, OPTIMIZERS, LR_SCHEDULERS, TASKS)


def register_model(name: str, config: type) -> Callable:
    """Register a model class; ``config`` is the dataclass of its options."""
    return MODELS.register(name, config)


def register_architecture(model_name: str, arch_name: str) -> Callable:
    """Register a preset: a function that sets fields of the model's config.

    The preset runs on the dataclass defaults, before ``--config`` YAML values and explicit CLI flags are
    applied, so it fills only what the user left unset (the fairseq contract, without getattr tricks).
    """
    return ARCHITECTURES.register(arch_name, parent=model_name)


def register_criterion(name: str, config: Optional[type] = None) -> Callable:
    return CRITERIA.register(name, config)


def register_optimizer(name: str, config: Optional[type] = None) -> Callable:
    return OPTIMIZERS.register(name, config)


def register_lr_scheduler(name: str, config: Optional[type] = None) -> Callable:
    return LR_SCHEDULERS.register(name, config)


def register_task(name: str, config: Optional[type] = None) -> Callable:
    return TASKS.register(name, config)


def import_builtin_components() -> None:
    """Import every built-in component now (each registry also does so for its own kind when first asked)."""
    for registry in REGISTRIES:
        registry._import_builtin()


_imported_user_dirs: set[str] = set()


def import_user_dir(path: str) -> None:
    """Import the plugin package at ``path`` (a folder with ``__init__.py``, or a single ``.py`` file)."""
    path = os.path.abspath(os.path.expanduser(path))
    if path in _imported_user_dirs:
        return
    if not os.path.exists(path):
        raise UsageError(f"--user-dir {path}: no such file or folder")
    if os.path.isdir(path):
        init = os.path.join(path, "__init__.py")
        if not os.path.exists(init):
            raise UsageError(f"--user-dir {path}: not a Python package (no __init__.py)")
        module_name = os.path.basename(path.rstrip(os.sep))
        location, search = init, [path]
    else:
        if not path.endswith(".py"):
            raise UsageError(f"--user-dir {path}: not a plugin (a folder with __init__.py, or a .py file)")
        module_name = os.path.splitext(os.path.basename(path))[0]
        location, search = path, None
    if module_name in sys.modules and not getattr(sys.modules[module_name], "__file__", "").startswith(path):
        raise UsageError(
            f"--user-dir {path}: a module named {module_name!r} is already imported from "
            f"{sys.modules[module_name].__file__}; rename the plugin folder"
        )
    spec = importlib.util.spec_from_file_location(module_name, location, submodule_search_locations=search)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except UsageError:
        raise
    except Exception as exc:  # a plugin's bug: say which plugin, keep the cause chained for --debug
        sys.modules.pop(module_name, None)
        raise UsageError(f"--user-dir {path}: importing the plugin failed: {type(exc).__name__}: {exc}") from exc
    _imported_user_dirs.add(path)


_entry_points_loaded = False


def load_entry_point_plugins() -> None:
    """Import every installed plugin that declares the ``nmt_toolkit.plugins`` entry-point group."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points  # 20 ms at import: every program imports this module

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:
            raise UsageError(f"plugin entry point {ep.name} ({ep.value}) failed to load: {exc}") from exc

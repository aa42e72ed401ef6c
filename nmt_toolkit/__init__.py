"""nmt_toolkit: the Transformer of "Attention Is All You Need" as a fairseq-style toolkit.

Importing the package registers nothing by itself; :func:`nmt_toolkit.registry.import_builtin_components`
imports the built-in models, criteria, optimizers, schedulers and tasks so that their
``@register_*`` decorators run. The CLI does this before it parses options.
"""

__version__ = "0.1.0"

_LIBRARY = {"Translator": "nmt_toolkit.generation.translator", "Translation": "nmt_toolkit.generation.translator",
            "Hypothesis": "nmt_toolkit.generation.translator"}


def __getattr__(name: str):
    """``from nmt_toolkit import Translator`` without importing torch for programs that never need it."""
    if name in _LIBRARY:
        import importlib

        return getattr(importlib.import_module(_LIBRARY[name]), name)
    raise AttributeError(f"module 'nmt_toolkit' has no attribute {name!r}")

"""Generation: batched beam search, sampling and teacher-forced scoring over the incremental-decoding model
contract (beam_search.py), ensembles (ensemble.py), fairseq's output lines (output.py),
the search options (config.py), the CTranslate2 engine (ct2_search.py, ct2_engine.py, ct2_text.py).

The names below are imported when first used, so that a module of this package that needs no torch (the
options, the output lines, the CTranslate2 text route) can be imported without loading it."""
from __future__ import annotations

import importlib

_LAZY = {"SequenceGenerator": "beam_search", "length_penalty": "beam_search", "GenerationConfig": "config",
         "EnsembleModel": "ensemble"}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""EVALB parameter files (``COLLINS.prm``): which labels are deleted, which count as equal, the limits."""
from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from typing import Union

from nmt_toolkit.data.lines import read_lines
from nmt_toolkit.data.trees import WHITESPACE as _WS
from nmt_toolkit.errors import DataError
from nmt_toolkit.scoring.evalb_reading import ParsevalError



@dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB ``.prm`` file (see :func:`load_params`)."""

    labeled: bool = True
    delete_labels: frozenset = frozenset()
    delete_labels_for_length: frozenset = frozenset()
    eq_labels: tuple = ()
    eq_words: tuple = ()
    quote_labels: frozenset = frozenset()
    cutoff_len: int = 40
    max_error: int = 10
    debug: int = 0

    def label_eq(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_labels or (b, a) in self.eq_labels

    def word_eq(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_words or (b, a) in self.eq_words


COLLINS = EvalbParams(
    labeled=True,
    delete_labels=frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."}),
    delete_labels_for_length=frozenset({"-NONE-"}),
    eq_labels=(("ADVP", "PRT"),),
)


def load_params(path: Union[str, os.PathLike]) -> EvalbParams:
    """Read an EVALB parameter file: ``KEY value`` lines, ``#`` comments, repeatable list keys.

    Lines end at ``\\n`` and the key ends at C whitespace, as in evalb.c's ``read_parameter_file``.
    """
    ints = {"DEBUG": "debug", "MAX_ERROR": "max_error", "CUTOFF_LEN": "cutoff_len", "LABELED": "labeled"}
    sets = {"DELETE_LABEL": "delete_labels", "DELETE_LABEL_FOR_LENGTH": "delete_labels_for_length",
            "QUOTE_LABEL": "quote_labels"}
    pairs = {"EQ_LABEL": "eq_labels", "EQ_WORD": "eq_words"}
    values: dict = {name: [] for name in (*sets.values(), *pairs.values())}
    try:
        lines = read_lines(os.fspath(path), f"EVALB parameter file {os.fspath(path)}")
    except DataError as err:
        raise ParsevalError(str(err)) from None
    for number, line in enumerate(lines, start=1):
        if line.startswith("#") or len(line) < 3:  # EVALB's own rule for skipping lines
            continue
        key, value = (re.split(f"[{_WS}]+", line.strip(_WS), maxsplit=1) + [""])[:2]
        where = f"{os.fspath(path)}:{number}"
        if not value:
            raise ParsevalError(f"{where}: {key} has no value")
        if key in ints:
            try:
                values[ints[key]] = int(value)
            except ValueError:
                raise ParsevalError(f"{where}: {key} needs a whole number, got {value!r}") from None
        elif key in sets:
            values[sets[key]].append(value)
        elif key in pairs:
            parts = re.split(f"[{_WS}]+", value)
            if len(parts) != 2:
                raise ParsevalError(f"{where}: {key} needs two values, got {value!r}")
            values[pairs[key]].append(tuple(parts))
        else:  # EVALB warns and goes on; so do we
            warnings.warn(f"{where}: unknown EVALB parameter {key!r} ignored", stacklevel=2)
    for name in sets.values():
        values[name] = frozenset(values[name])
    for name in pairs.values():
        values[name] = tuple(values[name])
    values["labeled"] = bool(values.get("labeled", 1))
    return EvalbParams(**values)


"""JSON files a user names — a model folder's manifest and config, a Hugging Face folder's config, vocabulary
and tokenizer files, ``preprocess.json``, ``nmt_export.json`` — read into plain values within limits, so a
crafted file is one line naming it, never a traceback.

Python's ``json`` recurses once per nesting level, so a file nested 100,000 deep raises ``RecursionError``,
and it turns a 4,000-digit number into an int that ``float()`` refuses later (``OverflowError``), far from
the file. These files are a few levels deep, and their largest numbers have about 30 digits (Transformers
writes 10^30 as a tokenizer's ``model_max_length``): nesting deeper than :data:`MAX_DEPTH` is refused before
parsing (a linear scan that skips strings), and integers longer than :data:`MAX_INT_DIGITS` while parsing
(shorter ones convert to float; the options' range checks refuse what is too large, naming the key).
``NaN`` and ``Infinity`` pass to those checks too.
"""
from __future__ import annotations

import itertools
import json
import re
from typing import Any, Optional

from nmt_toolkit.errors import DataError

MAX_DEPTH = 100
MAX_INT_DIGITS = 100
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


class _TooLong(ValueError):
    def __init__(self, digits: int):
        super().__init__(digits)
        self.digits = digits


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _TooLong(digits)
    return int(text)


def nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in the JSON ``text`` (brackets inside strings do not count)."""
    brackets = _NOT_BRACKETS.sub("", _STRING.sub("", text))
    steps = (1 if c in "[{" else -1 for c in brackets)
    return max(itertools.accumulate(steps, initial=0))


def read_json(path: str, what: str, missing: Optional[str] = None) -> Any:
    """The value of the JSON file ``path`` (``what`` it is, for messages); a file that is missing (``missing``
    says what then), unreadable, not JSON, nested deeper than :data:`MAX_DEPTH` or holding an integer longer
    than :data:`MAX_INT_DIGITS` digits is a :class:`DataError` naming it."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise DataError(f"{path}: {missing or f'missing ({what})'}") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise DataError(f"{path}: {what} nests arrays or objects {depth} levels deep (at most {MAX_DEPTH}): a "
                        f"damaged or crafted file")
    try:
        return json.loads(text, parse_int=_parse_int)
    except _TooLong as exc:
        raise DataError(f"{path}: {what} holds a {exc.digits}-digit integer (at most {MAX_INT_DIGITS} digits): a "
                        f"damaged or crafted file") from None
    except RecursionError:
        raise DataError(f"{path}: {what} nests too deep to read: a damaged or crafted file") from None
    except ValueError as exc:
        raise DataError(f"{path}: {what} is not valid JSON ({str(exc).splitlines()[0][:200]})") from None


def read_json_object(path: str, what: str, missing: Optional[str] = None) -> dict:
    """:func:`read_json` of a file that must hold one JSON object."""
    value = read_json(path, what, missing)
    if not isinstance(value, dict):
        raise DataError(f"{path}: {what} is not a JSON object (a {type(value).__name__})")
    return value

"""Raw source lines → the ids a model reads: checked as text, subword-encoded, looked up in the source
dictionary (unknown pieces as ``<unk>``), tagged, EOS appended, and refused by name when too long. Shared by
the Translator and the CTranslate2 text route, which loads no torch (``generation/ct2_text.py``)."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from nmt_toolkit.errors import DataError


def check_texts(lines: Sequence[Any], what: str, first: int, unit: str) -> None:
    """Each line a ``str`` that is valid Unicode (a lone surrogate such as ``"\\ud800"`` encodes to nothing)."""
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(f"{what} {unit} {first + i}: expected a str, got {type(line).__name__}")
        if not line.isascii():
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise DataError(f"{what} {unit} {first + i}: not valid Unicode text (a lone surrogate "
                                f"{line[exc.start]!r} at character {exc.start})") from None


def encode_lines(lines: Sequence[str], src_dict, codec, limit: tuple[int, str], what: str = "input", first: int = 1,
                 unit: str = "line", tag: Optional[str] = None,
                 tag_ids: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> list[np.ndarray]:
    """Raw lines → source id arrays (subword-encoded, unknowns → <unk>, ``tag`` first when given, then
    ``tag_ids`` applied: a multilingual task's language token); a line longer than ``limit`` (size, what sets
    it) is a :class:`DataError` naming it. See :meth:`Translator.encode`."""
    size, reason = limit
    pieces = codec.encode_pieces_batch(lines) if codec is not None else [line.split() for line in lines]
    if tag is not None:
        pieces = [[tag, *p] for p in pieces]
    out = []
    for i, p in enumerate(pieces):
        ids = src_dict.encode_tokens(p)
        if tag_ids is not None and len(ids) > 1:  # an empty line stays empty (its EOS alone)
            ids = tag_ids(ids)
        if len(ids) > size:
            hint = "" if reason.startswith("the model") else f" or raise {reason}"
            raise DataError(f"{what} {unit} {first + i}: {len(ids)} tokens (with its EOS), more than the {size} "
                            f"of {reason}; split the {unit}{hint}")
        out.append(ids)
    return out

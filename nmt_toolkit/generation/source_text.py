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


def split_constraints(lines: Sequence[str], what: str, first: int = 1,
                      unit: str = "line") -> tuple[list[str], list[list[str]]]:
    """fairseq-interactive's constrained input: each line the source, then each target phrase after a TAB.
    Returns the sources and each line's phrases (:func:`phrases_of`)."""
    sources, phrases = [], []
    for i, line in enumerate(lines):
        source, *wanted = line.split("\t")
        sources.append(source)
        phrases.append(phrases_of(wanted, f"{what} {unit} {first + i}"))
    return sources, phrases


def phrases_of(fields: Sequence[str], where: str) -> list[str]:
    """The phrases of one sentence, stripped; an empty one (two TABs, a trailing TAB, a phrase of spaces) is
    a :class:`DataError` naming ``where``, since it would constrain nothing."""
    for k, phrase in enumerate(fields, 1):
        if not phrase.strip():
            raise DataError(f"{where}: constraint {k} is empty (a TAB with no phrase after it)")
    return [p.strip() for p in fields]


def encode_phrases(phrases: Sequence[Sequence[str]], tgt_dict, codec, what: str, first: int = 1,
                   unit: str = "line") -> list[list[list[int]]]:
    """Target phrases → token ids (no EOS), through the target side's subword model; each checked by
    :func:`phrase_ids`, an error naming the line and the phrase."""
    out = []
    for i, row in enumerate(phrases):
        pieces = codec.encode_pieces_batch(list(row)) if codec is not None and row else [p.split() for p in row]
        out.append([phrase_ids(phrase, p, tgt_dict, f"{what} {unit} {first + i}: constraint {k} {phrase!r}")
                    for k, (phrase, p) in enumerate(zip(row, pieces), 1)])
    return out


def phrase_ids(phrase: str, pieces: Sequence[str], tgt_dict, where: str) -> list[int]:
    """One phrase's ids. One that encodes to nothing, or to a piece the target dictionary lacks (the model
    could only write it as ``<unk>``), is a :class:`DataError` naming ``where``."""
    ids = [int(t) for t in tgt_dict.encode_tokens(pieces)[:-1]]
    if not ids:
        raise DataError(f"{where} encodes to no target token")
    if tgt_dict.unk() in ids:
        missing = [piece for piece, t in zip(pieces, ids) if t == tgt_dict.unk()]
        raise DataError(f"{where} has pieces the target dictionary lacks ({' '.join(missing)}): the model could only "
                        f"write them as <unk>")
    return ids


def check_phrase_room(phrases: Sequence[Sequence[Sequence[int]]], limits: Sequence[int], what: str,
                      first: int = 1, unit: str = "line") -> None:
    """The constraints of each sentence must fit its output-length limit (``limits``), else no output could
    hold them: a :class:`DataError` naming the line."""
    for i, (row, limit) in enumerate(zip(phrases, limits)):
        needed = sum(len(p) for p in row)
        if needed > limit:
            raise DataError(f"{what} {unit} {first + i}: its constraints take {needed} target tokens, more than the "
                            f"{limit} its translation may have (--max-len-a, --max-len-b or the model's positions)")

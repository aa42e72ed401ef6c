"""Reading tree files line by line exactly as evalb.c's ``read_line`` does (see :mod:`.parseval`).

evalb.c reads more leniently than :func:`nmt_toolkit.data.trees.parse_tree`: unbalanced brackets, several
trees on a line and empty brackets are read with complaints rather than refused, and the complaints count
towards ``MAX_ERROR``. A line it cannot read at all raises :class:`ParsevalError`.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Iterable, Union

from nmt_toolkit.data.lines import read_lines
from nmt_toolkit.data.trees import WHITESPACE as _WS
from nmt_toolkit.data.trees import Tree, TreeError, parse_tree
from nmt_toolkit.errors import DataError


class ParsevalError(TreeError):
    """A tree file, parameter file or pair of files that PARSEVAL cannot score; the message names the line."""


def read_trees(source: Union[str, os.PathLike, Iterable[str]]) -> list[Union[Tree, str, None]]:
    """One item per line, as evalb.c pairs lines: a :class:`Tree`, ``None`` for a blank line, or the text.

    A line that is one well-formed tree gives its :class:`Tree` (an unlabelled outer bracket is
    kept, as evalb.c scores it). A line evalb.c reads only with complaints (unbalanced brackets)
    or that is not one tree (several trees, an empty bracket) comes back as its text, which
    :func:`evaluate` scores as evalb.c does. A line evalb.c cannot read raises, naming the line.
    ``source`` is a path, ``sys.stdin``, or an iterable of lines. Files are read one line per
    ``\\n`` (``nmt_toolkit.data.lines``), as evalb.c's ``fgets`` reads them.
    """
    name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<stdin>"
    if isinstance(source, (str, os.PathLike)) or source is sys.stdin:
        try:
            lines = read_lines("-" if source is sys.stdin else name, f"tree file {name}")
        except DataError as err:
            raise ParsevalError(str(err)) from None
    else:
        lines, name = list(source), None
    items: list[Union[Tree, str, None]] = []
    for number, line in enumerate(lines, start=1):
        try:
            reading = read_line(line)
        except ParsevalError as err:
            raise ParsevalError(f"{name + ': ' if name else ''}line {number}: {err}") from None
        items.append(_tree_or_text(line, reading))
    return items


def _tree_or_text(line: str, reading: Reading) -> Union[Tree, str, None]:
    if not line.strip(_WS):
        return None
    if not reading.errors:
        try:
            return parse_tree(line, unwrap_root=False)
        except TreeError:
            pass
    return line


def evalb_label(label: str) -> str:
    """evalb.c's ``modify_label``: cut at the first ``-`` or ``=``, wherever it is (``-X-`` -> ``""``)."""
    return re.split(r"[-=]", label, maxsplit=1)[0]


# --------------------------------------------------------------------------- reading as evalb.c reads


@dataclass
class Reading:
    """What evalb.c's ``read_line`` gathers from one line.

    ``brackets`` holds ``[label, first terminal, end terminal]`` in pre-order over all terminals
    (deleted ones too); the end of a bracket never closed stays ``-1``, as in evalb.c.
    ``errors`` has one entry per ``Error()`` call evalb.c makes while reading.
    """

    words: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    brackets: list[list] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# A terminal "(TAG word)" (the word may be empty, but nothing may follow it before ")"), an opening
# "(LABEL", a ")", whitespace, or anything else: a character evalb.c cannot read.
_READ = re.compile(rf"\(([^{_WS}()]*)[{_WS}]+([^{_WS}()]*)\)|\(([^{_WS}()]*)|(\))|[{_WS}]+|(.)", re.S)


def read_line(text: str) -> Reading:
    """Read one line as evalb.c's ``read_line`` does; :class:`ParsevalError` where evalb.c cannot go on."""
    out, open_, stray_closes = Reading(), [], 0
    for match in _READ.finditer(text):
        tag, word, label, close, junk = match.groups()
        if word is not None:
            out.words.append(word)
            out.tags.append(tag)
        elif label is not None:
            open_.append(len(out.brackets))
            out.brackets.append([label, len(out.words), -1])
        elif close and open_:
            out.brackets[open_.pop()][2] = len(out.words)
        elif close:
            stray_closes += 1
            if stray_closes > 1:  # evalb.c's popb() complains from the second one on
                out.errors.append("Bracketing unbalance (too many close bracket)")
        elif junk:
            shown = text[max(0, match.start() - 30):match.start() + 30].strip(_WS)
            raise ParsevalError(f"a word outside (TAG word), or not alone before its ')', at {shown!r}: evalb.c "
                                "cannot read this line either (it repeats 'Reading sentence' until MAX_ERROR)")
    if open_ or stray_closes:
        out.errors.append("Bracketing is unbalanced (too many open bracket)")  # evalb.c's words, either way
    return out


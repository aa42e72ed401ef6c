"""Constituency trees in the Penn Treebank's bracketed form: a node type and a strict one-line parser.

Shared by the parsing task (linearising trees into sequences and back) and the PARSEVAL scorer, so neither
imports the other. Whitespace is C's ``isspace()`` set, as in evalb.c: ``str.split()`` would also split
at U+2028.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

from nmt_toolkit.errors import DataError


class TreeError(DataError, ValueError):
    """A tree or tree file we cannot use; the message names the line."""


WHITESPACE = " \t\n\v\f\r"  # C's isspace()

@dataclass
class Tree:
    """A constituency tree node. Preterminals carry ``word`` and no children."""

    label: str
    children: list[Tree] = field(default_factory=list)
    word: Optional[str] = None

    @property
    def is_preterminal(self) -> bool:
        return self.word is not None

    def preterminals(self) -> Iterator[Tree]:
        """The preterminal nodes left to right (iterative: PTB trees can be deep)."""
        stack = [self]
        while stack:
            node = stack.pop()
            if node.is_preterminal:
                yield node
            else:
                stack.extend(reversed(node.children))

    def leaves(self) -> list[str]:
        return [node.word for node in self.preterminals()]

    def pos(self) -> list[tuple[str, str]]:
        """(word, tag) pairs left to right."""
        return [(node.word, node.label) for node in self.preterminals()]

    def __str__(self) -> str:
        parts: list[str] = []
        stack: list[Union[Tree, str]] = [self]
        while stack:  # iterative, so a degenerate model output nested 1000 deep still prints
            item = stack.pop()
            if isinstance(item, str):
                parts.append(item)
            elif item.is_preterminal:
                parts.append(f" ({item.label} {item.word})")
            else:
                parts.append(f" ({item.label}")
                stack.append(")")
                stack.extend(reversed(item.children))
        return "".join(parts)[1:]


# "(" with the label glued to it, ")", or a word.
_TOKEN = re.compile(rf"\(([^{WHITESPACE}()]*)|\)|[^{WHITESPACE}()]+")


def parse_tree(text: str, line: Optional[int] = None, unwrap_root: bool = True) -> Optional[Tree]:
    """Parse one well-formed bracketed tree strictly; ``None`` for blank text.

    Words must sit alone in their bracket, ``(TAG word)``. With ``unwrap_root`` an unlabelled
    outer bracket around a single tree, ``( (S ...) )``, is removed. (Scoring reads lines more
    leniently, as evalb.c does: see :func:`read_trees`.)
    """
    where = f"line {line}: " if line is not None else ""
    stack: list[Tree] = []
    root: Optional[Tree] = None

    def fail(why: str) -> TreeError:
        shown = text.strip(WHITESPACE)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return TreeError(f"{where}malformed tree: {why}: {shown}")

    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if root is not None:
            raise fail("text after the end of the tree (one tree per line expected)")
        if token[0] == "(":
            if stack and stack[-1].is_preterminal:
                raise fail(f"bracket ({stack[-1].label} {stack[-1].word} ...) mixes a word and subtrees")
            stack.append(Tree(match.group(1)))
        elif token == ")":
            if not stack:
                raise fail("too many ')'")
            node = stack.pop()
            if not node.is_preterminal and not node.children:
                raise fail(f"empty bracket ({node.label})")
            if stack:
                stack[-1].children.append(node)
            else:
                root = node
        else:
            if not stack:
                raise fail(f"word {token!r} outside any bracket")
            top = stack[-1]
            if top.is_preterminal or top.children:
                raise fail(f"more than one element in bracket ({top.label} ...); words go in (TAG word)")
            top.word = token
    if stack:
        raise fail(f"{len(stack)} bracket(s) left open (a multi-line tree? use tasks.parsing.read_treebank)")
    if unwrap_root and root is not None and root.label == "" and len(root.children) == 1:
        root = root.children[0]
    return root


def strip_function_tags(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``; labels starting with '-' (``-NONE-``, ``-LRB-``) stay.

    For cleaning treebanks (``tasks.parsing``); scoring cuts labels as evalb.c does (``evalb_label`` in :mod:`nmt_toolkit.scoring.evalb_reading`).
    """
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


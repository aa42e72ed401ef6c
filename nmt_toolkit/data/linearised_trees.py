"""Constituency parsing as translation (section 6.3 of the Transformer paper).

Following Vinyals, Kaiser et al. 2015 ("Grammar as a Foreign Language"), a tree becomes a
pair of token sequences: the source is the sentence's words, the target is the tree written
depth-first with labelled brackets and every tagged word replaced by one symbol ``XX``::

    (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))
    src: John has a dog .
    tgt: (S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S

Before that, a Penn Treebank tree is cleaned: ``-NONE-`` empty elements go, then every
constituent they leave empty, function tags and indices are cut (``NP-SBJ-1`` -> ``NP``) and
the unlabelled ``( ... )`` wrapper is removed. :func:`preprocess_tree` gives that cleaned tree
with its POS tags: it is the gold side for scoring.

:func:`delinearise` turns a model's target back into a tree and repairs whatever the model got
wrong, so every sentence gets a tree and none is lost to EVALB's error count.

Scoring, and why the tags matter: the model never predicts POS tags, so a delinearised tree
says ``XX`` for every tag. EVALB does not score tags as brackets, but with ``COLLINS.prm`` it
*drops punctuation by its tag* (``,`` ``.`` ``:`` `````` ``''``) before computing spans. A gold
``(, ,)`` is dropped while the model's ``(XX ,)`` is not, the word counts differ and EVALB throws
the sentence away as a length mismatch. So for scoring, pass the gold tags to
:func:`delinearise` (``pos_tags=``): the brackets are still entirely the model's, punctuation
is dropped on both sides as EVALB intends, and the F1 is the one parsing papers report.
Tagging accuracy is then meaningless (the tags are copied from gold) and should not be quoted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Optional, Sequence, Union

from nmt_toolkit.data.trees import Tree, TreeError, parse_tree, strip_function_tags

WORD_SYMBOL = "XX"
"""The one target symbol that stands for every (tag, word) leaf."""

DEFAULT_ROOT = "S"
"""Label of the root we invent when a model's output has none (flat trees, stray leaves)."""

EMPTY_ELEMENT = "-NONE-"


def read_treebank(path: Union[str, os.PathLike]) -> Iterator[str]:
    """Yield every tree in a treebank file as one line of text, in file order.

    Reads Penn Treebank ``.mrg`` files (trees spread over several lines, several per file) and
    one-tree-per-line files alike: a tree ends where its brackets balance. A directory is read
    file by file (its ``*.mrg`` files, sorted by name, or all files when it has none).
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.mrg")) or sorted(p for p in path.iterdir() if p.is_file())
        for file in files:
            yield from read_treebank(file)
        return
    try:
        handle = open(path, encoding="utf-8")
    except OSError as err:
        raise TreeError(f"cannot read treebank {path}: {err.strerror}") from err
    with handle:
        depth, parts, start = 0, [], 0
        for number, line in enumerate(handle, start=1):
            text = line.strip()
            if not text:
                continue
            if depth == 0:
                if not text.startswith("("):
                    raise TreeError(f"{path}:{number}: expected a tree starting with '(', got {text[:40]!r}")
                start = number
            for char in text:
                if char == "(":
                    depth += 1
                elif char == ")":
                    depth -= 1
                    if depth < 0:
                        raise TreeError(f"{path}:{number}: too many ')' in the tree starting on line {start}")
            parts.append(text)
            if depth == 0:
                yield " ".join(parts)
                parts = []
        if depth:
            raise TreeError(f"{path}: tree starting on line {start} is not closed at end of file")


def clean_tree(tree: Union[str, Tree]) -> Tree:
    """The tree without empty elements, emptied constituents, function tags or the outer wrapper."""
    if isinstance(tree, str):
        parsed = parse_tree(tree)
        if parsed is None:
            raise TreeError("empty tree")
        tree = parsed

    def clean(node: Tree) -> Optional[Tree]:
        if node.is_preterminal:
            return None if node.label == EMPTY_ELEMENT else Tree(node.label, word=node.word)
        children = [c for c in (clean(child) for child in node.children) if c is not None]
        return Tree(strip_function_tags(node.label), children) if children else None

    cleaned = clean(tree)
    if cleaned is None:
        raise TreeError(f"tree has no words once empty elements are removed: {tree}")
    while cleaned.label == "" and len(cleaned.children) == 1 and not cleaned.children[0].is_preterminal:
        cleaned = cleaned.children[0]
    if cleaned.label == "" or cleaned.is_preterminal:  # a wrapper over several trees, or a bare word
        cleaned = Tree(DEFAULT_ROOT, cleaned.children if cleaned.label == "" else [cleaned])
    return cleaned


def preprocess_tree(tree_str: str) -> str:
    """The cleaned tree as one line, POS tags kept: what the model is scored against."""
    return str(clean_tree(tree_str))


def linearise_tree(tree_str: Union[str, Tree]) -> tuple[list[str], list[str]]:
    """Source words and target tokens, ``(LABEL ... )LABEL`` with ``XX`` per word, of a (raw or clean) tree."""
    tree = clean_tree(tree_str)
    words: list[str] = []
    target: list[str] = []
    stack: list[tuple[Tree, bool]] = [(tree, False)]
    while stack:  # iterative depth-first walk: (node, closing?)
        node, closing = stack.pop()
        if closing:
            target.append(")" + node.label)
        elif node.is_preterminal:
            words.append(node.word)
            target.append(WORD_SYMBOL)
        else:
            target.append("(" + node.label)
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.children))
    return words, target


def delinearise(tgt_tokens: Sequence[str], words: Sequence[str],
                pos_tags: Optional[Sequence[str]] = None) -> str:
    """Put the words back into a predicted bracket sequence; always returns a well-formed tree.

    Leaves are tagged ``XX`` unless ``pos_tags`` (one per word, e.g. gold tags for scoring; see
    the module docstring) are given. Repairs, so that a bad prediction still scores:

    * a closer with nothing open is dropped; its label is ignored (brackets close by position);
      constituents still open at the end are closed;
    * anything predicted after the root closed goes back inside the root;
    * leaves beyond the number of words are dropped; words with no leaf are attached, in order,
      to the innermost constituent still open at the end (else to the root);
    * constituents that end up with no words are dropped;
    * an empty or bracket-free prediction gives the flat tree ``(S (XX w1) (XX w2) ...)``.

    Tokens other than ``(LABEL``, ``)LABEL`` and ``)`` count as a leaf. No words gives ``""``.
    """
    if pos_tags is not None and len(pos_tags) != len(words):
        raise ValueError(f"got {len(pos_tags)} POS tags for {len(words)} words")
    if not words:
        return ""
    tags = list(pos_tags) if pos_tags is not None else [WORD_SYMBOL] * len(words)
    root: Optional[Tree] = None
    stack: list[Tree] = []
    next_word = 0

    def open_for(node_or_leaf: Tree) -> None:
        nonlocal root
        if not stack:  # nothing open: use (re-open) the root, or make one
            if root is None:
                root = node_or_leaf if not node_or_leaf.is_preterminal else Tree(DEFAULT_ROOT)
                if root is node_or_leaf:
                    return
            stack.append(root)
        stack[-1].children.append(node_or_leaf)

    for token in tgt_tokens:
        if token.startswith("(") and len(token) > 1:
            node = Tree(token[1:])
            open_for(node)
            stack.append(node)
        elif token.startswith(")"):
            if stack:
                stack.pop()
        elif token != "(":
            if next_word < len(words):
                open_for(Tree(tags[next_word], word=words[next_word]))
                next_word += 1
    for index in range(next_word, len(words)):
        open_for(Tree(tags[index], word=words[index]))

    assert root is not None  # every word hangs somewhere below the root
    _drop_empty_constituents(root)
    return str(root)


def _drop_empty_constituents(root: Tree) -> None:
    """Remove constituents with no word below them (iteratively: model outputs can nest deeply)."""
    order, stack = [], [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(child for child in node.children if not child.is_preterminal)
    for node in reversed(order):  # children before parents
        node.children = [c for c in node.children if c.is_preterminal or c.children]

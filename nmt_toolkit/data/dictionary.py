"""A fairseq-compatible vocabulary: ``dict.<lang>.txt`` holds one ``symbol count`` per line.

The four special symbols are never written to the file; they always take the first indices::

    0 <s>    1 <pad>    2 </s>    3 <unk>    4… the file's symbols, in file order

A line ending in ``#fairseq:overwrite`` may repeat a symbol: as in fairseq, it takes a new index at the end
and the symbol maps to that one from then on; the earlier slot stays, so every later symbol's index is one
higher than without the line.

The vocabulary is padded to a multiple of ``padding_factor`` (8) with ``madeupword0000``,
``madeupword0001``… of count 0, exactly as fairseq's ``Dictionary.pad_to_multiple_``, and like fairseq
those fillers are written to the file too, so a file written here loads unchanged in fairseq and back.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from nmt_toolkit.errors import DataError

BOS, PAD, EOS, UNK = "<s>", "<pad>", "</s>", "<unk>"


class _Index(dict):
    """symbol → index; a missing symbol maps to ``<unk>`` without a Python-level ``get`` per token."""

    unk = 3

    def __missing__(self, key):
        return self.unk


class Dictionary:
    """Symbols and their counts; ``encode_line`` turns a tokenized line into ids with EOS appended."""

    def __init__(self):
        self.symbols: list[str] = []
        self.count: list[int] = []
        self.indices = _Index()
        self.bos_index = self.add_symbol(BOS)
        self.pad_index = self.add_symbol(PAD)
        self.eos_index = self.add_symbol(EOS)
        self.unk_index = self.add_symbol(UNK)
        self.indices.unk = self.unk_index
        self.nspecial = len(self.symbols)

    # ------------------------------------------------------------------ basics
    def bos(self) -> int:
        return self.bos_index

    def pad(self) -> int:
        return self.pad_index

    def eos(self) -> int:
        return self.eos_index

    def unk(self) -> int:
        return self.unk_index

    def __len__(self) -> int:
        return len(self.symbols)

    def __getitem__(self, i: int) -> str:
        if 0 <= i < len(self.symbols):
            return self.symbols[i]
        return UNK

    def __contains__(self, sym: str) -> bool:
        return dict.__contains__(self.indices, sym)

    def __eq__(self, other) -> bool:
        return isinstance(other, Dictionary) and self.symbols == other.symbols

    def __hash__(self):  # mutable; identity hash is enough for caches keyed by object
        return id(self)

    def checksum(self) -> str:
        """SHA-256 of the symbols in index order: what decides the ids a text is encoded to (counts do not).

        ``preprocess.json`` records it per split, so a split binarized with another dictionary is refused."""
        return hashlib.sha256("\n".join(self.symbols).encode("utf-8")).hexdigest()

    def fingerprint(self) -> dict:
        """The dictionary's identity as every file records it (checkpoints, model folders' manifests,
        ``preprocess.json``): its size and :meth:`checksum`. Two dictionaries of one size but other symbols
        differ here, where a tensor shape check cannot see them; compare with :func:`fingerprint_mismatch`."""
        return {"size": len(self), "sha256": self.checksum()}

    def __repr__(self) -> str:
        return f"Dictionary({len(self)} symbols)"

    def index(self, sym: str) -> int:
        return self.indices[sym]

    def add_symbol(self, word: str, n: int = 1, overwrite: bool = False) -> int:
        """Index of ``word``, its count raised by ``n``; a new slot at the end when it is new or ``overwrite``
        (fairseq's ``#fairseq:overwrite``: the symbol then maps to the new slot, the old one stays)."""
        if dict.__contains__(self.indices, word) and not overwrite:
            idx = self.indices[word]
            self.count[idx] += n
            return idx
        idx = len(self.symbols)
        self.indices[word] = idx
        self.symbols.append(word)
        self.count.append(n)
        return idx

    # ------------------------------------------------------------------ building
    @classmethod
    def from_counts(cls, counts: Counter, threshold: int = 0, nwords: int = -1,
                    padding_factor: int = 8) -> "Dictionary":
        """Most frequent first (ties alphabetical, as fairseq's ``finalize``), then padded."""
        d = cls()
        specials = set(d.symbols)
        items = sorted(((c, s) for s, c in counts.items() if s not in specials), key=lambda cs: (-cs[0], cs[1]))
        if nwords is not None and nwords >= 0:
            items = items[: max(nwords, 0)]
        for c, s in items:
            if c >= threshold:
                d.add_symbol(s, c)
        d.pad_to_multiple_(padding_factor)
        return d

    def pad_to_multiple_(self, padding_factor: int) -> None:
        """fairseq's padding: ``madeupword%04d`` fillers of count 0 until ``len(self) % factor == 0``."""
        if padding_factor > 1:
            i = 0
            while len(self) % padding_factor != 0:
                self.add_symbol(f"madeupword{i:04d}", n=0)
                i += 1

    # ------------------------------------------------------------------ files
    @classmethod
    def load(cls, path: str) -> "Dictionary":
        d = cls()
        try:
            handle = open(path, encoding="utf-8", newline="\n")  # one line per \n (data/lines.py)
        except OSError as exc:
            raise DataError(f"dictionary {path}: cannot read ({exc.strerror})") from None
        with handle:
            try:
                for lineno, line in enumerate(handle, start=1):
                    line = line.rstrip("\r\n")
                    word, sep, field = line.rpartition(" ")
                    overwrite = field == "#fairseq:overwrite"  # fairseq's per-line flag: a duplicate is allowed
                    if overwrite:
                        word, sep, field = word.rpartition(" ")
                    # isdigit() also accepts '²' and other digits int() refuses: only ASCII 0-9 is a count
                    if not sep or not word or not (field.isascii() and field.isdigit()):
                        raise DataError(f"dictionary {path} line {lineno}: expected 'symbol count' with a whole "
                                        f"number as count, got {line[:60]!r}")
                    if dict.__contains__(d.indices, word) and not overwrite:
                        raise DataError(f"dictionary {path} line {lineno}: duplicate symbol {word!r} (add "
                                        "#fairseq:overwrite to the line to give it a new index)")
                    d.add_symbol(word, int(field), overwrite=overwrite)
            except UnicodeDecodeError:
                raise DataError(f"dictionary {path}: not valid UTF-8") from None
        return d

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(self.to_text())

    def to_text(self) -> str:
        """The file's lines; a symbol that already has an earlier index carries ``#fairseq:overwrite``, so that
        the file loads back to the same indices here and in fairseq."""
        seen = set(self.symbols[:self.nspecial])
        lines = []
        for s, c in zip(self.symbols[self.nspecial:], self.count[self.nspecial:]):
            lines.append(f"{s} {c} #fairseq:overwrite\n" if s in seen else f"{s} {c}\n")
            seen.add(s)
        return "".join(lines)

    # ------------------------------------------------------------------ encoding
    def encode_tokens(self, tokens: Sequence[str]) -> np.ndarray:
        """Ids of already split tokens, EOS appended (one C-level dict lookup per token)."""
        ids = np.empty(len(tokens) + 1, dtype=np.int32)
        ids[:-1] = list(map(self.indices.__getitem__, tokens))
        ids[-1] = self.eos_index
        return ids

    def encode_line(self, line: str, add_eos: bool = True) -> np.ndarray:
        """``np.int32`` ids of a whitespace-tokenized line, unknown symbols → ``<unk>``, EOS appended."""
        ids = self.encode_tokens(line.split())
        return ids if add_eos else ids[:-1]

    def string(self, ids: Iterable[int], bpe_symbol: Optional[str] = None, escape_unk: bool = False,
               strip_eos: bool = True) -> str:
        """Symbols of ``ids`` joined by spaces; padding (and EOS) dropped; ``bpe_symbol`` removed."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        skip = {self.pad_index, self.eos_index} if strip_eos else {self.pad_index}
        syms = self.symbols
        n = len(syms)
        out = []
        for i in ids:
            if i in skip:
                continue
            if i == self.unk_index and escape_unk:
                out.append("<<unk>>")
            else:
                out.append(syms[i] if 0 <= i < n else UNK)
        text = " ".join(out)
        return remove_bpe(text, bpe_symbol)


def remove_bpe(text: str, bpe_symbol: Optional[str]) -> str:
    """Undo subword segmentation: ``sentencepiece`` (▁ marks word starts) or a continuation marker (``@@ ``)."""
    if not bpe_symbol:
        return text
    if bpe_symbol == "sentencepiece":
        return text.replace(" ", "").replace("\u2581", " ").strip()
    if bpe_symbol in ("subword_nmt", "@@"):
        bpe_symbol = "@@ "
    return (text + " ").replace(bpe_symbol, "").rstrip()


def _digest(fingerprint: Any) -> Optional[str]:
    """The sha256 a fingerprint records; ``checksum`` is the same digest under the key name of data-bins'
    ``preprocess.json`` files written before it was ``sha256`` there too (they stay readable)."""
    if not isinstance(fingerprint, dict):
        return None
    return fingerprint.get("sha256") or fingerprint.get("checksum") or None


def fingerprint_mismatch(first: Any, second: Any, required: bool = False) -> Optional[str]:
    """How two :meth:`Dictionary.fingerprint` records differ, as ``"N symbols, sha256 0123456789ab… against M
    symbols, sha256 …"`` (``first`` first) for an error message; None when they agree. A record without a digest
    (fairseq's checkpoints have none) agrees with anything unless ``required``: the one comparison of
    dictionary identity, wherever a file records it."""
    a, b = _digest(first), _digest(second)
    if (a is None or b is None) and not required:
        return None
    sizes = [r.get("size") if isinstance(r, dict) else None for r in (first, second)]
    if a is not None and a == b and (sizes[0] == sizes[1] or (None in sizes and not required)):
        return None
    return f"{sizes[0]} symbols, sha256 {str(a)[:12]}… against {sizes[1]} symbols, sha256 {str(b)[:12]}…"

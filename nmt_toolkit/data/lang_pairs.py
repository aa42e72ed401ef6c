"""``--lang-pairs en-de,en-fr,de-en``: translation directions as fairseq's multilingual tasks write them."""
from __future__ import annotations

from nmt_toolkit.data.language_codes import is_language_code
from nmt_toolkit.errors import UsageError


def parse_lang_pairs(text: str, flag: str = "--lang-pairs") -> list[tuple[str, str]]:
    """The directions of ``text`` in the order given; a malformed, repeated or same-language pair is one
    line naming ``flag``. A language is a language code (data/language_codes.py: file names carry it between
    dots and a dash)."""
    pairs: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()  # a many-to-many model lists thousands of directions
    for item in text.split(","):
        parts = item.strip().split("-")
        if len(parts) != 2 or not all(is_language_code(p) for p in parts):
            raise UsageError(f"{flag} {text}: {item.strip()!r} is not a pair SRC-TGT such as en-de")
        pair = (parts[0], parts[1])
        if pair[0] == pair[1]:
            raise UsageError(f"{flag} {text}: {item.strip()!r} translates a language into itself")
        if pair in seen:
            raise UsageError(f"{flag} {text}: {item.strip()!r} is given twice")
        seen.add(pair)
        pairs.append(pair)
    return pairs


def languages(pairs: list[tuple[str, str]]) -> list[str]:
    """Every language of ``pairs``, in the order of first appearance."""
    seen: list[str] = []
    for pair in pairs:
        seen += [lang for lang in pair if lang not in seen]
    return seen

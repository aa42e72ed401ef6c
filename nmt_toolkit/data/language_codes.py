"""Language codes and language tags, checked in one place wherever they are read: manifests, tokenizer
configs, ``preprocess.json``, ``nmt_export.json``, ``--lang-pairs``.

A code becomes part of file names (``dict.de.txt``, ``train.en-de.de.bin``) and of tokens (``__de__``,
``>>de<<``), so it is BCP-47-like but restricted to what those names can carry: ASCII letters, digits and
``_`` (NLLB's ``eng_Latn``, mBART's ``en_XX``), starting with a letter, at most :data:`MAX_CODE_LENGTH`
characters. A dash (a BCP-47 separator) would split ``en-de``; a dot, a slash, NUL or a bidirectional
control character (U+202E) would make the file names lie.

A language tag is the token a model reads as "translate into": OPUS-MT's ``>>fra<<`` or fairseq's
``__de__`` around a valid code, and a symbol of the model's source dictionary. Special symbols (``</s>``,
``<pad>``, ``<unk>``) and ordinary words are not tags.
"""
from __future__ import annotations

import re
from typing import Iterable, Optional

from nmt_toolkit.errors import DataError

MAX_CODE_LENGTH = 32
LANGUAGE_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_TAG = re.compile(r">>(.+)<<|__(.+)__")


def is_language_code(code) -> bool:
    return isinstance(code, str) and len(code) <= MAX_CODE_LENGTH and LANGUAGE_CODE.fullmatch(code) is not None


def check_language_code(code, where: str, error: type = DataError) -> str:
    """``code`` if it is a language code (see the module docstring), else ``error`` naming ``where`` (a file
    and key, or a flag) and the code as ``ascii()`` shows it (a control character stays visible)."""
    if not is_language_code(code):
        raise error(f"{where} {ascii(code)[:80]}: not a language code (ASCII letters, digits and _, starting with "
                    f"a letter, at most {MAX_CODE_LENGTH} characters, e.g. en, de, eng_Latn)")
    return code


def is_language_tag(symbol) -> bool:
    """``>>code<<`` or ``__code__`` around a valid language code."""
    match = _TAG.fullmatch(symbol) if isinstance(symbol, str) else None
    return match is not None and is_language_code(match.group(1) or match.group(2))


def language_tags(symbols: Iterable[str]) -> list[str]:
    """The language tags among ``symbols`` (a vocabulary, a dictionary's symbols), in their order."""
    return [s for s in symbols if is_language_tag(s)]


def check_language_tag(tag, symbols, where: str, error: type = DataError, owner: Optional[str] = None) -> str:
    """``tag`` if it is a language tag and one of ``symbols`` (the source dictionary or vocabulary), else
    ``error`` naming ``where`` (the flag, or the file and key it was read from) and the tags there are."""
    if is_language_tag(tag) and tag in symbols:
        return tag
    known = language_tags(symbols)
    listed = f"it has {', '.join(known[:8])}{' …' if len(known) > 8 else ''}" if known else "it has none"
    shown = tag if isinstance(tag, str) and tag.isprintable() else ascii(tag)
    raise error(f"{where} {shown[:80]}: not a language tag of {owner or 'the source dictionary'} ({listed}; a "
                f"tag is a token such as >>fra<< or __de__)")

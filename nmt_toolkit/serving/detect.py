"""Language identification for ``POST /detect`` and ``source: "auto"``: which of the served languages a text
is written in, with a confidence from 0 to 100 (LibreTranslate's scale).

The identifier is py3langid, a maintained fork of langid.py: a naive Bayes classifier over byte n-grams whose
model (4.5 MB) ships inside the package, read with numpy; nothing is downloaded or compiled. It was chosen by
``benchmarks/detect_accuracy.py`` (docs/serving.md has the figures). Restricted to the served languages, it
answers only among them, which is what a client of a translation server needs: the language to translate
from. A :class:`Detector` is made once when the server starts (reading the model takes about half a second);
importing this module loads nothing.
"""
from __future__ import annotations

from typing import Optional, Sequence

#: the package that identifies languages (the [serve] extra installs it)
LIBRARY = "py3langid"

#: served codes (ISO 639-1, as the toolkit names languages) that py3langid names otherwise
ALIASES = {"nb": "no"}


def library_code(code: str, known: frozenset[str]) -> Optional[str]:
    """py3langid's code for the served language ``code``, or None when it cannot identify that language.
    A code with a region or script after ``_`` (mBART's ``en_XX``, ``pt_BR``) is identified by its
    language part; NLLB's three-letter codes (``eng_Latn``) only where py3langid uses the same one."""
    for candidate in (code.lower(), code.split("_")[0].lower()):
        candidate = ALIASES.get(candidate, candidate)
        if candidate in known:
            return candidate
    return None


class Detector:
    """Ranks the served languages a text may be in. ``languages``: the served codes it can identify, in the
    order given; ``unknown``: the served codes it cannot (never answered)."""

    def __init__(self, languages: Sequence[str]):
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        known = frozenset(identifier.labels)
        self._codes = {code: library_code(code, known) for code in dict.fromkeys(languages)}
        self.languages = [code for code, theirs in self._codes.items() if theirs is not None]
        self.unknown = [code for code, theirs in self._codes.items() if theirs is None]
        if self.languages:
            identifier.set_languages(sorted({self._codes[code] for code in self.languages}))
        self._identifier = identifier

    def detect(self, text: str) -> list[tuple[str, float]]:
        """``[(served code, confidence 0-100), …]`` over :attr:`languages`, best first (ties in the served
        order). The confidences are the classifier's probabilities restricted to these languages (they sum to
        100 over the languages it tells apart): a text in none of them still gets the closest, with the
        confidence it earns."""
        if not self.languages:
            return []
        scores = dict(self._identifier.rank(text))
        found = [(code, round(100.0 * float(scores[self._codes[code]]), 2)) for code in self.languages]
        return sorted(found, key=lambda item: -item[1])

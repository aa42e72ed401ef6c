"""The loaded models of a server, one :class:`~nmt_toolkit.generation.translator.Translator` per language
pair, and what the batcher calls to decode a batch of one pair with one set of search options."""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

from nmt_toolkit.errors import NmtError

#: the search options a request may set (GenerationConfig fields, named as nmt-generate's flags)
REQUEST_OPTIONS = ("beam", "nbest", "lenpen", "lenpen_style", "max_len_a", "max_len_b", "min_len", "unkpen",
                   "no_repeat_ngram_size", "early_stop", "sampling", "sampling_topk", "sampling_topp", "temperature")

#: translators with other options than the server's, kept for reuse (each shares the loaded model)
OPTION_CACHE_SIZE = 32


class RequestError(Exception):
    """A request the server refuses: ``status`` (4xx/5xx) and one line saying why, as LibreTranslate's
    ``{"error": …}``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class ServedModel:
    """One language pair's translator. ``decode`` runs on the batcher's threads; everything else on the loop."""

    source: str
    target: str
    translator: Any

    def __post_init__(self):
        self._variants: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def engine(self) -> str:
        return self.translator.engine.name

    def encode(self, sentences: Sequence[str]) -> list:
        """Sentences → id arrays; a sentence the model cannot take is a 400 naming it and the limit."""
        try:
            return self.translator.encode(list(sentences), "request", budget=False, unit="sentence")
        except NmtError as exc:
            raise RequestError(400, str(exc)) from None

    def options_key(self, options: dict[str, Any]) -> tuple:
        """The request's search options as a hashable key, after checking them as nmt-generate checks its
        flags (a value out of range, nbest > beam …: a 400 naming the field)."""
        key = tuple(sorted(options.items()))
        self._variant(key)
        return key

    def decode(self, options: tuple, ids: Sequence) -> list[tuple]:
        """One batch of encoded sentences → their hypotheses (best first), in order."""
        import torch

        translator = self._variant(options)
        with torch.inference_mode():
            found = translator.translate_batch(translator.collate(ids))
        return [tuple(translator.hypothesis(h) for h in hyps) for hyps in found]

    def _variant(self, options: tuple):
        if not options:
            return self.translator
        with self._lock:
            if options in self._variants:
                self._variants.move_to_end(options)
                return self._variants[options]
        try:
            variant = self.translator.with_options(**dict(options))
        except NmtError as exc:
            raise RequestError(400, _field_names(str(exc))) from None
        with self._lock:
            self._variants[options] = variant
            while len(self._variants) > OPTION_CACHE_SIZE:
                self._variants.popitem(last=False)
        return variant


class ModelPool:
    """The served language pairs; the batcher's ``decode`` dispatches a key ``(source, target, options)``."""

    def __init__(self, models: Sequence[ServedModel]):
        self.models = {(m.source, m.target): m for m in models}

    def get(self, source: str, target: str) -> ServedModel:
        model = self.models.get((source, target))
        if model is not None:
            return model
        if not any(s == source for s, _ in self.models):
            raise RequestError(400, f"{source} is not supported")
        if not any(t == target for _, t in self.models):
            raise RequestError(400, f"{target} is not supported")
        raise RequestError(400, f"{target} is not available as a target language from {source}")

    def languages(self) -> dict[str, list[str]]:
        """Every language served, each with the targets it translates into (none for a target-only one)."""
        found: dict[str, list[str]] = {}
        for source, target in self.models:
            found.setdefault(source, []).append(target)
        for _, target in self.models:
            found.setdefault(target, [])
        return found

    def decode(self, key: Hashable, ids: Sequence) -> list[tuple]:
        source, target, options = key
        return self.models[(source, target)].decode(options, ids)


def _field_names(message: str) -> str:
    """An option error as a request sees it: ``--max-len-b`` is the field ``max_len_b``."""
    message = message.replace("Translator options: ", "")
    return re.sub(r"--([a-z0-9]+(?:-[a-z0-9]+)*)", lambda m: m.group(1).replace("-", "_"), message)

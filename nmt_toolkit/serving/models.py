"""The loaded models of a server, one :class:`~nmt_toolkit.generation.translator.Translator` per loaded model
(a bilingual model serves its pair, a multilingual one every direction between its languages), and what the
batcher calls to decode a batch of one direction with one set of search options."""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Optional, Sequence

from nmt_toolkit.config import shown_value
from nmt_toolkit.errors import NmtError

#: the search options a request may set (GenerationConfig fields, named as nmt-generate's flags): each is
#: checked by the code that checks the flag (its range or choices), through Translator.with_options
REQUEST_OPTIONS = ("beam", "nbest", "lenpen", "lenpen_style", "max_len_a", "max_len_b", "min_len", "unkpen",
                   "no_repeat_ngram_size", "early_stop", "sampling", "sampling_topk", "sampling_topp", "temperature")

#: the GenerationConfig fields a request may not set, and why (every field is one or the other: a new option
#: must be placed, and a request option then joins the request body and its tests by itself)
SERVER_ONLY = {
    "path": "the models are loaded once, at start",
    "max_len_source": "'batch' would make a request's length limit depend on the requests it is batched with",
    "prefix_size": "it forces reference tokens, and a request has no references",
    "score_reference": "it scores references, and a request has none",
    "forced_prefix_score": "how a forced language token counts is the served model's setting",
    "target_lang_tag": "the served direction sets the language tag",
    "static_search": "how the server's device runs the search is the server's setting",
    "static_check_interval": "how the server's device runs the search is the server's setting",
    "cpu_packed_linear": "the model is prepared for the CPU once, at start",
    "cpu_batch_size": "the server forms its own batches from the requests it holds",
    "constraints": "a request's phrases come from its glossary or the server's (--glossary, --keep), in any order",
}

#: translators with other options than the server's, kept for reuse (each shares the loaded model)
OPTION_CACHE_SIZE = 32


class RequestError(Exception):
    """A request the server refuses: ``status`` (4xx/5xx) and one line saying why, as LibreTranslate's
    ``{"error": …}``."""

    def __init__(self, status: int, message: str, headers: Optional[dict[str, str]] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class ConstrainedIds:
    """An encoded sentence with the target phrases (ids) its translation must contain; as long as its ids
    for the batcher's token budget."""

    __slots__ = ("ids", "phrases")

    def __init__(self, ids, phrases: list[list[int]]):
        self.ids, self.phrases = ids, phrases

    def __len__(self) -> int:
        return len(self.ids)


class _OnOneTranslator:
    """What a served model reports of the translator it decodes with."""

    translator: Any

    @property
    def engine(self) -> str:
        """The engine's name (torch, ctranslate2), as /health lists it."""
        return self.translator.engine.name


@dataclass
class ServedModel(_OnOneTranslator):
    """One language pair's translator. ``decode`` runs on the batcher's threads; everything else on the loop."""

    source: str
    target: str
    translator: Any

    def __post_init__(self):
        self._variants: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"{self.source}-{self.target}"

    def pairs(self) -> list[tuple[str, str]]:
        return [(self.source, self.target)]

    def serves(self, source: str, target: str) -> bool:
        return (source, target) == (self.source, self.target)

    def direction(self, source: str, target: str) -> "ServedModel":
        return self

    def encode(self, sentences: Sequence[str]) -> list:
        """Sentences → id arrays; a sentence the model cannot take is a 400 naming it and the limit."""
        try:
            return self.translator.encode(list(sentences), "request", budget=False, unit="sentence")
        except NmtError as exc:
            raise RequestError(400, str(exc)) from None

    def encode_constraints(self, phrases: Sequence[Sequence[str]], ids: Sequence) -> list:
        """Each sentence's target phrases as ids; a phrase the model cannot write is a 400 naming it."""
        try:
            return self.translator.encode_constraints(phrases, ids, "request", unit="sentence")
        except NmtError as exc:
            raise RequestError(400, str(exc)) from None

    def source_tokens(self, sentences: Sequence[str]) -> list[list[Optional[str]]]:
        """Each sentence as the model reads it (:meth:`Translator.source_tokens`); a sentence the model cannot
        take is a 400."""
        try:
            return self.translator.source_tokens(sentences, "request")
        except NmtError as exc:
            raise RequestError(400, str(exc)) from None

    def alignment_refusal(self) -> Optional[str]:
        """Why this model's hypotheses come without word alignments (None: they can have them)."""
        if self.translator.models is None:
            return "the CTranslate2 engine gives none (run nmt-serve with --engine torch)"
        if self.translator.gen.static_search == "on":
            return "--static-search on records no attention (use --static-search auto)"
        return None

    def options_key(self, options: dict[str, Any], scores: bool = True, alignment: bool = False) -> tuple:
        """The request's search options as a hashable key, after checking them as nmt-generate checks its
        flags (a value out of range, nbest > beam …: a 400 naming the field); ``scores=False``: the answer
        shows no per-token scores, which CTranslate2 then does not compute (a second pass over each batch);
        ``alignment``: each hypothesis carries its alignment (the search records the attention)."""
        key = (tuple(sorted(options.items())), scores, alignment)
        self._variant(key)
        return key

    def deterministic(self, options: tuple) -> bool:
        """Whether the search of ``options`` (a key of :meth:`options_key`) gives the same hypotheses for the
        same sentence every time, so they may be cached: not when it samples."""
        return not self._variant(options).gen.sampling

    def decode(self, options: tuple, ids: Sequence, stop: Optional[Callable[[], bool]] = None) -> list[tuple]:
        """One batch of encoded sentences → their hypotheses (best first), in order; ``stop`` (asked between
        search steps) ends the search early with ``SearchStopped``."""
        import torch

        translator = self._variant(options)
        phrases = None
        if ids and isinstance(ids[0], ConstrainedIds):
            phrases, ids = [x.phrases for x in ids], [x.ids for x in ids]
        with torch.inference_mode():
            found = translator.translate_batch(translator.collate(ids), need_attn=options[2], stop=stop,
                                               constraints=phrases)
        return [tuple(translator.hypothesis(h) for h in hyps) for hyps in found]

    def _variant(self, key: tuple):
        key = key[:2]  # the alignment is asked of the search, not of the translator
        options, scores = key
        if not options and scores:
            return self.translator
        with self._lock:
            if key in self._variants:
                self._variants.move_to_end(key)
                return self._variants[key]
        try:
            variant = self.translator.with_options(**dict(options))
        except NmtError as exc:
            raise RequestError(400, _field_names(str(exc))) from None
        if not scores:
            variant = variant.without_scores()
        with self._lock:
            self._variants[key] = variant
            while len(self._variants) > OPTION_CACHE_SIZE:
                self._variants.popitem(last=False)
        return variant


class MultilingualModel(_OnOneTranslator):
    """A multilingual model: one translator (the weights loaded once) serving every direction between its
    languages, the zero-shot ones included. A direction is a :class:`ServedModel` made on first use from
    :meth:`~nmt_toolkit.generation.translator.Translator.for_direction`: it shares the weights and differs
    only in the language tokens, so batches are cut per direction and never mix two."""

    def __init__(self, translator: Any):
        self.translator = translator
        self.languages: list[str] = list(translator.task.langs)
        self._directions: dict[tuple[str, str], ServedModel] = {}
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """``de|en|fr (every direction)``; a model of more than 12 languages by their number (NLLB-200's
        codes alone would make a 2 kB line)."""
        shown = "|".join(self.languages) if len(self.languages) <= 12 else f"{len(self.languages)} languages"
        return f"{shown} (every direction)"

    def pairs(self) -> list[tuple[str, str]]:
        return [(s, t) for s in self.languages for t in self.languages if s != t]

    def serves(self, source: str, target: str) -> bool:
        return source != target and source in self.languages and target in self.languages

    def direction(self, source: str, target: str) -> ServedModel:
        with self._lock:
            served = self._directions.get((source, target))
            if served is None:
                served = ServedModel(source, target, self.translator.for_direction(source, target))
                self._directions[(source, target)] = served
            return served


class ModelPool:
    """The served models; the batcher's ``decode`` dispatches a key ``(source, target, options)``."""

    def __init__(self, models: Sequence[Any]):
        self.models = list(models)

    def get(self, source: str, target: str) -> ServedModel:
        """The direction ``source`` → ``target``; one no model serves is LibreTranslate's 400."""
        for model in self.models:
            if model.serves(source, target):
                return model.direction(source, target)
        pairs = self.pairs()
        if not any(s == source for s, _ in pairs):
            raise RequestError(400, f"{shown_value(source)} is not supported")
        if not any(t == target for _, t in pairs):
            raise RequestError(400, f"{shown_value(target)} is not supported")
        raise RequestError(400, f"{target} is not available as a target language from {source}")

    def pairs(self) -> list[tuple[str, str]]:
        return [pair for model in self.models for pair in model.pairs()]

    def languages(self) -> dict[str, list[str]]:
        """Every language served, each with the targets it translates into (none for a target-only one)."""
        found: dict[str, list[str]] = {}
        pairs = self.pairs()
        for source, target in pairs:
            found.setdefault(source, []).append(target)
        for _, target in pairs:
            found.setdefault(target, [])
        return found

    def decode(self, key: Hashable, ids: Sequence, stop: Optional[Callable[[], bool]] = None) -> list[tuple]:
        source, target, options = key
        return self.get(source, target).decode(options, ids, stop)


def _field_names(message: str) -> str:
    """An option error as a request sees it: ``--max-len-b`` is the field ``max_len_b``."""
    message = message.replace("Translator options: ", "")
    return re.sub(r"--([a-z0-9]+(?:-[a-z0-9]+)*)", lambda m: m.group(1).replace("-", "_"), message)

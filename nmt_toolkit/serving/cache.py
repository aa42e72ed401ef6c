"""Translations already made, kept for the next request that asks for them: the LibreTranslate web page sends
the whole text again at each pause in typing, and its unchanged sentences need no second decode.

An entry is one encoded sentence under one decoder key (direction, search options, whether scores and
alignments are wanted) and, for a constrained sentence, its target phrases: what decoding it depends on, so
two requests share an entry only when their decodes would be the same search. Sampled searches are random
and are never cached (the caller decides, :meth:`ServedModel.deterministic`)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Hashable, Optional


class TranslationCache:
    """A least-recently-used map of at most ``size`` sentences to their hypotheses; ``size`` 0 keeps nothing.
    ``hits``/``misses`` count lookups (the metrics read them)."""

    def __init__(self, size: int):
        self.size = size
        self.hits = self.misses = 0
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Optional[Any]:
        """The hypotheses stored under ``key`` (now the most recently used), or None."""
        if self.size <= 0:
            return None
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found

    def put(self, key: Hashable, hypotheses: Any) -> None:
        """Keep ``hypotheses`` under ``key``, forgetting the least recently used entry past ``size``."""
        if self.size <= 0:
            return
        with self._lock:
            self._entries[key] = hypotheses
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


def sentence_key(decoder: Hashable, ids: Any) -> Hashable:
    """The cache key of one encoded sentence (an id array, or a ``ConstrainedIds`` with its phrases' ids)
    under its decoder's key."""
    phrases = getattr(ids, "phrases", None)
    if phrases is not None:
        return decoder, tuple(int(i) for i in ids.ids), tuple(tuple(int(i) for i in p) for p in phrases)
    return decoder, tuple(int(i) for i in ids), None

"""What the endpoints share: translate a request's sentences through the batcher, within its limits and
its time, and give up (dropping the work) when its client goes away."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from nmt_toolkit.serving.batcher import DynamicBatcher
from nmt_toolkit.serving.config import ServeConfig
from nmt_toolkit.serving.models import ConstrainedIds, ModelPool, RequestError, ServedModel

#: the status a request gets when its client went away first (nginx's "client closed request"): nobody
#: reads it, but the metrics count it apart from real errors
CLIENT_GONE = 499


@dataclass
class Service:
    """The loaded models, the batcher and the limits: everything a request needs."""

    pool: ModelPool
    batcher: DynamicBatcher
    cfg: ServeConfig
    keys: Optional[frozenset[str]] = None
    glossary: Any = None  # the served glossary (--glossary) and keep patterns (--keep): every request's
    keep: Any = None      # terms unless a /v1/translate request brings its own glossary

    def model_for(self, source: Optional[str], target: Optional[str]) -> ServedModel:
        if source == "auto":
            codes = ", ".join(sorted(code for code, targets in self.pool.languages().items() if targets))
            raise RequestError(400, f"source auto: this server has no language identifier; name the source "
                                    f"language ({codes})")
        if source is None or target is None:
            pairs = self.pool.pairs()
            if len(pairs) != 1:
                raise RequestError(400, "Invalid request: name source and target (the server has several pairs)")
            source, target = source or pairs[0][0], target or pairs[0][1]
        return self.pool.get(source, target)

    def check_chars(self, texts: Sequence[str]) -> None:
        """The request's characters within --max-chars: checked first, before any work that grows with them."""
        chars = sum(len(t) for t in texts)
        if chars > self.cfg.max_chars:
            raise RequestError(400, f"Invalid request: request ({chars}) exceeds text limit ({self.cfg.max_chars} "
                                    f"characters, the server's --max-chars)")

    def check_sentences(self, sentences: int) -> None:
        if sentences > self.cfg.max_sentences:
            raise RequestError(400, f"Invalid request: request ({sentences} sentences) exceeds the limit of "
                                    f"{self.cfg.max_sentences} (the server's --max-sentences)")

    def check_search(self, options: dict[str, Any]) -> None:
        beam, nbest = options.get("beam"), options.get("nbest")
        if beam is not None and beam > self.cfg.max_beam:
            raise RequestError(400, f"Invalid request: beam {beam} is over the server's --max-beam "
                                    f"{self.cfg.max_beam}")
        if nbest is not None and nbest > self.cfg.max_nbest:
            raise RequestError(400, f"Invalid request: nbest {nbest} is over the server's --max-nbest "
                                    f"{self.cfg.max_nbest}")

    def phrases(self, sentences: Sequence[str], glossary: Any = None) -> Optional[list[list[str]]]:
        """Each sentence's target phrases from ``glossary`` (else the served one) and the served keep
        patterns, or None when there are none at all."""
        from nmt_toolkit.generation.terminology import sentence_constraints

        glossary = self.glossary if glossary is None else glossary
        if glossary is None and self.keep is None:
            return None
        found = [sentence_constraints(s, glossary, self.keep) for s in sentences]
        return found if any(found) else None

    async def translate(self, request, model: ServedModel, sentences: Sequence[str],
                        options: dict[str, Any], scores: bool = True,
                        phrases: Optional[Sequence[Sequence[str]]] = None) -> list[tuple]:
        """Each sentence's hypotheses (best first; none for an empty sentence), in order; ``scores=False``:
        their per-token scores are not wanted (NaN where the engine would compute them apart). ``phrases``:
        each sentence's target phrases its translation must contain (a constrained search, in any order)."""
        ids = model.encode(sentences)
        if phrases is not None:
            wanted = model.encode_constraints(phrases, ids)
            ids = [ConstrainedIds(x, p) for x, p in zip(ids, wanted)]
            options = {**options, "constraints": "unordered"}
        key = (model.source, model.target, model.options_key(options, scores))
        nonempty = [i for i, x in enumerate(ids) if len(x) > 1]  # an empty sentence has only its EOS
        future = self.batcher.submit(key, [ids[i] for i in nonempty])
        found = await self._wait(request, future)
        results: list[tuple] = [()] * len(sentences)
        for i, hyps in zip(nonempty, found):
            results[i] = hyps
        return results

    async def _wait(self, request, future: asyncio.Future) -> list:
        """The future's result; 503 after --request-timeout, :data:`CLIENT_GONE` when the client disconnects.
        Either way the future is cancelled, so the batcher drops whatever of it has not decoded yet."""
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({future, gone}, timeout=self.cfg.request_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if future in done:
            return future.result()
        future.cancel()
        if gone in done:
            raise RequestError(CLIENT_GONE, "client disconnected")
        raise RequestError(503, f"Translation timed out after {self.cfg.request_timeout:g} s (the server's "
                                f"--request-timeout); the server is busy, try again later")


async def _disconnected(request) -> None:
    """Return when the client has gone away (the ASGI server reports it once the body has been read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return

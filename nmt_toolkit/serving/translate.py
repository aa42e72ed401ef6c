"""What the endpoints share: translate a request's sentences through the batcher, within its limits and
its time, and give up (dropping the work) when its client goes away."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from nmt_toolkit.serving.batcher import DynamicBatcher
from nmt_toolkit.serving.cache import TranslationCache, sentence_key
from nmt_toolkit.serving.config import ServeConfig
from nmt_toolkit.serving.detect import LIBRARY, Detector
from nmt_toolkit.serving.limits import RateLimiter, retry_after
from nmt_toolkit.serving.models import ConstrainedIds, ModelPool, RequestError, ServedModel

#: the status a request gets when its client went away first (nginx's "client closed request"): nobody
#: reads it, but the metrics count it apart from real errors
CLIENT_GONE = 499

#: texts of at most this many characters are identified together with the request's other texts
SHORT_TEXT = 40


@dataclass
class Service:
    """The loaded models, the batcher, the limits and the translation cache: everything a request needs.
    ``keys``: the API keys, each with its own requests per minute or None (--req-limit's)."""

    pool: ModelPool
    batcher: DynamicBatcher
    cfg: ServeConfig
    keys: Optional[Mapping[str, Optional[int]]] = None
    glossary: Any = None  # the served glossary (--glossary) and keep patterns (--keep): every request's
    keep: Any = None      # terms unless a /v1/translate request brings its own glossary
    detector: Optional[Detector] = None  # the served languages' identifier; None without its library
    suggestions: Any = None  # where /suggest stores (a SuggestionStore, --suggestions); None: refused
    documents: Any = None  # the limits of /translate_file's documents (a DocumentConfig); None: the defaults
    limiter: RateLimiter = field(init=False)
    cache: TranslationCache = field(init=False)

    def __post_init__(self):
        self.limiter = RateLimiter(self.cfg.req_limit)
        self.cache = TranslationCache(self.cfg.cache_size)

    def model_for(self, source: Optional[str], target: Optional[str]) -> ServedModel:
        """The served direction ``source`` → ``target`` (either may be left out when the server has one pair);
        ``auto`` is detected per text by the endpoint first (:meth:`detect_sources`), so here it is a 400."""
        if source == "auto":
            raise RequestError(400, "Invalid request: source auto is for /translate (LibreTranslate's API); name "
                                    "the source language here")
        if source is None or target is None:
            pairs = self.pool.pairs()
            if len(pairs) != 1:
                raise RequestError(400, "Invalid request: name source and target (the server has several pairs)")
            source, target = source or pairs[0][0], target or pairs[0][1]
        return self.pool.get(source, target)

    async def detect(self, text: str) -> list[tuple[str, float]]:
        """The served languages ``text`` may be in, ``[(code, confidence 0-100), …]`` best first, found off
        the event loop (the identifier's time grows with the text)."""
        detector = self._detector()
        return await asyncio.to_thread(detector.detect, text)

    async def detect_sources(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        """Each text's best served language and its confidence. A text of :data:`SHORT_TEXT` characters or
        fewer takes the answer for all the texts together, as LibreTranslate does: a few words alone are
        often too little to tell languages apart."""
        detector = self._detector()

        def run():
            short = [t for t in texts if len(t) <= SHORT_TEXT]
            together = detector.detect("\n".join(texts))[0] if short else None
            return [detector.detect(t)[0] if len(t) > SHORT_TEXT else together for t in texts]

        return await asyncio.to_thread(run)

    def _detector(self) -> Detector:
        if self.detector is None:
            raise RequestError(400, f"this server has no language identifier ({LIBRARY} is not installed); name "
                                    f"the source language")
        if not self.detector.languages:
            codes = ", ".join(self.detector.unknown[:8])
            raise RequestError(400, f"the language identifier knows none of the served languages ({codes}); name "
                                    f"the source language")
        return self.detector

    def check_chars(self, texts: Sequence[str]) -> None:
        """The request's characters within --max-chars: checked first, before any work that grows with them."""
        chars = sum(len(t) for t in texts)
        if chars > self.cfg.max_chars:
            raise RequestError(400, f"Invalid request: request ({chars}) exceeds text limit ({self.cfg.max_chars} "
                                    f"characters, the server's --max-chars)")

    def check_texts(self, texts: int) -> None:
        """The request's texts within --batch-limit (LibreTranslate's: the length of a q list)."""
        if 0 < self.cfg.batch_limit < texts:
            raise RequestError(400, f"Invalid request: request ({texts} texts) exceeds the batch limit "
                                    f"({self.cfg.batch_limit} texts, the server's --batch-limit)")

    def check_rate(self, address: str, key: Optional[str]) -> None:
        """One more request of its client within its requests per minute, else a 429 saying when to retry. The
        client is its API key when keys are in use (a key's own limit from the keys file wins), else its IP
        address."""
        if key is not None and self.keys:
            wait = self.limiter.take("key:" + key, self.keys.get(key))
            own = self.keys.get(key) is not None
        else:
            wait, own = self.limiter.take("ip:" + address), False
        if wait is not None:
            seconds = retry_after(wait)
            limit = f"this API key's {self.keys[key]}" if own else f"{self.cfg.req_limit} (the server's --req-limit)"
            raise RequestError(429, f"Too many requests: over {limit} requests per minute; retry in {seconds} s",
                               headers={"Retry-After": str(seconds)})

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
        return (await self.translate_jobs(request, [DirectionJob(model, sentences, options, phrases)], scores))[0]

    async def translate_jobs(self, request, jobs: Sequence[DirectionJob], scores: bool = True) -> list[list[tuple]]:
        """Several directions' sentences at once (a request whose texts are in several languages): each job's
        hypotheses as :meth:`translate` gives them. Every job is encoded before any is queued, so a sentence
        the model refuses (a 400) leaves nothing queued; a sentence the cache holds is answered from it, the
        others are decoded alongside each other and waited for together, within one --request-timeout."""
        queued = [self._lookup(job, scores) for job in jobs]
        futures = [self.batcher.submit(key, [ids[i] for i in missing]) for key, ids, _, _, missing in queued]
        try:
            found = await self._wait(request, asyncio.gather(*futures))
        finally:
            for future in futures:  # one failed: the others are not waited for either
                future.cancel()
        answers = []
        for (_, _, results, cache_keys, missing), hyps_of in zip(queued, found):
            for i, hyps in zip(missing, hyps_of):
                results[i] = hyps
                if cache_keys is not None:
                    self.cache.put(cache_keys[i], hyps)
            answers.append(results)
        return answers

    def _lookup(self, job: DirectionJob, scores: bool) -> tuple:
        """A job encoded: its decoder key, its sentences' ids, their results so far (empty sentences, which
        are only their EOS, and cache hits), their cache keys (None: not cached, a sampled search) and the
        positions still to decode."""
        ids, options = job.model.encode(job.sentences), job.options
        if job.phrases is not None:
            wanted = job.model.encode_constraints(job.phrases, ids)
            ids = [ConstrainedIds(x, p) for x, p in zip(ids, wanted)]
            options = {**options, "constraints": "unordered"}
        key = (job.model.source, job.model.target, job.model.options_key(options, scores, job.alignment))
        results: list[Any] = [()] * len(ids)
        cached = self.cfg.cache_size > 0 and job.model.deterministic(key[2])
        cache_keys = [sentence_key(key, x) for x in ids] if cached else None
        missing = []
        for i, x in enumerate(ids):
            if len(x) <= 1:  # empty: only its EOS
                continue
            hit = self.cache.get(cache_keys[i]) if cache_keys is not None else None
            if hit is None:
                missing.append(i)
            else:
                results[i] = hit
        return key, ids, results, cache_keys, missing

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


def alignment_shared(key: tuple) -> tuple[tuple, bool]:
    """The batcher's ``share`` for the keys :meth:`Service.translate_jobs` submits: requests that differ only
    in wanting word alignments (HTML) decode in one batch, which records them for all. Recording the attention
    costs the search little; a batch of their own for the few HTML sentences among many plain ones costs a
    whole decode (docs/benchmarks.md)."""
    source, target, (options, scores, alignment) = key
    return (source, target, options, scores), alignment


@dataclass
class DirectionJob:
    """One direction's share of a request: its sentences, search options and target phrases (or None);
    ``alignment``: the hypotheses must carry their alignments (HTML's inline tags are placed by them)."""

    model: ServedModel
    sentences: Sequence[str]
    options: dict[str, Any]
    phrases: Optional[Sequence[Sequence[str]]] = None
    alignment: bool = False


async def _disconnected(request) -> None:
    """Return when the client has gone away (the ASGI server reports it once the body has been read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return

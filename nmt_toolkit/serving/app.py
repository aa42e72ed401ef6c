"""The HTTP application: LibreTranslate's ``/translate``, ``/detect``, ``/suggest``, ``/languages`` and
``/translate_file`` (``files.py``), the native
``/v1/translate``, ``/health``, ``/metrics``, the web page at ``/`` and FastAPI's OpenAPI document
(``/openapi.json``, ``/docs``).

Errors have LibreTranslate's shape, ``{"error": "one line"}``, on every path (404 and 405 included)."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from nmt_toolkit.config import shown_value
from nmt_toolkit.errors import NmtError
from nmt_toolkit.markup.html import AlignedHtml, UnreadableHtml, text_of
from nmt_toolkit.markup.sentences import PlainText
from nmt_toolkit.serving.files import FileStore, file_routes, files_settings
from nmt_toolkit.serving.languages import language_name
from nmt_toolkit.serving.metrics import ServerMetrics
from nmt_toolkit.serving.models import RequestError
from nmt_toolkit.serving.requests import (DetectRequest, LibreTranslateRequest, NativeTranslateRequest,
                                          SuggestRequest, check_api_key, fields_of, parse, read_body)
from nmt_toolkit.serving.translate import DirectionJob, Service

ENDPOINTS = ("/", "/translate", "/detect", "/suggest", "/languages", "/frontend/settings", "/v1/translate", "/health", "/metrics",
             "/openapi.json", "/docs", "/translate_file")

logger = logging.getLogger("nmt_toolkit.serve")


def create_app(service: Service, metrics: ServerMetrics) -> FastAPI:
    files = FileStore(service.cfg)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.batcher.start()
        if not service.cfg.disable_files_translation:
            files.open()
        try:
            yield
        finally:
            await service.batcher.stop()
            files.close()

    # redirect_slashes off: Starlette would answer "/translate/" with a redirect to a URL built from the
    # request's Host header, where a client re-sends its body and key
    app = FastAPI(title="nmt-serve", version="1", lifespan=lifespan, redoc_url=None, redirect_slashes=False,
                  description="Neural machine translation: LibreTranslate's API and a native one.")
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_exception_handler(RequestError, _request_error)
    app.add_exception_handler(HTTPException, _http_error)
    _libretranslate_routes(app, service)
    _suggest_route(app, service)
    file_routes(app, service, files)
    _native_routes(app, service)
    _service_routes(app, service, metrics)
    return app


def _libretranslate_routes(app: FastAPI, service: Service) -> None:
    @app.post("/translate", openapi_extra=_body_schema(LibreTranslateRequest),
              responses={400: {"description": "bad request: {\"error\": …}"}, 401: {"description": "no valid key"}})
    async def translate(request: Request):
        """LibreTranslate's translate: ``q`` (a text or a list), ``source`` (or ``auto``), ``target`` →
        ``translatedText`` (and ``detectedLanguage`` for ``auto``). Texts are split into lines and sentences,
        translated, and re-joined with their whitespace; ``format: html`` keeps the markup
        (``markup/html.py``)."""
        fields = await _fields(request, service)
        req = parse(LibreTranslateRequest, fields)
        if not req.q:
            raise RequestError(400, "Invalid request: missing q parameter")
        if req.format not in ("text", "html"):
            raise RequestError(400, f"{shown_value(req.format)} format is not supported")
        texts = req.q if isinstance(req.q, list) else [req.q]
        service.check_texts(len(texts))
        nbest = req.alternatives + 1
        service.check_search({"nbest": nbest})
        service.check_chars(texts)  # before splitting or detecting: their cost grows with the text
        html = req.format == "html"
        detected = None
        if req.source == "auto":  # HTML: its language is its text's, not its markup's
            detected = await service.detect_sources(await _read_q(lambda: [text_of(t) for t in texts])
                                                    if html else texts)
        models = _models_for(service, texts, req.source, req.target, detected)
        if html:
            _check_alignments(models)
        translated = await _translate_texts(request, service, texts, models, nbest, html)
        # HTML is read again and written for each answer: off the event loop
        out, alternatives = (await asyncio.to_thread(_answers, translated, req.alternatives) if html else
                             _answers(translated, req.alternatives))
        body = {"translatedText": out if isinstance(req.q, list) else out[0]}
        if req.alternatives > 0:
            body["alternatives"] = alternatives if isinstance(req.q, list) else alternatives[0]
        if detected is not None:
            found = [{"confidence": confidence, "language": code} for code, confidence in detected]
            body["detectedLanguage"] = found if isinstance(req.q, list) else found[0]
        return body

    @app.post("/detect", openapi_extra=_body_schema(DetectRequest),
              responses={400: {"description": "bad request: {\"error\": …}"}, 401: {"description": "no valid key"}})
    async def detect(request: Request):
        """LibreTranslate's detect: ``q`` → ``[{"confidence": 0-100, "language": code}, …]``, the served
        languages the identifier knows, best first (a list of texts is identified as one text)."""
        fields = await _fields(request, service)
        req = parse(DetectRequest, fields)
        texts = req.q if isinstance(req.q, list) else [req.q]
        if not any(texts):
            raise RequestError(400, "Invalid request: missing q parameter")
        service.check_chars(texts)
        found = await service.detect("\n".join(texts))
        return [{"confidence": confidence, "language": code} for code, confidence in found]

    @app.get("/languages")
    async def languages():
        """LibreTranslate's languages: each source language with the targets it translates into."""
        return [{"code": code, "name": language_name(code), "targets": targets}
                for code, targets in service.pool.languages().items()]

    @app.get("/frontend/settings")
    async def frontend_settings():
        """LibreTranslate's settings for its web page and browser extensions: the server's limits and
        features, and the language pair a page shows first (docs/serving.md lists each field)."""
        return frontend_settings_of(service)


def _suggest_route(app: FastAPI, service: Service) -> None:
    @app.post("/suggest", openapi_extra=_body_schema(SuggestRequest),
              responses={400: {"description": "bad request: {\"error\": …}"}, 401: {"description": "no valid key"},
                         403: {"description": "suggestions are disabled (no --suggestions)"}})
    async def suggest(request: Request):
        """LibreTranslate's suggest: ``q`` (a text), ``s`` (the translation suggested for it), ``source``,
        ``target`` → ``{"success": true}`` once stored in the --suggestions database, as fine-tuning data
        (nmt-preprocess --trainpref sqlite:DB). The write runs off the event loop."""
        if service.suggestions is None:
            raise RequestError(403, "Suggestions are disabled on this server.")
        req = parse(SuggestRequest, await _fields(request, service))
        for name in ("q", "s"):
            if not getattr(req, name).strip():
                raise RequestError(400, f"Invalid request: missing {name} parameter")
        model = service.model_for(req.source, req.target)
        service.check_chars([req.q, req.s])
        try:
            await asyncio.to_thread(service.suggestions.add, model.name, req.source, req.target, req.q, req.s)
        except NmtError as exc:
            logger.error("/suggest: %s", exc)
            raise RequestError(500, "Could not store the suggestion") from None
        return {"success": True}


def frontend_settings_of(service: Service) -> dict:
    """What LibreTranslate's ``/frontend/settings`` answers, with this server's values: a feature that is off
    (suggestions without --suggestions, file translation with --disable-files-translation) says so, so a
    client does not offer it."""
    source, target = service.pool.pairs()[0]
    return {
        "charLimit": service.cfg.max_chars,
        "frontendTimeout": 500,  # LibreTranslate's default: milliseconds the page waits after typing
        "apiKeys": bool(service.keys),
        "keyRequired": bool(service.keys),
        "suggestions": service.suggestions is not None,
        **files_settings(service.cfg),
        "language": {"source": {"code": source, "name": language_name(source)},
                     "target": {"code": target, "name": language_name(target)}},
    }


def _models_for(service: Service, texts, source: str, target: str, detected) -> list:
    """Each text's served direction: ``source`` → ``target``, or with ``auto`` its detected language →
    ``target``; a direction the server lacks is LibreTranslate's 400, which for a detected language says so."""
    if detected is None:
        return [service.model_for(source, target)] * len(texts)
    models = []
    for code, confidence in detected:
        try:
            models.append(service.model_for(code, target))
        except RequestError as exc:
            raise RequestError(exc.status, f"{exc.message} (source auto: the text was detected as {code}, "
                                           f"confidence {confidence:g})") from None
    return models


def _check_alignments(models) -> None:
    """HTML's inline tags are placed by word alignments: a model whose engine gives none is a 400."""
    for model in models:
        reason = model.alignment_refusal()
        if reason is not None:
            raise RequestError(400, f"html format needs the model's word alignments: {reason}")


async def _read_q(read):
    """``read()`` in a worker thread (parsing a page is work); a text it cannot read is a 400."""
    try:
        return await asyncio.to_thread(read)
    except UnreadableHtml as exc:
        raise RequestError(400, f"Invalid request: q is {exc}") from None
    except NmtError as exc:
        raise RequestError(400, str(exc)) from None


async def _translate_texts(request: Request, service: Service, texts, models, nbest: int,
                           html: bool = False) -> list[tuple]:
    """Each text as ``(the text read, hypotheses of each of its sentences)``: split by its own language's
    rules (HTML: parsed, its markup set aside), its sentences translated in the batches of their direction
    (a request of several directions waits for all of them at once)."""
    def read(text, model):
        return AlignedHtml(text, model) if html else PlainText(text, model.source)

    split = await _read_q(lambda: [read(text, model) for text, model in zip(texts, models)])
    service.check_sentences(sum(len(r.sentences) for r in split))
    by_direction: dict[str, list[int]] = {}
    for i, model in enumerate(models):
        by_direction.setdefault(model.name, []).append(i)
    jobs = []
    for indices in by_direction.values():
        model = models[indices[0]]
        sentences = [s for i in indices for s in split[i].sentences]
        options = {"nbest": nbest, "beam": max(nbest, model.translator.gen.beam)} if nbest > 1 else {}
        jobs.append(DirectionJob(model, sentences, options, service.phrases(sentences), alignment=html))
    found = await service.translate_jobs(request, jobs, scores=False)
    hyps: list = [None] * len(texts)
    for indices, results in zip(by_direction.values(), found):
        results = iter(results)
        for i in indices:
            hyps[i] = [next(results) for _ in split[i].sentences]
    return list(zip(split, hyps))


def _answers(translated: list[tuple], wanted: int) -> tuple[list[str], list[list[str]]]:
    """Each text's translation (every sentence's best hypothesis) and its ``wanted`` alternatives: the i-th
    takes every sentence's (i+1)-th hypothesis (its best where it has fewer); duplicates of the translation
    and of each other are left out, as LibreTranslate does."""
    out, alternatives = [], []
    for read, hyps in translated:
        out.append(read.render([h[0] if h else None for h in hyps]))
        found: list[str] = []
        for rank in range(1, wanted + 1):
            text = read.render([(h[rank] if len(h) > rank else h[0]) if h else None for h in hyps])
            if text != out[-1] and text not in found:
                found.append(text)
        alternatives.append(found)
    return out, alternatives


def _native_routes(app: FastAPI, service: Service) -> None:
    @app.post("/v1/translate", openapi_extra=_body_schema(NativeTranslateRequest))
    async def translate_native(request: Request):
        """Sentences with nmt-generate's search options → n-best lists with base-2 scores (as nmt-generate
        prints them): ``{"translations": [{"text", "hypotheses": [{"text", "score", "pieces",
        "positional_scores"}]}]}``."""
        fields = await _fields(request, service)
        req = parse(NativeTranslateRequest, fields)
        model = service.model_for(req.source, req.target)
        options = req.model_dump(exclude_none=True, exclude={"sentences", "source", "target", "api_key", "glossary"})
        service.check_search(options)
        service.check_texts(len(req.sentences))
        service.check_chars(req.sentences)
        service.check_sentences(len(req.sentences))
        phrases = service.phrases(req.sentences, _request_glossary(req.glossary, service, model))
        results = await service.translate(request, model, req.sentences, options, phrases=phrases)
        # a hypothesis with an infinite score is no translation (nothing finished: every path was forbidden);
        # JSON has no infinity, and the sentence is answered as an empty one is
        found = [[h for h in hyps if math.isfinite(h.score)] for hyps in results]
        return {"source": model.source, "target": model.target,
                "translations": [{"text": hyps[0].text if hyps else "",
                                  "hypotheses": [{"text": h.text, "score": h.score, "pieces": h.pieces,
                                                  "positional_scores": list(h.positional_scores)} for h in hyps]}
                                 for hyps in found]}


def _request_glossary(pairs, service: Service, model):
    """A request's own glossary (``{source term: target term}`` or ``[[source, target], …]``) under the
    server's matching rules, its target terms checked against the model; None when it brings none."""
    from nmt_toolkit.generation.terminology import Glossary

    if pairs is None:
        return None
    rules = service.glossary or Glossary({})
    try:
        glossary = Glossary.from_pairs(pairs, rules.ignore_case, rules.whole_words)
        model.translator.check_glossary(glossary)
    except NmtError as exc:
        raise RequestError(400, f"Invalid request: {exc}") from None
    return glossary


def _service_routes(app: FastAPI, service: Service, metrics: ServerMetrics) -> None:
    from nmt_toolkit.serving.page import PAGE

    @app.get("/health")
    async def health():
        """``{"status": "ok", "models": ["en-de", "de|en|fr (every direction)"]}`` once the models are loaded
        (the server listens only then): a multilingual model is one entry, not its thousands of directions."""
        return {"status": "ok", "models": [model.name for model in service.pool.models]}

    @app.get("/metrics")
    async def prometheus_metrics():
        """Prometheus text exposition: requests, errors, latency, batch sizes, tokens, queue."""
        metrics.queue.set(service.batcher.waiting_sentences)
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/", response_class=HTMLResponse)
    async def page():
        """A page to type text, pick the language pair and read the translation (no external resources)."""
        return HTMLResponse(PAGE)


async def _fields(request: Request, service: Service) -> dict:
    body = await read_body(request, service.cfg.max_request_bytes)
    fields = fields_of(body, request.headers.get("content-type", ""), dict(request.query_params))
    key = check_api_key(service.keys, fields, request.headers)
    service.check_rate(request.client.host if request.client else "", key)
    return fields


def _body_schema(model) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()},
                                                          "application/x-www-form-urlencoded": {
                                                              "schema": model.model_json_schema()}}}}


async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)


class MetricsMiddleware:
    """Counts every answer by endpoint and status and times it (pure ASGI, so a client's disconnect reaches
    the endpoint untouched). Unknown paths count as ``other``, which keeps the label set bounded.

    It is also the last stop of an exception no handler took (a bug): the client gets a 500 in the API's
    shape, ``{"error": …}``, the log one line (the traceback with ``--debug``), and the connection stays
    open; uvicorn would answer text, log the traceback and close the connection."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.monotonic(), [None]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"
        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_status)
        except Exception as exc:
            logger.error("%s %s: internal error: %s: %s", scope.get("method"), endpoint, type(exc).__name__,
                         shown_value(" ".join(str(exc).split()), 300))
            logger.debug("the internal error's traceback", exc_info=True)
            if status[0] is None:  # nothing sent yet: the answer can still be a JSON error
                status[0] = 500
                await JSONResponse({"error": "Internal server error"}, status_code=500)(scope, receive, send)
            else:
                raise
        finally:
            self.metrics.in_flight.dec()
            self.metrics.answered(endpoint, status[0] or 500, time.monotonic() - started)

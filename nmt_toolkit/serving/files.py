"""LibreTranslate's document translation: ``POST /translate_file`` (a multipart upload: ``file``, ``source``,
``target``, ``api_key``) answers ``{"translatedFileUrl": …}``, a URL under ``/download_file/`` where the
translated file waits for --files-expiry seconds.

The document is read by :mod:`nmt_toolkit.documents` (off the event loop), its sentences go through the
batching service as one job, as a ``/translate`` request's do (with their alignments where its runs or inline
tags are placed by them), and the translated file is kept in a folder the server made for itself at start
and removes when it stops. A download name is a random id and the uploaded file's name, looked up as a key,
never read as a path: the file on disk is named by the id alone."""
from __future__ import annotations

import asyncio
import os
import re
import secrets
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.responses import Response

from nmt_toolkit.documents import DocumentConfig, read_document, supported_formats
from nmt_toolkit.documents.formats import UnsupportedFormat, format_of
from nmt_toolkit.errors import NmtError
from nmt_toolkit.markup.placement import Aligned
from nmt_toolkit.serving.config import ServeConfig
from nmt_toolkit.serving.models import RequestError
from nmt_toolkit.serving.requests import check_api_key, read_body
from nmt_toolkit.serving.translate import DirectionJob, Service

#: room for the form's other fields and its boundaries, beyond the file itself
FORM_MARGIN = 64 * 1024
#: the characters of an uploaded file's name kept in its download name (others become ``_``)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class StoredFile:
    path: str
    filename: str
    content_type: str
    created: float


class FileStore:
    """The translated files, each under a random name in a folder of the server's own, kept for
    ``cfg.files_expiry`` seconds; over ``cfg.max_stored_files`` the oldest goes first."""

    def __init__(self, cfg: ServeConfig):
        self.cfg = cfg
        self.folder: Optional[str] = None
        self.files: OrderedDict[str, StoredFile] = OrderedDict()
        self.lock = threading.Lock()

    def open(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="nmt-serve-files.")

    def close(self) -> None:
        """Remove the folder (this server made it; nothing else is in it)."""
        from nmt_toolkit.outputs import discard_staging

        if self.folder is not None:
            discard_staging(self.folder)
            self.folder = None

    def add(self, name: str, data: bytes, content_type: str) -> str:
        """Keep ``data``, the translation of the uploaded file ``name``; its download name."""
        from nmt_toolkit.outputs import replace_file

        token = secrets.token_hex(16)
        filename = download_filename(name)
        path = os.path.join(self.folder, token)
        replace_file(path, lambda handle: handle.write(data), "the translated file")
        with self.lock:
            self.files[f"{token}.{filename}"] = StoredFile(path, filename, content_type, time.monotonic())
            self._expire()
        return f"{token}.{filename}"

    def get(self, name: str) -> Optional[tuple[StoredFile, bytes]]:
        """The file under download name ``name`` and its bytes, or None (unknown or expired)."""
        with self.lock:
            self._expire()
            found = self.files.get(name)
            if found is None:
                return None
            with open(found.path, "rb") as f:
                return found, f.read()

    def _expire(self) -> None:
        now = time.monotonic()
        while self.files and (len(self.files) > self.cfg.max_stored_files or
                              now - next(iter(self.files.values())).created > self.cfg.files_expiry):
            _, old = self.files.popitem(last=False)
            try:
                os.unlink(old.path)
            except FileNotFoundError:
                pass


def download_filename(name: str) -> str:
    """An uploaded file's name as its translation is offered for download: its last path component, with
    the characters of a portable file name only."""
    base = re.split(r"[\\/]", name)[-1]
    stem, extension = os.path.splitext(base)
    stem = _UNSAFE.sub("_", stem).strip("._")[:100] or "document"
    return stem + _UNSAFE.sub("_", extension).lower()


def file_routes(app: FastAPI, service: Service, store: FileStore) -> None:
    @app.post("/translate_file", responses={400: {"description": "bad request: {\"error\": …}"},
                                            401: {"description": "no valid key"},
                                            403: {"description": "file translation is off"},
                                            413: {"description": "file over --max-file-bytes"}})
    async def translate_file(request: Request):
        """LibreTranslate's translate_file: a multipart form with ``file`` (its extension names its format:
        ``supportedFilesFormat`` of /frontend/settings), ``source`` (or ``auto``), ``target`` →
        ``{"translatedFileUrl": …/download_file/NAME}``. Formatting kept (docs/serving.md, "Documents")."""
        if service.cfg.disable_files_translation:
            raise RequestError(403, "Files translation are disabled on this server.")
        name, data, source, target = await _upload(request, service)
        document, model = await _document(service, name, data, source, target)
        translated = await _translate(request, service, document, model)
        stored = await asyncio.to_thread(store.add, name, translated, document.content_type)
        return {"translatedFileUrl": f"{request.base_url}download_file/{stored}"}

    @app.get("/download_file/{name}", responses={404: {"description": "no such file (or it expired)"}})
    async def download_file(name: str):
        """A translated file /translate_file made, while it is kept (--files-expiry)."""
        found = await asyncio.to_thread(store.get, name)
        if found is None:
            raise RequestError(404, "File not found (unknown, or expired)")
        stored, data = found
        return Response(data, media_type=stored.content_type,
                        headers={"Content-Disposition": f'attachment; filename="{stored.filename}"'})


async def _upload(request: Request, service: Service) -> tuple[str, bytes, str, str]:
    """The form's file (its name and bytes), source and target, after the API key and the rate limit."""
    from starlette.formparsers import MultiPartException, MultiPartParser

    limit = service.cfg.max_file_bytes
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "multipart/form-data":
        raise RequestError(400, "Invalid request: send the file as multipart/form-data (file, source, target)")
    try:
        body = await read_body(request, limit + FORM_MARGIN)
    except RequestError as exc:
        if exc.status == 413:
            raise RequestError(413, f"Invalid request: file over {limit} bytes (the server's --max-file-bytes)") \
                from None
        raise

    async def chunks():
        yield body

    try:
        form = await MultiPartParser(request.headers, chunks(), max_files=1, max_fields=16,
                                     max_part_size=FORM_MARGIN).parse()
    except MultiPartException as exc:
        raise RequestError(400, f"Invalid request: {exc.message}") from None
    try:
        fields = {key: value for key, value in form.items() if isinstance(value, str)}
        key = check_api_key(service.keys, fields, request.headers)
        service.check_rate(request.client.host if request.client else "", key)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise RequestError(400, "Invalid request: missing file parameter")
        data = await upload.read()
    finally:
        await form.close()
    if len(data) > limit:
        raise RequestError(413, f"Invalid request: file over {limit} bytes (the server's --max-file-bytes)")
    for field in ("source", "target"):
        if not fields.get(field):
            raise RequestError(400, f"Invalid request: missing {field} parameter")
    return upload.filename or "", data, fields["source"], fields["target"]


async def _document(service: Service, name: str, data: bytes, source: str, target: str):
    """The document read in its source language (``auto``: the served language its text is in) and the
    served direction that translates it, within the request limits."""
    try:
        format_of(name, "file")
    except UnsupportedFormat as exc:
        raise RequestError(400, f"Invalid request: {exc}") from None
    language = source if source != "auto" else service.pool.pairs()[0][0]
    document = await _read(service, name, data, language)
    service.check_chars(document.sentences)  # before identifying its language: that cost grows with the text
    if source == "auto":
        code, confidence = (await service.detect_sources([" ".join(document.sentences)]))[0]
        try:
            model = service.model_for(code, target)
        except RequestError as exc:
            raise RequestError(exc.status, f"{exc.message} (source auto: the file was detected as {code}, "
                                           f"confidence {confidence:g})") from None
        if code != language:
            document = await _read(service, name, data, code)
    else:
        model = service.model_for(source, target)
    service.check_sentences(len(document.sentences))
    if document.needs_alignment and model.alignment_refusal() is not None:
        raise RequestError(400, f"{os.path.splitext(name)[1].lower()} files need the model's word alignments: "
                                f"{model.alignment_refusal()}")
    return document, model


async def _read(service: Service, name: str, data: bytes, language: str):
    """The document read off the event loop; a file its format cannot be read as is a 400."""
    try:
        return await asyncio.to_thread(read_document, name, data, language, service.documents or DocumentConfig(),
                                       "file")
    except NmtError as exc:
        raise RequestError(400, f"Invalid request: {exc}") from None


async def _translate(request: Request, service: Service, document, model) -> bytes:
    """The document's sentences through the batcher as one job; the translated file's bytes."""
    sentences = document.sentences
    job = DirectionJob(model, sentences, {}, service.phrases(sentences), alignment=document.needs_alignment)
    found = (await service.translate_jobs(request, [job], scores=False))[0] if sentences else []

    def render() -> bytes:
        tokens = model.source_tokens(sentences) if document.needs_alignment and sentences else [()] * len(found)
        return document.render([Aligned.of(h[0] if h else None, t) for h, t in zip(found, tokens)])

    return await asyncio.to_thread(render)


def files_settings(cfg: ServeConfig) -> dict:
    """``/frontend/settings``' fields for document translation (LibreTranslate's names)."""
    on = not cfg.disable_files_translation
    return {"filesTranslation": on, "supportedFilesFormat": supported_formats() if on else []}

"""Reading a request: its body within the size limit, its fields from JSON or a form, its API key, and the
typed fields of each endpoint (pydantic models, which the OpenAPI document shows). Every refusal is a
:class:`~nmt_toolkit.serving.models.RequestError` with one line naming the field or the limit."""
from __future__ import annotations

import hmac
import json
from typing import Any, Optional, Union
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nmt_toolkit.serving.models import RequestError


class LibreTranslateRequest(BaseModel):
    """``POST /translate`` as LibreTranslate takes it (JSON or a form)."""

    model_config = ConfigDict(extra="allow")

    q: Union[str, list[str]] = Field(description="the text, or a list of texts")
    source: str = Field(description="source language code ('auto' needs a language identifier)")
    target: str = Field(description="target language code")
    format: str = Field("text", description="text (html is not supported)")
    alternatives: int = Field(0, ge=0, description="number of alternative translations")
    api_key: Optional[str] = None


class NativeTranslateRequest(BaseModel):
    """``POST /v1/translate``: sentences, with nmt-generate's search options (its flags with underscores)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    sentences: list[str] = Field(description="one sentence each (not split further)")
    source: Optional[str] = Field(None, description="source language (optional when the server has one pair)")
    target: Optional[str] = Field(None, description="target language (optional when the server has one pair)")
    beam: Optional[int] = None
    nbest: Optional[int] = None
    lenpen: Optional[float] = None
    lenpen_style: Optional[str] = None
    max_len_a: Optional[float] = None
    max_len_b: Optional[int] = None
    min_len: Optional[int] = None
    unkpen: Optional[float] = None
    no_repeat_ngram_size: Optional[int] = None
    early_stop: Optional[str] = None
    sampling: Optional[bool] = None
    sampling_topk: Optional[int] = None
    sampling_topp: Optional[float] = None
    temperature: Optional[float] = None
    api_key: Optional[str] = None


async def read_body(request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes (Content-Length or counted)."""
    too_big = RequestError(413, f"Invalid request: body over {limit} bytes (the server's --max-request-bytes)")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_big
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_big
    return bytes(body)


def fields_of(body: bytes, content_type: str, query: dict[str, str]) -> dict[str, Any]:
    """The fields of a JSON object body, or of a form body and the query string (LibreTranslate takes both)."""
    if content_type.split(";")[0].strip().lower() == "application/json":
        try:
            data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError):
            raise RequestError(400, "Invalid JSON format") from None
        if not isinstance(data, dict):
            raise RequestError(400, "Invalid JSON format: the body must be an object")
        return data
    try:
        form = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise RequestError(400, "Invalid request: the form is not UTF-8") from None
    fields = dict(query)
    fields.update({key: values[-1] for key, values in form.items()})
    return fields


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse(model: type[BaseModel], fields: dict[str, Any]) -> Any:
    """``fields`` as ``model``; the first problem is a 400 naming its field (LibreTranslate's words for a
    missing one)."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(part) for part in first["loc"]) or "body"
        if first["type"] == "missing":
            raise RequestError(400, f"Invalid request: missing {name} parameter") from None
        if first["type"] == "extra_forbidden":
            raise RequestError(400, f"Invalid request: unknown field {name}") from None
        raise RequestError(400, f"Invalid request: {name}: {first['msg']}") from None


def check_api_key(keys: Optional[frozenset[str]], fields: dict[str, Any], headers) -> None:
    """With keys configured, the request's key (``api_key`` field or ``Authorization: Bearer``) must be one."""
    if not keys:
        return
    given = fields.get("api_key")
    auth = headers.get("authorization", "")
    if not given and auth.lower().startswith("bearer "):
        given = auth[7:].strip()
    if not given:
        raise RequestError(401, "Please contact the server operator to get an API key")
    if not isinstance(given, str) or not any(hmac.compare_digest(given.encode(), key.encode()) for key in keys):
        raise RequestError(401, "Invalid API key")

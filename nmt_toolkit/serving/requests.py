"""Reading a request: its body within the size limit, its fields from JSON or a form, its API key, and the
typed fields of each endpoint (pydantic models, which the OpenAPI document shows). Every refusal is a
:class:`~nmt_toolkit.serving.models.RequestError` with one line naming the field or the limit."""
from __future__ import annotations

import dataclasses
import hmac
import json
import typing
from typing import Any, Optional, Union
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from starlette.requests import ClientDisconnect

from nmt_toolkit.config import shown_value
from nmt_toolkit.generation.config import GenerationConfig
from nmt_toolkit.serving.models import REQUEST_OPTIONS, RequestError
from nmt_toolkit.serving.translate import CLIENT_GONE


class LibreTranslateRequest(BaseModel):
    """``POST /translate`` as LibreTranslate takes it (JSON or a form)."""

    model_config = ConfigDict(extra="allow")

    q: Union[str, list[str]] = Field(description="the text, or a list of texts")
    source: str = Field(description="source language code, or 'auto': the language of each text, identified among "
                                    "the served ones")
    target: str = Field(description="target language code")
    format: str = Field("text", description="text, or html: the markup is kept, inline tags put around the "
                                            "words their words were translated into")
    alternatives: int = Field(0, ge=0, description="number of alternative translations")
    api_key: Optional[str] = None


class DetectRequest(BaseModel):
    """``POST /detect`` as LibreTranslate takes it (JSON or a form)."""

    model_config = ConfigDict(extra="allow")

    q: Union[str, list[str]] = Field(description="the text (a list of texts is identified as one text)")
    api_key: Optional[str] = None


class SuggestRequest(BaseModel):
    """``POST /suggest`` as LibreTranslate takes it (JSON or a form): a better translation of a text."""

    model_config = ConfigDict(extra="allow")

    q: str = Field(description="the source text")
    s: str = Field(description="the translation suggested for it")
    source: str = Field(description="source language code")
    target: str = Field(description="target language code")
    api_key: Optional[str] = None


def _search_option_fields() -> dict[str, Any]:
    """The request fields of the search options: GenerationConfig's fields of
    :data:`~nmt_toolkit.serving.models.REQUEST_OPTIONS`, with their types and their flags' help, range and
    choices (which the Translator enforces as it enforces the flags')."""
    hints = typing.get_type_hints(GenerationConfig)
    found: dict[str, Any] = {}
    for f in dataclasses.fields(GenerationConfig):
        if f.name not in REQUEST_OPTIONS:
            continue
        values = f.metadata.get("choices")
        bounds = f.metadata.get("range")
        allowed = (f"one of {', '.join(values)}" if values else
                   f"range {bounds.interval()}" if bounds is not None and (bounds.bounded or bounds.also) else "")
        text = f.metadata.get("help", "") + (f" [{allowed}]" if allowed else "")
        found[f.name] = (Optional[hints[f.name]], Field(None, description=text))
    return found


#: ``POST /v1/translate``: sentences, with nmt-generate's search options (its flags with underscores)
NativeTranslateRequest = create_model(
    "NativeTranslateRequest",
    __config__=ConfigDict(extra="forbid", strict=True),
    __doc__="``POST /v1/translate``: sentences, with nmt-generate's search options (its flags with underscores).",
    sentences=(list[str], Field(description="one sentence each (not split further)")),
    source=(Optional[str], Field(None, description="source language (optional when the server has one pair)")),
    target=(Optional[str], Field(None, description="target language (optional when the server has one pair)")),
    **_search_option_fields(),
    glossary=(Optional[Union[dict[str, str], list[list[str]]]],
              Field(None, description="source term -> target term ({\"term\": \"Term\"} or [[\"term\", \"Term\"]]): "
                                      "each target term whose source term a sentence holds must appear in its "
                                      "translation; replaces the server's --glossary ({} for none)")),
    api_key=(Optional[str], None),
)


async def read_body(request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes (Content-Length or counted)."""
    too_big = RequestError(413, f"Invalid request: body over {limit} bytes (the server's --max-request-bytes)")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_big
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise too_big
    except ClientDisconnect:  # it went away, or was cut off for sending too slowly (--client-timeout)
        raise RequestError(CLIENT_GONE, "client disconnected") from None
    return bytes(body)


def fields_of(body: bytes, content_type: str, query: dict[str, str]) -> dict[str, Any]:
    """The fields of a JSON object body, or of a form body and the query string (LibreTranslate takes both),
    each text valid Unicode. An API key in the query string is refused: URLs end up in proxies' logs."""
    if "api_key" in query:
        raise RequestError(400, "Invalid request: api_key in the URL is refused (proxies log URLs); send it in "
                                "the body or as an Authorization: Bearer header")
    if content_type.split(";")[0].strip().lower() == "application/json":
        try:
            data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError):
            raise RequestError(400, "Invalid JSON format") from None
        except RecursionError:
            raise RequestError(400, "Invalid JSON format: nested too deep") from None
        if not isinstance(data, dict):
            raise RequestError(400, "Invalid JSON format: the body must be an object")
        _check_unicode(data)
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


def _check_unicode(data: dict[str, Any]) -> None:
    """Every text of a JSON body valid Unicode: an escape such as ``"\\ud800"`` decodes to a lone surrogate,
    which nothing downstream can encode (the subword model, the log, the reply). A 400 names the field."""
    for name, value in data.items():
        if not _encodable(name):
            raise RequestError(400, "Invalid request: a field name is not valid Unicode text (a lone surrogate)")
        stack = [value]
        while stack:  # iterative: a body nested as deep as the JSON parser allows must not overflow this one
            item = stack.pop()
            if isinstance(item, str) and not _encodable(item):
                raise RequestError(400, f"Invalid request: {shown_value(name)}: not valid Unicode text (a lone "
                                        f"surrogate)")
            if isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


def check_api_key(keys, fields: dict[str, Any], headers) -> Optional[str]:
    """With keys configured (a collection of them), the request's key must be one; it is returned (None
    without keys), as it names the client for the rate limit. The key is the ``Authorization: Bearer`` header's
    when the request has one (HTTP's place for credentials: a body field never overrides it), else the
    ``api_key`` field's (JSON or form, as LibreTranslate clients send it)."""
    if not keys:
        return None
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    given = credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else fields.get("api_key")
    if not given:
        raise RequestError(401, "Please contact the server operator to get an API key")
    if not isinstance(given, str) or not any(hmac.compare_digest(given.encode(), key.encode()) for key in keys):
        raise RequestError(401, "Invalid API key")
    return given

"""Hostile requests to one real nmt-serve process: each is refused with one 4xx JSON line (never a 500, a
traceback or a text body), the connection stays usable, and the next request is answered.

The option matrix is generated from GenerationConfig's fields: every search option a request may set
(serving/models.py REQUEST_OPTIONS) is sent values outside the range or choices its flag declares, so a new
option joins it by itself. One server (module fixture) answers every test of this file, with an API key, so
that keys are checked on every request.
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import math
import select
import socket
import time
import typing
from urllib.parse import urlsplit

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")
httpx = pytest.importorskip("httpx", reason="the server tests need httpx (the [test] extra)")

from serve_process import ServerProcess  # noqa: E402

from nmt_toolkit import config  # noqa: E402
from nmt_toolkit.generation.config import GenerationConfig  # noqa: E402
from nmt_toolkit.serving import models  # noqa: E402
from nmt_toolkit.serving.models import REQUEST_OPTIONS  # noqa: E402

KEY = "the-test-key"
CLIENT_TIMEOUT = 3  # --client-timeout of the server below
MAX_CONNECTIONS = 12
OK = {"sentences": ["A dog runs."]}


@pytest.fixture(scope="module")
def server(trained_translation, tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text(KEY + "\n")
    process = ServerProcess(trained_translation.data, trained_translation.first, "--api-keys", keys,
                            "--max-chars", "5000", "--max-request-bytes", "2000000",
                            "--client-timeout", CLIENT_TIMEOUT, "--max-connections", MAX_CONNECTIONS)
    yield process
    assert process.terminate() == 0
    assert "Traceback" not in process.stderr and "internal error" not in process.stderr, process.stderr[-3000:]


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as c:
        yield c


def _refused(answer, status: int = 400) -> str:
    """The one-line JSON error of a refused request."""
    assert answer.status_code == status, answer.text[:500]
    assert answer.headers["content-type"].startswith("application/json"), answer.headers["content-type"]
    body = answer.json()
    assert set(body) == {"error"} and "\n" not in body["error"] and len(body["error"]) < 300, body
    return body["error"]


def _answered(client) -> None:
    answer = client.post("/v1/translate", json=OK)
    assert answer.status_code == 200 and answer.json()["translations"][0]["text"], answer.text


# ---------------------------------------------------------------------- the generated option matrix


def _outside(f: dataclasses.Field, tp: type) -> list:
    """Values a request may send that the flag refuses: just outside the declared range, beyond any range
    (2**64, ±1e308: past C integers and float32), the wrong type, or a word that is none of the choices."""
    if f.metadata.get("choices"):
        return ["bogus", "", 4]
    if tp is bool:
        return ["yes", 1]
    bounds = config._field_range(f)
    near = []
    if bounds.low is not None:
        near.append(bounds.low if bounds.low_open else bounds.low - (1 if tp is int else 1e-3))
    if bounds.high is not None:
        near.append(bounds.high if bounds.high_open else bounds.high + (1 if tp is int else 1e-3))
    far = [2**64, -2**64, 2**63] if tp is int else [1e308, -1e308, 1e-300]
    values = [tp(v) for v in near if v not in bounds.also] + [v for v in far if not bounds.contains(v)]
    return values + ["4"]  # a number as text


HINTS = typing.get_type_hints(GenerationConfig)
MATRIX = [pytest.param(f.name, value, id=f"{f.name}={value!r}"[:60])
          for f in dataclasses.fields(GenerationConfig) if f.name in REQUEST_OPTIONS
          for value in _outside(f, HINTS[f.name])]


def test_every_generation_option_is_a_request_option_or_kept_by_the_server_for_a_reason():
    names = {f.name for f in dataclasses.fields(GenerationConfig)}
    assert set(REQUEST_OPTIONS) | set(models.SERVER_ONLY) == names
    assert not set(REQUEST_OPTIONS) & set(models.SERVER_ONLY)
    for name in REQUEST_OPTIONS:  # each has what the matrix needs: a range, choices, or a bool's two values
        f = next(f for f in dataclasses.fields(GenerationConfig) if f.name == name)
        assert f.metadata.get("choices") or HINTS[name] is bool or config._field_range(f).bounded, name
    assert len(MATRIX) >= 50


@pytest.mark.parametrize("name, value", MATRIX)
@pytest.mark.slow
def test_a_request_option_outside_its_flags_range_is_one_json_line_and_the_next_is_answered(client, name, value):
    extra = {"sampling": True} if name in ("sampling_topk", "sampling_topp", "temperature") else {}
    error = _refused(client.post("/v1/translate", json={**OK, **extra, name: value}))
    assert name in error, error
    _answered(client)


#: the requests of the third reliability round that passed the checks and then failed (500, a traceback, a
#: one-token translation, or the decode worker held for minutes)
FOUND = [("lenpen", 1e308), ("lenpen", -1e308), ("lenpen_style", "bogus"), ("early_stop", "bogus"),
         ("temperature", 1e-300), ("max_len_b", 2**64), ("max_len_b", 2**63), ("max_len_b", 10**9),
         ("max_len_a", 1e30), ("max_len_a", 1e9)]


@pytest.mark.parametrize("name, value", FOUND, ids=[f"{n}={v!r}" for n, v in FOUND])
def test_the_values_that_failed_late_are_refused_up_front(client, name, value):
    extra = {"sampling": True} if name == "temperature" else {}
    error = _refused(client.post("/v1/translate", json={**OK, **extra, name: value}))
    assert error.startswith(f"{name} ") and "must be" in error, error
    _answered(client)


def test_the_openapi_document_lists_every_request_option_with_its_range(client):
    schema = client.get("/openapi.json").json()["paths"]["/v1/translate"]["post"]["requestBody"]["content"]
    properties = schema["application/json"]["schema"]["properties"]
    assert set(REQUEST_OPTIONS) <= set(properties)
    assert "[-5, 5]" in properties["lenpen"]["description"]
    assert "one of auto, bound, beam, never" in properties["early_stop"]["description"]


def test_no_repeat_ngram_size_1_translates_with_finite_scores(client):
    answer = client.post("/v1/translate", json={**OK, "no_repeat_ngram_size": 1})
    assert answer.status_code == 200, answer.text
    hypothesis = answer.json()["translations"][0]["hypotheses"][0]
    assert hypothesis["text"] and math.isfinite(hypothesis["score"])
    assert all(math.isfinite(p) for p in hypothesis["positional_scores"])
    pieces = hypothesis["pieces"].split()
    assert len(pieces) == len(set(pieces))  # no piece twice


# ---------------------------------------------------------------------- bodies that broke the server


class OneConnection:
    """Requests on one HTTP/1.1 connection, to see whether the server keeps it open after an error."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self.conn.connect()
        self.sock = self.conn.sock

    def post(self, path: str, body: bytes, content_type: str = "application/json", auth: bool = True):
        headers = {"Content-Type": content_type, **({"Authorization": f"Bearer {KEY}"} if auth else {})}
        self.conn.request("POST", path, body=body, headers=headers)
        answer = self.conn.getresponse()
        data = answer.read()
        assert self.conn.sock is self.sock, "the server closed the connection after that answer"
        return httpx.Response(answer.status, headers=dict(answer.getheaders()), content=data)

    def close(self):
        self.conn.close()


@pytest.mark.parametrize("what, body, field", [
    ("JSON nested 2,000 deep", b'{"q": ' + b"[" * 2000 + b"]" * 2000 + b', "source": "en", "target": "de"}',
     "nested too deep"),
    ("a lone surrogate in q", b'{"q": "A dog \\ud800 runs.", "source": "en", "target": "de"}', "q"),
    ("a lone surrogate in a list of q", b'{"q": ["A dog.", "\\udc00"], "source": "en", "target": "de"}', "q"),
    ("a lone surrogate in source", b'{"q": "A dog.", "source": "\\ud800", "target": "de"}', "source"),
    ("a lone surrogate in api_key", b'{"q": "A dog.", "source": "en", "target": "de", "api_key": "\\ud800"}',
     "api_key"),
])
def test_a_body_that_broke_the_server_is_a_400_on_a_connection_that_stays_open(server, what, body, field):
    connection = OneConnection(server.url)
    try:
        for auth in (True, False):  # a keyless client too: its key is read from the body
            error = _refused(connection.post("/translate", body, auth=auth))
            assert field in error, error
        after = connection.post("/translate", json.dumps({"q": "A dog runs.", "source": "en", "target": "de"})
                                .encode())
        assert after.status_code == 200 and after.json()["translatedText"]
    finally:
        connection.close()


def test_a_huge_language_code_is_not_echoed_whole(client):
    error = _refused(client.post("/translate", json={"q": "A dog.", "source": "x" * 500_000, "target": "de"}))
    assert "is not supported" in error and "500000 characters" in error


def test_max_chars_is_checked_before_the_text_is_split(server, client):
    """A 900 kB text over --max-chars costs the server no sentence splitting (about a second of CPU each
    before): four of them take well under a second of the server's CPU time."""
    text = "Dog. " * 180_000

    def cpu_seconds() -> float:
        fields = open(f"/proc/{server.pid}/stat").read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s

    client.post("/translate", json={"q": "A dog.", "source": "en", "target": "de"})
    before = cpu_seconds()
    for _ in range(4):
        assert "--max-chars" in _refused(client.post("/translate", json={"q": text, "source": "en", "target": "de"}))
    assert cpu_seconds() - before < 1.0
    _answered(client)


def test_an_exception_no_handler_took_is_a_json_500_and_one_log_line(caplog):
    """The last resort for a bug: the API's error shape, one log line (the traceback only with --debug)."""
    import asyncio

    from nmt_toolkit.serving.app import MetricsMiddleware
    from nmt_toolkit.serving.metrics import ServerMetrics

    async def broken(scope, receive, send):
        raise RuntimeError("a bug\nover two lines")

    async def main():
        transport = httpx.ASGITransport(app=MetricsMiddleware(broken, ServerMetrics()))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return await c.post("/v1/translate", json=OK)

    with caplog.at_level("INFO", logger="nmt_toolkit.serve"):
        answer = asyncio.run(main())
    assert answer.status_code == 500 and answer.json() == {"error": "Internal server error"}
    logged = [r for r in caplog.records if r.name == "nmt_toolkit.serve"]
    assert [r.getMessage() for r in logged] == ["POST /v1/translate: internal error: RuntimeError: a bug over two lines"]
    assert not logged[0].exc_info


# ---------------------------------------------------------------------- keys


def test_an_api_key_in_the_url_is_refused(server):
    form = {"q": "A dog runs.", "source": "en", "target": "de"}
    answer = httpx.post(server.url + f"/translate?api_key={KEY}", data=form, timeout=60)
    assert "api_key" in _refused(answer) and "URL" in answer.json()["error"]
    assert httpx.post(server.url + "/translate", data={**form, "api_key": KEY}, timeout=60).status_code == 200


def test_a_valid_bearer_header_is_the_key_whatever_the_body_says(client, server):
    body = {"q": "A dog runs.", "source": "en", "target": "de", "api_key": "not-the-key"}
    assert client.post("/translate", json=body).status_code == 200
    wrong_header = httpx.post(server.url + "/translate", json={**body, "api_key": KEY}, timeout=60,
                              headers={"Authorization": "Bearer not-the-key"})
    assert "Invalid API key" in _refused(wrong_header, 401)


def test_a_trailing_slash_is_not_redirected_to_the_host_header(client):
    answer = client.post("/translate/", json={"q": "A dog.", "source": "en", "target": "de"},
                         headers={"Host": "elsewhere.example"})
    assert "location" not in answer.headers
    _refused(answer, 404)


# ---------------------------------------------------------------------- connections


@pytest.mark.slow
def test_a_half_sent_request_is_cut_off_after_the_client_timeout(server):
    parts = urlsplit(server.url)
    partial = [b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: app",  # half a head
               b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"  # half a body
               b"Content-Length: 100\r\nAuthorization: Bearer " + KEY.encode() + b"\r\n\r\n{\"q\": "]
    sockets = [socket.create_connection((parts.hostname, parts.port), timeout=CLIENT_TIMEOUT + 20) for _ in partial]
    try:
        started = time.monotonic()
        for sock, data in zip(sockets, partial):
            sock.sendall(data)
        for sock in sockets:
            assert sock.recv(1000) == b""  # closed (a timeout here: the server still waits for the rest)
        assert time.monotonic() - started < CLIENT_TIMEOUT + 15
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.slow
def test_connections_over_the_cap_are_closed_at_once(server, client):
    parts = urlsplit(server.url)
    sockets = [socket.create_connection((parts.hostname, parts.port), timeout=10)
               for _ in range(MAX_CONNECTIONS + 6)]
    try:
        time.sleep(0.5)
        closed = [s for s in sockets if select.select([s], [], [], 0)[0] and s.recv(1) == b""]
        assert len(closed) >= 6, f"{len(closed)} of {len(sockets)} connections closed"
        assert len(closed) < len(sockets)
    finally:
        for s in sockets:
            s.close()
    time.sleep(0.2)
    _answered(client)

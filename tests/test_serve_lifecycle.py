"""nmt-serve under load and at its end: the event loop keeps answering while a batch decodes, a request that
waits too long gets 503, a client that goes away costs no decoding, and SIGTERM answers every request in
flight before the process exits 0. Real server processes on loopback ports, real HTTP clients."""
from __future__ import annotations

import concurrent.futures
import time

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")
httpx = pytest.importorskip("httpx", reason="the server tests need httpx (the [test] extra)")

from serve_process import ServerProcess, post_json, words  # noqa: E402

#: a request that keeps the tiny model's one decode thread busy for seconds: long forced outputs, wide beam
SLOW = {"sentences": list(words(16, seed=1)), "beam": 8, "min_len": 300, "max_len_b": 320}
#: a request within every range and limit of the server (--max-beam 16, --max-sentences 500) that keeps the
#: tiny model's decode thread busy for a minute or more: 64 sentences, beam 16, 1000 forced tokens each
STALL = {"sentences": list(words(64, seed=3)), "beam": 16, "min_len": 1000, "max_len_b": 1020}


def _wait_for(condition, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_busy_server_answers_health_times_out_with_503_and_drops_abandoned_work(trained_translation):
    t = trained_translation
    server = ServerProcess(t.data, t.first, "--request-timeout", "4")
    pool = concurrent.futures.ThreadPoolExecutor(2)
    try:
        slow = pool.submit(post_json, server.url + "/v1/translate", STALL, 120)
        _wait_for(lambda: server.metrics().get("nmt_serve_decoding_sentences") == len(STALL["sentences"]),
                  "the slow request to be taken for decoding")
        health = httpx.get(server.url + "/health", timeout=30)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert server.metrics().get("nmt_serve_sentences_total") == 0  # ...while the batch was still decoding

        gone = ["A dog runs.", "A cat sits.", "The man rides."]
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
            post_json(server.url + "/v1/translate", {"sentences": gone}, timeout=0.3)
        # waits behind the slow batch until that one's 4 s are up and its search stops, then is answered
        late = post_json(server.url + "/v1/translate", {"sentences": ["A big ball.", "Red house."]}, timeout=60)
        assert late.status_code == 200, late.text
        assert slow.result().status_code == 503 and "--request-timeout" in slow.result().json()["error"]

        after = server.metrics()
        assert after["nmt_serve_sentences_total"] == 2  # the late request's; the slow batch was stopped
        assert after["nmt_serve_dropped_sentences_total"] == len(gone) + len(STALL["sentences"])
        assert after["nmt_serve_decoding_sentences"] == 0
        assert after['nmt_serve_requests_total{endpoint="/v1/translate",status="499"}'] == 1
        assert after['nmt_serve_requests_total{endpoint="/v1/translate",status="503"}'] == 1
    finally:
        pool.shutdown(wait=True)
        assert server.terminate() == 0


@pytest.mark.slow
def test_sigterm_answers_every_request_in_flight_then_exits_0(trained_translation):
    from nmt_toolkit import Translator

    t = trained_translation
    sentences = list(words(12, seed=2))
    expected = [r.text for r in Translator.load(str(t.first), data=str(t.data), device="cpu").translate(sentences)]
    server = ServerProcess(t.data, t.first)
    slow = {**SLOW, "sentences": SLOW["sentences"][:6], "min_len": 200, "max_len_b": 220}
    with concurrent.futures.ThreadPoolExecutor(len(sentences) + 1) as pool:
        first = pool.submit(post_json, server.url + "/v1/translate", slow, 120)
        _wait_for(lambda: server.metrics().get("nmt_serve_requests_in_flight", 0) >= 2, "the slow request")
        answers = [pool.submit(post_json, server.url + "/translate", {"q": s, "source": "en", "target": "de"}, 120)
                   for s in sentences]
        _wait_for(lambda: server.metrics().get("nmt_serve_requests_in_flight", 0) >= len(sentences) + 2,
                  "every request to be in flight")
        status = server.terminate()
        assert first.result().status_code == 200
        got = [a.result() for a in answers]
    assert [a.status_code for a in got] == [200] * len(sentences)
    assert [a.json()["translatedText"] for a in got] == expected
    assert status == 0
    assert "Traceback" not in server.stderr



@pytest.mark.slow
def test_a_request_past_its_timeout_stops_its_decode_and_frees_the_worker(trained_translation):
    t = trained_translation
    server = ServerProcess(t.data, t.first, "--request-timeout", "2")
    try:
        stalled = post_json(server.url + "/v1/translate", STALL, timeout=120)
        assert stalled.status_code == 503 and "--request-timeout" in stalled.json()["error"]
        # answered within its own 2 s: the stalled batch's search stopped at its next step
        quick = post_json(server.url + "/v1/translate", {"sentences": ["A dog runs."]}, timeout=120)
        assert quick.status_code == 200, quick.text
        after = server.metrics()
        assert after["nmt_serve_dropped_sentences_total"] == len(STALL["sentences"])
        assert after["nmt_serve_decoding_sentences"] == 0 and after["nmt_serve_sentences_total"] == 1
    finally:
        assert server.terminate() == 0
    assert "Traceback" not in server.stderr


@pytest.mark.slow
def test_sigterm_during_a_long_decode_exits_within_the_drain_limit(trained_translation):
    t = trained_translation
    server = ServerProcess(t.data, t.first, "--request-timeout", "2")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(post_json, server.url + "/v1/translate", STALL, 120)
        _wait_for(lambda: server.metrics().get("nmt_serve_decoding_sentences") == len(STALL["sentences"]),
                  "the long request to be decoding")
        signalled = time.monotonic()
        status = server.terminate(timeout=30)
        took = time.monotonic() - signalled
        assert pending.result().status_code == 503  # answered (its time ran out), as every request in flight is
    assert status == 0
    assert took < 2 + 5 + 3, f"exited {took:.1f} s after SIGTERM; the drain limit is --request-timeout + 5 s"

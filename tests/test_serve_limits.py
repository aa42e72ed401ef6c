"""nmt-serve's limits, translation cache and LibreTranslate's /frontend/settings, against real server processes
and real clients (libretranslatepy, httpx): a client over its requests per minute gets 429 while others, some
sending at the same moment, are served, a longer list than --batch-limit is a 400, a repeated request is
answered from the cache with the same hypotheses and scores, and the settings carry the server's values."""
from __future__ import annotations

import json
import threading
import time
import urllib.error

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")
httpx = pytest.importorskip("httpx", reason="the server tests need httpx (the [test] extra)")

from serve_process import ServerProcess, post_json, words  # noqa: E402

#: alpha has its own 2 requests a minute, beta the server's --req-limit, gamma none (the other tests' key), delta
#: its own 3 (the concurrent clients' test)
KEYS = "# key, then its requests per minute\nalpha 2\nbeta\ngamma 0\ndelta 3\n"
GAMMA = {"Authorization": "Bearer gamma"}


@pytest.fixture(scope="module")
def server(trained_translation, tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text(KEYS)
    t = trained_translation
    process = ServerProcess(t.data, t.first, "--api-keys", keys, "--req-limit", "3", "--batch-limit", "3",
                            "--max-chars", "4000", "--cache-size", "1000")
    yield process
    assert process.terminate() == 0


def _moved(before: dict, after: dict, name: str) -> float:
    return after.get(name, 0) - before.get(name, 0)


def test_a_key_over_its_limit_gets_429_while_other_keys_are_served(server):
    from libretranslatepy import LibreTranslateAPI

    alpha, beta = LibreTranslateAPI(server.url, api_key="alpha"), LibreTranslateAPI(server.url, api_key="beta")
    assert alpha.translate("A dog runs.", "en", "de") and alpha.translate("A cat sits.", "en", "de")
    with pytest.raises(urllib.error.HTTPError) as refused:
        alpha.translate("A man rides.", "en", "de")
    assert refused.value.code == 429
    assert 1 <= int(refused.value.headers["Retry-After"]) <= 30  # 2 a minute: one more every 30 s
    error = json.loads(refused.value.read())
    assert set(error) == {"error"} and "this API key's 2 requests per minute" in error["error"]
    for _ in range(3):  # beta has the server's --req-limit 3, counted apart from alpha's
        assert beta.translate("A dog runs.", "en", "de")
    over = post_json(server.url + "/detect", {"q": "A dog runs.", "api_key": "beta"})
    assert over.status_code == 429 and "--req-limit" in over.json()["error"] and "Retry-After" in over.headers
    assert post_json(server.url + "/v1/translate", {"sentences": ["A dog."]}, headers=GAMMA).status_code == 200


def _send_together(server, jobs: dict[str, list[str]]) -> dict[str, list[tuple]]:
    """Each key's texts sent by threads of its own, all released at once: per key, (status, Retry-After,
    sent, answered) of every request, times from time.monotonic()."""
    released = threading.Barrier(sum(len(texts) for texts in jobs.values()))
    found: dict[str, list[tuple]] = {key: [] for key in jobs}

    def send(key: str, text: str) -> None:
        with httpx.Client(timeout=60) as client:
            released.wait(30)
            sent = time.monotonic()
            answer = client.post(server.url + "/translate", json={"q": text, "source": "en", "target": "de",
                                                                   "api_key": key})
            found[key].append((answer.status_code, answer.headers.get("Retry-After"), sent, time.monotonic()))

    threads = [threading.Thread(target=send, args=(key, text)) for key, texts in jobs.items() for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return found


def test_concurrent_clients_are_served_while_one_over_its_limit_gets_429(server):
    """delta (3 requests a minute) sends 8 requests at once while gamma's clients (no limit) send 6: delta
    gets its 3 (and one more per 20 s the run takes) and 429 for the rest, each with a Retry-After, while
    every one of the others is answered, some of them while delta is being refused."""
    started = time.monotonic()
    found = _send_together(server, {"delta": ["A dog runs."] * 8, "gamma": list(words(6, seed=3))})
    took = time.monotonic() - started
    delta = [status for status, *_ in found["delta"]]
    assert len(delta) == 8 and set(delta) <= {200, 429}
    assert 3 <= delta.count(200) <= 3 + int(took / 20)
    refused = [row for row in found["delta"] if row[0] == 429]
    assert refused and all(retry and 1 <= int(retry) <= 20 for _, retry, _, _ in refused)
    assert [status for status, *_ in found["gamma"]] == [200] * 6
    first_refusal = min(answered for *_, answered in refused)
    assert any(sent <= first_refusal <= answered for _, _, sent, answered in found["gamma"])


def test_clients_without_keys_are_told_apart_by_address(trained_translation):
    """Two loopback addresses (127.0.0.1 and 127.0.0.2) are two clients, each with its own 2 a minute."""
    t = trained_translation
    process = ServerProcess(t.data, t.first, "--req-limit", "2")
    other = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=60)
    try:
        body = {"q": "A dog runs.", "source": "en", "target": "de"}
        assert [post_json(process.url + "/translate", body).status_code for _ in range(3)] == [200, 200, 429]
        assert other.post(process.url + "/translate", json=body).status_code == 200
        assert httpx.get(process.url + "/health").status_code == 200  # only translation counts
    finally:
        other.close()
        assert process.terminate() == 0


def test_a_longer_list_than_the_batch_limit_is_a_400(server):
    body = {"source": "en", "target": "de", "api_key": "gamma"}
    assert post_json(server.url + "/translate", {**body, "q": ["A dog.", "A cat.", "A man."]}).status_code == 200
    refused = post_json(server.url + "/translate", {**body, "q": ["A dog.", "A cat.", "A man.", "A boy."]})
    assert refused.status_code == 400
    assert refused.json() == {"error": "Invalid request: request (4 texts) exceeds the batch limit (3 texts, the "
                                       "server's --batch-limit)"}
    native = post_json(server.url + "/v1/translate", {"sentences": ["A dog."] * 4}, headers=GAMMA)
    assert native.status_code == 400 and "--batch-limit" in native.json()["error"]


def test_a_repeated_request_is_answered_from_the_cache_with_the_same_hypotheses(server):
    body = {"sentences": ["The small dog runs.", "A red ball.", ""], "beam": 4, "nbest": 3}
    before = server.metrics()
    first = post_json(server.url + "/v1/translate", body, headers=GAMMA)
    middle = server.metrics()
    second = post_json(server.url + "/v1/translate", body, headers=GAMMA)
    after = server.metrics()
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()  # texts, pieces, scores and positional scores alike
    assert len(first.json()["translations"][0]["hypotheses"]) == 3
    assert _moved(before, middle, "nmt_serve_cache_misses_total") == 2  # the empty sentence is never looked up
    assert _moved(before, middle, "nmt_serve_cache_hits_total") == 0
    assert _moved(middle, after, "nmt_serve_cache_hits_total") == 2
    assert _moved(middle, after, "nmt_serve_cache_misses_total") == 0
    assert _moved(middle, after, "nmt_serve_sentences_total") == 0  # nothing decoded the second time
    assert 0 < after["nmt_serve_cache_hit_ratio"] <= 1 and after["nmt_serve_cache_sentences"] >= 2

    other = post_json(server.url + "/v1/translate", {**body, "lenpen": 0.5}, headers=GAMMA)
    last = server.metrics()
    assert other.status_code == 200
    assert _moved(after, last, "nmt_serve_cache_hits_total") == 0  # another option: its own entries
    assert _moved(after, last, "nmt_serve_cache_misses_total") == 2


def test_a_sentences_phrases_are_part_of_its_cache_entry(server):
    """The same sentence under two glossaries is two searches: the second is no hit, and its answer has its
    own term; asked again, each glossary's answer comes from the cache unchanged."""
    sentence = ["The small dog runs on the street."]
    answers = {}
    before = server.metrics()
    for own in ({"street": "PARK"}, {"street": "HOUSE"}):
        answer = post_json(server.url + "/v1/translate", {"sentences": sentence, "glossary": own}, headers=GAMMA)
        answers[own["street"]] = answer.json()
        assert own["street"] in answer.json()["translations"][0]["text"]
    middle = server.metrics()
    assert _moved(before, middle, "nmt_serve_cache_hits_total") == 0
    again = post_json(server.url + "/v1/translate", {"sentences": sentence, "glossary": {"street": "PARK"}},
                      headers=GAMMA)
    assert again.json() == answers["PARK"]
    assert _moved(middle, server.metrics(), "nmt_serve_cache_hits_total") == 1


def test_sampled_translations_are_not_cached(server):
    body = {"sentences": ["A dog runs."], "sampling": True, "beam": 1, "sampling_topk": 5}
    before = server.metrics()
    for _ in range(2):
        assert post_json(server.url + "/v1/translate", body, headers=GAMMA).status_code == 200
    after = server.metrics()
    assert _moved(before, after, "nmt_serve_cache_hits_total") == _moved(before, after,
                                                                         "nmt_serve_cache_misses_total") == 0
    assert _moved(before, after, "nmt_serve_sentences_total") == 2


def test_frontend_settings_have_the_servers_values(server):
    answer = httpx.get(server.url + "/frontend/settings", timeout=30)
    assert answer.status_code == 200
    assert answer.json() == {"charLimit": 4000, "frontendTimeout": 500, "apiKeys": True, "keyRequired": True,
                             "suggestions": False, "filesTranslation": True,
                             "supportedFilesFormat": [".txt", ".html", ".htm", ".docx", ".odt", ".odp", ".pptx", ".srt"],
                             "language": {"source": {"code": "en", "name": "English"},
                                          "target": {"code": "de", "name": "German"}}}


def test_cache_keys_tell_options_directions_and_phrases_apart():
    import numpy as np

    from nmt_toolkit.serving.cache import TranslationCache, sentence_key
    from nmt_toolkit.serving.models import ConstrainedIds

    ids = np.array([5, 6, 2])
    keys = {sentence_key(("en", "de", ((), True, False)), ids), sentence_key(("en", "fr", ((), True, False)), ids),
            sentence_key(("en", "de", ((("beam", 4),), True, False)), ids),
            sentence_key(("en", "de", ((), False, False)), ids),
            sentence_key(("en", "de", ((), True, False)), ConstrainedIds(ids, [[7, 8]])),
            sentence_key(("en", "de", ((), True, False)), ConstrainedIds(ids, [[7, 9]]))}
    assert len(keys) == 6
    cache = TranslationCache(2)
    for i, key in enumerate(keys):
        cache.put(key, i)
    assert len(cache) == 2  # least recently used out first
    off = TranslationCache(0)
    off.put("k", 1)
    assert off.get("k") is None and off.hits == off.misses == 0


def test_the_rate_limiter_refills_evenly():
    from nmt_toolkit.serving.limits import RateLimiter

    now = [0.0]
    limiter = RateLimiter(3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [None] * 3
    assert limiter.take("a") == pytest.approx(20.0)  # 3 a minute: the next in 20 s
    assert limiter.take("b") is None and limiter.take("a", per_minute=0) is None
    now[0] = 20.0
    assert limiter.take("a") is None and limiter.take("a") == pytest.approx(20.0)

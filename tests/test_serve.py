"""nmt-serve against real clients: a server process on a loopback port, LibreTranslate's own Python client
and httpx, compared with the Translator (itself tested against nmt-generate) on the same sentences."""
from __future__ import annotations

import math

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")
httpx = pytest.importorskip("httpx", reason="the server tests need httpx (the [test] extra)")

from serve_process import ServerProcess, post_json  # noqa: E402

from nmt_toolkit import Translator  # noqa: E402


@pytest.fixture(scope="module")
def server(trained_translation):
    t = trained_translation
    process = ServerProcess(t.data, t.first, "--max-sentences", "50", "--max-chars", "5000",
                            "--max-request-bytes", "20000")
    yield process
    assert process.terminate() == 0


@pytest.fixture(scope="module")
def translator(trained_translation):
    return Translator.load(str(trained_translation.first), data=str(trained_translation.data), device="cpu")


def _sources(trained_translation) -> list[str]:
    return (trained_translation.root / "test.en").read_text().splitlines()


@pytest.mark.slow
def test_libretranslatepy_gets_the_translators_translations(server, translator, trained_translation):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    assert client.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                                  {"code": "de", "name": "German", "targets": []}]
    sources = _sources(trained_translation)
    expected = [r.text for r in translator.translate(sources)]
    assert [client.translate(s, "en", "de") for s in sources] == expected
    assert sum(e == s.upper() for e, s in zip(expected, sources)) >= 10  # a model that learned its task


def test_a_text_is_split_into_lines_and_sentences_and_joined_back(server, translator):
    text = "A dog runs.  The man sits on the ball.\n\n  A red cat rides. Small house.\n"
    sentences = ["A dog runs.", "The man sits on the ball.", "A red cat rides.", "Small house."]
    t = [r.text for r in translator.translate(sentences)]
    answer = post_json(server.url + "/translate", {"q": text, "source": "en", "target": "de"})
    assert answer.status_code == 200
    assert answer.json() == {"translatedText": f"{t[0]}  {t[1]}\n\n  {t[2]} {t[3]}\n"}
    listed = post_json(server.url + "/translate", {"q": ["A dog runs.", "", "Small house."], "source": "en",
                                                   "target": "de"})
    assert listed.json() == {"translatedText": [t[0], "", t[3]]}


def test_libretranslate_alternatives_are_the_next_hypotheses(server, translator):
    best = translator.translate(["The small dog runs on the street."], beam=4, nbest=3)[0]
    answer = post_json(server.url + "/translate", {"q": "The small dog runs on the street.", "source": "en",
                                                   "target": "de", "alternatives": 2}).json()
    assert answer["translatedText"] == best.text
    assert answer["alternatives"] == [h.text for h in best.hypotheses[1:] if h.text != best.text]


def test_html_keeps_its_markup_and_translates_its_text(server, translator):
    """format html: tags around the words their words became (hand-checked: this model upper-cases), the same
    text as a plain request once the tags are stripped (alternatives included), verbatim parts untouched."""
    from html_check import first_difference, parse_strict

    html = ('<p title="A cat sits.">A <b>dog</b> runs.</p>\n<ul><li>The <i>man</i> sits.</li>'
            '<li><script>var x = "<b>";</script>A woman runs.<pre>a dog</pre></li></ul>')
    answer = post_json(server.url + "/translate", {"q": [html, "A <b>small <i>cat</i></b> runs."], "source": "en",
                                                   "target": "de", "format": "html"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"translatedText": [
        '<p title="A CAT SITS.">A <b>DOG</b> RUNS.</p>\n<ul><li>THE <i>MAN</i> SITS.</li>'
        '<li><script>var x = "<b>";</script>A WOMAN RUNS.<pre>a dog</pre></li></ul>',
        "A <b>SMALL <i>CAT</i></b> RUNS."]}
    source = "The small <em>dog</em> runs on <a href='/s'>the street</a>."
    html_answer = post_json(server.url + "/translate", {"q": source, "source": "en", "target": "de",
                                                        "format": "html", "alternatives": 2}).json()
    plain = post_json(server.url + "/translate", {"q": "The small dog runs on the street.", "source": "en",
                                                  "target": "de", "alternatives": 2}).json()
    for got, want in zip([html_answer["translatedText"], *html_answer["alternatives"]],
                         [plain["translatedText"], *plain["alternatives"]]):
        assert first_difference(source, got) is None
        assert parse_strict(got).text == want
    assert len(html_answer["alternatives"]) == len(plain["alternatives"])
    # source auto: the language is identified from the text, not from the markup
    auto = post_json(server.url + "/translate", {"q": source, "source": "auto", "target": "de", "format": "html"})
    assert auto.json() == {"translatedText": html_answer["translatedText"],
                           "detectedLanguage": {"confidence": auto.json()["detectedLanguage"]["confidence"],
                                                "language": "en"}}


def test_the_native_api_returns_nbest_lists_with_nmt_generates_scores(server, translator, trained_translation):
    sources = _sources(trained_translation)[:10] + [""]
    expected = translator.translate(sources, beam=4, nbest=3, lenpen=1.0)
    answer = post_json(server.url + "/v1/translate", {"sentences": sources, "beam": 4, "nbest": 3, "lenpen": 1.0})
    assert answer.status_code == 200
    got = answer.json()
    assert (got["source"], got["target"]) == ("en", "de")
    assert len(got["translations"]) == len(sources)
    for result, want in zip(got["translations"], expected):
        assert result["text"] == want.text
        assert [(h["text"], h["pieces"]) for h in result["hypotheses"]] == [(h.text, h.pieces) for h in want.hypotheses]
        assert [h["score"] for h in result["hypotheses"]] == pytest.approx([h.score for h in want.hypotheses],
                                                                          rel=1e-5)
    assert got["translations"][-1] == {"text": "", "hypotheses": []}
    sampled = post_json(server.url + "/v1/translate", {"sentences": sources[:3], "sampling": True, "beam": 2,
                                                       "nbest": 2, "sampling_topk": 5, "temperature": 0.7})
    assert sampled.status_code == 200
    assert all(len(t["hypotheses"]) == 2 for t in sampled.json()["translations"])


BAD = [
    # (what, content, expected status, words the error must contain)
    ("malformed JSON", b'{"q": "A dog', 400, "Invalid JSON"),
    ("a JSON list", [1, 2], 400, "object"),
    ("q missing", {"source": "en", "target": "de"}, 400, "missing q"),
    ("q empty", {"q": "", "source": "en", "target": "de"}, 400, "missing q"),
    ("q a number", {"q": 5, "source": "en", "target": "de"}, 400, "q"),
    ("target missing", {"q": "A dog.", "source": "en"}, 400, "missing target"),
    ("unknown source", {"q": "A dog.", "source": "xx", "target": "de"}, 400, "xx is not supported"),
    ("unknown target", {"q": "A dog.", "source": "en", "target": "fr"}, 400, "fr is not supported"),
    ("auto source, a text in the target language", {"q": "Ein Hund läuft.", "source": "auto", "target": "de"}, 400,
     "detected as de"),
    ("an unknown format", {"q": "<b>A dog.</b>", "source": "en", "target": "de", "format": "xml"}, 400,
     "xml format is not supported"),
    ("html that cannot be read", {"q": "<!DOCTYPE html>", "source": "en", "target": "de", "format": "html"}, 400,
     "not HTML"),
    ("alternatives not a number", {"q": "A dog.", "source": "en", "target": "de", "alternatives": "x"}, 400,
     "alternatives"),
    ("too many alternatives", {"q": "A dog.", "source": "en", "target": "de", "alternatives": 10}, 400,
     "--max-nbest"),
    ("too many characters", {"q": "A dog runs. " * 500, "source": "en", "target": "de"}, 400, "--max-chars"),
    ("too many sentences", {"q": "Dog. " * 60, "source": "en", "target": "de"}, 400, "--max-sentences"),
    ("too big a body", {"q": "a" * 30000, "source": "en", "target": "de"}, 413, "--max-request-bytes"),
]

BAD_NATIVE = [
    ("sentences a string", {"sentences": "A dog."}, 400, "sentences"),
    ("a beam as text", {"sentences": ["A dog."], "beam": "4"}, 400, "beam"),
    ("an unknown option", {"sentences": ["A dog."], "beem": 4}, 400, "unknown field beem"),
    ("nbest over beam", {"sentences": ["A dog."], "beam": 2, "nbest": 3}, 400, "nbest"),
    ("beam over the limit", {"sentences": ["A dog."], "beam": 64}, 400, "--max-beam"),
    ("a negative temperature", {"sentences": ["A dog."], "sampling": True, "temperature": -1.0}, 400,
     "temperature"),
    ("too long a sentence", {"sentences": [" ".join(["dog"] * 1100)]}, 400, "request sentence 1"),
    ("too many sentences", {"sentences": ["A dog."] * 51}, 400, "--max-sentences"),
    ("source auto", {"sentences": ["A dog."], "source": "auto", "target": "de"}, 400, "name the source language"),
]


def _send(url: str, content):
    if isinstance(content, bytes):
        return httpx.post(url, content=content, headers={"Content-Type": "application/json"}, timeout=30)
    return post_json(url, content, timeout=30)


@pytest.mark.parametrize("what, content, status, words_", BAD + [(f"native: {w}", c, s, x) for w, c, s, x in
                                                                  BAD_NATIVE], ids=lambda v: v if isinstance(v, str) else None)
def test_a_bad_request_is_a_json_error_and_the_server_answers_the_next(server, what, content, status, words_):
    path = "/v1/translate" if what.startswith("native") else "/translate"
    answer = _send(server.url + path, content)
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == {"error"} and words_ in answer.json()["error"]
    assert "\n" not in answer.json()["error"]
    ok = post_json(server.url + "/translate", {"q": "A dog runs.", "source": "en", "target": "de"})
    assert ok.status_code == 200 and ok.json()["translatedText"]


def test_unknown_paths_and_methods_have_the_same_error_shape(server):
    assert httpx.get(server.url + "/nowhere").status_code == 404
    assert set(httpx.get(server.url + "/nowhere").json()) == {"error"}
    wrong = httpx.get(server.url + "/translate")
    assert wrong.status_code == 405 and set(wrong.json()) == {"error"}


def test_metrics_move_with_requests(server):
    before = server.metrics()
    for text in ("Three dogs run home. Two cats sit.", "Six men ride. Four boys sing.", "A red car. A blue tree."):
        # sentences no other test sends: a repeated one would be answered from the translation cache
        post_json(server.url + "/translate", {"q": text, "source": "en", "target": "de"})
    post_json(server.url + "/translate", {"q": "", "source": "en", "target": "de"})
    after = server.metrics()

    def moved(name):
        return after.get(name, 0) - before.get(name, 0)

    assert moved('nmt_serve_requests_total{endpoint="/translate",status="200"}') == 3
    assert moved('nmt_serve_errors_total{endpoint="/translate",status="400"}') == 1
    assert moved("nmt_serve_sentences_total") == 6
    assert moved('nmt_serve_request_seconds_count{endpoint="/translate"}') == 4
    assert moved("nmt_serve_batch_sentences_count") >= 1 and moved("nmt_serve_batch_sentences_sum") == 6
    assert moved("nmt_serve_target_tokens_total") >= 6  # each translation has at least its end token
    assert after["nmt_serve_queue_sentences"] == after["nmt_serve_decoding_sentences"] == 0


def test_the_openapi_document_lists_the_endpoints(server):
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    assert {"/translate", "/detect", "/languages", "/v1/translate", "/health", "/metrics"} <= set(paths)
    schema = paths["/v1/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"sentences", "beam", "nbest", "lenpen", "sampling"} <= set(schema["properties"])


def test_the_web_page_loads_nothing_from_elsewhere(server):
    page = httpx.get(server.url + "/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "http://" not in page.text and "https://" not in page.text and "//cdn" not in page.text


@pytest.mark.slow
def test_a_thousand_bad_requests_leak_nothing(server):
    from serve_process import rss_kib

    bad = [b'{"q": ', {"q": 5, "source": "en", "target": "de"}, {"q": "A dog.", "source": "xx", "target": "de"},
           {"q": "Dog. " * 60, "source": "en", "target": "de"}]
    with httpx.Client(timeout=30) as client:
        def send(i):
            content = bad[i % len(bad)]
            if isinstance(content, bytes):
                return client.post(server.url + "/translate", content=content,
                                   headers={"Content-Type": "application/json"})
            return client.post(server.url + "/translate", json=content)

        for i in range(200):  # allocator pools and caches reach their working size
            send(i)
        before = rss_kib(server.pid)
        assert all(send(i).status_code == 400 for i in range(1000))
        after = rss_kib(server.pid)
    assert after <= before * 1.10, (before, after)
    assert post_json(server.url + "/translate", {"q": "A dog runs.", "source": "en", "target": "de"}).status_code == 200


@pytest.mark.slow
def test_api_keys(trained_translation, tmp_path):
    from libretranslatepy import LibreTranslateAPI

    keys = tmp_path / "keys"
    keys.write_text("# one key a line\nsecret-1\n\nsecret-2\n")
    process = ServerProcess(trained_translation.data, trained_translation.first, "--api-keys", keys)
    try:
        body = {"q": "A dog runs.", "source": "en", "target": "de"}
        for key, status in ((None, 401), ("wrong", 401), ("secret-2", 200)):
            answer = post_json(process.url + "/translate", {**body, **({"api_key": key} if key else {})})
            assert answer.status_code == status and (status == 200 or "API key" in answer.json()["error"])
        bearer = post_json(process.url + "/v1/translate", {"sentences": ["A dog."]},
                           headers={"Authorization": "Bearer secret-1"})
        assert bearer.status_code == 200
        assert post_json(process.url + "/detect", {"q": "A dog runs."}).status_code == 401
        assert LibreTranslateAPI(process.url, api_key="secret-2").detect("A dog runs.")[0]["language"] == "en"
        assert post_json(process.url + "/v1/translate", {"sentences": ["A dog."]}).status_code == 401
        assert LibreTranslateAPI(process.url, api_key="secret-1").translate("A dog runs.", "en", "de")
        assert httpx.get(process.url + "/health").status_code == 200  # health and languages need no key
        assert httpx.get(process.url + "/languages").status_code == 200
    finally:
        assert process.terminate() == 0


@pytest.mark.slow
def test_a_model_folder_is_served_without_a_data_bin(trained_translation, translator, tmp_path, capsys):
    from libretranslatepy import LibreTranslateAPI

    from nmt_toolkit.cli.export import run as export

    t = trained_translation
    folder = tmp_path / "model"
    assert export([str(t.data), "--path", str(t.first), "--format", "folder", "--output-dir", str(folder)]) == 0
    process = ServerProcess(None, folder)
    try:
        sources = _sources(t)[:8]
        client = LibreTranslateAPI(process.url)
        assert [client.translate(s, "en", "de") for s in sources] == [r.text for r in translator.translate(sources)]
    finally:
        assert process.terminate() == 0
    from nmt_toolkit.cli.serve import run

    capsys.readouterr()
    assert run(["--path", str(folder), "--also", str(folder), "--cpu", "--port", "0"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert errors == [f"nmt-serve: error: --also {folder}: en-de is served already (one model per pair)"]


@pytest.mark.slow
def test_several_pairs_each_from_its_own_model(trained_translation, translator, tmp_path):
    from nmt_toolkit.cli.export import run as export
    from tests.reliability.harness import tiny_trained_model

    _, data, checkpoint = tiny_trained_model(tmp_path)  # a second pair, xx-yy
    folder = tmp_path / "xx-yy"
    assert export([str(data), "--path", str(checkpoint), "--format", "folder", "--output-dir", str(folder)]) == 0
    other = Translator.load(str(folder), device="cpu")
    process = ServerProcess(trained_translation.data, trained_translation.first, "--also", folder)
    try:
        languages = {entry["code"]: entry["targets"] for entry in httpx.get(process.url + "/languages").json()}
        assert languages == {"en": ["de"], "xx": ["yy"], "de": [], "yy": []}
        for source, target, text, model in (("en", "de", "A dog runs on the street.", translator),
                                            ("xx", "yy", "w1 w2 w3 w4", other)):
            answer = post_json(process.url + "/translate", {"q": text, "source": source, "target": target})
            assert answer.json() == {"translatedText": model.translate([text])[0].text}
        crossed = post_json(process.url + "/translate", {"q": "A dog.", "source": "en", "target": "yy"})
        assert crossed.status_code == 400 and crossed.json()["error"] == "yy is not available as a target language from en"
        unnamed = post_json(process.url + "/v1/translate", {"sentences": ["A dog."]})
        assert unnamed.status_code == 400 and "several pairs" in unnamed.json()["error"]
    finally:
        assert process.terminate() == 0


@pytest.mark.slow
def test_a_ctranslate2_export_is_served_without_a_data_bin_or_search_flags(trained_translation, tmp_path):
    """nmt-serve --path EXPORT --engine ctranslate2 alone (it refused its own default search rules, and an
    export without its data-bin) answers as the Translator on the same export; a request naming a rule
    CTranslate2 lacks is one 400 JSON line, and the next request is answered."""
    pytest.importorskip("ctranslate2")
    from libretranslatepy import LibreTranslateAPI

    from nmt_toolkit.cli.export import run as export

    t = trained_translation
    ct2 = tmp_path / "ct2"
    assert export([str(t.data), "--path", str(t.first), "--format", "ctranslate2", "--output-dir", str(ct2)]) == 0
    expected = Translator.load(str(ct2), engine="ctranslate2", device="cpu")
    process = ServerProcess(None, ct2, "--engine", "ctranslate2")
    try:
        sources = _sources(t)[:6]
        client = LibreTranslateAPI(process.url)
        assert [client.translate(s, "en", "de") for s in sources] == [r.text for r in expected.translate(sources)]
        refused = post_json(process.url + "/v1/translate", {"sentences": sources[:1], "lenpen_style": "gnmt"})
        assert refused.status_code == 400 and "lenpen_style gnmt" in refused.json()["error"]
        html = post_json(process.url + "/translate", {"q": "A <b>dog</b> runs.", "source": "en", "target": "de",
                                                      "format": "html"})  # hand-checked: the model upper-cases
        assert html.status_code == 200 and html.json() == {"translatedText": "A <b>DOG</b> RUNS."}
        assert post_json(process.url + "/v1/translate", {"sentences": sources[:1]}).status_code == 200
    finally:
        assert process.terminate() == 0


def test_libretranslate_requests_skip_ctranslate2s_scoring_pass(trained_translation, tmp_path):
    """LibreTranslate's /translate shows no scores, so its batches skip CTranslate2's second, scoring pass
    (score_batch); /v1/translate's show them. Both give the same translations."""
    pytest.importorskip("ctranslate2")
    from nmt_toolkit.cli.export import run as export
    from nmt_toolkit.serving.models import ServedModel

    t = trained_translation
    ct2 = tmp_path / "ct2"
    assert export([str(t.data), "--path", str(t.first), "--format", "ctranslate2", "--output-dir", str(ct2)]) == 0
    translator = Translator.load(str(ct2), engine="ctranslate2", device="cpu")
    calls = []
    real = translator.generator.search.translator

    class Counting:
        def __getattr__(self, name):
            return getattr(real, name)

        def score_batch(self, *args, **kwargs):
            calls.append(len(args[0]))
            return real.score_batch(*args, **kwargs)

    translator.generator.search.translator = Counting()
    served = ServedModel("en", "de", translator)
    ids = served.encode(_sources(t)[:8])
    plain = served.decode(served.options_key({}, scores=False), ids)
    assert calls == []
    scored = served.decode(served.options_key({}), ids)
    assert sum(calls) == 8
    assert [h[0].text for h in plain] == [h[0].text for h in scored]
    assert all(math.isfinite(p) for h in scored for p in h[0].positional_scores)

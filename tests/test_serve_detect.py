"""Language identification in nmt-serve: LibreTranslate's ``POST /detect`` and ``source: "auto"`` on
``/translate``, asked by LibreTranslate's own client and httpx of a real server process serving the session's
en→de model (so detection is among en and de). The references are independent of the identifier: texts
whose language is known (sentences written here, Multi30k's test captions) and the Translator's own
translations of the same texts from their true language."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")
pytest.importorskip("py3langid", reason="language identification needs the [serve] extra")
httpx = pytest.importorskip("httpx", reason="the server tests need httpx (the [test] extra)")

from serve_process import ServerProcess, post_json  # noqa: E402

from nmt_toolkit import Translator  # noqa: E402
from nmt_toolkit.serving.models import RequestError  # noqa: E402

#: (language, text) written for these tests: the en ones over the trained model's words
KNOWN = [("en", "A small dog runs on the street in the park."), ("en", "The woman sits on a big red ball."),
         ("de", "Ein kleiner Hund läuft auf der Straße im Park."), ("de", "Die Frau sitzt auf einem großen Ball."),
         ("en", "A man rides."), ("de", "Zwei Männer unterhalten sich.")]


@pytest.fixture(scope="module")
def server(trained_translation):
    t = trained_translation
    process = ServerProcess(t.data, t.first, "--max-chars", "2000")
    yield process
    assert process.terminate() == 0


@pytest.fixture(scope="module")
def translator(trained_translation):
    return Translator.load(str(trained_translation.first), data=str(trained_translation.data), device="cpu")


def test_libretranslatepy_detect_ranks_the_served_languages(server):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    for language, text in KNOWN:
        found = client.detect(text)
        assert [set(entry) for entry in found] == [{"confidence", "language"}] * 2
        assert {entry["language"] for entry in found} == {"en", "de"}  # the served ones, no other
        assert found[0]["language"] == language, (text, found)
        confidences = [entry["confidence"] for entry in found]
        assert confidences == sorted(confidences, reverse=True) and all(0 <= c <= 100 for c in confidences)
        assert sum(confidences) == pytest.approx(100, abs=0.02)
    french = client.detect("Un homme en vélo descend une rue de la ville.")
    assert {entry["language"] for entry in french} == {"en", "de"}


def test_detect_names_the_language_of_multi30k_captions(server, data_path):
    """The Multi30k test captions the library was chosen on, as requests: every one identified right."""
    wrong = []
    with httpx.Client(timeout=30) as client:
        for language in ("en", "de"):
            lines = data_path(f"multi30k/test_2016_flickr.{language}").read_text(encoding="utf-8").splitlines()
            for line in lines[:100]:
                answer = client.post(server.url + "/detect", json={"q": line})
                assert answer.status_code == 200
                if answer.json()[0]["language"] != language:
                    wrong.append((language, line))
    assert wrong == []


def test_auto_translates_from_the_detected_language(server, translator):
    from libretranslatepy import LibreTranslateAPI

    english = [text for language, text in KNOWN if language == "en"]
    expected = [r.text for r in translator.translate(english)]
    client = LibreTranslateAPI(server.url)
    assert [client.translate(text, "auto", "de") for text in english] == expected
    one = post_json(server.url + "/translate", {"q": english[0], "source": "auto", "target": "de"}).json()
    top = post_json(server.url + "/detect", {"q": english[0]}).json()[0]
    assert one == {"translatedText": expected[0], "detectedLanguage": top}
    listed = post_json(server.url + "/translate", {"q": english, "source": "auto", "target": "de"}).json()
    assert listed["translatedText"] == expected
    assert [d["language"] for d in listed["detectedLanguage"]] == ["en"] * len(english)
    named = post_json(server.url + "/translate", {"q": english[0], "source": "en", "target": "de"}).json()
    assert named == {"translatedText": expected[0]}  # a named source gets no detectedLanguage


def test_a_short_text_is_identified_with_the_requests_other_texts(server, translator):
    """"Man." alone reads as German to the identifier; beside two English captions it is taken as English,
    as LibreTranslate takes a short text (40 characters or fewer) with its request's other texts."""
    assert post_json(server.url + "/detect", {"q": "Man."}).json()[0]["language"] == "de"
    texts = ["A man rides a red ball on the street in the park.", "Man.", "The small dog sits on a big house."]
    answer = post_json(server.url + "/translate", {"q": texts, "source": "auto", "target": "de"}).json()
    assert [d["language"] for d in answer["detectedLanguage"]] == ["en"] * 3
    assert answer["translatedText"] == [r.text for r in translator.translate(texts)]


def test_a_detected_language_the_server_cannot_translate_is_a_400(server):
    answer = post_json(server.url + "/translate", {"q": "Ein kleiner Hund läuft auf der Straße im Park.",
                                                   "source": "auto", "target": "de"})
    assert answer.status_code == 400 and set(answer.json()) == {"error"}
    error = answer.json()["error"]
    assert error.startswith("de is not supported (source auto: the text was detected as de, confidence ")
    assert "\n" not in error
    listed = post_json(server.url + "/translate", {"q": ["A small dog runs on the street in the park.",
                                                         "Die Frau sitzt auf einem großen Ball im Park."],
                                                   "source": "auto", "target": "de"})
    assert listed.status_code == 400 and "detected as de" in listed.json()["error"]
    after = post_json(server.url + "/translate", {"q": "A dog runs.", "source": "auto", "target": "de"})
    assert after.status_code == 200


@pytest.mark.parametrize("body, words", [
    ({"q": ""}, "missing q"), ({}, "missing q"), ({"q": []}, "missing q"), ({"q": ["", ""]}, "missing q"),
    ({"q": 5}, "q"), ({"q": "Ein Hund. " * 300}, "--max-chars"),
], ids=["empty", "missing", "empty list", "empty texts", "a number", "too long"])
def test_detect_refuses_a_request_without_text_in_one_line(server, body, words):
    answer = post_json(server.url + "/detect", body)
    assert answer.status_code == 400 and set(answer.json()) == {"error"}
    assert words in answer.json()["error"] and "\n" not in answer.json()["error"]
    assert httpx.post(server.url + "/detect", data={"q": "Ein Hund läuft."}).json()[0]["language"] == "de"  # a form


def test_the_openapi_document_lists_detect(server):
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    schema = paths["/detect"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "q" in schema["properties"] and "q" in schema["required"]
    source = paths["/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]["source"]
    assert "auto" in source["description"]


# --------------------------------------------------------------------------- the detector in-process

def test_the_detector_maps_served_codes_to_the_libraries():
    from nmt_toolkit.serving.detect import Detector

    detector = Detector(["en", "de", "pt_BR", "nb", "xx", "eng_Latn"])
    assert detector.languages == ["en", "de", "pt_BR", "nb"]
    assert detector.unknown == ["xx", "eng_Latn"]
    for language, text in [("de", "Ein kleiner Hund läuft auf der Straße."),
                           ("pt_BR", "Uma mulher está andando na rua."),
                           ("nb", "Hunden løper på stranden og mannen ser på."), ("en", "A DOG RUNS ON THE BEACH.")]:
        found = detector.detect(text)
        assert found[0][0] == language
        assert sorted(code for code, _ in found) == sorted(detector.languages)
    assert Detector(["xx", "yy"]).detect("A dog runs.") == []


def test_importing_the_module_loads_no_identifier():
    code = ("import sys, nmt_toolkit.serving.detect, nmt_toolkit.serving.app; "
            "assert not [m for m in sys.modules if m.startswith('py3langid')], 'loaded on import'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_without_the_library_the_server_starts_and_detection_is_a_400(monkeypatch, caplog):
    from nmt_toolkit.serving.batcher import DynamicBatcher
    from nmt_toolkit.serving.config import ServeConfig
    from nmt_toolkit.serving.models import ModelPool
    from nmt_toolkit.serving.server import open_detector
    from nmt_toolkit.serving.translate import Service

    for name in ("py3langid", "py3langid.langid"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails, as when it is not installed
    with caplog.at_level("WARNING", logger="nmt_toolkit.serve"):
        assert open_detector(["en", "de"]) is None
    assert "pip install py3langid" in caplog.text

    class Model:
        def pairs(self):
            return [("en", "de")]

    service = Service(ModelPool([Model()]), DynamicBatcher(lambda *a: []), ServeConfig(), detector=None)
    with pytest.raises(RequestError, match=r"\(py3langid is not installed\); name the source language") as refused:
        asyncio.run(service.detect_sources(["A dog runs."]))
    assert refused.value.status == 400

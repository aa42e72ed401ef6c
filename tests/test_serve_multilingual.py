"""nmt-serve with a multilingual model (en→de, en→fr trained; de, en, fr known): one process serves every
direction between the model's languages, zero-shot ones included, from one loaded model. Real servers on a
loopback port, real clients (LibreTranslate's own and httpx), each direction's answers compared with the
Translator's for that direction (itself tested against nmt-generate in test_multilingual_decode)."""
from __future__ import annotations

import concurrent.futures

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")
httpx = pytest.importorskip("httpx", reason="the server tests need httpx (the [test] extra)")

from serve_process import ServerProcess, post_json  # noqa: E402

from nmt_toolkit import Translator  # noqa: E402
from tests.multilingual_model import tiny_multilingual_model  # noqa: E402

#: two trained directions and three zero-shot ones
DIRECTIONS = (("en", "de"), ("en", "fr"), ("de", "fr"), ("fr", "en"), ("de", "en"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_multilingual_model(tmp_path_factory)


@pytest.fixture(scope="module")
def server(tiny):
    # a long --max-wait-ms, so that requests sent together are batched together whatever their direction
    process = ServerProcess(tiny.data, tiny.checkpoint, "--max-wait-ms", "100", "--beam", "3")
    yield process
    assert process.terminate() == 0


@pytest.fixture(scope="module")
def translators(tiny):
    return {(s, t): Translator.load(str(tiny.checkpoint), str(tiny.data), source_lang=s, target_lang=t,
                                    device="cpu", beam=3) for s, t in DIRECTIONS}


@pytest.mark.slow
def test_languages_lists_every_direction_between_the_models_languages(server):
    from libretranslatepy import LibreTranslateAPI

    assert LibreTranslateAPI(server.url).languages() == [
        {"code": "de", "name": "German", "targets": ["en", "fr"]},
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "fr", "name": "French", "targets": ["de", "en"]}]
    assert httpx.get(server.url + "/health").json()["models"] == ["de|en|fr (every direction)"]


@pytest.mark.slow
def test_requests_of_all_directions_at_once_get_each_directions_translations(server, translators, tiny):
    """Requests of five directions sent together reach the batcher together; each gets its direction's
    n-best lists and scores, which a batch mixing directions (other tags) would not give."""
    sentences = {s: tiny.lines(s, 12) for s in ("en", "de", "fr")}

    def ask(direction):
        source, target = direction
        return post_json(server.url + "/v1/translate", {"sentences": sentences[source], "source": source,
                                                        "target": target, "nbest": 2})

    batches_before = server.metrics()["nmt_serve_batch_sentences_count"]
    with concurrent.futures.ThreadPoolExecutor(len(DIRECTIONS)) as pool:
        answers = dict(zip(DIRECTIONS, pool.map(ask, DIRECTIONS)))
    texts = {}
    for (source, target), answer in answers.items():
        assert answer.status_code == 200, answer.text
        got = answer.json()
        assert (got["source"], got["target"]) == (source, target)
        want = translators[(source, target)].translate(sentences[source], nbest=2)
        for result, expected in zip(got["translations"], want, strict=True):
            assert [(h["text"], h["pieces"]) for h in result["hypotheses"]] == \
                [(h.text, h.pieces) for h in expected.hypotheses]
            assert [h["score"] for h in result["hypotheses"]] == \
                pytest.approx([h.score for h in expected.hypotheses], rel=1e-4)
            assert [h["positional_scores"] for h in result["hypotheses"]] == \
                [pytest.approx(list(h.positional_scores), rel=1e-4, abs=1e-5) for h in expected.hypotheses]
        texts[(source, target)] = [t["text"] for t in got["translations"]]
    assert texts[("en", "de")] != texts[("en", "fr")]  # the target language steers the same sources
    assert sum(t.startswith("__") or " __" in t for ts in texts.values() for t in ts) == 0  # no tag leaks
    batches = server.metrics()["nmt_serve_batch_sentences_count"] - batches_before
    assert batches == len(DIRECTIONS)  # one batch per direction: the requests did meet in the batcher


def test_libretranslate_translates_any_two_languages(server, translators, tiny):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    for source, target in (("en", "fr"), ("de", "fr")):
        lines = tiny.lines(source, 3)
        assert [client.translate(line, source, target) for line in lines] == \
            [r.text for r in translators[(source, target)].translate(lines)]


def test_auto_translates_each_text_from_its_own_language(server, translators, tiny):
    """source auto over English and German texts in one request: each text's language is identified among
    the model's (de, en, fr), and each is translated by its own direction as the Translator translates it
    from its true language; the two directions are waited for together."""
    pytest.importorskip("py3langid", reason="language identification needs the [serve] extra")
    pairs = [(en, de) for en, de in zip(tiny.lines("en"), tiny.lines("de")) if min(len(en), len(de)) > 40][:3]
    texts = [text for pair in pairs for text in pair]
    languages = ["en", "de"] * len(pairs)
    answer = post_json(server.url + "/translate", {"q": texts, "source": "auto", "target": "fr"})
    assert answer.status_code == 200, answer.text
    assert [d["language"] for d in answer.json()["detectedLanguage"]] == languages
    expected = [translators[(language, "fr")].translate([text])[0].text for language, text in zip(languages, texts)]
    assert answer.json()["translatedText"] == expected


@pytest.mark.parametrize("source, target, error", [
    ("cs", "de", "cs is not supported"),
    ("en", "cs", "cs is not supported"),
    ("en", "en", "en is not available as a target language from en"),
])
def test_a_pair_the_model_does_not_know_is_librettranslates_400(server, source, target, error):
    answer = post_json(server.url + "/translate", {"q": "A dog.", "source": source, "target": target})
    assert (answer.status_code, answer.json()) == (400, {"error": error})
    unnamed = post_json(server.url + "/v1/translate", {"sentences": ["A dog."]})
    assert unnamed.status_code == 400 and "several pairs" in unnamed.json()["error"]


def test_one_loaded_model_serves_every_direction(tiny):
    """Each direction's translator shares the loaded weights and the search; only the tags differ."""
    from nmt_toolkit.serving.models import ModelPool, MultilingualModel

    base = Translator.load(str(tiny.checkpoint), str(tiny.data), source_lang="en", target_lang="de", device="cpu")
    pool = ModelPool([MultilingualModel(base)])
    served = [pool.get(s, t) for s, t in DIRECTIONS]
    assert all(m.translator.models is base.models and m.translator.generator is base.generator for m in served)
    assert pool.get("de", "fr") is pool.get("de", "fr")  # made once
    tags = {(m.source, m.target): (m.encode(["A dog."])[0][0], m.translator.task.decoder_token()) for m in served}
    vocab = base.task.src_dict
    assert tags[("de", "fr")] == (vocab.index("__de__"), vocab.index("__fr__"))
    assert tags[("fr", "en")] == (vocab.index("__fr__"), vocab.index("__en__"))


def test_a_multilingual_model_folder_loads_without_a_direction_and_is_served_once(tiny, capsys):
    """A model folder needs no data-bin and no --source-lang/--target-lang; given twice (--also), the
    directions it would serve again are refused by name before anything listens."""
    from nmt_toolkit.cli.serve import run

    capsys.readouterr()
    folder = tiny.saved_folder
    assert run(["--path", str(folder), "--also", str(folder), "--cpu", "--port", "0"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert errors == [f"nmt-serve: error: --also {folder}: de-en, de-fr, en-de is served already (one model per pair)"]


def test_a_ctranslate2_export_serves_every_direction_from_one_loaded_model(tiny, tmp_path):
    """--engine ctranslate2: the directions share the one loaded CTranslate2 model; each decodes as the
    export loaded for that direction does (options a request sets included)."""
    pytest.importorskip("ctranslate2")
    from nmt_toolkit.cli.export import run as export
    from nmt_toolkit.serving.models import ModelPool, MultilingualModel

    folder = tmp_path / "ct2"
    assert export([str(tiny.data), "--path", str(tiny.checkpoint), "--format", "ctranslate2", "--output-dir",
                   str(folder)]) == 0
    options = {"lenpen_style": "fairseq", "early_stop": "beam", "device": "cpu", "engine": "ctranslate2"}
    base = Translator.load(str(folder), str(tiny.data), source_lang="en", target_lang="de", **options)
    pool = ModelPool([MultilingualModel(base)])
    lines = tiny.lines("de", 6)
    for source, target, request in (("de", "fr", {}), ("de", "en", {"beam": 2, "nbest": 2})):
        served = pool.get(source, target)
        assert served.translator.generator.model is base.generator.model
        found = served.decode(served.options_key(request), served.encode(lines))
        alone = Translator.load(str(folder), str(tiny.data), source_lang=source, target_lang=target, **options)
        want = alone.translate(lines, **request)
        assert [[h.pieces for h in hyps] for hyps in found] == [[h.pieces for h in r.hypotheses] for r in want]


def test_a_model_of_200_languages_is_named_by_their_number_and_lists_every_target():
    from types import SimpleNamespace

    from nmt_toolkit.serving.models import ModelPool, MultilingualModel

    codes = [f"l{i:03d}" for i in range(200)]  # NLLB-200's size; nothing is decoded, so no model is needed
    many = MultilingualModel(SimpleNamespace(task=SimpleNamespace(langs=codes)))
    assert many.name == "200 languages (every direction)"
    languages = ModelPool([many]).languages()
    assert list(languages) == codes and languages["l007"] == [c for c in codes if c != "l007"]
    assert ModelPool([many]).pairs()[:2] == [("l000", "l001"), ("l000", "l002")]

"""nmt-serve's web page in a real browser (headless Chromium): type a sentence, pick the languages (or let the
server detect the source), press Translate, read what the page shows, and compare it with the Translator's
own translation of the same text. One server process serves the session's tiny multilingual model (de, en,
fr: every direction) to every test here. Screenshots are kept as test artifacts (in $NMT_TEST_ARTIFACTS when
set, else in the test's temporary folder)."""
from __future__ import annotations

import json
import os
import pathlib

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")
httpx = pytest.importorskip("httpx", reason="the server tests need httpx (the [test] extra)")

from html_check import first_difference, parse_strict  # noqa: E402
from serve_browser import Browser, chromium_path  # noqa: E402
from serve_process import ServerProcess  # noqa: E402

from nmt_toolkit import Translator  # noqa: E402
from tests.multilingual_model import tiny_multilingual_model  # noqa: E402

pytestmark = pytest.mark.skipif(chromium_path() is None,
                                reason="no Chromium on this machine (Debian: apt-get install chromium)")

#: a Multi30k caption (test_2016_flickr.de), German by its source, long enough to be identified alone
GERMAN = "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt."
#: an English fragment with inline elements, as a page editor would send it
FRAGMENT = 'A man in a <b>blue shirt</b> is sitting on a <a href="/bench">bench</a>.'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_multilingual_model(tmp_path_factory)


@pytest.fixture(scope="module")
def server(tiny):
    process = ServerProcess(tiny.data, tiny.checkpoint)
    yield process
    assert process.terminate() == 0


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    opened = Browser(str(tmp_path_factory.mktemp("chromium-profile")))
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def translate(tiny):
    """``translate("en", "de", texts)``: the Translator's own translations, one loaded model per direction."""
    loaded = {}

    def run(source: str, target: str, texts: list[str]) -> list[str]:
        if (source, target) not in loaded:
            loaded[source, target] = Translator.load(str(tiny.checkpoint), str(tiny.data), source_lang=source,
                                                     target_lang=target, device="cpu")
        return [r.text for r in loaded[source, target].translate(texts)]

    return run


def open_page(browser: Browser, server: ServerProcess) -> None:
    browser.open(server.url + "/")
    browser.wait_for("document.getElementById('target').options.length")


def keep_screenshot(browser: Browser, tmp_path: pathlib.Path, name: str) -> None:
    folder = pathlib.Path(os.environ.get("NMT_TEST_ARTIFACTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    picture = browser.screenshot()
    assert picture.startswith(b"\x89PNG\r\n\x1a\n")
    (folder / name).write_bytes(picture)


def shown(browser: Browser, element_id: str) -> str:
    return browser.evaluate(f"document.getElementById({element_id!r}).textContent")


def test_the_web_page_translates_what_is_typed(server, browser, tiny, translate, tmp_path):
    sentence = tiny.lines("en", 1)[0]
    [expected] = translate("en", "de", [sentence])
    first = httpx.get(server.url + "/frontend/settings").json()["language"]
    served = {entry["code"]: entry["targets"] for entry in httpx.get(server.url + "/languages").json()}
    open_page(browser, server)
    # the pair the server names first, and that source's targets; "auto" besides the served sources
    assert browser.evaluate("document.getElementById('source').value") == first["source"]["code"]
    assert browser.evaluate("document.getElementById('target').value") == first["target"]["code"]
    assert browser.evaluate("[...document.getElementById('source').options].map(o => o.value)") == \
        ["auto", *served]
    browser.choose("source", "en")
    assert browser.evaluate("[...document.getElementById('target').options].map(o => o.value)") == served["en"]
    browser.choose("target", "de")
    browser.type("text", sentence)
    browser.click("translate")
    assert browser.wait_for("document.getElementById('translation').value") == expected
    assert shown(browser, "error") == "" and shown(browser, "detected") == ""
    assert browser.evaluate("document.getElementById('files').hidden") is \
        (not httpx.get(server.url + "/frontend/settings").json()["filesTranslation"])
    keep_screenshot(browser, tmp_path, "nmt-serve-page.png")


def test_the_page_translates_when_the_typing_pauses(server, browser, tiny, translate):
    """No button: the text is sent frontendTimeout ms after the last keystroke, and a change of target sends
    it again; the page then shows the answer to the newest request."""
    sentence = tiny.lines("en", 2)[1]
    [german] = translate("en", "de", [sentence])
    [french] = translate("en", "fr", [sentence])
    assert httpx.get(server.url + "/frontend/settings").json()["frontendTimeout"] > 0
    open_page(browser, server)
    browser.choose("source", "en")
    browser.choose("target", "de")
    browser.type("text", sentence)
    assert browser.wait_for("document.getElementById('translation').value") == german
    browser.choose("target", "fr")
    assert browser.wait_for("(v => v !== %s && v)(document.getElementById('translation').value)"
                            % json.dumps(german)) == french
    assert shown(browser, "error") == ""


def test_the_page_detects_the_source_language(server, browser, translate, tmp_path):
    pytest.importorskip("py3langid", reason="language identification needs the [serve] extra")
    [expected] = translate("de", "en", [GERMAN])
    open_page(browser, server)
    browser.choose("source", "auto")
    # a detected language may be any served source: every served target is offered
    assert sorted(browser.evaluate("[...document.getElementById('target').options].map(o => o.value)")) == \
        ["de", "en", "fr"]
    browser.choose("target", "en")
    browser.type("text", GERMAN)
    browser.click("translate")
    assert browser.wait_for("document.getElementById('translation').value") == expected
    detected = browser.wait_for("document.getElementById('detected').textContent")
    assert detected.startswith("Detected: German (") and detected.endswith(" %)")
    assert shown(browser, "error") == ""
    keep_screenshot(browser, tmp_path, "nmt-serve-page-detected.png")


def test_the_page_shows_an_html_translation_as_its_source(server, browser, translate, tmp_path):
    [expected] = translate("en", "de", [parse_strict(FRAGMENT).text])
    open_page(browser, server)
    browser.choose("source", "en")
    browser.choose("target", "de")
    browser.click("html")
    assert browser.evaluate("document.getElementById('html').checked") is True
    browser.type("text", FRAGMENT)
    browser.click("translate")
    answer = browser.wait_for("document.getElementById('translation').value")
    assert first_difference(FRAGMENT, answer) is None, answer
    assert parse_strict(answer).text == expected
    # shown as text: the markup is in the page's text, no element of it in the page's tree
    assert shown(browser, "translation") == answer
    assert browser.evaluate("document.querySelectorAll('#translation *').length") == 0
    assert shown(browser, "error") == ""
    keep_screenshot(browser, tmp_path, "nmt-serve-page-html.png")


def test_the_page_shows_an_error_in_one_line(server, browser):
    """A detected language the server cannot translate into the chosen target is the server's 400, shown."""
    pytest.importorskip("py3langid", reason="language identification needs the [serve] extra")
    open_page(browser, server)
    browser.choose("source", "auto")
    browser.choose("target", "de")
    browser.type("text", GERMAN)
    browser.click("translate")
    error = browser.wait_for("document.getElementById('error').textContent")
    assert "detected as de" in error and "\n" not in error
    assert browser.evaluate("document.getElementById('translate').disabled") is False



def test_the_page_translates_a_file(server, browser, tiny, translate, tmp_path):
    """A .txt file put on the file input as a person's file chooser does, translated, and the page's link
    followed: the file's lines are the Translator's translations of the uploaded lines."""
    settings = httpx.get(server.url + "/frontend/settings").json()
    assert settings["filesTranslation"] is True and ".txt" in settings["supportedFilesFormat"]
    lines = tiny.lines("en", 5)
    expected = translate("en", "de", lines)
    upload = tmp_path / "captions.txt"
    upload.write_text("\n".join(lines) + "\n", encoding="utf-8")
    open_page(browser, server)
    assert browser.evaluate("document.getElementById('files').hidden") is False
    assert set(browser.evaluate("document.getElementById('file').accept").split(",")) == \
        set(settings["supportedFilesFormat"])
    browser.choose("source", "en")
    browser.choose("target", "de")
    browser.set_files("file", [str(upload)])
    browser.click("translate-file")
    link = browser.wait_for("!document.getElementById('download').hidden && document.getElementById('download').href")
    assert shown(browser, "error") == ""
    keep_screenshot(browser, tmp_path, "nmt-serve-page-file.png")
    answer = httpx.get(link, timeout=60)
    assert answer.status_code == 200
    assert answer.content.decode("utf-8").splitlines() == expected

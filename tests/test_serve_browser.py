"""nmt-serve's web page in a real browser (headless Chromium): type a sentence, press Translate, read the
translation the page shows, and compare it with the Translator's. A screenshot is kept as a test artifact
(in $NMT_TEST_ARTIFACTS when set, else in the test's temporary folder)."""
from __future__ import annotations

import os
import pathlib

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")
pytest.importorskip("httpx", reason="the server tests need httpx (the [test] extra)")

from serve_browser import Browser, chromium_path  # noqa: E402
from serve_process import ServerProcess  # noqa: E402


@pytest.mark.skipif(chromium_path() is None, reason="no Chromium on this machine (Debian: apt-get install chromium)")
def test_the_web_page_translates_what_is_typed(trained_translation, tmp_path):
    from nmt_toolkit import Translator

    t = trained_translation
    sentence = "The small dog runs on the street."
    expected = Translator.load(str(t.first), data=str(t.data), device="cpu").translate([sentence])[0].text
    server = ServerProcess(t.data, t.first)
    browser = Browser(str(tmp_path / "profile"))
    try:
        browser.open(server.url + "/")
        assert browser.wait_for("document.getElementById('target').options.length") == 1
        assert browser.evaluate("document.getElementById('source').value") == "en"
        browser.type("text", sentence)
        browser.click("translate")
        shown = browser.wait_for("document.getElementById('translation').value")
        assert shown == expected
        assert browser.evaluate("document.getElementById('error').textContent") == ""
        folder = pathlib.Path(os.environ.get("NMT_TEST_ARTIFACTS", tmp_path))
        folder.mkdir(parents=True, exist_ok=True)
        picture = browser.screenshot()
        assert picture.startswith(b"\x89PNG\r\n\x1a\n")
        (folder / "nmt-serve-page.png").write_bytes(picture)
    finally:
        browser.close()
        assert server.terminate() == 0

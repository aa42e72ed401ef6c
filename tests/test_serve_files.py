"""LibreTranslate's document translation against a real nmt-serve process, through httpx's multipart upload:
/translate_file answers a /download_file URL whose file, read back by its format's own library, has every
paragraph translated as the Translator translates it, each run's formatting in its place and the same
structure; the limits (API key, --max-chars, --max-file-bytes, --max-stored-files) hold; unknown and crafted
download names are 404; the server's folder for the files is its own and goes when it stops."""
from __future__ import annotations

import re
from urllib.parse import quote

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")
pytest.importorskip("multipart", reason="/translate_file needs python-multipart (the [serve] extra)")
pytest.importorskip("docx", reason="the document formats need the [documents] extra")
httpx = pytest.importorskip("httpx", reason="the server tests need httpx (the [test] extra)")

import document_files as files  # noqa: E402
from serve_process import ServerProcess  # noqa: E402

from nmt_toolkit.markup.sentences import PlainText  # noqa: E402

KEY = "document-key"


@pytest.fixture(scope="module")
def server(trained_translation, tmp_path_factory):
    """One server with an API key, --max-chars 600, --max-file-bytes 100000, --max-stored-files 3, its
    temporary folder under the test's own; ``(process, the folder it makes its folder in)``."""
    t = trained_translation
    root = tmp_path_factory.mktemp("serve-files")
    (root / "keys").write_text(KEY + "\n")
    (root / "tmp").mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(root / "tmp"))
        process = ServerProcess(t.data, t.first, "--api-keys", root / "keys", "--max-chars", "600",
                                "--max-file-bytes", "100000", "--max-stored-files", "3")
    yield process, root / "tmp"
    assert process.terminate() == 0
    assert list((root / "tmp").iterdir()) == []  # the server's folder is gone with it


@pytest.fixture(scope="module")
def translate(trained_translation):
    from nmt_toolkit import Translator

    t = trained_translation
    translator = Translator.load(str(t.first), data=str(t.data), device="cpu")

    def plain(text: str) -> str:
        read = PlainText(text, "en")
        return read.render(translator.translate(read.sentences)) if read.sentences else text
    return plain


def upload(url: str, name: str, data: bytes, source: str = "en", key: str = KEY) -> httpx.Response:
    return httpx.post(url + "/translate_file", data={"source": source, "target": "de", "api_key": key},
                      files={"file": (name, data)}, timeout=120)


def download(server_url: str, answer: httpx.Response) -> httpx.Response:
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    assert re.fullmatch(re.escape(server_url) + r"/download_file/[0-9a-f]{32}\.[A-Za-z0-9_.-]+", url), url
    return httpx.get(url, timeout=30)


@pytest.mark.parametrize("extension", [".docx", ".pptx", ".odt"])
def test_documents_come_back_translated_with_their_formatting(server, translate, extension):
    process, _ = server
    make, view = files.MAKERS[extension]
    source = make()
    got = download(process.url, upload(process.url, "my report" + extension, source))
    assert got.status_code == 200
    assert got.headers["content-disposition"] == f'attachment; filename="my_report{extension}"'
    assert got.headers["content-type"].startswith({".docx": "application/vnd.openxmlformats-officedocument.word",
                                                   ".pptx": "application/vnd.openxmlformats-officedocument.pres",
                                                   ".odt": "application/vnd.oasis.opendocument.text"}[extension])
    assert files.check_runs(view(source), view(got.content), translate) >= 4


def test_subtitles_with_source_auto(server, translate):
    process, _ = server
    source = files.make_srt()
    got = download(process.url, upload(process.url, "film.srt", source, source="auto"))
    before, after = files.srt_view(source), files.srt_view(got.content)
    assert [s[:3] for s in after] == [s[:3] for s in before]
    assert [" ".join(s[3].split("\n")) for s in after] == [translate(" ".join(s[3].split("\n"))) for s in before]


def test_limits(server):
    process, _ = server
    url = process.url
    assert upload(url, "a.txt", b"A dog runs.", key="wrong").status_code == 401
    too_big = upload(url, "a.txt", b"A dog runs. " * 9000)
    assert too_big.status_code == 413 and "--max-file-bytes" in too_big.json()["error"]
    too_long = upload(url, "a.txt", b"A dog runs. " * 60)
    assert too_long.status_code == 400 and "--max-chars" in too_long.json()["error"]
    unknown = upload(url, "a.pdf", b"%PDF-1.4")
    assert unknown.status_code == 400 and ".pdf" in unknown.json()["error"]
    for name, data in (("a.docx", b"PK\x03\x04 no zip"), ("b.docx", files.make_docx()[:20000])):
        answer = upload(url, name, data)
        assert answer.status_code == 400 and "file" in answer.json()["error"], answer.text
    not_a_form = httpx.post(url + "/translate_file", json={"source": "en", "target": "de"},
                            headers={"Authorization": f"Bearer {KEY}"})
    assert not_a_form.status_code == 400 and "multipart" in not_a_form.json()["error"]


def test_download_names_are_keys_never_paths(server):
    process, folder = server
    url = process.url
    answer = upload(url, "../../etc/passwd.txt", b"A dog runs.")
    good = answer.json()["translatedFileUrl"]
    token = good.rsplit("/", 1)[1].split(".")[0]
    assert good.endswith(f"/{token}.passwd.txt")  # the uploaded name's last component only
    assert httpx.get(good).text == httpx.get(good).text != ""
    [own] = list(folder.iterdir())  # the server's own folder: files named by their random id alone
    names = [p.name for p in own.iterdir()]
    assert token in names and all(re.fullmatch("[0-9a-f]{32}", n) for n in names), names
    for name in ("made-up.txt", token, f"{token}.other.txt", quote(f"../{own.name}/{token}", safe=""),
                 quote(f"{own}/{token}", safe=""), quote(f"{token}.passwd.txt/", safe="")):
        missing = httpx.get(f"{url}/download_file/{name}")
        assert missing.status_code == 404 and "error" in missing.json(), name


def test_the_oldest_files_go_past_max_stored_files(server):
    process, _ = server
    urls = [upload(process.url, f"{k}.txt", b"A dog runs.").json()["translatedFileUrl"] for k in range(4)]
    assert httpx.get(urls[0]).status_code == 404
    assert [httpx.get(u).status_code for u in urls[1:]] == [200, 200, 200]


def test_settings_say_files_are_translated(server):
    process, _ = server
    settings = httpx.get(process.url + "/frontend/settings").json()
    assert settings["filesTranslation"] is True
    assert settings["supportedFilesFormat"] == [".txt", ".html", ".htm", ".docx", ".odt", ".odp", ".pptx", ".srt"]


def test_disable_files_translation(trained_translation, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    process = ServerProcess(trained_translation.data, trained_translation.first, "--disable-files-translation")
    try:
        assert httpx.get(process.url + "/frontend/settings").json()["filesTranslation"] is False
        answer = upload(process.url, "a.txt", b"A dog runs.")
        assert answer.status_code == 403 and "disabled" in answer.json()["error"]
        assert list(tmp_path.iterdir()) == []  # no folder made for files it never keeps
    finally:
        assert process.terminate() == 0

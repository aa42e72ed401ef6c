"""nmt-export as a program: what it says without the [ct2] extra (tested with the import made to fail, so it
runs where CTranslate2 is installed too), and what it copies beside the model (the data-bin's subword model)."""
from __future__ import annotations

import json
import pathlib
import sys

import pytest

from nmt_toolkit.cli.export import run as export
from nmt_toolkit.cli.preprocess import run as preprocess

FIX = pathlib.Path(__file__).parent / "fixtures" / "fairseq"
BIN = str(FIX / "data-bin")
OURS = str(FIX / "exported" / "ours.pt")  # a model of ours trained on that data-bin (README there)
INSTALL = "CTranslate2 is not installed: pip install 'nmt_toolkit[ct2]' (or pip install ctranslate2)"


def errors(capfd) -> list[str]:
    return [line for line in capfd.readouterr().err.splitlines() if " | INFO | " not in line]


def test_without_ctranslate2_the_programs_say_how_to_install_it(monkeypatch, tmp_path, capfd):
    for name in [m for m in sys.modules if m == "ctranslate2" or m.startswith("ctranslate2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` raises ImportError
    capfd.readouterr()
    assert export([BIN, "--path", OURS, "--output-dir", str(tmp_path / "ct2")]) == 2
    assert errors(capfd) == [f"nmt-export: error: {INSTALL}"]
    assert not (tmp_path / "ct2").exists()


HIDDEN = ("import sys; sys.modules['ctranslate2'] = None; from nmt_toolkit.cli.generate import run; "
          "sys.exit(run(sys.argv[1:]))")


@pytest.mark.slow
def test_generate_with_engine_ctranslate2_without_it_prints_one_line():
    """A process of its own, so that the garbage collector's output at exit reaches stderr as a user sees it."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", HIDDEN, BIN, "--path", OURS, "--engine", "ctranslate2",
                           "--gen-subset", "test", "--lenpen-style", "fairseq", "--early-stop", "beam"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if " | INFO | " not in line] == [
        f"nmt-generate: error: {INSTALL}"]


@pytest.mark.parametrize("kind,name", [("sentencepiece", "spm.model"), ("subword_nmt", "bpe.codes")])
def test_export_copies_the_subword_model(kind, name, tmp_path):
    """The data-bin's subword model lands beside the exported model, byte for byte, and nmt_export.json names it
    (the data-bin: the fixtures' text binarized by nmt-preprocess with the dictionaries ours.pt was trained on)."""
    pytest.importorskip("ctranslate2", reason="the [ct2] extra is not installed")
    import subprocess

    subprocess.run([sys.executable, str(FIX / "synthetic_text.py"), str(tmp_path / "raw")], check=True)
    data = tmp_path / "bin"
    assert preprocess(["--source-lang", "src", "--target-lang", "tgt", "--trainpref", str(tmp_path / "raw" / "train"),
                       "--testpref", str(tmp_path / "raw" / "test"), "--bpe", kind, "--bpe-vocab-size", "60",
                       "--srcdict", f"{BIN}/dict.src.txt", "--tgtdict", f"{BIN}/dict.tgt.txt", "--workers", "1",
                       "--destdir", str(data)]) == 0
    assert export([str(data), "--path", OURS, "--output-dir", str(tmp_path / "ct2")]) == 0
    assert (tmp_path / "ct2" / name).read_bytes() == (data / name).read_bytes()
    record = json.loads((tmp_path / "ct2" / "nmt_export.json").read_text(encoding="utf-8"))
    assert record["subword"]["type"] == kind and record["subword"]["model"] == name


MARIAN = pathlib.Path(__file__).parent / "fixtures" / "marian" / "en-de"


def test_every_option_a_format_cannot_hold_is_named_at_once(tmp_path, capfd):
    """The OPUS-MT fixture (config.json: activation swish, decoding from the pad id, Marian's sinusoids, and a
    vocabulary without <s>, whose output-bias row keeps it at p = 0) in fairseq's format: four options fairseq
    cannot hold, one line naming them all, the exit status of an option that does not fit (2), nothing
    written."""
    from nmt_toolkit.importers.marian import import_marian

    folder = tmp_path / "opus.nmt"
    import_marian(str(MARIAN)).write(str(folder))
    capfd.readouterr()
    assert export(["--path", str(folder), "--format", "fairseq", "--output-dir", str(tmp_path / "fs")]) == 2
    assert errors(capfd) == [
        f"nmt-export: error: {folder}: cannot be exported to fairseq: --output-bias (its output projection has no "
        f"bias); --decoder-start pad (it starts decoding from EOS); --activation-fn silu (not among the activations "
        f"we export); --sinusoid-layout marian (not among the layouts we export)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["opus.nmt"]

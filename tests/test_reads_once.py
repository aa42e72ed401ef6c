"""Every program reads each model file once: a checkpoint (ours or fairseq's), a model folder (its manifest with
config and dictionaries, and its safetensors weights) or an nmt-export CTranslate2 folder (its record, and
CTranslate2's model) is opened by ``loading.open_model`` and what it read is handed on, to choose the task, to
load the weights, to export and to serve. The readers are counted where they are called: ``torch.load``,
safetensors' ``load_file``, the fairseq unpickler, ``read_model_folder``, ``read_export`` and
``ctranslate2.Translator``. The programs run in this process on the session's tiny models."""
from __future__ import annotations

import collections
import os
import pathlib
import sys

import pytest
import torch

from tests.multilingual_model import tiny_multilingual_model
from tests.reliability.harness import run_in_process

FAIRSEQ = pathlib.Path(__file__).parent / "fixtures" / "fairseq"
MARIAN = pathlib.Path(__file__).parent / "fixtures" / "marian" / "en-de"


def _readers() -> dict:
    """Each reader of a model file, by the name a count is reported under."""
    import ctranslate2
    import safetensors.torch

    from nmt_toolkit import export_record, model_folder
    from nmt_toolkit.importers import fairseq_pickle

    return {"torch.load": torch.load, "load_file": safetensors.torch.load_file,
            "fairseq_pickle.read": fairseq_pickle.read, "read_model_folder": model_folder.read_model_folder,
            "read_export": export_record.read_export, "ctranslate2.Translator": ctranslate2.Translator}


class Reads:
    """Counts ``(reader, real path)`` while it is installed: every module's reference to a reader (``from x
    import f`` binds one in the importing module) is replaced by a counting one."""

    def __init__(self, monkeypatch):
        self.counts: collections.Counter = collections.Counter()
        for name, original in _readers().items():
            counted = self._counting(name, original)
            for module in list(sys.modules.values()):
                for attr, value in list(getattr(module, "__dict__", {}).items()):
                    if value is original:
                        monkeypatch.setattr(module, attr, counted)

    def _counting(self, name: str, original):
        def counted(source, *args, **kwargs):
            where = os.path.realpath(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else "<stream>"
            self.counts[(name, where)] += 1
            return original(source, *args, **kwargs)

        return counted

    def of(self, *paths) -> dict:
        """The counts of the readers of ``paths`` (files, or folders and the files in them)."""
        roots = [os.path.realpath(p) for p in paths]
        return {(name, where): n for (name, where), n in self.counts.items()
                for root in roots if where == root or where.startswith(root + os.sep)}


def _checkpoint(path) -> dict:
    return {("torch.load", os.path.realpath(path)): 1}


def _folder(path) -> dict:
    path = os.path.realpath(path)
    return {("read_model_folder", path): 1, ("load_file", os.path.join(path, "model.safetensors")): 1}


def _export(path) -> dict:
    path = os.path.realpath(path)
    return {("read_export", path): 1, ("ctranslate2.Translator", path): 1}


@pytest.fixture(scope="module")
def models(trained_translation, tmp_path_factory):
    """The session's tiny model as a checkpoint, a model folder and a CTranslate2 export (written by the
    programs before anything is counted), a Marian-shaped model folder, and a few lines to translate."""
    pytest.importorskip("ctranslate2")
    root = tmp_path_factory.mktemp("reads")
    data, first = trained_translation.data, trained_translation.first
    for fmt in ("folder", "ctranslate2"):
        assert run_in_process("nmt-export", [data, "--path", first, "--format", fmt,
                                             "--output-dir", root / fmt]).status == 0
    assert run_in_process("nmt-convert", ["--from", "marian", "--path", MARIAN, "--output",
                                          root / "marian"]).status == 0
    lines = root / "lines.en"
    lines.write_text("".join((trained_translation.root / "test.en").read_text().splitlines(True)[:3]))
    return {"data": data, "first": first, "second": trained_translation.second, "folder": root / "folder",
            "ct2": root / "ctranslate2", "marian": root / "marian", "lines": lines, "root": root}


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory):
    return tiny_multilingual_model(tmp_path_factory)


def _run(monkeypatch, prog: str, args: list, stdin: str = "") -> Reads:
    reads = Reads(monkeypatch)
    result = run_in_process(prog, args, stdin)
    assert result.status == 0, result.stderr[-2000:]
    return reads


@pytest.mark.parametrize("case", ["checkpoint", "ensemble", "folder", "ct2 export", "ct2 export alone",
                                  "checkpoint in ct2"])
def test_nmt_generate_reads_each_model_file_once(models, case, monkeypatch):
    m = models
    args, expected = {
        "checkpoint": ([m["data"], "--path", m["first"]], _checkpoint(m["first"])),
        "ensemble": ([m["data"], "--path", f"{m['first']}:{m['second']}"],
                     {**_checkpoint(m["first"]), **_checkpoint(m["second"])}),
        "folder": (["--path", m["folder"], "--input", m["lines"]], _folder(m["folder"])),
        "ct2 export": ([m["data"], "--path", m["ct2"], "--engine", "ctranslate2", "--lenpen-style", "fairseq",
                        "--early-stop", "beam"], _export(m["ct2"])),
        "ct2 export alone": (["--path", m["ct2"], "--input", m["lines"], "--engine", "ctranslate2"], _export(m["ct2"])),
        "checkpoint in ct2": ([m["data"], "--path", m["first"], "--engine", "ctranslate2", "--lenpen-style",
                               "fairseq", "--early-stop", "beam"], _checkpoint(m["first"])),
    }[case]
    reads = _run(monkeypatch, "nmt-generate", [*args, "--beam", "2", "--cpu", "--quiet"])
    assert reads.of(m["first"], m["second"], m["folder"], m["ct2"]) == expected
    assert max(reads.counts.values()) == 1, reads.counts  # the on-the-fly export's own folder too


def test_nmt_generate_reads_a_fairseq_checkpoint_once(monkeypatch):
    """Our loader is tried first and refuses it (torch.load with weights_only stops at fairseq's classes);
    then the restricted unpickler reads it; nothing reads it again to choose the task."""
    model = FAIRSEQ / "postnorm" / "model.pt"
    reads = _run(monkeypatch, "nmt-generate", [FAIRSEQ / "data-bin", "--path", model, "--gen-subset", "test",
                                               "--beam", "1", "--cpu", "--quiet"])
    assert reads.of(model) == {**_checkpoint(model), ("fairseq_pickle.read", os.path.realpath(model)): 1}


@pytest.mark.parametrize("case", ["checkpoint", "folder"])
def test_nmt_interactive_reads_the_model_once(models, case, monkeypatch):
    m = models
    args, expected = {"checkpoint": ([m["data"], "--path", m["first"]], _checkpoint(m["first"])),
                      "folder": (["--path", m["folder"]], _folder(m["folder"]))}[case]
    reads = _run(monkeypatch, "nmt-interactive", [*args, "--cpu"], stdin=m["lines"].read_text())
    assert reads.of(m["first"], m["folder"]) == expected


@pytest.mark.parametrize("fmt", ["ctranslate2", "fairseq", "folder", "marian"])
def test_nmt_export_reads_the_model_once(models, fmt, monkeypatch, tmp_path):
    """--format marian exports the Marian-shaped folder; the others the checkpoint without DATA (the data-bin
    it records is found in what was read)."""
    m = models
    source = m["marian"] if fmt == "marian" else m["first"]
    reads = _run(monkeypatch, "nmt-export", ["--path", source, "--format", fmt, "--output-dir", tmp_path / "out"])
    assert reads.of(source) == (_folder(source) if fmt == "marian" else _checkpoint(source))


@pytest.mark.parametrize("case", ["checkpoint", "multilingual checkpoint", "multilingual folder"])
def test_nmt_serve_loads_each_model_once(models, multilingual, case, monkeypatch):
    """Everything up to serving: the socket is bound, the models loaded and the service built, then serving
    itself is skipped."""
    from nmt_toolkit.serving import server
    from tests.reliability import harness

    monkeypatch.setitem(harness.PROGRAMS, "nmt-serve", "serve")
    monkeypatch.setattr(server, "serve", lambda service, metrics, sock: None)
    args, path, expected = {
        "checkpoint": ([models["data"], "--path", models["first"]], models["first"], _checkpoint(models["first"])),
        "multilingual checkpoint": ([multilingual.data, "--path", multilingual.checkpoint], multilingual.checkpoint,
                                    _checkpoint(multilingual.checkpoint)),
        "multilingual folder": (["--path", multilingual.saved_folder], multilingual.saved_folder,
                                _folder(multilingual.saved_folder)),
    }[case]
    reads = _run(monkeypatch, "nmt-serve", [*args, "--cpu", "--port", "0"])
    assert reads.of(path) == expected


def test_translator_load_reads_the_model_once(models, multilingual, monkeypatch):
    from nmt_toolkit import Translator

    reads = Reads(monkeypatch)
    Translator.load(str(models["first"]), str(models["data"]), device="cpu")
    Translator.load(str(multilingual.checkpoint), str(multilingual.data), source_lang="en", target_lang="fr",
                    device="cpu")
    Translator.load(str(multilingual.saved_folder), source_lang="en", target_lang="de", device="cpu")
    assert reads.of(models["first"], multilingual.checkpoint, multilingual.saved_folder) == {
        **_checkpoint(models["first"]), **_checkpoint(multilingual.checkpoint), **_folder(multilingual.saved_folder)}


def test_nmt_average_checkpoints_reads_each_input_once(models, monkeypatch, tmp_path):
    m = models
    reads = _run(monkeypatch, "nmt-average-checkpoints", ["--inputs", m["first"], m["second"],
                                                          "--output", tmp_path / "avg.pt"])
    assert reads.of(m["first"], m["second"]) == {**_checkpoint(m["first"]), **_checkpoint(m["second"])}


@pytest.mark.parametrize("source", ["fairseq", "marian"])
def test_nmt_convert_reads_the_foreign_model_once(source, monkeypatch, tmp_path):
    """A fairseq checkpoint through the restricted unpickler alone (the importer knows what it reads; no
    torch.load tries it first), a Marian folder's weights through safetensors."""
    if source == "fairseq":
        path = FAIRSEQ / "postnorm" / "model.pt"
        expected = {("fairseq_pickle.read", os.path.realpath(path)): 1}
        out = tmp_path / "ours.pt"
    else:
        path = MARIAN
        expected = {("load_file", os.path.realpath(MARIAN / "model.safetensors")): 1}
        out = tmp_path / "folder"
    reads = _run(monkeypatch, "nmt-convert", ["--from", source, "--path", path, "--output", out])
    assert reads.of(path) == expected


@pytest.mark.parametrize("kind", ["data-bin", "model folder"])
def test_a_translator_reads_its_subword_model_once_not_per_call(trained_translation, tmp_path, monkeypatch, kind):
    """A server encodes every request: the sentencepiece model is read when first needed, then kept (it
    was read again for each call, 6 ms each, which held nmt-serve to half of nmt-generate's speed)."""
    import sentencepiece

    from nmt_toolkit import Translator
    from nmt_toolkit.cli.export import run as export

    path, data = str(trained_translation.first), str(trained_translation.data)
    if kind == "model folder":
        assert export([data, "--path", path, "--format", "folder", "--output-dir", str(tmp_path / "m")]) == 0
        path, data = str(tmp_path / "m"), None
    translator = Translator.load(path, data, device="cpu")
    loads = []
    real = sentencepiece.SentencePieceProcessor.Load
    monkeypatch.setattr(sentencepiece.SentencePieceProcessor, "Load",
                        lambda self, *a, **k: loads.append(1) or real(self, *a, **k))
    for _ in range(5):
        assert translator.translate(["A dog runs."])[0].hypotheses
    assert len(loads) <= 2  # at most the source's and the target's model, once each

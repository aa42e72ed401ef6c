"""Crafted model folders, Hugging Face folders and JSON files: what a folder says is not trusted.

Every case is one error line naming the file (and key, or flag), exit status != 0, no traceback, and
nothing written (the test's folder compared before and after). Links are made to files inside the test's
own temporary folder, outside the model folder. The model is the tiny Marian fixture imported once.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
import shutil

import pytest
import torch

from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.importers.marian import import_marian
from tests.reliability.harness import (MARIAN_FIXTURE, assert_refused, assert_unchanged, record_in_manifest,
                                       run_in_process, snapshot, tiny_model_folder)

NESTED = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return tiny_model_folder(tmp_path_factory.mktemp("crafted-folders"))


def _folder(world, tmp_path) -> pathlib.Path:
    return pathlib.Path(shutil.copytree(world / "model", tmp_path / "model"))


def _marian(tmp_path) -> pathlib.Path:
    return pathlib.Path(shutil.copytree(MARIAN_FIXTURE, tmp_path / "marian"))


def _edit_json(path: pathlib.Path, change) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value))


def _generate(folder, raw, *extra):
    return run_in_process("nmt-generate", ["--path", folder, "--input", raw, "--beam", "1", *extra])


def _refused_nothing_written(tmp_path, monkeypatch, program, args, *names, status=None) -> str:
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    line = assert_refused(run_in_process(program, args), *names, status=status)
    assert_unchanged(before, tmp_path)
    return line


# ---------------------------------------------------------------------------- JSON files within limits

@pytest.mark.parametrize("name", ["manifest.json", "config.json"])
@pytest.mark.parametrize("content", ["nested", "digits"])
def test_a_model_folder_json_nested_deep_or_with_a_huge_integer(world, tmp_path, monkeypatch, name, content):
    """RecursionError and OverflowError (embed_dim of 4,000 digits) were tracebacks."""
    folder = _folder(world, tmp_path)
    if content == "nested":
        (folder / name).write_text('{"a": ' + NESTED + "}")
    else:
        text = (folder / name).read_text()
        key = '"version": 1' if name == "manifest.json" else '"embed_dim": 32'
        (folder / name).write_text(text.replace(key, key.split(":")[0] + ": " + "9" * 4000))
    if name == "config.json":
        record_in_manifest(folder, name)
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate", ["--path", folder, "--input", world / "raw.en"],
                             str(folder / name))


@pytest.mark.parametrize("name", ["config.json", "vocab.json", "tokenizer_config.json"])
def test_a_marian_json_nested_deep_is_one_line_and_writes_nothing(tmp_path, monkeypatch, name):
    marian = _marian(tmp_path)
    (marian / name).write_text('{"a": ' + NESTED + "}")
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-convert",
                             ["--from", "marian", "--path", marian, "--output", tmp_path / "out"], str(marian / name))


def test_a_preprocess_json_nested_deep(world, tmp_path, monkeypatch):
    data = tmp_path / "bin"
    data.mkdir()
    (data / "preprocess.json").write_text(NESTED)
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate",
                             [data, "--path", world / "model", "--input", world / "raw.en"], str(data / "preprocess.json"))


def test_an_export_record_nested_deep(tmp_path):
    from nmt_toolkit.export.ctranslate2 import read_export

    (tmp_path / "nmt_export.json").write_text(NESTED)
    with pytest.raises(DataError, match="nmt_export.json: the export record nests arrays or objects 100000 levels"):
        read_export(str(tmp_path))


# ---------------------------------------------------------------------------- nmt-convert --from marian

def _set_config(**values):
    return lambda marian: _edit_json(marian / "config.json", lambda c: c.update(values))


def _set_weight(name, change):
    def craft(marian):
        from safetensors.torch import load_file, save_file

        weights = load_file(marian / "model.safetensors")
        weights[name] = change(weights[name])
        save_file(weights, marian / "model.safetensors")
    return craft


def _corrupt_spm(marian):
    data = bytearray((marian / "source.spm").read_bytes())
    data[10:400] = b"\xff" * 390
    (marian / "source.spm").write_bytes(bytes(data))


FC1 = "model.encoder.layers.0.fc1.weight"
MARIAN_FIXTURE_CASES = {
    "d_model -32": (_set_config(d_model=-32), "d_model"),
    "d_model 10^7": (_set_config(d_model=10 ** 7), "d_model"),
    "max_position_embeddings 0": (_set_config(max_position_embeddings=0), "max_position_embeddings"),
    "dropout 2.0": (_set_config(dropout=2.0), "dropout"),
    "dropout NaN": (_set_config(dropout=math.nan), "dropout"),
    "dropout high": (_set_config(dropout="high"), "dropout"),
    "FFN width 0": (_set_config(encoder_ffn_dim=0, decoder_ffn_dim=0), "encoder_ffn_dim"),
    "a NaN weight": (_set_weight(FC1, lambda t: t.index_fill(0, torch.tensor([3]), math.nan)), "non-finite"),
    "a weight of the wrong shape": (_set_weight(FC1, lambda t: t[:-1].clone()), FC1),
    "integer weights": (_set_weight(FC1, lambda t: t.to(torch.int32)), FC1),
    "a corrupt source.spm": (_corrupt_spm, "source.spm"),
}


@pytest.mark.parametrize("case", list(MARIAN_FIXTURE_CASES))
def test_nmt_convert_from_marian_validates_the_whole_result_before_writing(tmp_path, monkeypatch, case):
    """Each of these was exit 0 and a folder that every program then refused (or decoded as garbage)."""
    marian = _marian(tmp_path)
    craft, named = MARIAN_FIXTURE_CASES[case]
    craft(marian)
    out = tmp_path / "out"
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-convert",
                             ["--from", "marian", "--path", marian, "--output", out], str(marian), named)
    assert not out.exists()


# ---------------------------------------------------------------------------- links leading out of a folder

def test_a_marian_spm_linking_out_of_the_folder_is_not_copied(tmp_path, monkeypatch):
    marian = _marian(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copyfile(marian / "source.spm", outside / "secret.spm")  # a valid model: only the link is wrong
    (marian / "source.spm").unlink()
    (marian / "source.spm").symlink_to(outside / "secret.spm")
    out = tmp_path / "out"
    line = _refused_nothing_written(tmp_path, monkeypatch, "nmt-convert",
                                    ["--from", "marian", "--path", marian, "--output", out],
                                    str(marian / "source.spm"), "link leading out")
    assert not out.exists(), line


def test_a_hugging_face_cache_snapshot_of_links_into_its_blobs_imports(tmp_path):
    """The download cache's layout: snapshots/<revision>/<file> are links into the repository's blobs/."""
    repo = tmp_path / "models--Helsinki-NLP--opus-mt-en-de"
    snapshot_dir, blobs = repo / "snapshots" / "0123abc", repo / "blobs"
    snapshot_dir.mkdir(parents=True)
    blobs.mkdir()
    for path in MARIAN_FIXTURE.iterdir():
        blob = blobs / hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, blob)
        (snapshot_dir / path.name).symlink_to(os.path.relpath(blob, snapshot_dir))
    import_marian(str(snapshot_dir)).write(str(tmp_path / "out"))
    assert (tmp_path / "out" / "source.spm").read_bytes() == (MARIAN_FIXTURE / "source.spm").read_bytes()


@pytest.mark.parametrize("name", ["model.safetensors", "dict.en.txt", "source.spm", "config.json", "manifest.json"])
def test_a_model_folder_file_linking_out_of_the_folder_is_refused(world, tmp_path, monkeypatch, name):
    """The link leads to a copy of the very file, so only where it leads is wrong (the old code used it)."""
    folder = _folder(world, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(folder / name, outside / name)
    (folder / name).symlink_to(outside / name)
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate", ["--path", folder, "--input", world / "raw.en"],
                             str(folder / name), "link leading out")


def test_a_link_between_a_folders_own_files_is_fine(world, tmp_path, capsys):
    folder = _folder(world, tmp_path)
    (folder / "target.spm").rename(folder / "target-model.spm")
    (folder / "target.spm").symlink_to("target-model.spm")
    assert run_in_process("nmt-generate", ["--path", folder, "--input", world / "raw.en"]).status == 0


def test_an_exported_ctranslate2_folder_with_a_link_leading_out_is_refused(tmp_path):
    from nmt_toolkit.export.ctranslate2 import read_export

    export = tmp_path / "ct2"
    export.mkdir()
    (export / "nmt_export.json").write_text(json.dumps({"format": "ctranslate2", "max_positions": 256,
                                                        "dictionaries": {"source": "dict.en.txt",
                                                                         "target": "dict.de.txt"}}))
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    (export / "model.bin").symlink_to(tmp_path / "weights.bin")
    with pytest.raises(DataError, match="model.bin: a link leading out of"):
        read_export(str(export))


# ---------------------------------------------------------------------------- fingerprints of every file

def test_a_swapped_subword_model_is_refused_by_name(world, tmp_path, monkeypatch):
    """Another valid sentencepiece model segments otherwise: the old code translated with it, exit 0."""
    folder = _folder(world, tmp_path)
    shutil.copyfile(folder / "target.spm", folder / "source.spm")
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate", ["--path", folder, "--input", world / "raw.en"],
                             str(folder / "source.spm"), "differs from the file the manifest records")


def test_an_edited_config_json_is_refused_by_name(world, tmp_path, monkeypatch):
    """A valid option changed (relu for Marian's silu): the shapes still match, the outputs silently differ."""
    folder = _folder(world, tmp_path)
    _edit_json(folder / "config.json", lambda c: c["model"].update(activation_fn="relu"))
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate", ["--path", folder, "--input", world / "raw.en"],
                             str(folder / "config.json"), "differs from the file the manifest records")


def test_a_folder_without_fingerprints_still_reads(world, tmp_path):
    """Folders written before the manifest recorded the files' sizes and sha256 are read as before."""
    folder = _folder(world, tmp_path)
    _edit_json(folder / "manifest.json", lambda m: m.pop("files", None))
    result = run_in_process("nmt-generate", ["--path", folder, "--input", world / "raw.en"])
    assert result.status == 0 and "D-1\t" in result.stdout, result.stderr


def test_integer_weights_are_refused(world, tmp_path, monkeypatch):
    """int32 in place of float32: the same file size, garbage decoded with exit 0 by the old code."""
    from safetensors.torch import load_file, save_file

    folder = _folder(world, tmp_path)
    weights = load_file(folder / "model.safetensors")
    name = "encoder.layers.0.ffn.fc1.weight"
    weights[name] = weights[name].to(torch.int32)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate", ["--path", folder, "--input", world / "raw.en"],
                             str(folder / "model.safetensors"), name)


def test_integer_weights_in_a_checkpoint_are_refused(world, tmp_path):
    from nmt_toolkit.loading import load_models
    from nmt_toolkit.model_folder import read_model_folder

    folder = read_model_folder(str(world / "model"))
    state = folder.checkpoint()
    state["model"]["decoder.layers.0.ffn.fc2.weight"] = state["model"]["decoder.layers.0.ffn.fc2.weight"].to(torch.int64)
    torch.save(state, tmp_path / "ck.pt")
    with pytest.raises(DataError, match="'decoder.layers.0.ffn.fc2.weight' is int64, not floating point"):
        load_models([str(tmp_path / "ck.pt")], folder.src_dict, folder.tgt_dict)


# ---------------------------------------------------------------------------- language tags and codes

@pytest.mark.parametrize("tag", ["</s>", "<pad>", "<unk>", "▁Hund"])
def test_a_target_lang_tag_must_be_a_language_tag_of_the_model(world, tmp_path, monkeypatch, tag):
    """The old code put any symbol of the dictionary before every sentence, exit 0."""
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate",
                             ["--path", world / "model", "--input", world / "raw.en", "--target-lang-tag", tag],
                             f"--target-lang-tag {tag}: not a language tag", status=2)


def test_nmt_convert_refuses_the_same_tags(tmp_path, monkeypatch):
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-convert",
                             ["--from", "marian", "--path", MARIAN_FIXTURE, "--output", tmp_path / "out",
                              "--target-lang-tag", "</s>"], "--target-lang-tag </s>: not a language tag")


def test_a_tag_read_from_the_manifest_is_reported_by_file_and_key(world, tmp_path, monkeypatch):
    folder = _folder(world, tmp_path)
    _edit_json(folder / "manifest.json", lambda m: m.update(target_lang_tag=5))
    line = _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate",
                                    ["--path", folder, "--input", world / "raw.en"],
                                    f"{folder / 'manifest.json'}: target_lang_tag 5: not a language tag")
    assert "--target-lang-tag" not in line


def test_a_data_bin_tag_that_is_a_special_symbol_is_refused(world, tmp_path, monkeypatch):
    data = tmp_path / "bin"
    (tmp_path / "train.en").write_text("A dog runs.\n")
    (tmp_path / "train.de").write_text("Ein Hund rennt.\n")
    assert run_in_process("nmt-preprocess", ["--model-folder", world / "model", "--trainpref", tmp_path / "train",
                                             "--destdir", data]).status == 0
    _edit_json(data / "preprocess.json", lambda r: r.update(target_lang_tag="</s>"))
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate",
                             [data, "--path", world / "model", "--input", world / "raw.en"],
                             f"{data / 'preprocess.json'}: target_lang_tag </s>: not a language tag")


@pytest.mark.parametrize("code", ["../../x", "e\x00n", "en\u202e", "en-US", ""])
def test_a_manifest_language_code_is_checked_before_any_use(world, tmp_path, monkeypatch, code):
    folder = _folder(world, tmp_path)
    _edit_json(folder / "manifest.json", lambda m: m.update(source_lang=code))
    line = _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate",
                                    ["--path", folder, "--input", world / "raw.en"], str(folder / "manifest.json"),
                                    "source_lang")
    assert line.isprintable()  # a control character is shown escaped, never written to the terminal


@pytest.mark.parametrize("code", ["e\x00n", "en\u202e", "../../x"])
def test_a_tokenizer_config_language_code_is_checked_before_any_use(tmp_path, monkeypatch, code):
    marian = _marian(tmp_path)
    _edit_json(marian / "tokenizer_config.json", lambda t: t.update(source_lang=code))
    _refused_nothing_written(tmp_path, monkeypatch, "nmt-convert",
                             ["--from", "marian", "--path", marian, "--output", tmp_path / "out"],
                             str(marian / "tokenizer_config.json"), "source_lang")


# ---------------------------------------------------------------------------- what a path lacks

def test_a_path_folder_without_a_manifest_says_so(world, tmp_path, monkeypatch):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    line = _refused_nothing_written(tmp_path, monkeypatch, "nmt-generate",
                                    ["--path", folder, "--input", world / "raw.en"], str(folder), "manifest.json")
    assert "positional DATA" not in line


@pytest.mark.parametrize("kind", ["missing", "a text file", "a folder"])
def test_translator_load_says_what_is_wrong_with_the_path(tmp_path, kind):
    from nmt_toolkit import Translator

    path = tmp_path / "model"
    if kind == "a text file":
        path.write_text("not a model\n")
    elif kind == "a folder":
        path.mkdir()
    expected = {"missing": (DataError, "no such checkpoint or model folder"),
                "a text file": (UsageError, "a checkpoint file holds no dictionaries"),
                "a folder": (DataError, "a folder without manifest.json")}[kind]
    with pytest.raises(expected[0], match=expected[1]) as error:
        Translator.load(str(path))
    assert str(error.value).startswith(str(path))

"""Model folders (nmt_toolkit/model_folder.py): what is written reads back the same (weights bit for bit,
dictionaries symbol for symbol, the subword model byte for byte), and a damaged or foreign folder is refused
in one line naming the file, with no pickle ever unpickled."""
from __future__ import annotations

import json
import os
import pickle

import pytest
import torch

from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.errors import DataError
from nmt_toolkit.model_folder import is_model_folder, read_model_folder, write_model_folder


@pytest.fixture(scope="module")
def trained(trained_translation):
    """A model nmt-train trained on a real data-bin (sentencepiece, joined dictionaries)."""
    state = torch.load(trained_translation.first, map_location="cpu", weights_only=True)
    data = trained_translation.data
    return state, Dictionary.load(str(data / "dict.en.txt")), Dictionary.load(str(data / "dict.de.txt")), data


def _write(out, trained, **changes):
    state, src, tgt, data = trained
    args = dict(arch=state["config"]["components"]["arch"], model_config=state["config"]["model"],
                state_dict=state["model"], src_dict=src, tgt_dict=tgt, source_lang="en", target_lang="de",
                subword_scheme="sentencepiece",
                subword_files={"source": str(data / "spm.model"), "target": str(data / "spm.model")},
                made_by="tests")
    write_model_folder(str(out), **{**args, **changes})
    return out


@pytest.fixture(scope="module")
def folder(trained, tmp_path_factory):
    return _write(tmp_path_factory.mktemp("mf") / "model", trained)


def _copy(folder, tmp_path):
    import shutil

    return shutil.copytree(folder, tmp_path / "copy")


def test_round_trip_weights_dictionaries_and_subword_model(folder, trained):
    state, src, tgt, data = trained
    assert is_model_folder(str(folder)) and not is_model_folder(str(data))
    mf = read_model_folder(str(folder))
    weights = mf.state_dict()
    assert set(weights) == set(state["model"])
    for name, tensor in state["model"].items():
        assert weights[name].dtype == torch.float32 and torch.equal(weights[name], tensor.float()), name
    assert mf.src_dict.symbols == src.symbols and mf.tgt_dict.symbols == tgt.symbols
    assert (mf.source_lang, mf.target_lang, mf.subword_scheme) == ("en", "de", "sentencepiece")
    assert mf.subword_paths["source"] == mf.subword_paths["target"]  # one joint model, named once
    assert open(mf.subword_paths["source"], "rb").read() == (data / "spm.model").read_bytes()
    assert mf.codec("source").encode("A dog runs.") == mf.codec("target").encode("A dog runs.")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == "nmt_toolkit-model-folder" and manifest["version"] == 1
    assert manifest["dictionaries"]["source"] == {"file": "dict.en.txt", "size": len(src), "sha256": src.checksum()}


def test_checkpoint_builds_the_same_model(folder, trained):
    """The folder's checkpoint() goes through the checkpoint loading path to a model that scores a batch
    exactly as the model loaded from the original .pt file."""
    from nmt_toolkit.models import build_model_from_config_dict

    state, src, tgt, _ = trained
    ck = read_model_folder(str(folder)).checkpoint()
    assert ck["dictionaries"] == state["dictionaries"]
    models = []
    for source in (ck, state):
        model = build_model_from_config_dict(source["config"], src, tgt)
        model.load_state_dict(source["model"])
        models.append(model.eval())
    tokens = torch.tensor([[10, 11, 12, 2], [13, 14, 2, 1]])
    prev = torch.tensor([[2, 20, 21, 22], [2, 23, 24, 1]])
    with torch.no_grad():
        out = [m(tokens, torch.tensor([4, 3]), prev) for m in models]
    assert torch.equal(out[0], out[1])


def test_separate_subword_models_keep_both(trained, tmp_path):
    _, _, _, data = trained
    other = tmp_path / "other.model"
    other.write_bytes((data / "spm.model").read_bytes())
    out = _write(tmp_path / "sep", trained, subword_files={"source": str(data / "spm.model"), "target": str(other)})
    mf = read_model_folder(str(out))
    assert sorted(os.path.basename(p) for p in mf.subword_paths.values()) == ["source.spm", "target.spm"]


def test_existing_folder_refused_unless_overwrite(folder, trained, tmp_path):
    out = _copy(folder, tmp_path)
    before = (out / "manifest.json").read_text()
    with pytest.raises(DataError, match="holds a model folder already; add --overwrite"):
        _write(out, trained)
    assert (out / "manifest.json").read_text() == before
    _write(out, trained, overwrite=True, made_by="tests, again")
    assert read_model_folder(str(out)).manifest["made_by"] == "tests, again"
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []  # no temporary folder left


@pytest.mark.parametrize("name", ["manifest.json", "config.json", "model.safetensors", "dict.de.txt", "spm.model"])
def test_missing_file_refused(folder, tmp_path, name):
    out = _copy(folder, tmp_path)
    os.remove(out / name)
    with pytest.raises(DataError, match=rf"{name}: missing"):
        read_model_folder(str(out)).state_dict()


def test_edited_dictionary_refused_by_sha256(folder, tmp_path):
    """Two symbols swapped: same size, other ids; the manifest's sha256 catches it."""
    out = _copy(folder, tmp_path)
    lines = (out / "dict.de.txt").read_text().splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    (out / "dict.de.txt").write_text("".join(lines))
    with pytest.raises(DataError, match=r"dict\.de\.txt: the target dictionary differs from the one the manifest"):
        read_model_folder(str(out))


@pytest.mark.parametrize("version, message", [(3, "newer than this nmt_toolkit reads"), (0, "not one this program"),
                                              ("1", "not one this program")])
def test_unknown_format_version_refused(folder, tmp_path, version, message):
    out = _copy(folder, tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["version"] = version
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=message):
        read_model_folder(str(out))


def test_manifest_naming_a_file_outside_the_folder_refused(folder, tmp_path):
    out = _copy(folder, tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["weights"] = "../model.safetensors"
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="not a file name inside the folder"):
        read_model_folder(str(out))


class _Planted:
    def __reduce__(self):
        return (os.system, ("touch PLANTED",))


@pytest.mark.parametrize("kind", ["pickle", "torch.save"])
def test_pickle_in_place_of_safetensors_refused_without_running_it(folder, tmp_path, monkeypatch, kind):
    out = _copy(folder, tmp_path)
    monkeypatch.chdir(tmp_path)
    weights = out / "model.safetensors"
    if kind == "pickle":
        weights.write_bytes(pickle.dumps({"x": _Planted()}))
    else:
        torch.save({"x": _Planted()}, weights)
    with pytest.raises(DataError, match="model.safetensors: differs from the file the manifest records"):
        read_model_folder(str(out))  # the size the manifest records
    _drop_fingerprints(out)  # a folder written before the manifest recorded them: the reader itself refuses
    with pytest.raises(DataError, match="model.safetensors: not a safetensors file"):
        read_model_folder(str(out)).state_dict()
    assert not (tmp_path / "PLANTED").exists()


def _drop_fingerprints(folder):
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["files"]
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_bpe_codes_round_trip_as_a_subword_nmt_codec(trained, tmp_path):
    from nmt_toolkit.data.subword import SubwordNmtCodec, learn_subword_nmt

    _, _, _, data = trained
    text = tmp_path / "text.txt"
    text.write_text("a man rides a red bike\nthe dog runs on the street\n" * 20)
    codes = learn_subword_nmt([str(text)], str(tmp_path / "bpe.codes"), 30)
    out = _write(tmp_path / "bpe", trained, subword_scheme="bpe", subword_files={"source": codes, "target": codes})
    mf = read_model_folder(str(out))
    assert mf.subword_scheme == "bpe" and os.path.basename(mf.subword_paths["source"]) == "bpe.codes"
    codec = mf.codec("target")
    assert isinstance(codec, SubwordNmtCodec)
    assert codec.encode("a man rides") == SubwordNmtCodec(codes).encode("a man rides")

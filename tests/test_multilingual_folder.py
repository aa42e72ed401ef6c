"""A multilingual model in a model folder: nmt-export --format folder and nmt-train --save-model-folder record
its languages, directions and tag options; --path FOLDER, with no data-bin, decodes every direction (a
zero-shot one too) exactly as the checkpoint with its data-bin does, through the Translator, nmt-generate
and nmt-interactive; an unknown language and an edited folder are one line each."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from nmt_toolkit import Translator
from nmt_toolkit.cli.export import run as export
from nmt_toolkit.cli.generate import run as generate
from nmt_toolkit.cli.interactive import run as interactive
from nmt_toolkit.cli.preprocess import run as preprocess
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.errors import DataError
from nmt_toolkit.model_folder import read_model_folder
from tests.multilingual_model import DIRECTIONS, tiny_multilingual_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_multilingual_model(tmp_path_factory)


@pytest.fixture(scope="module")
def folder(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("folder") / "multi.nmt"
    assert export([str(model.data), "--path", str(model.checkpoint), "--format", "folder", "--output-dir",
                   str(out)]) == 0
    return out


def test_the_folder_lists_its_languages_directions_and_tags(model, folder):
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["version"] == 2 and "source_lang" not in manifest and "target_lang" not in manifest
    assert manifest["languages"] == ["de", "en", "fr"]
    assert manifest["multilingual"] == {"lang_pairs": ["en-de", "en-fr"], "lang_tok_style": "multilingual",
                                        "encoder_langtok": "src", "decoder_langtok": True}
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["components"]["task"] == "translation_multi_simple_epoch"
    assert config["task"] == {"lang_pairs": "en-de,en-fr", "lang_tok_style": "multilingual",
                              "encoder_langtok": "src", "decoder_langtok": True}
    # one joint dictionary: the data-bin's, then the language tokens in sorted order (fairseq's ids)
    joint = Dictionary.load(str(folder / "dict.txt"))
    data_bin = Dictionary.load(str(model.data / "dict.en.txt"))
    assert [joint[i] for i in range(len(joint))] == [data_bin[i] for i in range(len(data_bin))] + [
        "__de__", "__en__", "__fr__"]
    assert manifest["dictionaries"]["source"] == manifest["dictionaries"]["target"] == {
        "file": "dict.txt", "size": len(joint), "sha256": joint.checksum()}
    assert (folder / "spm.model").read_bytes() == (model.data / "spm.model").read_bytes()
    # the weights are the checkpoint's, bit for bit
    weights = load_file(str(folder / "model.safetensors"))
    state = torch.load(model.checkpoint, map_location="cpu", weights_only=True)["model"]
    assert set(weights) == set(state) and all(torch.equal(weights[k], state[k].float()) for k in state)


def test_nmt_train_save_model_folder_writes_the_same_folder(model, folder):
    """The fixture's run had --save-model-folder: its folder is nmt-export's of checkpoint_best.pt."""
    ours, theirs = (json.loads((f / "manifest.json").read_text()) for f in (model.saved_folder, folder))
    assert ours.pop("made_by") == "nmt-train --save-model-folder (checkpoint_best.pt)"
    del theirs["made_by"], ours["created"], theirs["created"]
    assert ours == theirs
    for name in ("config.json", "dict.txt", "spm.model", "model.safetensors"):
        assert (model.saved_folder / name).read_bytes() == (folder / name).read_bytes(), name


def _hypotheses(translator, lines):
    return [[(h.pieces, h.text, h.score, h.positional_scores) for h in t.hypotheses]
            for t in translator.translate(lines)]


@pytest.mark.parametrize("src, tgt", DIRECTIONS)  # en-de and en-fr trained, de-fr zero-shot
def test_the_folder_decodes_as_the_checkpoint_and_its_data_bin(model, folder, src, tgt):
    lines = model.lines(src, 24)
    options = dict(source_lang=src, target_lang=tgt, device="cpu", beam=3, nbest=2)
    from_folder = Translator.load(str(folder), **options)
    from_checkpoint = Translator.load(str(model.checkpoint), str(model.data), **options)
    ours = _hypotheses(from_folder, lines)
    assert ours == _hypotheses(from_checkpoint, lines)
    assert not any("__" in pieces for hyps in ours for pieces, *_ in hyps)  # the forced tag is no output
    # the tags placed: the source's language token first, the target's forced first in the decoder
    ids = from_folder.encode(lines[:1])[0]
    assert from_folder.task.src_dict[int(ids[0])] == f"__{src}__"
    assert from_folder.task.decoder_token() == from_folder.task.tgt_dict.index(f"__{tgt}__")


def _d_lines(text):
    return [line for line in text.splitlines() if line.startswith(("H-", "D-", "P-"))]


def test_nmt_generate_and_nmt_interactive_take_the_folder_alone(model, folder, tmp_path, capsys):
    source = tmp_path / "in.de"
    source.write_text("\n".join(model.lines("de", 12)) + "\n", encoding="utf-8")
    direction = ["--source-lang", "de", "--target-lang", "fr", "--cpu", "--beam", "2", "--input", str(source)]
    assert generate(["--path", str(folder), *direction]) == 0
    from_folder = _d_lines(capsys.readouterr().out)
    assert generate([str(model.data), "--path", str(model.checkpoint), *direction]) == 0
    assert from_folder == _d_lines(capsys.readouterr().out) and len(from_folder) == 36
    assert interactive(["--path", str(folder), *direction, "--plain"]) == 0
    assert capsys.readouterr().out.splitlines() == [line.split("\t")[2] for line in from_folder
                                                    if line.startswith("D-")]


@pytest.mark.parametrize("flags, message", [
    (["--source-lang", "en", "--target-lang", "cs"], "--target-lang cs: not a language of this model; it knows de, "
                                                     "en, fr"),
    (["--target-lang", "de"], "--source-lang and --target-lang: a multilingual model translates between de, en, fr"),
])
def test_an_unknown_or_missing_language_is_one_line(folder, tmp_path, capsys, flags, message):
    source = tmp_path / "in.txt"
    source.write_text("A dog .\n", encoding="utf-8")
    assert generate(["--path", str(folder), "--input", str(source), "--cpu", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["nmt-generate: error: " + message + (" (trained on en-de,en-fr); name the direction"
                                                        if not flags[0] == "--source-lang" else "")]


def _edited(folder, tmp_path, edit):
    """``folder`` with its JSON files edited; an edited config.json keeps the size and sha256 the manifest
    records in step (edited as a whole folder), so the check under test is the one that refuses it."""
    from tests.reliability.harness import record_in_manifest

    out = tmp_path / "edited"
    shutil.copytree(folder, out)
    for name, change in edit.items():
        value = json.loads((out / name).read_text(encoding="utf-8"))
        change(value)
        (out / name).write_text(json.dumps(value), encoding="utf-8")
    if "config.json" in edit:
        record_in_manifest(out, "config.json")
    return out


@pytest.mark.parametrize("edit, message", [
    ({"manifest.json": lambda m: m.update(version=1)}, "a multilingual record in a version-1 manifest"),
    ({"manifest.json": lambda m: m.update(languages=["de", "en"])}, "'multilingual.lang_pairs' must list directions"),
    ({"manifest.json": lambda m: m.update(languages=["de", "en", "fr", "fr"])}, "'languages' must list distinct"),
    ({"manifest.json": lambda m: m["multilingual"].update(encoder_langtok="both")}, "'multilingual.encoder_langtok'"),
    ({"manifest.json": lambda m: m["multilingual"].update(lang_pairs=["en-de", "en-fr", "de-fr"])},
     "config.json: the task and its options differ from the manifest's multilingual record"),
    ({"config.json": lambda c: c["components"].update(task="translation")}, "the task and its options differ"),
    ({"manifest.json": lambda m: [m["dictionaries"][r].update(file="../dict.txt") for r in ("source", "target")]},
     "not a file name inside the folder"),
    ({"manifest.json": lambda m: m["dictionaries"].update(target={"file": "spm.model"})}, "one joint dictionary"),
])
def test_an_edited_multilingual_folder_is_refused_by_name(folder, tmp_path, edit, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_model_folder(str(_edited(folder, tmp_path, edit)))


def test_a_language_without_its_token_is_refused(folder, tmp_path, capsys):
    """A language the manifest lists but the dictionary has no token for (dictionary and sha256 edited alike)."""
    out = tmp_path / "no-token"
    shutil.copytree(folder, out)
    lines = (out / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "dict.txt").write_text("".join(line.replace("__fr__", "__xx__") for line in lines), encoding="utf-8")
    joint = Dictionary.load(str(out / "dict.txt"))
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    for role in ("source", "target"):
        manifest["dictionaries"][role]["sha256"] = joint.checksum()
    (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    source = tmp_path / "in.txt"
    source.write_text("A dog .\n", encoding="utf-8")
    assert generate(["--path", str(out), "--input", str(source), "--source-lang", "en", "--target-lang", "de"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"nmt-generate: error: {out / 'dict.txt'}: lacks the language tokens __fr__ of the languages the manifest "
        f"lists"]


def test_programs_that_read_one_language_pair_refuse_it_in_one_line(model, folder, tmp_path, capsys):
    assert preprocess(["--model-folder", str(folder), "--trainpref", str(model.raw / "train"), "--destdir",
                       str(tmp_path / "bin")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"{folder}: a multilingual model folder (de, en, fr); it decodes with "
                                             f"--source-lang and --target-lang, and is not read as one language "
                                             f"pair here")
    assert not (tmp_path / "bin").exists()
    assert export(["--path", str(folder), "--format", "marian", "--output-dir", str(tmp_path / "hf")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"nmt-export: error: --format marian: {folder} is a multilingual model (de, en, fr); it exports as --format "
        f"folder or ctranslate2, which keep its language tokens"]


def test_a_checkpoint_on_other_dictionaries_names_the_folders_own_dictionary_file(folder):
    """The task builds the paths of its dictionary files (a multilingual folder's is dict.txt, not dict.en.txt):
    what the checkpoint checks name in their messages."""
    from nmt_toolkit.checkpoints import check_task_dictionaries
    from nmt_toolkit.tasks.multilingual import MultilingualConfig, MultilingualTranslationTask

    task = MultilingualTranslationTask.setup_decoding(MultilingualConfig(data=str(folder), source_lang="en",
                                                                         target_lang="de"))
    other = {"lang": None, "size": 12, "sha256": "0" * 64}
    with pytest.raises(DataError, match=f"^ck.pt: wrong dictionary: the checkpoint's source dictionary differs from "
                                        f"{folder / 'dict.txt'} \\(12 symbols, sha256 000000000000… against "):
        check_task_dictionaries({"dictionaries": {"source": other, "target": other}}, "ck.pt", task)

"""Model folders through the programs: nmt-export --format folder writes one from a checkpoint and its data-bin,
and nmt-generate, nmt-interactive, nmt-export and the Translator take it as --path with no data-bin, giving
what the data-bin route gives on the same model."""
from __future__ import annotations

import pytest
import torch

from nmt_toolkit.model_folder import read_model_folder


def _export(trained, out, *extra):
    from nmt_toolkit.cli.export import run as export

    return export([str(trained.data), "--path", str(trained.first), "--format", "folder", "--output-dir", str(out),
                   *extra])


def test_export_folder_holds_the_checkpoint_and_the_data_bin(trained_translation, tmp_path):
    out = tmp_path / "model"
    assert _export(trained_translation, out) == 0
    folder = read_model_folder(str(out))
    state = torch.load(trained_translation.first, map_location="cpu", weights_only=True)
    weights = folder.state_dict()
    assert set(weights) == set(state["model"])
    assert all(torch.equal(weights[k], v) for k, v in state["model"].items())
    assert folder.config["components"]["arch"] == state["config"]["components"]["arch"]
    assert folder.config["model"] == state["config"]["model"]
    assert (out / "spm.model").read_bytes() == (trained_translation.data / "spm.model").read_bytes()
    assert (out / "dict.en.txt").read_text() == (trained_translation.data / "dict.en.txt").read_text()
    assert oct((out / "model.safetensors").stat().st_mode & 0o777) != oct(0o600)


def test_export_folder_refuses_a_non_empty_output_dir(trained_translation, tmp_path, capsys):
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert _export(trained_translation, out) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"--output-dir {out}: a non-empty folder that is not a model folder (it holds keep.txt); "
                            f"nothing was written: name a new or empty folder")
    assert (out / "keep.txt").read_text() == "mine"
    assert _export(trained_translation, out, "--overwrite") != 0  # --overwrite replaces only a model folder
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    assert _export(trained_translation, out) == 0
    assert _export(trained_translation, out) != 0
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("holds a model folder already; add --overwrite "
                                                                     "to replace it, or name another folder")
    assert _export(trained_translation, out, "--overwrite") == 0


@pytest.fixture(scope="module")
def folder(trained_translation, tmp_path_factory):
    out = tmp_path_factory.mktemp("programs") / "model"
    assert _export(trained_translation, out) == 0
    return out


def _generate(capsys, *args) -> str:
    from nmt_toolkit.cli.generate import run as generate

    capsys.readouterr()
    assert generate([str(a) for a in args]) == 0
    return capsys.readouterr().out


def _lines(out: str, kind: str) -> list[str]:
    """The ``kind`` lines (D, H, P …) without their scores' last digits: only the ids and texts."""
    rows = [line.split("\t") for line in out.splitlines() if line.startswith(f"{kind}-")]
    return [f"{row[0]}\t{row[-1]}" for row in rows]


def test_generate_from_a_folder_with_raw_input_equals_the_data_bin_route(trained_translation, folder, capsys):
    """``--path FOLDER --input raw`` (no data-bin) prints the translations the checkpoint gives with its data-bin,
    both from the same raw text and from the binarized test split; the corpus BLEU lines agree."""
    t = trained_translation
    flags = ["--beam", "4", "--lenpen", "0.6", "--batch-size", "8"]
    from_folder = _generate(capsys, "--path", folder, "--input", t.root / "test.en", *flags)
    from_bin_raw = _generate(capsys, t.data, "--path", t.first, "--input", t.root / "test.en", *flags)
    from_bin_split = _generate(capsys, t.data, "--path", t.first, "--gen-subset", "test", *flags)
    hypotheses = _lines(from_folder, "D")
    assert len(hypotheses) == 23
    assert hypotheses == _lines(from_bin_raw, "D")
    assert sorted(hypotheses) == sorted(_lines(from_bin_split, "D"))
    assert sum(h.split("\t")[1] == s.upper() for h, s in
               zip(hypotheses, (t.root / "test.en").read_text().splitlines())) >= 10  # the model learned the task


def test_a_folder_works_with_a_data_bin_of_its_dictionaries_and_refuses_others(trained_translation, folder, capsys,
                                                                                tmp_path):
    from nmt_toolkit.cli.generate import run as generate
    from nmt_toolkit.cli.preprocess import run as preprocess

    t = trained_translation
    with_bin = _generate(capsys, t.data, "--path", folder, "--gen-subset", "test", "--beam", "2")
    assert _lines(with_bin, "D") == _lines(_generate(capsys, t.data, "--path", t.first, "--gen-subset", "test",
                                                     "--beam", "2"), "D")
    other = tmp_path / "other"
    assert preprocess(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(t.root / "train"),
                       "--testpref", str(t.root / "test"), "--joined-dictionary", "--destdir", str(other),
                       "--no-progress-bar"]) == 0
    capsys.readouterr()
    assert generate([str(other), "--path", str(folder), "--gen-subset", "test"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "wrong dictionary" in err[-1] and str(folder) in err[-1], err


def test_generate_from_a_folder_needs_input(folder, capsys):
    from nmt_toolkit.cli.generate import run as generate

    assert generate(["--path", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"nmt-generate: error: --path {folder}: a model folder holds no binarized splits; give "
                       f"--input FILE (raw text), or a data-bin built with nmt-preprocess --model-folder as DATA")


def test_interactive_and_translator_from_a_folder(trained_translation, folder, capsys, monkeypatch):
    import io
    import sys

    from nmt_toolkit import Translator
    from nmt_toolkit.cli.interactive import run as interactive

    t = trained_translation
    sources = (t.root / "test.en").read_text().splitlines()[:6]
    expected = [r.text for r in Translator.load(str(t.first), data=str(t.data)).translate(sources)]
    assert [r.text for r in Translator.load(str(folder)).translate(sources)] == expected
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(sources) + "\n"))
    capsys.readouterr()
    assert interactive(["--path", str(folder), "--plain"]) == 0
    assert capsys.readouterr().out.splitlines() == expected


def test_export_from_a_folder_to_ctranslate2_and_fairseq(folder, tmp_path):
    import json

    pytest.importorskip("ctranslate2")
    from nmt_toolkit.cli.export import run as export

    assert export(["--path", str(folder), "--format", "ctranslate2", "--output-dir", str(tmp_path / "ct2")]) == 0
    record = json.loads((tmp_path / "ct2" / "nmt_export.json").read_text())
    assert record["subword"]["type"] == "sentencepiece"
    assert (tmp_path / "ct2" / record["subword"]["model"]).read_bytes() == (folder / "spm.model").read_bytes()
    assert export(["--path", str(folder), "--format", "fairseq", "--output-dir", str(tmp_path / "fs")]) == 0
    assert (tmp_path / "fs" / "checkpoint.pt").is_file()


def test_preprocess_applies_a_folders_separate_source_and_target_subword_models(trained_translation, tmp_path,
                                                                                  capfd):
    """A folder with source.spm and target.spm (Marian's layout): each side of the text is encoded with its own
    model, as sentencepiece itself encodes it."""
    import sentencepiece as spm

    from nmt_toolkit.cli.preprocess import run as preprocess
    from nmt_toolkit.data.dictionary import Dictionary
    from nmt_toolkit.model_folder import write_model_folder
    from nmt_toolkit.registry import TASKS, import_builtin_components

    t = trained_translation
    spm.SentencePieceTrainer.train(input=str(t.root / "train.de"), model_prefix=str(tmp_path / "tgt"), vocab_size=40,
                                   model_type="bpe", character_coverage=1.0, bos_id=-1, eos_id=-1)
    state = torch.load(t.first, map_location="cpu", weights_only=True)
    dictionary = Dictionary.load(str(t.data / "dict.en.txt"))
    write_model_folder(str(tmp_path / "sep"), arch="transformer_tiny", model_config=state["config"]["model"],
                       state_dict=state["model"], src_dict=dictionary, tgt_dict=dictionary, source_lang="en",
                       target_lang="de", subword_scheme="sentencepiece", made_by="tests",
                       subword_files={"source": str(t.data / "spm.model"), "target": str(tmp_path / "tgt.model")})
    assert preprocess(["--model-folder", str(tmp_path / "sep"), "--trainpref", str(t.root / "test"),
                       "--destdir", str(tmp_path / "bin"), "--no-progress-bar"]) == 0
    import_builtin_components()
    task_cfg = TASKS.get("translation").config(data=str(tmp_path / "bin"))
    task = TASKS.get("translation").obj.setup_task(task_cfg)
    pairs = task.load_dataset("train")
    models = {"en": spm.SentencePieceProcessor(model_file=str(t.data / "spm.model")),
              "de": spm.SentencePieceProcessor(model_file=str(tmp_path / "tgt.model"))}
    assert task.subword("target").model_path.endswith("target.spm.model")
    for lang, key in (("en", "source"), ("de", "target")):
        lines = (t.root / f"test.{lang}").read_text().splitlines()
        for i, line in enumerate(lines):
            want = dictionary.encode_tokens(models[lang].encode(line, out_type=str)).tolist()
            assert pairs[i][key].tolist() == want, (lang, i)


def test_an_ensemble_of_folders_needs_no_data_bin(trained_translation, folder, tmp_path, capsys):
    from nmt_toolkit.cli.export import run as export

    t = trained_translation
    second = tmp_path / "second"
    assert export([str(t.data), "--path", str(t.second), "--format", "folder", "--output-dir", str(second)]) == 0
    flags = ["--input", t.root / "test.en", "--beam", "2"]
    from_folders = _generate(capsys, "--path", f"{folder}:{second}", *flags)
    assert _lines(from_folders, "D") == _lines(_generate(capsys, t.data, "--path", f"{t.first}:{t.second}", *flags),
                                               "D")


def test_preprocess_puts_a_folders_target_language_tag_first_in_every_source(trained_translation, tmp_path):
    """A multilingual folder's default tag (``>>deu<<``) starts every binarized source, as the Translator puts it
    before every raw sentence: fine-tuning then trains on what decoding feeds the model."""
    import json

    from nmt_toolkit.cli.preprocess import run as preprocess
    from nmt_toolkit.data.dictionary import Dictionary
    from nmt_toolkit.model_folder import write_model_folder
    from nmt_toolkit.registry import TASKS, import_builtin_components

    t = trained_translation
    state = torch.load(t.first, map_location="cpu", weights_only=True)
    dictionary = Dictionary.load(str(t.data / "dict.en.txt"))
    tag = dictionary.add_symbol(">>deu<<", 0)
    write_model_folder(str(tmp_path / "tagged"), arch="transformer_tiny", model_config=state["config"]["model"],
                       state_dict=state["model"], src_dict=dictionary, tgt_dict=dictionary, source_lang="en",
                       target_lang="de", subword_scheme="sentencepiece", target_lang_tag=">>deu<<", made_by="tests",
                       subword_files={"source": str(t.data / "spm.model"), "target": str(t.data / "spm.model")})
    assert preprocess(["--model-folder", str(tmp_path / "tagged"), "--trainpref", str(t.root / "test"),
                       "--destdir", str(tmp_path / "bin"), "--no-progress-bar"]) == 0
    assert json.loads((tmp_path / "bin" / "preprocess.json").read_text())["target_lang_tag"] == ">>deu<<"
    import_builtin_components()
    task = TASKS.get("translation").obj.setup_task(TASKS.get("translation").config(data=str(tmp_path / "bin")))
    pairs = task.load_dataset("train")
    untagged = TASKS.get("translation").obj.setup_task(TASKS.get("translation").config(data=str(t.data)))
    plain = untagged.load_dataset("test")
    assert task.default_target_lang_tag() == ">>deu<<"
    for i in range(len(pairs)):
        assert pairs[i]["source"].tolist() == [tag, *plain[i]["source"].tolist()]
        assert pairs[i]["target"].tolist() == plain[i]["target"].tolist()

"""fairseq-generate's command line for a multilingual model repeats the training run's task flags
(``--task translation_multi_simple_epoch --lang-pairs … --encoder-langtok src --decoder-langtok``, and often
``--lang-dict``) beside ``--source-lang``/``--target-lang``. nmt-generate and nmt-interactive take them: flags
that say what the model records change nothing (the output is the one without them, byte for byte), and one
that contradicts it is refused in one line naming the flag and what the model was trained with."""
from __future__ import annotations

import re

import pytest

from tests.multilingual_model import tiny_multilingual_model
from tests.reliability.harness import run_in_process

FAIRSEQ_FLAGS = ["--task", "translation_multi_simple_epoch", "--lang-pairs", "en-de,en-fr", "--encoder-langtok",
                 "src", "--decoder-langtok"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_multilingual_model(tmp_path_factory)


def _generate(model, *flags: str):
    return run_in_process("nmt-generate", [model.data, "--path", model.checkpoint, "--source-lang", "en",
                                           "--target-lang", "de", "--gen-subset", "valid", "--beam", "2", "--cpu",
                                           *flags])


def test_the_task_flags_fairseq_generate_takes_decode_as_without_them(model, tmp_path):
    langs = tmp_path / "langs.txt"
    langs.write_text("de\nen\nfr\n")  # the order the model's language tokens were added in (sorted)
    plain = _generate(model)
    assert plain.status == 0 and sum(line.startswith("H-") for line in plain.stdout.splitlines()) == 40
    for flags in (FAIRSEQ_FLAGS, [*FAIRSEQ_FLAGS[:3], "en-fr,en-de", *FAIRSEQ_FLAGS[4:], "--lang-dict", langs]):
        given = _generate(model, *flags)
        assert given.status == 0, given.stderr[-500:]
        assert given.stdout == plain.stdout


def test_nmt_interactive_takes_them_too(model):
    args = ["--path", model.saved_folder, "--source-lang", "en", "--target-lang", "fr", "--cpu", "--beam", "2"]
    text = "\n".join(model.lines("en", 3)) + "\n"
    plain = run_in_process("nmt-interactive", args, text)
    given = run_in_process("nmt-interactive", [*args, *FAIRSEQ_FLAGS], text)
    assert plain.status == given.status == 0 and sum(line.startswith("H-") for line in plain.stdout.splitlines()) == 3
    assert given.stdout == plain.stdout


@pytest.mark.parametrize("flags, named", [
    (["--encoder-langtok", "tgt"], r"--encoder-langtok tgt \(trained with --encoder-langtok src\)"),
    (["--lang-pairs", "en-de"], r"--lang-pairs en-de \(trained with --lang-pairs en-de,en-fr\)"),
    (["--lang-tok-style", "opus_mt"], r"--lang-tok-style opus_mt \(trained with --lang-tok-style multilingual\)"),
    (["--lang-dict", "REVERSED"], r"--lang-dict \S+reversed\.txt \(trained without --lang-dict\)"),
])
def test_a_task_flag_that_contradicts_the_model_is_refused_by_name(model, tmp_path, flags, named):
    reversed_langs = tmp_path / "reversed.txt"
    reversed_langs.write_text("fr\nen\nde\n")
    flags = [str(reversed_langs) if f == "REVERSED" else f for f in flags]
    result = _generate(model, "--task", "translation_multi_simple_epoch", *flags)
    assert result.status == 2 and result.stdout == ""
    line = result.stderr.strip().splitlines()[-1]
    assert re.search(named, line), line
    assert "not the model's own options" in line


def test_a_task_other_than_the_models_is_refused(model, trained_translation):
    multilingual = _generate(model, "--task", "translation")
    assert multilingual.status == 2 and multilingual.stdout == ""
    assert "--task translation: " in multilingual.stderr and "trained with --task translation_multi_simple_epoch" \
        in multilingual.stderr
    bilingual = run_in_process("nmt-generate", [trained_translation.data, "--path", trained_translation.first,
                                                *FAIRSEQ_FLAGS, "--cpu"])
    assert bilingual.status == 2 and bilingual.stdout == ""
    assert "--task translation_multi_simple_epoch: " in bilingual.stderr and "trained with --task translation\n" in \
        bilingual.stderr

"""Decoding a --task translation_multi_simple_epoch model: nmt-generate, nmt-interactive and the Translator
with --source-lang/--target-lang put the language tokens where training put them (compared id for id with
the task's own training items), the target's token is the decoder's forced first input and leaves no trace
in the output, zero-shot directions decode, an unknown language is one line."""
import json
import shutil

import pytest
import torch

from nmt_toolkit import Translator
from nmt_toolkit.cli.generate import run as generate
from nmt_toolkit.cli.interactive import run as interactive
from nmt_toolkit.cli.preprocess import run as preprocess
from nmt_toolkit.cli.train import run as train
from nmt_toolkit.data.pair_dataset import collate
from nmt_toolkit.tasks.multilingual import MultilingualConfig, MultilingualTranslationTask
from tests.test_multilingual_data import raw  # noqa: F401 (fixture)
from tests.train_helpers import TINY

PAIRS = "en-de,en-fr"


@pytest.fixture(scope="module")
def model(raw):  # noqa: F811
    """A tiny en→{de,fr} model, 200 updates on 300 Multi30k sentences per direction: (data-bin, checkpoint)."""
    dest = raw.parent / "decode-bin"
    assert preprocess(["--lang-pairs", PAIRS, "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                       "--destdir", str(dest), "--no-progress-bar"]) == 0
    ck = raw.parent / "decode-ck"
    assert train([str(dest), *TINY, "--task", "translation_multi_simple_epoch", "--encoder-langtok", "src",
                  "--decoder-langtok", "--lr", "3e-3", "--max-update", "200", "--cpu", "--save-dir", str(ck)]) == 0
    return dest, ck / "checkpoint_last.pt"


def _training_items(data, pair):
    """The validation items of ``pair`` exactly as training reads them (source and target ids)."""
    task = MultilingualTranslationTask.setup_task(MultilingualConfig(
        data=str(data), max_tokens=400, lang_pairs=PAIRS, encoder_langtok="src", decoder_langtok=True))
    dataset = task.load_dataset(f"valid.{pair}")
    return task, [dataset[i] for i in range(len(dataset))]


class _Recorder:
    """Wraps the search's model: records the sources it encodes and the decoder's input at the second step."""

    def __init__(self, model):
        self.model, self.sources, self.second_inputs = model, [], []
        self._encode, self._log_probs = model.forward_encoder, model.log_probs
        model.forward_encoder, model.log_probs = self.forward_encoder, self.log_probs

    def forward_encoder(self, src_tokens, src_lengths):
        self.sources += [row[: int(n)].tolist() for row, n in zip(src_tokens, src_lengths)]
        return self._encode(src_tokens, src_lengths)

    def log_probs(self, tokens, *args, **kwargs):
        if tokens.size(1) == 2:
            self.second_inputs += tokens.tolist()
        return self._log_probs(tokens, *args, **kwargs)


def _raw_valid(raw, lang):  # noqa: F811
    return (raw / f"valid.{lang}").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("target", ["de", "fr"])
@pytest.mark.slow
def test_the_tags_fed_to_the_model_are_the_training_items(model, raw, target):  # noqa: F811
    data, ck = model
    task, items = _training_items(data, f"en-{target}")
    # beam 1: every row of the second step is live (a wider beam also keeps rows that lost to the forced token)
    translator = Translator.load(str(ck), str(data), source_lang="en", target_lang=target, device="cpu", beam=1)
    recorder = _Recorder(translator.generator.model)
    translator.translate(_raw_valid(raw, "en"))  # raw text, tagged by the decoding task
    assert sorted(recorder.sources) == sorted(item["source"].tolist() for item in items)  # batched by length
    # the decoder's input after </s> is the target language's token, as in the training batch
    training_inputs = collate(items, task.src_dict.pad(), task.tgt_dict.eos())["net_input"]["prev_output_tokens"]
    assert recorder.second_inputs == [training_inputs[0, :2].tolist()] * len(items)
    assert training_inputs[0, :2].tolist() == [task.tgt_dict.eos(), task.tgt_dict.index(f"__{target}__")]


def test_the_forced_tag_leaves_no_trace_and_the_target_language_steers(model, raw):  # noqa: F811
    data, ck = model
    lines = _raw_valid(raw, "en")[:12]
    texts = {}
    for target in ("de", "fr"):
        translator = Translator.load(str(ck), str(data), source_lang="en", target_lang=target, device="cpu",
                                     beam=3, nbest=2)
        found = translator.translate(lines)
        texts[target] = [t.text for t in found]
        # the search itself, asked for the tag as a forced first token: ours are its hypotheses after the tag
        tag = translator.task.tgt_dict.index(f"__{target}__")
        ids = translator.encode(lines)
        sample = translator.collate(ids)
        prefix = torch.full((len(ids), 1), tag)
        direct = translator.generator.generate(sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"],
                                               prefix_tokens=prefix)
        for result, hyps in zip(found, direct):
            for ours, theirs in zip(result.hypotheses, hyps):
                assert theirs["tokens"][0] == tag
                output = [t for t in theirs["tokens"][1:].tolist() if t != tag]  # fairseq-generate strips the tag
                assert ours.pieces == translator.task.tgt_dict.string(output)  # wherever the model emits it
                assert len(ours.positional_scores) == len(output)
                assert ours.score == pytest.approx(float(theirs["score"]) / 0.6931471805599453)
    assert texts["de"] != texts["fr"]


def _d_lines(text):
    return [line.split("\t") for line in text.splitlines() if line.startswith("D-")]


def test_translator_equals_nmt_generate_and_nmt_interactive(model, raw, tmp_path, capsys):  # noqa: F811
    data, ck = model
    lines = _raw_valid(raw, "en")[:10]
    source = tmp_path / "in.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = [str(data), "--path", str(ck), "--source-lang", "en", "--target-lang", "fr", "--cpu", "--beam", "3"]
    assert generate([*flags, "--input", str(source)]) == 0
    from_input = _d_lines(capsys.readouterr().out)
    assert generate([*flags, "--gen-subset", "valid"]) == 0
    out = capsys.readouterr().out
    from_split = _d_lines(out)
    assert interactive([*flags, "--input", str(source), "--plain"]) == 0
    plain = capsys.readouterr().out.splitlines()
    found = Translator.load(str(ck), str(data), source_lang="en", target_lang="fr", device="cpu",
                            beam=3).translate(lines)
    assert [d[2] for d in from_input] == [t.text for t in found] == plain
    assert [float(d[1]) for d in from_input] == pytest.approx([t.score for t in found], abs=1e-4)
    assert [d[2] for d in from_split[:10]] == [t.text for t in found]
    # S- and T- lines of the binarized split are the text, without the language tokens
    assert f"S-0\t{lines[0]}" in out.splitlines()
    assert f"T-0\t{_raw_valid(raw, 'fr')[0]}" in out.splitlines()


def test_a_zero_shot_direction_decodes_with_its_tags(model, raw):  # noqa: F811
    data, ck = model
    translator = Translator.load(str(ck), str(data), source_lang="de", target_lang="fr", device="cpu", beam=1)
    recorder = _Recorder(translator.generator.model)
    lines = _raw_valid(raw, "de")[:4]
    assert len(translator.translate(lines)) == 4
    d = translator.task.src_dict
    assert [s[0] for s in recorder.sources] == [d.index("__de__")] * 4
    assert recorder.second_inputs == [[d.eos(), d.index("__fr__")]] * 4


@pytest.mark.parametrize("flags, message", [
    (["--source-lang", "en", "--target-lang", "cs"], "--target-lang cs: not a language of this model; it knows de, "
                                                     "en, fr"),
    (["--source-lang", "xx", "--target-lang", "de"], "--source-lang xx: not a language of this model; it knows de, "
                                                     "en, fr"),
    ([], "--source-lang and --target-lang: a multilingual model translates between de, en, fr"),
])
def test_an_unknown_language_is_one_line(model, tmp_path, capsys, flags, message):
    data, ck = model
    source = tmp_path / "in.txt"
    source.write_text("A dog .\n", encoding="utf-8")
    assert generate([str(data), "--path", str(ck), "--input", str(source), "--cpu", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("nmt-generate: error: " + message)
    assert "Traceback" not in "\n".join(err)


def test_eval_bleu_scores_every_direction_as_nmt_generate_does(model, tmp_path, capfd):
    """--eval-bleu's per-direction BLEU is nmt-generate's. The barely trained model also emits __de__ in the
    middle of en-de hypotheses: validation BLEU must drop it as nmt-generate does (it kept it: 1.9 against 1.3)."""
    data, trained = model
    ck = tmp_path / "ck"
    ck.mkdir()
    shutil.copy(trained, ck / "checkpoint_last.pt")  # resumed for a few updates: BLEU of a model that learned
    assert train([str(data), *TINY, "--task", "translation_multi_simple_epoch", "--encoder-langtok", "src",
                  "--decoder-langtok", "--lr", "3e-3", "--max-update", "215", "--cpu", "--eval-bleu",
                  "--eval-bleu-args", '{"beam": 2}', "--save-dir", str(ck)]) == 0
    records = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    last = {r["tag"]: r for r in records if r.get("num_updates") == 215 and r.get("tag", "").startswith("valid")}
    assert set(last) == {"valid", "valid.en-de", "valid.en-fr"}
    scores = []
    for pair in ("en-de", "en-fr"):
        src, tgt = pair.split("-")
        assert generate([str(data), "--path", str(ck / "checkpoint_last.pt"), "--source-lang", src, "--target-lang",
                         tgt, "--gen-subset", "valid", "--cpu", "--beam", "2", "--quiet"]) == 0
        line = capfd.readouterr().out.strip().splitlines()[-1]
        assert line.startswith("Generate valid with beam=2: BLEU|")
        bleu = last[f"valid.{pair}"][f"valid.{pair}_bleu"]
        assert bleu == pytest.approx(float(line.split()[6]), abs=0.006)
        scores.append(bleu)
    assert max(scores) > 0  # a number with something to compare

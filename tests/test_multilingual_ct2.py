"""A multilingual model through CTranslate2: nmt-export --format ctranslate2 (of a checkpoint or a model folder)
keeps the joint dictionary and records the languages and tag options, in nmt_export.json and in CTranslate2's
own config.json; --engine ctranslate2 decodes every direction (a zero-shot one too) as the torch engine does,
greedy and beam, and as CTranslate2 itself does when given the source tag as a token and the target tag as
its target_prefix. One translate_batch call serves a batch of sentences with different length limits where
that cannot change a result."""
import json

import pytest
import torch

ct2 = pytest.importorskip("ctranslate2", reason="the [ct2] extra is not installed")

from nmt_toolkit import Translator  # noqa: E402
from nmt_toolkit.cli.export import run as export  # noqa: E402
from nmt_toolkit.cli.generate import run as generate  # noqa: E402
from nmt_toolkit.data.subword import load_codec  # noqa: E402
from tests.multilingual_model import DIRECTIONS, tiny_multilingual_model  # noqa: E402

CT2_SEARCH = dict(lenpen_style="fairseq", early_stop="beam", lenpen=1.0)  # what CTranslate2's search does


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_multilingual_model(tmp_path_factory)


@pytest.fixture(scope="module")
def exports(model, tmp_path_factory):
    """The model as CTranslate2 folders: from the checkpoint (with its data-bin) and from its model folder."""
    root = tmp_path_factory.mktemp("ct2")
    assert export([str(model.data), "--path", str(model.checkpoint), "--output-dir", str(root / "from-checkpoint")]) == 0
    assert export(["--path", str(model.saved_folder), "--output-dir", str(root / "from-folder")]) == 0
    return root / "from-checkpoint", root / "from-folder"


def test_the_export_knows_its_languages_and_tags(model, exports):
    for out in exports:
        record = json.loads((out / "nmt_export.json").read_text(encoding="utf-8"))
        assert record["languages"] == ["de", "en", "fr"]
        assert record["task"] == {"lang_pairs": "en-de,en-fr", "lang_tok_style": "multilingual",
                                  "encoder_langtok": "src", "decoder_langtok": True}
        assert record["dictionaries"] == {"source": "dict.txt", "target": "dict.txt"}
        own = json.loads((out / "config.json").read_text(encoding="utf-8"))  # CTranslate2's, read by it alone
        assert own["languages"] == ["de", "en", "fr"]
        assert own["multilingual"] == {"lang_pairs": ["en-de", "en-fr"], "lang_tok_style": "multilingual",
                                       "encoder_langtok": "src", "decoder_langtok": True,
                                       "language_tokens": {"de": "__de__", "en": "__en__", "fr": "__fr__"}}
        vocabulary = json.loads((out / "shared_vocabulary.json").read_text(encoding="utf-8"))
        assert vocabulary[-3:] == ["__de__", "__en__", "__fr__"]
    # the checkpoint's and the folder's exports are one model
    assert (exports[0] / "model.bin").read_bytes() == (exports[1] / "model.bin").read_bytes()


def _translate(translator, lines):
    return [[(h.pieces, h.score, h.positional_scores) for h in t.hypotheses] for t in translator.translate(lines)]


@pytest.mark.parametrize("search", [dict(beam=1), dict(beam=4, nbest=2)], ids=["greedy", "beam"])
@pytest.mark.parametrize("src, tgt", DIRECTIONS)  # en-de and en-fr trained, de-fr zero-shot
def test_ctranslate2_decodes_as_the_torch_engine(model, exports, src, tgt, search):
    lines = model.lines(src)
    options = dict(source_lang=src, target_lang=tgt, device="cpu", **CT2_SEARCH, **search)
    torch_engine = _translate(Translator.load(str(model.saved_folder), **options), lines)
    ct2_engine = _translate(Translator.load(str(exports[1]), str(model.saved_folder), engine="ctranslate2",
                                            **options), lines)
    assert [[h[0] for h in hyps] for hyps in ct2_engine] == [[h[0] for h in hyps] for hyps in torch_engine]
    for ours, theirs in zip(ct2_engine, torch_engine):
        for (_, score, positional), (_, their_score, their_positional) in zip(ours, theirs):
            assert score == pytest.approx(their_score, abs=1e-3)
            assert positional == pytest.approx(their_positional, abs=1e-3)
    assert not any("__" in h[0] for hyps in ct2_engine for h in hyps)  # the target's tag is no output


def test_ctranslate2_itself_given_the_recorded_tags_agrees(model, exports):
    """The tags as CTranslate2's config.json names them, used as CTranslate2 documents target_prefix: its
    hypotheses are the tag followed by ours."""
    out = exports[0]
    tokens = json.loads((out / "config.json").read_text(encoding="utf-8"))["multilingual"]["language_tokens"]
    lines = model.lines("de", 20)
    codec = load_codec("sentencepiece", str(out / "spm.model"))
    sources = [[tokens["de"], *pieces] for pieces in codec.encode_pieces_batch(lines)]
    results = ct2.Translator(str(out), device="cpu").translate_batch(
        sources, target_prefix=[[tokens["fr"]]] * len(sources), beam_size=4, length_penalty=1.0,
        max_decoding_length=max(len(s) + 1 for s in sources) + 50)
    ours = Translator.load(str(out), str(model.data), engine="ctranslate2", source_lang="de", target_lang="fr",
                           beam=4, **CT2_SEARCH).translate(lines)
    for result, translation in zip(results, ours):
        assert result.hypotheses[0][0] == tokens["fr"]
        assert " ".join(result.hypotheses[0][1:]) == translation.hypotheses[0].pieces


def _lines(text, prefix="D-"):
    return [line.split("\t") for line in text.splitlines() if line.startswith(prefix)]


def test_nmt_generate_with_the_exported_folder_and_a_checkpoint(model, exports, tmp_path, capsys):
    source = tmp_path / "in.en"
    source.write_text("\n".join(model.lines("en", 16)) + "\n", encoding="utf-8")
    flags = [str(model.data), "--source-lang", "en", "--target-lang", "de", "--cpu", "--beam", "3", "--input",
             str(source), "--lenpen-style", "fairseq", "--early-stop", "beam"]
    found = {}
    for name, path, engine in (("torch", model.checkpoint, "torch"), ("exported", exports[0], "ctranslate2"),
                               ("on the fly", model.checkpoint, "ctranslate2")):
        assert generate([*flags, "--path", str(path), "--engine", engine]) == 0
        found[name] = _lines(capsys.readouterr().out)
    assert len(found["torch"]) == 16
    for name in ("exported", "on the fly"):
        assert [d[2] for d in found[name]] == [d[2] for d in found["torch"]], name
        assert [float(d[1]) for d in found[name]] == pytest.approx([float(d[1]) for d in found["torch"]], abs=1e-3)


def _count_calls(generator):
    calls = []
    real = generator.search.translator

    class Counting:
        def __getattr__(self, name):
            return getattr(real, name)

        def translate_batch(self, sources, **options):
            calls.append(len(sources))
            return real.translate_batch(sources, **options)

    generator.search.translator = Counting()
    return calls


@pytest.mark.parametrize("search, one_call", [
    (dict(beam=4, nbest=2), True), (dict(beam=1), True),
    (dict(beam=4, lenpen=0.0), False),  # without a length penalty: one call per limit, as before
    (dict(beam=3, max_len_a=0.5, max_len_b=2), False),  # tight limits: most sentences reach theirs
], ids=["beam", "greedy", "no-lenpen", "tight"])
@pytest.mark.slow
def test_one_call_serves_a_batch_and_changes_no_result(model, exports, search, one_call):
    """A batch of 40 sentences of different lengths (so different limits a * |source| + b) decodes as each
    sentence alone does (one limit, one call: what the engine did before it searched batches together)."""
    translator = Translator.load(str(exports[0]), str(model.data), engine="ctranslate2", source_lang="en",
                                 target_lang="fr", device="cpu", **{**CT2_SEARCH, **search})
    generator = translator.generator
    calls = _count_calls(generator)
    ids = translator.encode(model.lines("en"))
    prefix = torch.full((len(ids), 1), translator.task.decoder_token())
    batch = translator.collate(ids)["net_input"]
    assert len(set(batch["src_lengths"].tolist())) > 5
    together = generator.generate(batch["src_tokens"], batch["src_lengths"], prefix_tokens=prefix)
    assert (calls == [40]) is one_call
    alone = []
    for row in ids:
        single = translator.collate([row])["net_input"]
        alone += generator.generate(single["src_tokens"], single["src_lengths"], prefix_tokens=prefix[:1])
    assert [[h["tokens"].tolist() for h in hyps] for hyps in together] == [[h["tokens"].tolist() for h in hyps]
                                                                           for hyps in alone]
    assert [h["score"] for hyps in together for h in hyps] == pytest.approx(
        [h["score"] for hyps in alone for h in hyps], abs=1e-5)

"""Hugging Face M2M-100 models imported (nmt-convert --from m2m100), checked against Transformers itself.

Each test module run writes tiny random ``M2M100ForConditionalGeneration`` models with ``save_pretrained``
and a sentencepiece model trained here on Multi30k (en, de, fr, cs) through ``M2M100Tokenizer``'s own
``save_pretrained``, so the files are the ones a Hub download has, in the layout of the Transformers
version installed. The reference is Transformers: logits, the tokenizer's source ids and ``generate(...,
forced_bos_token_id=...)``'s outputs. No network is used.

The random models have init_std 1.0 (peaked distributions: near-ties would make the comparison depend on
rounding) and ``</s>``'s embedding row scaled by 3, so that most outputs end before the length limit and
beam search has real choices to make.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
pytest.importorskip("sentencepiece")

from nmt_toolkit.config import from_dict  # noqa: E402
from nmt_toolkit.errors import DataError, UsageError  # noqa: E402
from nmt_toolkit.importers.m2m100 import import_m2m100  # noqa: E402
from nmt_toolkit.model_folder import read_model_folder  # noqa: E402
from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
CONVERT = "from nmt_toolkit.cli.convert import main; main()"
MAX_LENGTH = 24  # Transformers' max_length: the start symbol, the language token, then at most 22 tokens
#: our search options that reproduce generate(num_beams=k, early_stopping=True) (see test_marian.SAME_AS_HF):
#: max_length counts the start symbol and the forced language token and (no forced EOS in M2M-100's generation
#: config) ends without EOS; we count the token in --max-len-b and end with EOS
SAME_AS_HF = dict(lenpen_style="fairseq", early_stop="beam", min_len=0, max_len_a=0.0, max_len_b=MAX_LENGTH - 1)


def train_spm(data_dir: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    """A joint 500-piece BPE sentencepiece model over 1000 training lines of each language (under a second)."""
    import sentencepiece as spm

    lines = []
    for lang in ("en", "de", "fr", "cs"):
        lines += (data_dir / "multi30k" / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:1000]
    (work / "text.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(work / "text.txt"), model_prefix=str(work / "spm"), vocab_size=500,
                                   model_type="bpe", character_coverage=1.0, num_threads=1, minloglevel=2)
    return work / "spm.model"


def write_hf_model(folder: pathlib.Path, spm_model: pathlib.Path, language_codes: str = "m2m100",
                   safetensors: bool = True, **config) -> None:
    """A random M2M-100 model and its tokenizer, written by Transformers (vocab.json in fairseq's order:
    <s> <pad> </s> <unk>, then the pieces; the language tokens and 8 unnamed rows follow in the embeddings)."""
    import sentencepiece as spm
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>"] + pieces)}
    folder.mkdir(parents=True)
    (folder.parent / f"{folder.name}.vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tok = M2M100Tokenizer(vocab_file=str(folder.parent / f"{folder.name}.vocab.json"), spm_file=str(spm_model),
                          language_codes=language_codes)
    tok.save_pretrained(folder)
    languages = {"m2m100": 100, "wmt21": 8}[language_codes]
    settings = dict(d_model=16, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                    encoder_attention_heads=2, decoder_attention_heads=2, max_position_embeddings=128, init_std=1.0)
    settings.update(config)
    cfg = M2M100Config(vocab_size=len(vocab) + languages + 8, **settings)
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        model.model.shared.weight[cfg.eos_token_id] *= 3
    model.save_pretrained(folder)
    if not safetensors:  # what older Transformers versions (and many Hub folders) hold: a pickled state dict
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()


@pytest.fixture(scope="module")
def made(tmp_path_factory, data_dir):
    """``made[name]``: (Transformers' folder, our imported folder) of two models: ``m2m100`` (100 languages,
    2+2 layers, ReLU, scaled embeddings, model.safetensors) and ``variant`` (WMT-21's 8 languages, 1+1 layers,
    d_model 32, GELU, unscaled embeddings, pytorch_model.bin); ``made["spm"]``: their sentencepiece model."""
    work = tmp_path_factory.mktemp("m2m100")
    spm_model = train_spm(data_dir, work)
    out = {}
    for name, options in (("m2m100", {}),
                          ("variant", dict(language_codes="wmt21", safetensors=False, d_model=32, encoder_layers=1,
                                           decoder_layers=1, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                           activation_function="gelu", scale_embedding=False))):
        write_hf_model(work / name, spm_model, **options)
        import_m2m100(str(work / name)).write(str(work / f"{name}.nmt"))
        out[name] = (work / name, work / f"{name}.nmt")
    out["spm"] = spm_model
    return out


def hf(folder: pathlib.Path, src_lang: str = "en", tgt_lang: str = "de"):
    from transformers import M2M100ForConditionalGeneration, M2M100Tokenizer

    return (M2M100ForConditionalGeneration.from_pretrained(folder).eval(),
            M2M100Tokenizer.from_pretrained(folder, src_lang=src_lang, tgt_lang=tgt_lang))


def ours(folder: pathlib.Path):
    mf = read_model_folder(str(folder))
    model = TransformerModel.build_model(from_dict(TransformerConfig, mf.config["model"]), mf.src_dict, mf.tgt_dict)
    model.load_state_dict(mf.state_dict())
    return model.eval(), mf


def lines(data_dir: pathlib.Path, lang: str, n: int) -> list[str]:
    return (data_dir / "multi30k" / f"test_2016_flickr.{lang}").read_text(encoding="utf-8").splitlines()[:n]


# ---------------------------------------------------------------------------- the folder and its dictionary

def test_the_folder_is_multilingual_with_the_tokenizers_ids(made):
    """Our dictionary holds every Transformers id at the same index (fairseq's order is ours), the language
    tokens where M2M100Tokenizer puts them; the folder lists the tokenizer's languages and tags sources with
    the source language and the decoder with the target language."""
    for name, languages in (("m2m100", 100), ("variant", 8)):
        theirs, tok = hf(made[name][0])
        mf = read_model_folder(str(made[name][1]))
        assert len(mf.src_dict) == theirs.config.vocab_size and mf.src_dict == mf.tgt_dict
        named = len(tok)  # vocab.json and the language tokens; the 8 rows after them have no token
        assert [mf.src_dict[i] for i in range(named)] == tok.convert_ids_to_tokens(list(range(named)))
        assert len(mf.languages) == languages and "en" in mf.languages and "de" in mf.languages
        assert mf.src_dict.index("__de__") == tok.get_lang_id("de")
        record = mf.multilingual
        assert (record["lang_tok_style"], record["encoder_langtok"], record["decoder_langtok"]) == \
            ("multilingual", "src", True)
        assert len(record["lang_pairs"]) == languages * (languages - 1)


@pytest.mark.parametrize("name", ["m2m100", "variant"])
def test_logits_equal_transformers(name, made, data_dir):
    """Teacher-forced logits of a padded batch (6 en→de pairs; the tokenizer's __en__ … </s> sources and
    </s> __de__ … decoder inputs) equal Transformers' within 1e-5, log-probabilities too."""
    theirs, tok = hf(made[name][0])
    model, _ = ours(made[name][1])
    enc = tok(lines(data_dir, "en", 6), text_target=lines(data_dir, "de", 6), return_tensors="pt", padding=True)
    assert bool(enc["attention_mask"].eq(0).any())
    prev = torch.cat([torch.full((6, 1), theirs.config.decoder_start_token_id), enc["labels"][:, :-1]], dim=1)
    with torch.no_grad():
        want = theirs(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], decoder_input_ids=prev).logits
        got = model(enc["input_ids"], None, prev)
    real = enc["labels"].ne(theirs.config.pad_token_id)
    torch.testing.assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.log_softmax(-1)[real], want.log_softmax(-1)[real], rtol=1e-5, atol=1e-5)


def test_sources_are_tagged_as_the_tokenizer_tags_them(made, data_dir):
    """The Translator's source ids for raw text are M2M100Tokenizer's (``__fr__`` pieces ``</s>``), and the
    decoder's forced first token is ``forced_bos_token_id``'s."""
    from nmt_toolkit.generation.translator import Translator

    folder, imported = made["m2m100"]
    for src, tgt in (("en", "de"), ("fr", "cs")):
        _, tok = hf(folder, src, tgt)
        translator = Translator.load(str(imported), source_lang=src, target_lang=tgt, device="cpu")
        text = lines(data_dir, src, 5)
        assert [x.tolist() for x in translator.encode(text)] == tok(text)["input_ids"]
        assert translator.task.decoder_token() == tok.get_lang_id(tgt)


# ---------------------------------------------------------------------------- search: outputs equal generate's

def translate_ids(translator, text: list[str]) -> list[list[int]]:
    """Our outputs as ids, without EOS and the target language's token (see :func:`generate_ids`)."""
    d, tag = translator.task.tgt_dict, translator.task.decoder_token()
    return [[d.index(p) for p in r.hypotheses[0].pieces.split() if d.index(p) != tag]
            for r in translator.translate(text)]


def generate_ids(theirs, tok, text: list[str], forced: int, **kwargs) -> tuple[list[list[int]], list[bool]]:
    """Transformers' outputs as ids (the start symbol, the forced token and what follows EOS dropped, and the
    target language's token wherever a random model emits it again: fairseq-generate, and so nmt-generate,
    strip it from the output), and whether each reached ``MAX_LENGTH``."""
    outputs, at_limit = [], []
    for i in range(0, len(text), 200):
        enc = tok(text[i:i + 200], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = theirs.generate(**enc, forced_bos_token_id=forced, max_length=MAX_LENGTH, **kwargs)
        for row in out.tolist():
            assert row[:2] == [theirs.config.decoder_start_token_id, forced]
            body = row[2:]
            ended = theirs.config.eos_token_id in body
            text_ids = body[:body.index(theirs.config.eos_token_id)] if ended else body
            outputs.append([t for t in text_ids if t != forced])
            at_limit.append(len(row) == MAX_LENGTH and (not ended or body.index(theirs.config.eos_token_id) ==
                                                        len(body) - 1))
    return outputs, at_limit


SEARCHES = [(1, 0.0, "model"), (4, 0.0, "model"), (4, 0.0, "zero"), (4, 1.0, "zero")]


@pytest.mark.parametrize("beam,lenpen,forced_score", SEARCHES, ids=["greedy", "beam4", "beam4-zero", "beam4-lenpen1"])
def test_outputs_equal_generate_on_200_sentences(beam, lenpen, forced_score, made, data_dir):
    """en→de on 200 Multi30k test sentences: our outputs (Translator: sentencepiece, source tag, forced
    target tag) equal ``generate(num_beams=…, forced_bos_token_id=…, early_stopping=True, length_penalty=…)``
    id for id: every one greedy; with a beam every one that ends before the length limit (Transformers
    scores the EOS it forces there as ln 1, we its own ln p). Transformers scores the forced language token
    as ln 1 too: with a length penalty (its default 1.0) our search matches it with ``forced_prefix_score
    ="zero"``; without one either setting ranks alike. Other directions' tags: the tests above and the NLLB
    one."""
    from nmt_toolkit.generation.translator import Translator

    folder, imported = made["m2m100"]
    theirs, tok = hf(folder, "en", "de")
    text = lines(data_dir, "en", 200)
    translator = Translator.load(str(imported), source_lang="en", target_lang="de", device="cpu", beam=beam,
                                 lenpen=lenpen, forced_prefix_score=forced_score, **SAME_AS_HF)
    got = translate_ids(translator, text)
    want, at_limit = generate_ids(theirs, tok, text, tok.get_lang_id("de"), num_beams=beam, length_penalty=lenpen,
                                  early_stopping=True)
    compared = [i for i in range(len(text)) if beam == 1 or not at_limit[i]]
    assert len(compared) >= 160
    differ = [(i, got[i], want[i]) for i in compared if got[i] != want[i]]
    assert not differ, f"{len(differ)} of {len(compared)} differ, first: {differ[0]}"
    assert len({tuple(x) for x in want}) > 60  # outputs differ from sentence to sentence


@pytest.mark.slow
def test_ctranslate2_engine_with_zero_forced_score_is_ctranslate2s_own_search(made, data_dir, tmp_path):
    """``--engine ctranslate2 --forced-prefix-score zero`` on the exported folder returns what CTranslate2
    itself returns given the target tag as ``target_prefix`` (which it scores 0): the same n-best in the same
    order, with its scores (ln → base 2), on every sentence whose hypotheses end before the length limit.
    With the default (``model``) the engine re-ranks the final beam, and on this model some order differs."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from nmt_toolkit.cli.export import run as export
    from nmt_toolkit.generation.translator import LN2, Translator

    imported = made["m2m100"][1]
    text = lines(data_dir, "en", 200)
    assert export(["--path", str(imported), "--output-dir", str(tmp_path / "ct2")]) == 0
    options = dict(source_lang="en", target_lang="de", device="cpu", beam=4, nbest=2, lenpen=1.0, **SAME_AS_HF)
    limit = MAX_LENGTH - 1
    engine = {score: Translator.load(str(tmp_path / "ct2"), str(imported), engine="ctranslate2",
                                     forced_prefix_score=score, **options).translate(text)
              for score in ("model", "zero")}
    d = read_model_folder(str(imported)).src_dict
    sources = [[d[i] for i in ids[:-1]] for ids in Translator.load(str(imported), **options).encode(text)]
    itself = ctranslate2.Translator(str(tmp_path / "ct2")).translate_batch(
        sources, target_prefix=[["__de__"]] * len(text), beam_size=4, num_hypotheses=2, length_penalty=1.0,
        max_decoding_length=limit, min_decoding_length=0, return_scores=True)
    compared = [i for i, r in enumerate(itself) if all(len(h) < limit for h in r.hypotheses)]
    assert len(compared) >= 160
    for i in compared:
        want = [(" ".join(h[1:]), s / LN2) for h, s in zip(itself[i].hypotheses, itself[i].scores)]
        got = [(h.pieces, h.score) for h in engine["zero"][i].hypotheses]
        assert [p for p, _ in got] == [p for p, _ in want], i
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-4)
    assert any([h.pieces for h in engine["model"][i].hypotheses] != [h.pieces for h in engine["zero"][i].hypotheses]
               for i in compared)


def test_score_reference_counts_the_forced_token_as_the_search_does(made, data_dir):
    """``--score-reference`` of the search's own best hypotheses (teacher-forced after the language token,
    which the translator puts first as the search forces it) gives the search's scores under either setting:
    the forced token counts its log-probability with ``model`` and 0 with ``zero``, there as in the search."""
    from nmt_toolkit.generation.translator import Translator

    imported = made["m2m100"][1]
    text = lines(data_dir, "en", 20)
    totals = {}
    for forced_score in ("model", "zero"):
        translator = Translator.load(str(imported), source_lang="en", target_lang="de", device="cpu", beam=4,
                                     lenpen=1.0, forced_prefix_score=forced_score, **SAME_AS_HF)
        sample = translator.collate(translator.encode(text))
        src, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
        tag = translator.task.decoder_token()
        found = translator.generator.generate(src, lengths, prefix_tokens=torch.full((len(text), 1), tag))
        rows = [hyps[0]["tokens"] for hyps in found]  # the tag, the output (its own copies of the tag too), EOS
        assert all(int(r[0]) == tag for r in rows)
        target = torch.full((len(rows), max(len(r) for r in rows) - 1), translator.task.tgt_dict.pad())
        for i, r in enumerate(rows):
            target[i, : len(r) - 1] = r[1:]
        scored = translator.with_options(score_reference=True).translate_batch({**sample, "target": target})
        got = [hyps[0]["score"] for hyps in scored]
        totals[forced_score] = [hyps[0]["score"] for hyps in found]
        assert got == pytest.approx(totals[forced_score], abs=1e-4)
    assert totals["zero"] != pytest.approx(totals["model"], abs=1e-3)  # the tag's log-probability is not 0


def test_nmt_generate_translates_the_folder(made, data_dir, tmp_path, capsys):
    """``nmt-generate --path FOLDER --input F --source-lang en --target-lang de`` prints the Translator's
    hypotheses, without the language tag."""
    from nmt_toolkit.cli.generate import run as generate
    from nmt_toolkit.generation.translator import Translator

    imported = made["m2m100"][1]
    text = lines(data_dir, "en", 20)
    (tmp_path / "in.en").write_text("\n".join(text) + "\n", encoding="utf-8")
    flags = ["--beam", "4", "--max-len-a", "0", "--max-len-b", "20"]
    assert generate(["--path", str(imported), "--input", str(tmp_path / "in.en"), "--source-lang", "en",
                     "--target-lang", "de", "--threads", "1", *flags]) == 0
    printed = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("H-"):
            key, _, pieces = line.split("\t")
            printed[int(key[2:])] = pieces
    translator = Translator.load(str(imported), source_lang="en", target_lang="de", device="cpu", beam=4,
                                 max_len_a=0.0, max_len_b=20)
    assert [printed[i] for i in range(len(text))] == [r.hypotheses[0].pieces for r in translator.translate(text)]
    assert not any("__de__" in p.split()[:1] for p in printed.values())
    # without a direction: one line naming the languages and how many directions (not all 9,900 of them)
    assert generate(["--path", str(imported), "--input", str(tmp_path / "in.en"), "--target-lang", "de"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "between af, am, ar" in err[0] and "(trained on 9900 directions)" in err[0]


# ---------------------------------------------------------------------------- safety and refusals

class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.slow
def test_pickle_payload_in_pytorch_model_bin_is_refused_unexecuted(made, tmp_path):
    folder = tmp_path / "evil"
    shutil.copytree(made["variant"][0], folder)
    weights = torch.load(folder / "pytorch_model.bin", weights_only=True)
    marker = tmp_path / "ran"
    torch.save({**weights, "payload": _Payload(str(marker))}, folder / "pytorch_model.bin")
    with pytest.raises(DataError, match="refusing to load"):
        import_m2m100(str(folder)).write(str(tmp_path / "out"))
    assert not marker.exists() and not (tmp_path / "out").exists()
    # the payload is real: the same file loaded as a plain pickle runs it
    subprocess.run([sys.executable, "-c", "import sys, torch; torch.load(sys.argv[1], weights_only=False)",
                    str(folder / "pytorch_model.bin")], check=True, cwd=tmp_path)
    assert marker.exists()
    # a clean file imports; the sinusoid tables older Transformers versions saved with the weights are not
    # weights of ours (recomputed), and the result is the same model
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

    table = M2M100SinusoidalPositionalEmbedding(128, 32, 1).weights
    torch.save({**weights, "model.encoder.embed_positions.weights": table,
                "model.decoder.embed_positions.weights": table}, folder / "pytorch_model.bin")
    import_m2m100(str(folder)).write(str(tmp_path / "clean"))
    got, want = read_model_folder(str(tmp_path / "clean")).state_dict(), read_model_folder(str(made["variant"][1])).state_dict()
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)


REFUSALS = [("model_type", "nllb-moe"), ("activation_function", "tanh"), ("decoder_ffn_dim", 128),
            ("decoder_attention_heads", 4), ("pad_token_id", 0), ("decoder_start_token_id", 0),
            ("tie_word_embeddings", False), ("vocab_size", 999)]


@pytest.mark.parametrize("key,value", REFUSALS, ids=[k for k, _ in REFUSALS])
def test_refusals_name_the_config_key(key, value, made, tmp_path):
    """What our transformer cannot reproduce is one error naming config.json's key; nothing is written."""
    folder = tmp_path / "m"
    shutil.copytree(made["m2m100"][0], folder)
    config = json.loads((folder / "config.json").read_text())
    config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match=f"config.json {key}="):
        import_m2m100(str(folder)).write(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def nllb(made, tmp_path_factory):
    """An NLLB-style model: a random M2M-100 model (2+2 layers, d_model 16) with an ``NllbTokenizer`` over
    the same sentencepiece model (202 language codes such as eng_Latn, ``<mask>``, 4 rows no token names),
    written by Transformers, and our import of it."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    work = tmp_path_factory.mktemp("nllb")
    (work / "spm").mkdir()
    shutil.copyfile(made["spm"], work / "spm" / "sentencepiece.bpe.model")
    # the codes named: Transformers 5 converts the sentencepiece model to its tokenizers form (with protobuf)
    # and leaves NLLB's default codes out then; Transformers 4 takes the same list
    tok = NllbTokenizer.from_pretrained(work / "spm", additional_special_tokens=FAIRSEQ_LANGUAGE_CODES)
    tok.save_pretrained(work / "hf")
    if not (work / "hf" / "sentencepiece.bpe.model").is_file():  # a tokenizers-only save: Hub folders have it
        shutil.copyfile(made["spm"], work / "hf" / "sentencepiece.bpe.model")
    cfg = M2M100Config(vocab_size=len(tok) + 4, d_model=16, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=32,
                       decoder_ffn_dim=32, encoder_attention_heads=2, decoder_attention_heads=2, init_std=1.0)
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        model.model.shared.weight[cfg.eos_token_id] *= 3
    model.save_pretrained(work / "hf")
    import_m2m100(str(work / "hf")).write(str(work / "nllb.nmt"))
    return work / "hf", work / "nllb.nmt"


def test_an_nllb_model_imports_and_translates_as_generate(nllb, data_dir):
    """NllbTokenizer's ids (no vocab.json; pieces at their sentencepiece id + 1, the eng_Latn … codes where
    tokenizer_config.json puts them): the dictionary holds every id of the tokenizer, sources are tagged as
    it tags them, and greedy outputs on 50 sentences equal generate(forced_bos_token_id=deu_Latn)'s."""
    from transformers import M2M100ForConditionalGeneration, NllbTokenizer

    from nmt_toolkit.generation.translator import Translator

    folder, imported = nllb
    theirs = M2M100ForConditionalGeneration.from_pretrained(folder).eval()
    tok = NllbTokenizer.from_pretrained(folder, src_lang="eng_Latn", tgt_lang="deu_Latn")
    mf = read_model_folder(str(imported))
    assert len(mf.languages) == 202 and "eng_Latn" in mf.languages and len(mf.src_dict) == theirs.config.vocab_size
    ids = list(range(len(tok)))
    named = [f"__{t}__" if t in mf.languages else t for t in tok.convert_ids_to_tokens(ids)]
    assert [mf.src_dict[i] for i in ids] == named
    text = lines(data_dir, "en", 50)
    translator = Translator.load(str(imported), source_lang="eng_Latn", target_lang="deu_Latn", device="cpu", beam=1,
                                 lenpen=0.0, **SAME_AS_HF)
    assert [x.tolist() for x in translator.encode(text)] == tok(text)["input_ids"]
    assert translator.task.decoder_token() == tok.convert_tokens_to_ids("deu_Latn")
    want, _ = generate_ids(theirs, tok, text, tok.convert_tokens_to_ids("deu_Latn"), num_beams=1)
    assert translate_ids(translator, text) == want
    assert len({tuple(x) for x in want}) > 25


def test_an_nllb_legacy_layout_is_refused_by_name(nllb, tmp_path):
    """NllbTokenizer's legacy_behaviour puts the source language's token after </s>, where our tags never go,
    and a config without the codes' ids leaves them unknown: refused by name, rather than imported to
    translate wrongly."""
    folder = tmp_path / "m"
    shutil.copytree(nllb[0], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "legacy_behaviour": True}))
    with pytest.raises(DataError, match="legacy_behaviour=true"):
        import_m2m100(str(folder)).write(str(tmp_path / "out"))
    # a tokenizer whose files do not record the codes' ids (older saves): refused, not guessed. Transformers 5
    # records them in tokenizer.json too (and 4 may write one): without it
    (folder / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in config.items()
                                                              if k != "added_tokens_decoder"}))
    (folder / "tokenizer.json").unlink(missing_ok=True)
    with pytest.raises(DataError, match="records no language code such as eng_Latn"):
        import_m2m100(str(folder)).write(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_nmt_convert_refuses_in_one_line(made, tmp_path):
    """The program: exit status 2, one line naming the key, no traceback, nothing written; then it converts
    the untouched folder."""
    folder = tmp_path / "m"
    shutil.copytree(made["variant"][0], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "nllb-moe"}))
    command = [sys.executable, "-c", CONVERT, "--from", "m2m100", "--path", str(folder), "--output",
               str(tmp_path / "out")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "model_type=" in result.stderr
    assert not (tmp_path / "out").exists()
    (folder / "config.json").write_text(json.dumps(config))
    from nmt_toolkit.cli.convert import run as convert

    assert convert(command[3:]) == 0
    assert read_model_folder(str(tmp_path / "out")).languages == "en ha is ja cs ru zh de".split()


def test_nmt_convert_takes_no_language_options_for_m2m100(made, tmp_path, capsys):
    """The languages are the tokenizer's and the direction is chosen when decoding: --source-lang (Marian's)
    is one line saying so, nothing written."""
    from nmt_toolkit.cli.convert import run as convert

    assert convert(["--from", "m2m100", "--path", str(made["variant"][0]), "--output", str(tmp_path / "out"),
                    "--source-lang", "en"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--source-lang: not with --from m2m100" in err[0]
    assert not (tmp_path / "out").exists()


def _nan_weight(folder):
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    weights["model.encoder.layers.0.fc1.weight"][0, 0] = float("nan")
    save_file(weights, folder / "model.safetensors")


def _link_out(folder):
    outside = folder.parent / "elsewhere"
    outside.mkdir()
    shutil.move(folder / "sentencepiece.bpe.model", outside / "sentencepiece.bpe.model")
    (folder / "sentencepiece.bpe.model").symlink_to(outside / "sentencepiece.bpe.model")


CRAFTED = {
    "nested tokenizer_config.json": (lambda f: (f / "tokenizer_config.json").write_text("[" * 100_000 + "]" * 100_000),
                                     "tokenizer_config.json"),
    "nested vocab.json": (lambda f: (f / "vocab.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
                          "vocab.json"),
    "d_model of 4,000 digits": (lambda f: (f / "config.json").write_text(re.sub(
        r'"d_model": \d+', '"d_model": ' + "7" * 4000, (f / "config.json").read_text())), "config.json"),
    "dropout high": (lambda f: (f / "config.json").write_text(json.dumps(
        {**json.loads((f / "config.json").read_text()), "dropout": "high"})), "dropout"),
    "a NaN weight": (_nan_weight, "non-finite"),
    "a sentencepiece model linking out": (_link_out, "link leading out"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_m2m100_folder_is_one_line_and_writes_nothing(case, made, tmp_path, capsys):
    """Tracebacks (RecursionError, OverflowError, ValueError), or exit 0 with a folder that every program then
    refuses, on the code before these checks."""
    from nmt_toolkit.cli.convert import run as convert

    folder = tmp_path / "m"
    shutil.copytree(made["m2m100"][0], folder)
    craft, named = CRAFTED[case]
    craft(folder)
    assert convert(["--from", "m2m100", "--path", str(folder), "--output", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and str(folder) in err[0], err
    assert not (tmp_path / "out").exists()

"""Language tokens that a multilingual model emits mid-sentence, in every output: fairseq-generate's rule.

fairseq's translation_multi_simple_epoch gives its SequenceGenerator ``symbols_to_strip_from_output =
{target language's token}`` (plus ``</s>``), and fairseq_cli/generate.py and interactive.py print
``tgt_dict.string(tokens, extra_symbols_to_ignore=that set)`` as H-/D- text, the D- text post-processed as
``data_utils.post_process(sentence, "sentencepiece")``: so the target language's token goes wherever it
stands and any other language's token stays. The model here is the tiny en→{de,fr} one with two rows of its
output projection altered so that its en→de search emits ``__de__`` and ``__fr__`` mid-sentence; the
expected text is worked from the search's own ids by that rule, and nmt-generate (torch and CTranslate2),
nmt-interactive, the Translator and nmt-serve's decode must all print it."""
from __future__ import annotations

import collections

import pytest
import torch

from nmt_toolkit import Translator
from nmt_toolkit.cli.generate import run as generate
from nmt_toolkit.cli.interactive import run as interactive
from tests.multilingual_model import tiny_multilingual_model


def fairseq_sentencepiece(pieces: str) -> str:
    """fairseq's data_utils.post_process(sentence, "sentencepiece")."""
    return pieces.replace(" ", "").replace("\u2581", " ").strip()


@pytest.fixture(scope="module")
def altered(tmp_path_factory):
    """(checkpoint, data-bin, source lines): the tiny model with the output row of ``__de__``, then that of
    ``__fr__``, made a little larger than the row of the piece its en→de search then emits most, so that the
    search emits the tag in that piece's place."""
    tiny = tiny_multilingual_model(tmp_path_factory)
    lines = tiny.lines("en", 20)
    state = torch.load(str(tiny.checkpoint), map_location="cpu", weights_only=True)
    path = tmp_path_factory.mktemp("altered") / "altered.pt"
    current = tiny.checkpoint
    for tag in ("__de__", "__fr__"):
        translator = Translator.load(str(current), str(tiny.data), source_lang="en", target_lang="de", device="cpu",
                                     beam=1)
        vocab = translator.task.tgt_dict
        counts = collections.Counter(t for r in translator.translate(lines) for t in r.hypotheses[0].pieces.split()
                                     if not t.startswith("__"))
        rows = state["model"]["decoder.output_projection.weight"]
        rows[vocab.index(tag)] = 1.05 * rows[vocab.index(counts.most_common(1)[0][0])]
        torch.save(state, path)
        current = path
    return path, tiny.data, lines


@pytest.fixture(scope="module")
def expected(altered):
    """Per source line: the best hypothesis' (H- pieces, D- text, number of P- scores) by fairseq's rule,
    from the ids the search returns with the forced first token."""
    path, data, lines = altered
    translator = Translator.load(str(path), str(data), source_lang="en", target_lang="de", device="cpu", beam=1)
    vocab = translator.task.tgt_dict
    de, fr = vocab.index("__de__"), vocab.index("__fr__")
    sample = translator.collate(translator.encode(lines))
    src, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    prefix = torch.full((len(lines), 1), de, dtype=torch.long)
    found = translator.generator.generate(src, lengths, prefix_tokens=prefix)
    out = []
    for hyps in found:
        tokens = hyps[0]["tokens"].tolist()
        assert tokens[0] == de
        kept = [t for t in tokens if t != de]  # fairseq strips the target's token (and </s>) from the text
        pieces = vocab.string(kept)
        out.append((pieces, fairseq_sentencepiece(pieces), len(kept)))
    emitted = [hyps[0]["tokens"][1:].tolist() for hyps in found]
    assert sum(de in ids for ids in emitted) >= 3 and sum(fr in ids for ids in emitted) >= 3  # the tags do occur
    assert sum("__fr__" in pieces for pieces, _, _ in out) >= 3
    return out


def _lines(output: str, kind: str) -> list[list[str]]:
    rows = [line.split("\t") for line in output.splitlines() if line.startswith(f"{kind}-")]
    return [row[1:] for row in sorted(rows, key=lambda row: int(row[0].split("-")[1]))]


@pytest.mark.slow
def test_translator_and_server_decode(altered, expected):
    from nmt_toolkit.serving.models import MultilingualModel

    path, data, lines = altered
    translator = Translator.load(str(path), str(data), source_lang="en", target_lang="fr", device="cpu", beam=1)
    en_de = translator.for_direction("en", "de")
    results = en_de.translate(lines)
    assert [(r.hypotheses[0].pieces, r.text, len(r.hypotheses[0].positional_scores)) for r in results] == expected
    served = MultilingualModel(translator).direction("en", "de")  # what nmt-serve decodes a batch with
    hyps = served.decode(served.options_key({}), served.encode(lines))
    assert [(h[0].pieces, h[0].text, len(h[0].positional_scores)) for h in hyps] == expected


def test_nmt_generate_and_interactive(altered, expected, tmp_path, capsys):
    path, data, lines = altered
    source = tmp_path / "in.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    common = [str(data), "--path", str(path), "--source-lang", "en", "--target-lang", "de", "--beam", "1", "--cpu"]
    capsys.readouterr()
    assert generate([*common, "--input", str(source)]) == 0
    out = capsys.readouterr().out
    assert [h[1] for h in _lines(out, "H")] == [pieces for pieces, _, _ in expected]
    assert [d[1] for d in _lines(out, "D")] == [text for _, text, _ in expected]
    assert [len(p[0].split()) for p in _lines(out, "P")] == [n for _, _, n in expected]
    assert interactive([*common, "--input", str(source), "--buffer-size", "20"]) == 0
    out = capsys.readouterr().out
    assert [h[1] for h in _lines(out, "H")] == [pieces for pieces, _, _ in expected]
    assert [d[1] for d in _lines(out, "D")] == [text for _, text, _ in expected]
    assert interactive([*common, "--input", str(source), "--buffer-size", "20", "--plain"]) == 0
    assert capsys.readouterr().out.splitlines() == [text for _, text, _ in expected]


@pytest.mark.slow
def test_ctranslate2_prints_the_same(altered, expected, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    path, data, lines = altered
    source = tmp_path / "in.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert generate([str(data), "--path", str(path), "--source-lang", "en", "--target-lang", "de", "--beam", "1",
                     "--cpu", "--engine", "ctranslate2", "--lenpen-style", "fairseq", "--input", str(source)]) == 0
    out = capsys.readouterr().out
    assert [h[1] for h in _lines(out, "H")] == [pieces for pieces, _, _ in expected]
    assert [d[1] for d in _lines(out, "D")] == [text for _, text, _ in expected]

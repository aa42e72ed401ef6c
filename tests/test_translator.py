"""nmt_toolkit.Translator, the library call, against the program users already trust: the same sentences
through ``nmt-generate --input`` give the same n-best texts and scores (D-/H- lines, base 2)."""
from __future__ import annotations

import pytest

from nmt_toolkit import Translator


def _generate(capsys, data, path, input_file, *flags) -> dict[int, list[tuple[float, str, str]]]:
    """nmt-generate's n-best per sentence id: (score, H- pieces, D- text), in printed order."""
    from nmt_toolkit.cli.generate import run

    capsys.readouterr()
    assert run([str(data), "--path", str(path), "--input", str(input_file), *flags]) == 0
    out: dict[int, list] = {}
    pieces: dict[int, list] = {}
    for line in capsys.readouterr().out.splitlines():
        kind, _, rest = line.partition("-")
        if kind == "H":
            sid, score, text = rest.split("\t")
            pieces.setdefault(int(sid), []).append(text)
        elif kind == "D":
            sid, score, text = rest.split("\t")
            out.setdefault(int(sid), []).append((float(score), pieces[int(sid)][len(out.get(int(sid), []))], text))
    return out


def _sources(trained_translation) -> list[str]:
    return (trained_translation.root / "test.en").read_text().splitlines()


def test_translate_equals_nmt_generate_input(trained_translation, capsys):
    t = trained_translation
    expected = _generate(capsys, t.data, t.first, t.root / "test.en", "--beam", "4", "--nbest", "3")
    translator = Translator.load(str(t.first), data=str(t.data))
    results = translator.translate(_sources(t), beam=4, nbest=3)
    assert len(results) == len(expected) == 23
    for sid, result in enumerate(results):
        assert result.source == _sources(t)[sid]
        got = [(h.pieces, h.text) for h in result.hypotheses]
        assert got == [(pieces, text) for _, pieces, text in expected[sid]]
        for hyp, (score, _, _) in zip(result.hypotheses, expected[sid]):
            assert hyp.score == pytest.approx(score, rel=1e-5)
            assert hyp.score == pytest.approx(sum(hyp.positional_scores) / ((5 + len(hyp.positional_scores)) / 6) ** 0.6,
                                              rel=1e-5)  # GNMT's length penalty, worked from the token scores
        assert result.text == expected[sid][0][2]
    assert sum(r.text == s.upper() for r, s in zip(results, _sources(t))) >= 10  # the model learned the task


def test_an_ensemble_and_other_options_match_nmt_generate(trained_translation, capsys):
    t = trained_translation
    expected = _generate(capsys, t.data, f"{t.first}:{t.second}", t.root / "test.en", "--beam", "2",
                         "--lenpen", "1.0")
    results = Translator.load(f"{t.first}:{t.second}", data=str(t.data), beam=2, lenpen=1.0).translate(_sources(t))
    assert [r.text for r in results] == [expected[i][0][2] for i in range(len(results))]
    assert [r.score for r in results] == pytest.approx([expected[i][0][0] for i in range(len(results))], rel=1e-5)


def test_options_per_call_reuse_the_loaded_model_and_streams_keep_order(trained_translation):
    t = trained_translation
    translator = Translator.load(str(t.first), data=str(t.data))
    wide = translator.with_options(beam=5, nbest=5)
    assert wide.models is translator.models and wide.gen.beam == 5 and translator.gen.beam == 4
    sources = _sources(t)
    whole = translator.translate(sources)
    streamed = list(translator.translate_stream(iter(sources), chunk_size=4))
    assert [r.text for r in streamed] == [r.text for r in whole]
    assert len(wide.translate(sources[:2])[0].hypotheses) == 5


def test_empty_lines_translate_to_empty_text_in_place(trained_translation):
    t = trained_translation
    translator = Translator.load(str(t.first), data=str(t.data))
    results = translator.translate(["A dog runs.", "", "The cat sits."])
    assert [r.source for r in results] == ["A dog runs.", "", "The cat sits."]
    assert results[1].text == "" and results[1].hypotheses == ()
    assert results[0].text and results[2].text


def test_a_sentence_longer_than_the_model_takes_is_refused_by_number(trained_translation):
    """As the programs do: a cut sentence would be a wrong translation, a dropped one a missing one. The
    number counts from 1 over the whole input, across the chunks of translate_stream."""
    from nmt_toolkit.errors import DataError

    t = trained_translation
    translator = Translator.load(str(t.first), data=str(t.data), max_tokens=40)
    long = " ".join(["dog"] * 60)
    with pytest.raises(DataError, match=r"Translator input sentence 3: \d+ tokens .* more than the 40 of --max-tokens"):
        list(translator.translate_stream(["A dog.", "A cat.", long], chunk_size=2))
    assert translator.translate(["A dog."])[0].text


def test_bad_options_are_refused_by_name(trained_translation):
    from nmt_toolkit.errors import NmtError

    t = trained_translation
    with pytest.raises(NmtError, match="beam"):
        Translator.load(str(t.first), data=str(t.data), beam=0)
    with pytest.raises(NmtError, match="no_such_option"):
        Translator.load(str(t.first), data=str(t.data), no_such_option=1)


def test_ctranslate2_engine_matches_nmt_generate(trained_translation, capsys):
    pytest.importorskip("ctranslate2")
    t = trained_translation
    expected = _generate(capsys, t.data, t.first, t.root / "test.en", "--engine", "ctranslate2",
                         "--lenpen-style", "fairseq", "--early-stop", "beam")
    translator = Translator.load(str(t.first), data=str(t.data), engine="ctranslate2", device="cpu",
                                 lenpen_style="fairseq", early_stop="beam")
    results = translator.translate(_sources(t))
    assert [r.text for r in results] == [expected[i][0][2] for i in range(len(results))]
    assert [r.score for r in results] == pytest.approx([expected[i][0][0] for i in range(len(results))], rel=1e-5)
    assert len(translator.translate(_sources(t)[:1], beam=3, nbest=3)[0].hypotheses) == 3

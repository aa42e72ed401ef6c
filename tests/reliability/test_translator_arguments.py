"""The Translator's arguments are checked where the caller passes them: a wrong type is one TypeError naming
the argument, a value outside an option's range or choices the NmtError the flag's check raises (the same
code: nmt_toolkit/config.py), never an error from deep inside sentencepiece, torch or the search.

The option matrix is generated from GenerationConfig's fields, so a new option joins it by itself.
"""
from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import textwrap
import typing

import pytest

from nmt_toolkit import Translator, config
from nmt_toolkit.errors import DataError, NmtError, UsageError
from nmt_toolkit.generation.config import GenerationConfig


@pytest.fixture(scope="module")
def translator(trained_translation):
    return Translator.load(str(trained_translation.first), data=str(trained_translation.data), device="cpu")


@pytest.mark.slow
def test_a_string_is_one_sentence_too_many_a_real_process_says_so_in_one_line(trained_translation, tmp_path):
    """translate("A dog runs.") translated each of its 11 characters; now a TypeError, as in a user's script."""
    script = textwrap.dedent(f"""
        from nmt_toolkit import Translator
        translator = Translator.load({str(trained_translation.first)!r}, data={str(trained_translation.data)!r},
                                     device="cpu")
        for call in (lambda: translator.translate("A dog runs."), lambda: translator.translate_stream("A dog.")):
            try:
                print("translated", len(list(call())))
            except TypeError as exc:
                print("TypeError", exc)
        print("one sentence", [t.text for t in translator.translate(["A dog runs."])])
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == ("TypeError Translator.translate: sentences must be a list of str (one sentence each), not "
                        "a str; for one sentence: translate([text])")
    assert lines[1].startswith("TypeError Translator.translate_stream: sentences must be a list of str")
    assert lines[2] == "one sentence ['A DOG RUNS.']"


def test_wrong_arguments_are_one_clear_error_at_the_call(translator, trained_translation):
    cases = [
        (lambda: Translator.load(None), TypeError, r"^Translator\.load: path must be a str or os\.PathLike"),
        (lambda: Translator.load(str(trained_translation.first), data=5), TypeError, "data must be"),
        (lambda: Translator.load(str(trained_translation.first), engine="bogus"), UsageError,
         "engine 'bogus': must be one of torch, ctranslate2"),
        (lambda: Translator.load(str(trained_translation.first), device="gpu0"), UsageError,
         "device 'gpu0': not a torch device"),
        (lambda: Translator.load(str(trained_translation.first), seed=-1), NmtError, "seed -1: must be"),
        (lambda: Translator.load(str(trained_translation.first), data=str(trained_translation.data),
                                 early_stop="bogus"), NmtError,
         "^Translator: early_stop bogus: must be one of auto, bound, beam, never$"),
        (lambda: translator.translate([1, 2]), TypeError, "^Translator input sentence 1: expected a str, got int$"),
        (lambda: translator.translate(["A dog.", "\ud800"]), DataError,
         r"^Translator input sentence 2: not valid Unicode text \(a lone surrogate '\\ud800' at character 0\)$"),
        (lambda: translator.translate(5), TypeError, "sentences must be a list of str, not int"),
        (lambda: list(translator.translate_stream(["A dog."], chunk_size=0)), TypeError, "chunk_size"),
    ]
    for call, kind, pattern in cases:
        with pytest.raises(kind, match=pattern):
            call()


def test_a_path_object_loads_as_its_string(translator, trained_translation):
    loaded = Translator.load(trained_translation.first, data=trained_translation.data, device="cpu")
    assert [t.text for t in loaded.translate(["A dog runs."])] == [t.text for t in translator.translate(["A dog runs."])]


HINTS = typing.get_type_hints(GenerationConfig)


def _outside(f: dataclasses.Field) -> list:
    """A value each bound or the choices of ``f`` refuse, and values past C integers and float32."""
    tp = HINTS[f.name]
    if f.metadata.get("choices"):
        return ["bogus"]
    bounds = config._field_range(f)
    values: list = []
    if bounds.low is not None:
        values.append(bounds.low if bounds.low_open else bounds.low - (1 if tp is int else 1e-3))
    if bounds.high is not None:
        values.append(bounds.high if bounds.high_open else bounds.high + (1 if tp is int else 1e-3))
    values += [2**64] if tp is int else [1e308, -1e308, math.nan]
    return [tp(v) if tp is int and not isinstance(v, int) else v for v in values
            if v not in bounds.also and not (isinstance(v, float) and bounds.contains(v))]


OPTIONS = [pytest.param(f.name, value, id=f"{f.name}={value!r}") for f in dataclasses.fields(GenerationConfig)
           if HINTS[f.name] in (int, float, str) and f.name != "path"
           and (f.metadata.get("choices") or config._field_range(f).bounded) for value in _outside(f)]


@pytest.mark.parametrize("name, value", OPTIONS)
def test_every_option_outside_its_flags_range_or_choices_is_refused_by_the_flags_check(translator, name, value):
    with pytest.raises(NmtError, match=f"^Translator options: {name} .*: must be"):
        translator.with_options(**{name: value})
    with pytest.raises(NmtError, match=f"^Translator options: {name} "):
        translator.translate(["A dog."], **{name: value})


@pytest.mark.parametrize("options", [{"lenpen": 1e308}, {"lenpen": -1e308}, {"max_len_b": 2**63},
                                     {"max_len_a": 1e30}, {"sampling": True, "temperature": 1e-300}],
                         ids=lambda o: ",".join(f"{k}={v!r}" for k, v in o.items()))
def test_the_values_that_failed_late_are_refused_up_front(translator, options):
    """They overflowed while decoding, gave a one-token translation or sampled from NaN probabilities."""
    name = [k for k in options if k != "sampling"][0]
    with pytest.raises(NmtError, match=f"^Translator options: {name} .*: must be"):
        translator.translate(["A dog runs on the street."], **options)


def test_choices_are_enforced_for_yaml_and_dicts_as_for_flags():
    groups = [config.Group("generation", GenerationConfig)]
    with pytest.raises(UsageError, match=r"^--config g\.yaml: early_stop bogus: must be one of auto, bound, beam, never$"):
        config.resolve(groups, {}, set(), {"early_stop": "bogus"}, "g.yaml")
    with pytest.raises(NmtError, match="^ck: lenpen_style x{40}… \\(500 characters\\): must be one of auto, gnmt, fairseq$"):
        config.from_dict(GenerationConfig, {"lenpen_style": "x" * 500}, what="ck")
    with pytest.raises(UsageError, match="^--static-search sometimes: must be one of auto, on, off$"):
        config.check_ranges(GenerationConfig(static_search="sometimes"))


def test_no_repeat_ngram_size_1_still_lets_a_hypothesis_end(translator):
    """The decoder's start symbol is EOS: counted as an output, size 1 forbade EOS and every score was -inf."""
    for result in translator.translate(["A dog runs on the street.", "Red ball."], no_repeat_ngram_size=1):
        assert result.text and math.isfinite(result.score)
        pieces = result.hypotheses[0].pieces.split()
        assert len(pieces) == len(set(pieces))


def test_a_huge_length_limit_is_capped_by_the_model_not_wrapped_to_one_token():
    import torch

    from nmt_toolkit.generation.search_steps import output_limits

    cfg = GenerationConfig()
    object.__setattr__(cfg, "max_len_a", 1e30)  # past the range the options refuse: the search caps anyway
    assert output_limits(torch.tensor([3, 7]), cfg, 1024, torch.device("cpu")).tolist() == [1023, 1023]
    cfg.max_len_a, cfg.max_len_b = 0.0, 2**63
    assert output_limits(torch.tensor([3, 7]), cfg, 1024, torch.device("cpu")).tolist() == [1023, 1023]


def test_a_search_asked_to_stop_stops_between_steps(translator):
    from nmt_toolkit.generation.search_steps import SearchStopped

    sample = translator.collate(translator.encode(["A dog runs."]))
    asked = []
    with pytest.raises(SearchStopped):
        translator.translate_batch(sample, stop=lambda: asked.append(1) or len(asked) > 3)
    assert len(asked) == 4
    assert translator.translate_batch(sample, stop=lambda: False)[0][0]["tokens"].numel() > 1

"""nmt-export --format ctranslate2 and --engine ctranslate2, against our own model and sacreBLEU.

The references are independent of the exporter: our PyTorch model's teacher-forced log-probabilities (every
layout the export handles: post-/pre-norm, shared/separate embeddings, scaling, both sinusoid layouts,
learned positions, GELU), nmt-generate's torch engine on a model trained on real Multi30k, and sacreBLEU.
"""
from __future__ import annotations

import os
import re

import pytest
import torch

ct2 = pytest.importorskip("ctranslate2", reason="the [ct2] extra is not installed")

from nmt_toolkit.errors import UsageError  # noqa: E402
from nmt_toolkit.export.ctranslate2 import build_spec  # noqa: E402
from nmt_toolkit.export.exportable import check_exportable  # noqa: E402
from nmt_toolkit.data.dictionary import Dictionary  # noqa: E402
from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel  # noqa: E402
from nmt_toolkit.registry import ARCHITECTURES, import_builtin_components  # noqa: E402

import_builtin_components()


def _model(vocab=60, **kw):
    cfg = TransformerConfig()
    ARCHITECTURES.get("transformer_tiny").obj(cfg)
    cfg.embed_dim, cfg.ffn_embed_dim, cfg.attention_heads, cfg.dropout = 32, 64, 4, 0.0
    for k, v in kw.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    d = Dictionary()
    for i in range(vocab - len(d)):
        d.add_symbol(f"w{i}")
    model = TransformerModel.build_model(cfg, d, d).eval()
    with torch.no_grad():  # LayerNorms away from their initial 1/0, so that a swapped norm would show
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return model, d


@pytest.mark.parametrize("variant", [
    {}, {"normalize_before": True}, {"share_all_embeddings": True}, {"share_decoder_input_output_embed": True},
    {"no_scale_embedding": True}, {"positional_embeddings": "learned", "max_positions": 64},
    {"sinusoid_layout": "fairseq"}, {"activation_fn": "gelu"}, {"layernorm_embedding": True},
    {"layernorm_embedding": True, "normalize_before": True}])
def test_exported_model_scores_like_our_model(tmp_path, variant):
    """CTranslate2's score_batch log-probabilities equal our model's, token by token (1e-4)."""
    model, d = _model(**variant)
    spec = build_spec(model, d, d)
    spec.validate()
    spec.optimize(quantization=None)
    spec.save(str(tmp_path))
    translator = ct2.Translator(str(tmp_path), device="cpu", intra_threads=1)
    gen = torch.Generator().manual_seed(1)
    src = [torch.randint(4, len(d), (n,), generator=gen).tolist() for n in (5, 9, 2)]
    tgt = [torch.randint(4, len(d), (n,), generator=gen).tolist() for n in (7, 3, 11)]
    scored = translator.score_batch([[d[t] for t in s] for s in src], [[d[t] for t in t_] for t_ in tgt])
    for s, t, result in zip(src, tgt, scored):
        src_t = torch.tensor([s + [d.eos()]])
        prev = torch.tensor([[d.eos()] + t])
        with torch.no_grad():
            logits = model(src_t, None, prev)
        expected = torch.log_softmax(logits.float(), -1)[0].gather(1, torch.tensor(t + [d.eos()]).unsqueeze(1))
        assert result.tokens == [d[x] for x in t] + ["</s>"]
        torch.testing.assert_close(torch.tensor(result.log_probs), expected.squeeze(1), atol=1e-4, rtol=0)


def test_export_refuses_what_ctranslate2_cannot_represent():
    model, _ = _model(key_dim=6, value_dim=6)
    with pytest.raises(UsageError, match=r"^ck\.pt: cannot be exported to CTranslate2: --key-dim 6 \(its attention "
                                         r"heads have d_model / heads = \d+ / \d+ dimensions\); --value-dim 6 \("):
        check_exportable(model.cfg, "ctranslate2", "ck.pt", model_class=type(model))
    model, _ = _model(value_dim=16)
    with pytest.raises(UsageError, match="--value-dim 16"):
        check_exportable(model.cfg, "ctranslate2", "ck.pt", model_class=type(model))

    class Plugin(TransformerModel):
        pass

    plugin, _ = _model()
    with pytest.raises(UsageError, match="cannot be exported to CTranslate2: a Plugin"):
        check_exportable(plugin.cfg, "ctranslate2", "ck.pt", model_class=Plugin)


def test_engine_names_the_options_it_lacks():
    from nmt_toolkit.generation.config import GenerationConfig
    from nmt_toolkit.generation.ct2_engine import unsupported_options

    gen = GenerationConfig(lenpen_style="fairseq", early_stop="beam")
    assert unsupported_options(gen) == []
    assert unsupported_options(GenerationConfig(lenpen=0.0, early_stop="beam")) == []  # no penalty: no style
    lacking = unsupported_options(GenerationConfig(lenpen_style="gnmt", early_stop="bound", unkpen=2.0))
    assert [x.split(" (")[0] for x in lacking] == ["--lenpen-style gnmt", "--early-stop bound", "--unkpen"]
    # the defaults are each engine's own rules: CTranslate2's search, the paper's for the torch engine
    assert unsupported_options(GenerationConfig().for_engine("ctranslate2")) == []
    torch_rules = GenerationConfig().for_engine("torch")
    assert (torch_rules.lenpen_style, torch_rules.early_stop) == ("gnmt", "bound")
    assert GenerationConfig(early_stop="never").for_engine("ctranslate2").early_stop == "never"  # named: kept
    lacking = unsupported_options(GenerationConfig(lenpen_style="fairseq", early_stop="beam", max_len_source="batch"))
    assert [x.split(" (")[0] for x in lacking] == ["--max-len-source batch"]


# ---------------------------------------------------------------------- a model trained on Multi30k

def _generate(data, path, out, *extra):
    from nmt_toolkit.cli.generate import run as generate

    assert generate([str(data), "--path", str(path), "--gen-subset", "test", "--beam", "4", "--lenpen", "0.6",
                     "--lenpen-style", "fairseq", "--early-stop", "beam", "--batch-size", "64", "--results-path",
                     str(out), *extra]) == 0
    text = (out / "generate-test.txt").read_text(encoding="utf-8")
    hyps = {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t[^\t]*\t(.*)$", text, re.M)}
    detok = {int(m.group(1)): m.group(2) for m in re.finditer(r"^D-(\d+)\t[^\t]*\t(.*)$", text, re.M)}
    return hyps, [detok[i] for i in sorted(detok)]


def _alignments(out) -> dict[int, list[str]]:
    """Each sentence's A- pairs (``src-tgt``) of a --results-path run."""
    text = (out / "generate-test.txt").read_text(encoding="utf-8")
    return {int(m.group(1)): m.group(2).split() for m in re.finditer(r"^A-(\d+)\t(.*)$", text, re.M)}


@pytest.mark.slow
def test_ctranslate2_engine_agrees_with_nmt_generate_on_multi30k(multi30k_learning_run, tmp_path):
    """Exported with quantization none, >= 98 % of the 1,000 test hypotheses identical to
    the torch engine's, BLEU (sacreBLEU) within 0.3, and on identical hypotheses the same alignment (A-
    lines) for >= 99.5 % of the tokens; int8 within 1.0 BLEU of float32."""
    import sacrebleu

    from nmt_toolkit.cli.export import run as export_cli

    data, ck, raw = multi30k_learning_run.data, multi30k_learning_run.checkpoint, multi30k_learning_run.raw
    refs = (raw / "test.de").read_text(encoding="utf-8").splitlines()
    ours, ours_d = _generate(data, ck, tmp_path / "torch", "--print-alignment")
    for q in ("none", "int8"):
        assert export_cli(["--path", str(ck), "--quantization", q, "--output-dir", str(tmp_path / q)]) == 0
    ct2_h, ct2_d = _generate(data, tmp_path / "none", tmp_path / "ct2", "--engine", "ctranslate2", "--threads", "2",
                             "--print-alignment")
    int8_h, int8_d = _generate(data, tmp_path / "int8", tmp_path / "int8out", "--engine", "ctranslate2")
    assert len(ours) == len(ct2_h) == 1000
    same = sum(ours[i] == ct2_h[i] for i in ours)
    bleu = {name: sacrebleu.corpus_bleu(d, [refs]).score for name, d in
            (("torch", ours_d), ("ct2", ct2_d), ("int8", int8_d))}
    print(f"identical {same}/1000, BLEU {bleu}")
    assert same >= 980
    ours_a, ct2_a = _alignments(tmp_path / "torch"), _alignments(tmp_path / "ct2")
    tokens = [(a, b) for i in ours if ours[i] == ct2_h[i] for a, b in zip(ours_a[i], ct2_a[i], strict=True)]
    agree = sum(a == b for a, b in tokens)
    print(f"alignment: {agree}/{len(tokens)} tokens the same")
    assert agree >= 0.995 * len(tokens)
    assert abs(bleu["ct2"] - bleu["torch"]) <= 0.3
    assert abs(bleu["int8"] - bleu["ct2"]) <= 1.0
    assert len(set(ours.values())) > 500  # varied outputs: the agreement is not between degenerate hypotheses
    # a checkpoint given to --engine ctranslate2 is exported on the fly: the same lines
    fly_h, _ = _generate(data, ck, tmp_path / "fly", "--engine", "ctranslate2")
    assert fly_h == ct2_h


def test_nmt_export_errors_are_one_line(tmp_path, capfd):
    from nmt_toolkit.cli.export import run as export_cli

    assert export_cli(["--path", str(tmp_path / "missing.pt"), "--output-dir", str(tmp_path / "out")]) != 0
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.pt" in err[0]
    assert os.listdir(tmp_path) == []  # no output folder, no staging folder


def test_the_defaults_run_with_the_ctranslate2_engine_as_its_own_rules(trained_translation, tmp_path, capsys):
    """--engine ctranslate2 without search flags runs (it refused its own defaults, GNMT's penalty and the
    exact bound, until the user named others) and prints what naming CTranslate2's rules prints; a rule it
    lacks, named, is still refused by name."""
    from nmt_toolkit.cli.generate import run as generate

    base = [str(trained_translation.data), "--path", str(trained_translation.first), "--gen-subset", "test", "--beam", "4",
            "--engine", "ctranslate2"]
    assert generate(base) == 0
    defaults = capsys.readouterr().out
    assert generate([*base, "--lenpen-style", "fairseq", "--early-stop", "beam"]) == 0
    named = capsys.readouterr().out
    assert defaults == named and defaults.count("\nH-") + defaults.startswith("H-") >= 20
    assert generate([*base, "--early-stop", "bound"]) == 2
    assert "--engine ctranslate2 has no --early-stop bound" in capsys.readouterr().err

"""fairseq interoperability, proven against files real fairseq wrote (tests/fixtures/fairseq, README.md there):
its checkpoints decode here as fairseq-generate decodes them, its data-bin reads here, ours reads in fairseq,
our exports decode in fairseq as here, and loading a checkpoint never runs pickled code."""
from __future__ import annotations

import collections
import os
import pathlib
import pickle
import subprocess
import sys

import pytest
import torch

from nmt_toolkit.cli.convert import run as convert
from nmt_toolkit.cli.export import run as export
from nmt_toolkit.cli.generate import run as generate
from nmt_toolkit.errors import DataError, NmtError
from nmt_toolkit.export import fairseq, fairseq_export, fairseq_pickle

FIX = pathlib.Path(__file__).parent / "fixtures" / "fairseq"
BIN = str(FIX / "data-bin")
FAIRSEQ_STYLE = ["--lenpen", "0.6", "--lenpen-style", "fairseq", "--early-stop", "beam", "--batch-size", "32",
                 "--gen-subset", "test"]


def hypotheses(text: str) -> dict[int, list[tuple[float, str]]]:
    out = collections.defaultdict(list)
    for line in text.splitlines():
        if line.startswith("H-"):
            tag, score, words = line.split("\t")
            out[int(tag[2:])].append((float(score), words))
    return out


def decode(capsys, path: str, *flags: str, data: str = BIN) -> str:
    capsys.readouterr()
    assert generate([data, "--path", path, *FAIRSEQ_STYLE, *flags]) == 0
    return capsys.readouterr().out


def assert_same_as_fairseq(ours: str, reference: pathlib.Path) -> None:
    """Every sentence's n-best list equal token for token on >= 99 % of sentences, scores to 1e-4."""
    mine, theirs = hypotheses(ours), hypotheses(reference.read_text(encoding="utf-8"))
    assert set(mine) == set(theirs) and len(theirs) == 100
    same = [k for k in theirs if [w for _, w in mine[k]] == [w for _, w in theirs[k]]]
    assert len(same) >= 0.99 * len(theirs), f"{len(same)}/{len(theirs)} sentences as fairseq-generate's"
    worst = max(abs(a - b) for k in same for (a, _), (b, _) in zip(mine[k], theirs[k]))
    assert worst < 1e-4, worst


@pytest.mark.parametrize("model", ["postnorm", "prenorm"])
@pytest.mark.parametrize("beam", ["4", "1"])
def test_fairseq_checkpoint_decodes_as_fairseq_generate(model, beam, capsys):
    flags = ["--beam", beam] + (["--nbest", "2"] if beam == "4" else [])
    assert_same_as_fairseq(decode(capsys, str(FIX / model / "model.pt"), *flags),
                           FIX / model / f"generate-beam{beam}.txt")


@pytest.mark.parametrize("layout", ["model-omegaconf.pt", "model-args.pt"])
def test_older_checkpoint_layouts_load_to_the_same_model(layout):
    """cfg as a pickled omegaconf DictConfig (fairseq 0.10/0.11), args as a Namespace only (<= 0.9)."""
    reference = fairseq.load_checkpoint(str(FIX / "postnorm" / "model.pt"))
    other = fairseq.load_checkpoint(str(FIX / "postnorm" / layout))
    assert other["config"]["model"] == reference["config"]["model"]
    assert all(torch.equal(other["model"][k], v) for k, v in reference["model"].items())


def test_a_planted_reduce_payload_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    state = fairseq_pickle.load(str(FIX / "postnorm" / "model.pt"))
    path = tmp_path / "evil.pt"
    torch.save({"args": None, "cfg": {"model": {"arch": "transformer"}}, "model": {}, "extra": Payload()}, path)
    with pytest.raises(DataError, match=r"refusing to load (posix|os|nt)\.system"):
        fairseq_pickle.load(str(path))
    with pytest.raises(DataError, match="refusing to load"):
        fairseq.load_any_checkpoint(str(path))  # what nmt-generate --path does
    assert not marker.exists() and state["model"]


def test_fairseq_data_bin_reads_as_its_text(tmp_path):
    """fairseq-preprocess's .bin/.idx and dictionaries, read by our task, give back the synthetic text."""
    from nmt_toolkit.registry import TASKS

    subprocess.run([sys.executable, str(FIX / "synthetic_text.py"), str(tmp_path)], check=True)
    entry = TASKS.get("translation")
    cfg = entry.config(data=BIN, source_lang="src", target_lang="tgt")
    task = entry.obj.setup_task(cfg)
    task.load_dataset("test")
    ds = task.datasets["test"] if hasattr(task, "datasets") else task.dataset("test")
    src_lines = (tmp_path / "test.src").read_text().split("\n")[:-1]
    tgt_lines = (tmp_path / "test.tgt").read_text().split("\n")[:-1]
    assert len(ds) == len(src_lines) == 100
    for i in range(len(ds)):
        item = ds[i]
        assert task.source_dictionary.string(item["source"]) == src_lines[i]
        assert task.target_dictionary.string(item["target"]) == tgt_lines[i]


def test_our_data_bin_reads_in_fairseq(tmp_path):
    """fairseq-generate on a data-bin written by nmt-preprocess (recorded): its S-/T- lines are the text."""
    subprocess.run([sys.executable, str(FIX / "synthetic_text.py"), str(tmp_path)], check=True)
    out = (FIX / "ours-databin" / "generate-beam4.txt").read_text(encoding="utf-8").splitlines()
    src = (tmp_path / "test.src").read_text().split("\n")
    tgt = (tmp_path / "test.tgt").read_text().split("\n")
    s = {int(l.split("\t")[0][2:]): l.split("\t")[1] for l in out if l.startswith("S-")}
    t = {int(l.split("\t")[0][2:]): l.split("\t")[1] for l in out if l.startswith("T-")}
    assert len(s) == 100 and all(s[i] == src[i] and t[i] == tgt[i] for i in s)


def test_our_export_decodes_in_fairseq_as_here(capsys):
    """A model of ours with the paper's sinusoids, exported with nmt-export --format fairseq: what
    fairseq-generate decoded from the export (recorded) is what nmt-generate decodes from the original."""
    assert_same_as_fairseq(decode(capsys, str(FIX / "exported" / "ours.pt"), "--beam", "4", "--nbest", "2"),
                           FIX / "exported" / "generate-beam4.txt")


def test_export_then_import_gives_back_the_weights(tmp_path, capsys):
    ours = FIX / "exported" / "ours.pt"
    assert export([BIN, "--path", str(ours), "--format", "fairseq", "--output-dir", str(tmp_path / "fs")]) == 0
    back = fairseq.load_checkpoint(str(tmp_path / "fs" / "checkpoint.pt"))
    original = torch.load(ours, weights_only=True)["model"]
    for key, value in original.items():
        if "embed_positions" in key:
            continue  # paper sinusoids travel as a learned table (the import then has learned positions)
        assert torch.equal(back["model"][key], value), key
    assert sorted(os.listdir(tmp_path / "fs")) == ["checkpoint.pt", "dict.src.txt", "dict.tgt.txt", "nmt_export.json"]


def test_convert_then_fine_tune_with_nmt_train(tmp_path, capsys):
    from nmt_toolkit.cli.train import run as train

    out = tmp_path / "imported.pt"
    assert convert(["--from", "fairseq", "--path", str(FIX / "postnorm" / "model.pt"), "--output", str(out)]) == 0
    flags = capsys.readouterr().out.split()
    assert "--sinusoid-layout" in flags and "--share-all-embeddings" in flags
    assert convert(["--from", "fairseq", "--path", str(FIX / "postnorm" / "model.pt"), "--output", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    save = tmp_path / "ck"
    save.mkdir()
    rc = train([BIN, "--source-lang", "src", "--target-lang", "tgt", *flags, "--restore-file", str(out),
                "--reset-optimizer", "--reset-lr-scheduler", "--reset-dataloader", "--reset-meters",
                "--optimizer", "adam", "--lr", "1e-4", "--lr-scheduler", "fixed", "--max-tokens", "512",
                "--max-update", "3", "--save-dir", str(save), "--no-epoch-checkpoints", "--log-format", "json"])
    assert rc == 0
    err = capsys.readouterr().err
    tuned = torch.load(save / "checkpoint_last.pt", weights_only=True)
    start = torch.load(out, weights_only=True)["model"]
    assert tuned["train_state"]["num_updates"] == 3
    diff = max(float((tuned["model"][k] - v).abs().max()) for k, v in start.items())
    assert 0 < diff < 0.05, diff  # fine-tuned from the imported weights, not from a fresh model
    assert "resum" in err.lower() or "restor" in err.lower()


def test_what_fairseq_cannot_hold_or_we_cannot_build_is_refused():
    from nmt_toolkit.models.transformer import TransformerConfig

    args = fairseq.model_args({"args": {"arch": "transformer", "layernorm_embedding": True}})
    assert fairseq.transformer_config(args).layernorm_embedding  # mapped, not refused
    with pytest.raises(NmtError, match="adaptive_softmax_cutoff"):
        fairseq.transformer_config({**args, "adaptive_softmax_cutoff": "1000,2000"})
    with pytest.raises(NmtError, match="encoder_embed_dim=512 differs from decoder_embed_dim=256"):
        fairseq.transformer_config({**args, "decoder_embed_dim": 256})
    with pytest.raises(NmtError, match="transformer_lm"):
        fairseq.model_args({"args": {"arch": "transformer_lm"}})
    with pytest.raises(NmtError, match="--key-dim 32 cannot be represented in fairseq"):
        fairseq_export.check_exportable(TransformerConfig(key_dim=32), "ck.pt")


def test_published_architecture_presets_fill_what_old_checkpoints_lack():
    """fairseq <= 0.9 checkpoints (the published WMT models) carry the preset's values only if the user typed
    them: transformer_vaswani_wmt_en_de_big means 1024/4096/16 heads, dropout 0.3 (fairseq's presets)."""
    cfg = fairseq.transformer_config(fairseq.model_args({"args": {"arch": "transformer_vaswani_wmt_en_de_big",
                                                                  "share_all_embeddings": True}}))
    assert (cfg.embed_dim, cfg.ffn_embed_dim, cfg.attention_heads, cfg.dropout) == (1024, 4096, 16, 0.3)
    assert cfg.share_all_embeddings and cfg.sinusoid_layout == "fairseq" and not cfg.normalize_before


@pytest.mark.parametrize("options", [
    dict(layernorm_embedding=True, normalize_before=True, positional_embeddings="learned", max_positions=20),
    dict(sinusoid_layout="fairseq", share_decoder_input_output_embed=False),
])
def test_weights_round_trip_through_fairseq_names(options):
    """fairseq_state_dict and convert_state_dict are inverses (layernorm_embedding, learned tables, an
    untied output projection, separate dictionaries)."""
    from nmt_toolkit.data.dictionary import Dictionary
    from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel

    src, tgt = Dictionary(), Dictionary()
    for i in range(20):
        src.add_symbol(f"s{i}")
        tgt.add_symbol(f"t{i}")
    cfg = TransformerConfig(encoder_layers=1, decoder_layers=2, embed_dim=16, ffn_embed_dim=32, attention_heads=2,
                            **options)
    torch.manual_seed(0)
    state = TransformerModel.build_model(cfg, src, tgt).state_dict()
    theirs = fairseq_export.fairseq_state_dict(state, cfg, src.pad())
    assert ("encoder.layernorm_embedding.weight" in theirs) == bool(options.get("layernorm_embedding"))
    back = fairseq.convert_state_dict(theirs, src.pad())
    assert set(back) == set(state) and all(torch.equal(back[k], v) for k, v in state.items())

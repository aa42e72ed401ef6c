"""fairseq interoperability, proven against files real fairseq wrote (tests/fixtures/fairseq, README.md there):
its checkpoints decode here as fairseq-generate decodes them, its data-bin reads here, ours reads in fairseq,
our exports decode in fairseq as here, and loading a checkpoint never runs pickled code."""
from __future__ import annotations

import argparse
import collections
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from nmt_toolkit import loading
from nmt_toolkit.cli.convert import run as convert
from nmt_toolkit.cli.export import run as export
from nmt_toolkit.cli.generate import run as generate
from nmt_toolkit.errors import DataError, NmtError, UsageError
from nmt_toolkit.export import fairseq as fairseq_export
from nmt_toolkit.importers import fairseq as fairseq_import, fairseq_pickle

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
    reference = fairseq_import.load_fairseq_checkpoint(str(FIX / "postnorm" / "model.pt"))
    other = fairseq_import.load_fairseq_checkpoint(str(FIX / "postnorm" / layout))
    assert other["config"]["model"] == reference["config"]["model"]
    assert all(torch.equal(other["model"][k], v) for k, v in reference["model"].items())


def test_a_planted_reduce_payload_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    state = fairseq_pickle.read(str(FIX / "postnorm" / "model.pt"))
    path = tmp_path / "evil.pt"
    torch.save({"args": None, "cfg": {"model": {"arch": "transformer"}}, "model": {}, "extra": Payload()}, path)
    with pytest.raises(DataError, match=r"refusing to load (posix|os|nt)\.system"):
        fairseq_pickle.read(str(path))
    with pytest.raises(DataError, match="refusing to load"):
        loading.open_model(str(path))  # what nmt-generate --path does
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
    back = fairseq_import.load_fairseq_checkpoint(str(tmp_path / "fs" / "checkpoint.pt"))
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

    args = fairseq_import.model_args({"args": {"arch": "transformer", "layernorm_embedding": True}})
    assert fairseq_import.transformer_config(args).layernorm_embedding  # mapped, not refused
    with pytest.raises(NmtError, match="adaptive_softmax_cutoff"):
        fairseq_import.transformer_config({**args, "adaptive_softmax_cutoff": "1000,2000"})
    with pytest.raises(NmtError, match="encoder_embed_dim=512 differs from decoder_embed_dim=256"):
        fairseq_import.transformer_config({**args, "decoder_embed_dim": 256})
    with pytest.raises(NmtError, match="transformer_lm"):
        fairseq_import.model_args({"args": {"arch": "transformer_lm"}})
    from nmt_toolkit.export.exportable import check_exportable
    from nmt_toolkit.models.transformer import TransformerModel

    with pytest.raises(UsageError, match=r"^ck\.pt: cannot be exported to fairseq: --key-dim 32 \(its attention heads"):
        check_exportable(TransformerConfig(key_dim=32), "fairseq", "ck.pt", model_class=TransformerModel)


def test_published_architecture_presets_fill_what_old_checkpoints_lack():
    """fairseq <= 0.9 checkpoints (the published WMT models) carry the preset's values only if the user typed
    them: transformer_vaswani_wmt_en_de_big means 1024/4096/16 heads, dropout 0.3 (fairseq's presets)."""
    cfg = fairseq_import.transformer_config(fairseq_import.model_args({"args": {"arch": "transformer_vaswani_wmt_en_de_big",
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
    back = fairseq_import.convert_state_dict(theirs, src.pad())
    assert set(back) == set(state) and all(torch.equal(back[k], v) for k, v in state.items())


def old_fairseq_layout(state: dict, tied: bool = True) -> dict:
    """A fairseq 0.12 ``state_dict`` under the names of the 2018-2019 checkpoints, which fairseq 0.12 renames on
    load (``upgrade_state_dict_named`` of MultiheadAttention, TransformerEncoderLayer and TransformerDecoder):
    fused ``in_proj_weight``/``in_proj_bias`` ([Q; K; V]) per attention, ``layers.N.layer_norms.K`` (encoder 0
    self-attention, 1 FFN; decoder 0, 1 encoder attention, 2 FFN), no ``version`` (read as 1), the buffers old
    sinusoidal modules saved, and with ``tied=False`` the output matrix as ``decoder.embed_out`` and separate
    embedding tensors (the checkpoint's args then say nothing is shared)."""
    old = {}
    norms = {"encoder": {"self_attn_layer_norm": 0, "final_layer_norm": 1},
             "decoder": {"self_attn_layer_norm": 0, "encoder_attn_layer_norm": 1, "final_layer_norm": 2}}
    for key, value in state.items():
        attn = re.match(r"(.*\.(?:self_attn|encoder_attn))\.([qkv])_proj\.(weight|bias)$", key)
        norm = re.match(r"(encoder|decoder)(\.layers\.\d+\.)(\w+_layer_norm)\.(weight|bias)$", key)
        if attn:
            prefix, part = attn.group(1), attn.group(3)
            if attn.group(2) == "q":
                old[f"{prefix}.in_proj_{part}"] = torch.cat([state[f"{prefix}.{x}_proj.{part}"] for x in "qkv"])
        elif norm:
            side, mid, name, part = norm.groups()
            old[f"{side}{mid}layer_norms.{norms[side][name]}.{part}"] = value
        elif key.endswith(".version"):
            continue
        elif key == "decoder.output_projection.weight":
            if not tied:
                old["decoder.embed_out"] = value.clone()
        elif key.endswith("embed_tokens.weight") and not tied:
            old[key] = value.clone()
        else:
            old[key] = value
    for side in ("encoder", "decoder"):
        if f"{side}.embed_positions.weight" not in state:  # sinusoidal: the buffers old fairseq saved
            old[f"{side}.embed_positions._float_tensor"] = torch.zeros(1)
            old[f"{side}.embed_positions.weights"] = torch.zeros(8, 32)
    return old


def rewrite(path: pathlib.Path, source: str, model=None, **args) -> str:
    """The fixture ``source`` saved again in the ``args`` layout (a Namespace, as fairseq <= 0.9 wrote it), with
    ``model`` as its weights and ``args`` overriding its options."""
    state = fairseq_pickle.read(str(FIX / source))
    options = state["args"] if state.get("args") else state["cfg"]["model"]
    torch.save({"args": argparse.Namespace(**{**options, **args}),
                "model": state["model"] if model is None else model}, path)
    return str(path)


@pytest.mark.parametrize("tied", [True, False], ids=["shared", "embed_out"])
def test_old_fairseq_weight_names_load_as_fairseq_renames_them(tied, tmp_path, capsys):
    """The published 2018-2019 models carry fused in_proj weights, layer_norms.N and decoder.embed_out.

    Reference: the same rewrite (this function's code) of postnorm/model-args.pt, decoded by real fairseq-generate
    0.12.3.1 with the fixtures' command (beam 4, nbest 2, lenpen 0.6): 100 of 100 n-best lists identical to
    postnorm/generate-beam4.txt, scores within 5.7e-6, in both variants. Before this test, import stopped at a
    KeyError on 'encoder.layers.0.self_attn.q_proj.weight'."""
    state = fairseq_pickle.read(str(FIX / "postnorm" / "model-args.pt"))
    shared = {} if tied else dict(share_all_embeddings=False, share_decoder_input_output_embed=False)
    path = rewrite(tmp_path / "old.pt", "postnorm/model-args.pt", old_fairseq_layout(state["model"], tied), **shared)
    converted = fairseq_import.load_fairseq_checkpoint(path)["model"]
    reference = fairseq_import.load_fairseq_checkpoint(str(FIX / "postnorm" / "model.pt"))["model"]
    if tied:
        assert set(converted) == set(reference)
        assert all(torch.equal(converted[k], v) for k, v in reference.items())
    else:  # separate matrices holding the shared one's values
        embed = reference["encoder.embed.embed_tokens.weight"]
        assert torch.equal(converted["decoder.output_projection.weight"], embed)
        assert torch.equal(converted["decoder.embed.embed_tokens.weight"], embed)
        assert set(converted) == set(reference) | {"decoder.output_projection.weight"}
    assert_same_as_fairseq(decode(capsys, path, "--beam", "4", "--nbest", "2"), FIX / "postnorm" / "generate-beam4.txt")


def test_a_missing_fairseq_tensor_is_named_on_one_line():
    state = dict(fairseq_pickle.read(str(FIX / "postnorm" / "model.pt"))["model"])
    del state["decoder.layers.1.encoder_attn.k_proj.bias"]
    with pytest.raises(NmtError, match=r"^fairseq tensor 'decoder\.layers\.1\.encoder_attn\.k_proj\.bias' is "
                                       r"missing[^\n]*$"):
        fairseq_import.convert_state_dict(state)


@pytest.mark.parametrize("versions,refused", [
    ({}, "encoder.version"), ({"encoder.version": 2.0, "decoder.version": 2.0}, "decoder.version"),
    ({"encoder.version": 2.0, "decoder.version": 3.0}, None)])
def test_pre_norm_checkpoints_of_old_versions_have_no_final_norm_in_fairseq(versions, refused, tmp_path):
    """fairseq 0.12 drops the final LayerNorm of a pre-norm encoder whose ``encoder.version`` is < 2 and of a
    decoder whose ``decoder.version`` is <= 2 (absent = 1), even when the weights are there (checked with real
    fairseq on prenorm/model.pt: no version keys -> both layer_norm None; decoder.version 2 -> the decoder's None;
    encoder.version 2 -> both kept). Our pre-norm stack always ends with one: refused by name, not mis-decoded."""
    state = fairseq_pickle.read(str(FIX / "prenorm" / "model.pt"))["model"]
    model = {k: v for k, v in state.items() if not k.endswith(".version")}
    model.update({k: torch.tensor([v]) for k, v in versions.items()})
    path = rewrite(tmp_path / "old.pt", "prenorm/model.pt", model)
    if refused is None:
        assert "decoder.layer_norm.weight" in fairseq_import.load_fairseq_checkpoint(path)["model"]
        return
    with pytest.raises(NmtError, match=rf"^{re.escape(path)}: {re.escape(refused)} .*no final LayerNorm"):
        fairseq_import.load_fairseq_checkpoint(path)
    postnorm = rewrite(tmp_path / "post.pt", "postnorm/model.pt", {
        k: v for k, v in fairseq_pickle.read(str(FIX / "postnorm" / "model.pt"))["model"].items()
        if not k.endswith(".version")})
    fairseq_import.load_fairseq_checkpoint(postnorm)  # a post-norm stack has no final norm to drop


def test_no_decoder_final_norm_is_refused_by_name_where_it_changes_the_model(tmp_path):
    """fairseq's --no-decoder-final-norm leaves a pre-norm decoder without its final LayerNorm (real fairseq
    0.12.3.1 on prenorm/model.pt with the option set and decoder.layer_norm.* removed: decoder.layer_norm is None;
    with the weights kept it refuses the unexpected keys). Our pre-norm decoder always ends with one: refused by
    name (before: 'tensor decoder.layer_norm.weight is missing' when decoding). A post-norm decoder has no final
    norm either way, so there the option changes nothing and is accepted."""
    state = fairseq_pickle.read(str(FIX / "prenorm" / "model.pt"))["model"]
    path = rewrite(tmp_path / "pre.pt", "prenorm/model.pt",
                   {k: v for k, v in state.items() if not k.startswith("decoder.layer_norm.")},
                   no_decoder_final_norm=True)
    with pytest.raises(NmtError, match=r"fairseq option no_decoder_final_norm=True is not supported"):
        fairseq_import.load_fairseq_checkpoint(path)
    post = fairseq_import.load_fairseq_checkpoint(rewrite(tmp_path / "post.pt", "postnorm/model.pt", no_decoder_final_norm=True))
    assert post["model"].keys() == fairseq_import.load_fairseq_checkpoint(str(FIX / "postnorm" / "model.pt"))["model"].keys()


def test_fairseq_checkpoints_read_the_same_under_torch_force_weights_only_load(monkeypatch, tmp_path):
    """The fairseq reader never calls torch.load, so TORCH_FORCE_WEIGHTS_ONLY_LOAD=1 (which makes torch.load
    refuse any unpickler but its own) changes nothing; torch.load itself is the reference for the tensors."""
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")
    path = str(FIX / "postnorm" / "model.pt")
    ours = fairseq_pickle.read(path)["model"]
    monkeypatch.delenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    reference = torch.load(path, map_location="cpu", weights_only=False)["model"]  # a trusted fixture
    assert ours.keys() == reference.keys()
    assert all(torch.equal(ours[k], v) and ours[k].dtype == v.dtype for k, v in reference.items())


def test_a_fairseq_checkpoint_in_torchs_older_file_format_loads_the_same(tmp_path):
    """torch.save(_use_new_zipfile_serialization=False): the format of checkpoints before torch 1.6."""
    zipped = fairseq_pickle.read(str(FIX / "postnorm" / "model.pt"))
    base = torch.arange(12.0)
    zipped["extra"] = {"view": base[3:7], "base": base, "half": torch.ones(2, 3, dtype=torch.half).t(),
                       "empty": torch.zeros(0, dtype=torch.long)}
    legacy = tmp_path / "legacy.pt"
    torch.save(zipped, legacy, _use_new_zipfile_serialization=False)
    again = fairseq_pickle.read(str(legacy))
    reference = torch.load(legacy, weights_only=True)
    for k, v in reference["model"].items():
        assert torch.equal(again["model"][k], v) and again["model"][k].dtype == v.dtype, k
    for k, v in reference["extra"].items():
        assert torch.equal(again["extra"][k], v) and again["extra"][k].dtype == v.dtype, k
    reference_config = fairseq_import.load_fairseq_checkpoint(str(FIX / "postnorm" / "model.pt"))["config"]["model"]
    assert fairseq_import.converted(again, str(legacy))["config"]["model"] == reference_config


def test_convert_from_fairseq_refuses_the_direction_options(tmp_path, capsys):
    """A fairseq checkpoint takes its languages from its data-bin: --source-lang, --target-lang and
    --target-lang-tag (options of the Hugging Face importers) are refused by name, not ignored."""
    out = tmp_path / "ours.pt"
    for flag, value in (("--source-lang", "en"), ("--target-lang", "de"), ("--target-lang-tag", ">>fra<<")):
        assert convert(["--from", "fairseq", "--path", str(FIX / "postnorm" / "model.pt"), "--output", str(out),
                        flag, value]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"nmt-convert: error: {flag}: not with --from fairseq (a checkpoint takes its languages from the "
            f"data-bin it is trained or decoded with)")
    assert list(tmp_path.iterdir()) == []

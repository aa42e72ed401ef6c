"""Parity with fairseq 0.12.3's translation_multi_simple_epoch, from numbers fairseq recorded on a tiny
multilingual data-bin that our nmt-preprocess --lang-pairs wrote (``make_multilingual_fixtures.py``; see
README.md): the language tokens' ids, the tagged items of every direction, batches taken across directions,
and the first updates of fairseq's Trainer from the same initial weights. No fairseq import: the test runs in
CI from the fixtures.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from nmt_toolkit.data.pair_dataset import collate
from nmt_toolkit.importers.fairseq import convert_state_dict
from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel
from nmt_toolkit.tasks.multilingual import MultilingualConfig, MultilingualTranslationTask
from tests.parity.test_fairseq_parity import _trainer

HERE = pathlib.Path(__file__).parent / "fixtures" / "multilingual"
PAIRS = "en-de,de-en,en-fr"


@pytest.fixture(scope="module")
def records() -> dict:
    return torch.load(HERE / "records.pt", map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def task() -> MultilingualTranslationTask:
    cfg = MultilingualConfig(data=str(HERE / "bin"), lang_pairs=PAIRS, encoder_langtok="src", decoder_langtok=True,
                             sampling_method="temperature", sampling_temperature=1.5, max_tokens=4096)
    return MultilingualTranslationTask.setup_task(cfg)


@pytest.fixture(scope="module")
def directions(task) -> list:
    return [task.load_dataset(f"train.{pair}") for pair in PAIRS.split(",")]


def test_language_tokens_and_items_are_fairseqs(task, directions, records):
    assert len(task.source_dictionary) == len(task.target_dictionary) == records["dict_size"]
    for token, index in records["lang_tokens"].items():
        assert task.source_dictionary.index(token) == index, token
    for pair, dataset in zip(PAIRS.split(","), directions):
        for k, (source, target) in enumerate(records["items"][pair]):
            item = dataset[k]
            assert list(map(int, item["source"])) == source, f"{pair} item {k}: source"
            assert list(map(int, item["target"])) == target, f"{pair} item {k}: target"


def our_batches(directions, records) -> list[dict]:
    """Our collater's batches of the items fairseq collated, in fairseq's order (it sorts by source length)."""
    out = []
    for rec in records["batches"]:
        items = [directions[d][k] for d, k in rec["picks"]]
        out.append(collate([{"id": int(i), "source": np.asarray(items[int(i)]["source"]),
                             "target": np.asarray(items[int(i)]["target"])} for i in rec["order"]],
                           directions[0].src_dict.pad(), directions[0].src_dict.eos()))
    return out


def test_batches_across_directions_are_fairseqs(directions, records, task):
    pad = task.source_dictionary.pad()
    for n, (ours, theirs) in enumerate(zip(our_batches(directions, records), records["batches"])):
        net = ours["net_input"]
        for row, want in zip(net["src_tokens"], theirs["src_tokens"]):  # fairseq left-pads sources, we right-pad
            assert row[row.ne(pad)].tolist() == want[want.ne(pad)].tolist(), f"batch {n}: a source"
        assert torch.equal(net["prev_output_tokens"], theirs["prev_output_tokens"]), f"batch {n}: decoder input"
        assert torch.equal(ours["target"], theirs["target"]), f"batch {n}: target"


def test_first_updates_follow_fairseq(task, directions, records):
    d = task.source_dictionary
    cfg = TransformerConfig(encoder_layers=2, decoder_layers=2, embed_dim=32, ffn_embed_dim=64, attention_heads=4,
                            dropout=0.0, share_all_embeddings=True, sinusoid_layout="fairseq")
    torch.manual_seed(0)
    model = TransformerModel.build_model(cfg, d, d)
    model.load_state_dict(convert_state_dict(records["init"], d.pad()), strict=True)
    trainer = _trainer(model, d)
    steps = records["steps"]
    for n, batch in enumerate(our_batches(directions, records)):
        assert trainer.get_lr() == pytest.approx(steps["lr"][n], rel=1e-9, abs=1e-12), f"lr of update {n + 1}"
        trainer.train_step([batch])
        values = trainer.take_stats()[-1]
        assert values["sample_size"] == steps["sample_size"][n]
        assert values["loss"] == pytest.approx(steps["loss"][n], rel=1e-5), f"update {n + 1}: loss"
        assert values["nll_loss"] == pytest.approx(steps["nll_loss"][n], rel=1e-5), f"update {n + 1}: nll"
        if n == 0:
            state = model.state_dict()
            for key, want in convert_state_dict(records["after_first"], d.pad()).items():
                err = float((state[key] - want).abs().max())
                assert err < 1e-5, f"{key} after the first update differs from fairseq's by {err:.2e}"


def _d_lines(out: str) -> list[str]:
    lines = [line.split("\t") for line in out.splitlines() if line.startswith("D-")]
    return [text for _, _, text in sorted(lines, key=lambda cols: int(cols[0][2:]))]


def test_nmt_generate_decodes_fairseqs_checkpoint_as_fairseq_generate(tmp_path, capsys):
    """fairseq's own checkpoint of this task, converted by nmt-convert (which carries the task's directions
    and tags over), decodes each direction's valid split into fairseq-generate's hypotheses."""
    from nmt_toolkit.cli.convert import run as convert
    from nmt_toolkit.cli.generate import run as generate

    imported = tmp_path / "imported.pt"
    assert convert(["--from", "fairseq", "--path", str(HERE / "checkpoint.pt"), "--output", str(imported)]) == 0
    for pair in ("en-de", "de-en", "en-fr"):
        capsys.readouterr()
        src, tgt = pair.split("-")
        assert generate([str(HERE / "bin"), "--path", str(imported), "--source-lang", src, "--target-lang", tgt,
                         "--gen-subset", "valid", "--beam", "4", "--lenpen", "0.6", "--lenpen-style", "fairseq",
                         "--batch-size", "8", "--cpu"]) == 0
        theirs = (HERE / f"generate.{pair}.txt").read_text(encoding="utf-8").splitlines()
        assert len(theirs) == 16
        assert _d_lines(capsys.readouterr().out) == theirs, pair


def test_an_unsupported_option_of_fairseqs_task_is_refused_by_name():
    from nmt_toolkit.errors import NmtError
    from nmt_toolkit.importers import fairseq_pickle
    from nmt_toolkit.importers.fairseq import converted

    state = fairseq_pickle.read(str(HERE / "checkpoint.pt"))
    assert converted(state, "ck.pt")["config"]["task"]["lang_pairs"] == PAIRS
    state["cfg"]["task"]["lang_tok_style"] = "mbart"
    with pytest.raises(NmtError, match=r"ck\.pt: fairseq option lang_tok_style='mbart' of "
                                       r"translation_multi_simple_epoch is not supported"):
        converted(state, "ck.pt")

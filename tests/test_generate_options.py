"""nmt-generate options that change what is printed or whether it runs: contradictory length limits and
non-finite checkpoints are errors, --remove-bpe against sentencepiece's own decoder and fairseq's sed rule,
--results-path against stdout, and raw --input read one line per \\n."""
from __future__ import annotations

import dataclasses
import io
import re
import sys

import pytest
import torch
from test_generate_cli import WORDS, setup_dir  # noqa: F401  (the module's data-bin and random-weight model)

from nmt_toolkit.cli import generate as gen_cli
from nmt_toolkit.cli import interactive as inter_cli
from nmt_toolkit.cli import preprocess as prep_cli
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel
from nmt_toolkit.checkpoints import save_checkpoint


def _run(capsys, argv, program=gen_cli):
    rc = program.run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if " error: " in line]  # log lines (INFO) may come before it
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _tagged(out: str, tag: str) -> list[str]:
    return [line.split("\t")[-1] for line in out.split("\n") if line.startswith(f"{tag}-")]


@pytest.mark.parametrize("limits, words", [
    (["--min-len", "500", "--max-len-b", "3"], ["--max-len-b 3", "500", "--min-len"]),
    (["--max-len-a", "0", "--max-len-b", "-5"], ["--max-len-a 0 --max-len-b -5", "one token"]),
    (["--max-len-a", "-1"], ["--max-len-a -1: must be a finite number in [0, 1000]"]),
])
def test_contradictory_length_limits_are_one_line_errors(setup_dir, capsys, limits, words):
    """Before: --min-len 500 --max-len-b 3 printed 500-token outputs; --max-len-a 0 --max-len-b -5 one token."""
    root, data, ck = setup_dir
    for program in (gen_cli, inter_cli):
        rc, out, err = _run(capsys, [data, "--path", ck, *limits], program)
        line = _one_error(err)
        assert rc == 2 and not out
        for w in words:
            assert w in line, (w, line)


def test_limits_that_agree_are_kept(setup_dir, capsys):
    root, data, ck = setup_dir
    rc, out, err = _run(capsys, [data, "--path", ck, "--min-len", "3", "--max-len-a", "0", "--max-len-b", "4",
                                 "--beam", "2"])
    assert rc == 0, err
    lengths = [len(h.split()) for h in _tagged(out, "H")]
    assert len(lengths) == 23 and all(3 <= n <= 4 for n in lengths), lengths


def test_non_finite_weights_are_an_error_at_load(setup_dir, capsys, tmp_path):
    """Before: a checkpoint with NaN weights printed -inf hypotheses and exited 0."""
    root, data, ck = setup_dir
    state = torch.load(ck, weights_only=True)
    key = next(k for k, t in state["model"].items() if k.startswith("decoder.layers.0") and t.dim() == 2)
    for value in (float("nan"), float("inf")):
        state["model"][key] = state["model"][key].clone()
        state["model"][key][0, :3] = value
        bad = tmp_path / "diverged.pt"
        save_checkpoint(state, str(bad))
        rc, out, err = _run(capsys, [data, "--path", bad, "--max-len-b", "3"])
        line = _one_error(err)
        assert rc == 1 and not out
        assert "diverged.pt" in line and key in line and "3 non-finite values" in line


def test_results_path_holds_what_stdout_gets(setup_dir, capsys, tmp_path, monkeypatch):
    root, data, ck = setup_dir
    argv = [data, "--path", ck, "--beam", "2", "--max-len-b", "4", "--decode-workers", "1"]
    rc, stdout, err = _run(capsys, argv)
    assert rc == 0, err
    folder = tmp_path / "results" / "run1"  # created, parents included
    rc, out, err = _run(capsys, argv + ["--results-path", folder])
    assert rc == 0 and out == "", err
    assert (folder / "generate-test.txt").read_text(encoding="utf-8") == stdout
    (tmp_path / "afile").write_text("x\n")
    for bad, words in ((tmp_path / "afile", "not a folder"), (tmp_path / "afile" / "sub", "is a file, not a folder")):
        rc, out, err = _run(capsys, argv + ["--results-path", bad])
        line = _one_error(err)
        assert rc == 1 and f"--results-path {bad}" in line and words in line, line
    from nmt_toolkit import outputs

    def denied(*a, **k):  # the tests may run as root, for whom chmod 0o500 denies nothing
        raise PermissionError(13, "Permission denied")

    with monkeypatch.context() as patch:
        patch.setattr(outputs.tempfile, "mkdtemp", denied)
        rc, out, err = _run(capsys, argv + ["--results-path", tmp_path / "ro"])
    line = _one_error(err)
    assert rc == 1 and f"--results-path {tmp_path / 'ro'}: cannot write there (Permission denied)" in line, line
    assert not (tmp_path / "ro").exists()


def test_remove_bpe_sentencepiece_equals_sentencepiece_decoding(setup_dir, capsys):
    import sentencepiece as spm

    root, data, ck = setup_dir
    argv = [data, "--path", ck, "--beam", "2", "--max-len-b", "6"]
    _, plain, _ = _run(capsys, argv)
    pieces = _tagged(plain, "H")
    assert any("\u2581" in p for p in pieces)
    sp = spm.SentencePieceProcessor(model_file=str(data / "spm.model"))
    want = [sp.decode_pieces(p.split()) for p in pieces]
    for symbol in ("sentencepiece", "auto"):
        rc, out, err = _run(capsys, argv + ["--remove-bpe", symbol])
        assert rc == 0, err
        assert _tagged(out, "H") == want
        assert _tagged(out, "D") == _tagged(plain, "D")  # D- lines are detokenized either way


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    """A subword-nmt data-bin ('@@ ' continuation marks) and a random-weight model over its dictionary."""
    import random

    root = tmp_path_factory.mktemp("bpe")
    rng = random.Random(1)
    for split, n in (("train", 200), ("test", 12)):
        src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7))) for _ in range(n)]
        (root / f"{split}.en").write_text("\n".join(src) + "\n")
        (root / f"{split}.de").write_text("\n".join(s.upper() for s in src) + "\n")
    data = root / "bin"
    assert prep_cli.run(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(root / "train"),
                         "--testpref", str(root / "test"), "--bpe", "subword_nmt", "--bpe-merges", "20",
                         "--joined-dictionary", "--destdir", str(data), "--no-progress-bar"]) == 0
    d = Dictionary.load(str(data / "dict.en.txt"))
    torch.manual_seed(1)
    cfg = TransformerConfig(encoder_layers=1, decoder_layers=1, embed_dim=16, ffn_embed_dim=32, attention_heads=2,
                            dropout=0.0, share_all_embeddings=True)
    state = {"model": TransformerModel.build_model(cfg, d, d).state_dict(), "version": 1, "optimizer": {},
             "config": {"components": {"task": "translation", "model": "transformer", "arch": "transformer_tiny"},
                        "model": dataclasses.asdict(cfg), "task": {"data": str(data)}}}
    save_checkpoint(state, str(root / "model.pt"))
    return data, root / "model.pt"


def test_remove_bpe_subword_nmt_equals_fairseqs_sed_rule(bpe_dir, capsys):
    data, ck = bpe_dir
    argv = [data, "--path", ck, "--beam", "3", "--nbest", "3", "--max-len-b", "8"]
    _, plain, _ = _run(capsys, argv)
    pieces = _tagged(plain, "H")
    assert len(pieces) == 36 and any("@@ " in p for p in pieces)
    # fairseq's scripts: sed -r 's/(@@ )|(@@ ?$)//g'
    want = [re.sub(r"(@@ )|(@@ ?$)", "", p) for p in pieces]
    for symbol in ("@@ ", "auto"):
        rc, out, err = _run(capsys, argv + ["--remove-bpe", symbol])
        assert rc == 0, err
        assert _tagged(out, "H") == want


def test_raw_input_lines_end_at_newlines_only(setup_dir, capsys, tmp_path, monkeypatch):
    """A stray \\r or U+2028 inside a line is part of it (was: the line was cut in two, shifting the ids)."""
    root, data, ck = setup_dir
    raw = tmp_path / "raw.en"
    raw.write_bytes("A dog\rruns.\nThe cat\u2028sits.\r\nA man.\n".encode("utf-8"))
    rc, out, err = _run(capsys, [data, "--path", ck, "--input", raw, "--max-len-b", "3"])
    assert rc == 0, err
    assert _tagged(out, "S") == ["A dog\\x0druns.", "The cat\\u2028sits.", "A man."]  # printed escaped
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw.read_bytes()), encoding="utf-8"))
    rc, out, err = _run(capsys, [data, "--path", ck, "--plain", "--max-len-b", "3"], inter_cli)
    assert rc == 0, err
    assert out.count("\n") == 3
    raw.write_bytes(b"fine\nbroken \xff\n")
    rc, out, err = _run(capsys, [data, "--path", ck, "--input", raw])
    assert rc == 1 and f"--input {raw} line 2: invalid UTF-8" in _one_error(err)


def test_min_len_beyond_the_models_positions_is_an_error(setup_dir, capsys, tmp_path):
    """A model with 16 learned target positions ends its outputs by 15 tokens: --min-len 20 contradicts it."""
    root, data, ck = setup_dir
    state = torch.load(ck, weights_only=True)
    cfg = TransformerConfig(**{**state["config"]["model"], "positional_embeddings": "learned", "max_positions": 16})
    d = Dictionary.load(str(data / "dict.en.txt"))
    state["model"] = TransformerModel.build_model(cfg, d, d).state_dict()
    state["config"]["model"] = dataclasses.asdict(cfg)
    learned = tmp_path / "learned.pt"
    save_checkpoint(state, str(learned))
    rc, out, err = _run(capsys, [data, "--path", learned, "--min-len", "20", "--max-len-b", "30",
                                 "--skip-invalid-size-inputs-valid-test"])
    assert rc == 2 and not out and "--min-len 20: the model has 16 target positions" in _one_error(err)
    rc, out, err = _run(capsys, [data, "--path", learned, "--min-len", "15", "--max-len-a", "0", "--max-len-b", "30",
                                 "--beam", "2", "--skip-invalid-size-inputs-valid-test"])
    assert rc == 0, err
    lengths = [len(p.split()) - 1 for p in _tagged(out, "P")]  # one score per token, EOS included
    assert lengths and set(lengths) == {15}


def test_weights_that_disagree_with_their_config_are_not_called_a_wrong_dictionary(setup_dir, capsys, tmp_path):
    """A shape mismatch that is not vocabulary-sized says which shapes differ (not 'wrong dictionary')."""
    root, data, ck = setup_dir
    state = torch.load(ck, weights_only=True)
    state["config"]["model"]["ffn_embed_dim"] = 48  # the weights are for 64
    mixed = tmp_path / "mixed.pt"
    save_checkpoint(state, str(mixed))
    rc, out, err = _run(capsys, [data, "--path", mixed])
    line = _one_error(err)
    assert rc == 1 and "wrong dictionary" not in line
    assert "mixed.pt" in line and "(64, 32)" in line and "(48, 32)" in line, line


def test_a_split_preprocess_json_does_not_list_is_refused(setup_dir, capsys, tmp_path):
    """A split's files that preprocess.json does not list (left by an earlier vocabulary) are refused by
    nmt-generate --gen-subset, never decoded into garbage with exit 0."""
    import json
    import shutil

    root, data, ck = setup_dir
    stale = tmp_path / "bin"
    shutil.copytree(data, stale)
    record = json.loads((stale / "preprocess.json").read_text())
    del record["splits"]["test"]
    (stale / "preprocess.json").write_text(json.dumps(record))
    rc, out, err = _run(capsys, [stale, "--path", ck, "--gen-subset", "test", "--max-len-b", "3"])
    assert rc == 1 and not out
    assert "preprocess.json does not list the split 'test'" in _one_error(err)
    rc, out, err = _run(capsys, [stale, "--path", ck, "--gen-subset", "valid", "--max-len-b", "3"])
    assert rc == 0 and len(_tagged(out, "H")) == 20, err


def test_results_path_keeps_the_previous_file_when_a_run_fails(setup_dir, capsys, tmp_path, monkeypatch):
    """Nothing already written is lost: the file is written under a temporary name and renamed at the end."""
    from nmt_toolkit.generation import output

    root, data, ck = setup_dir
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "generate-test.txt").write_text("the previous run's lines\n")
    real, calls = output.hypothesis_lines, []

    def failing_after_five(*args, **kwargs):
        calls.append(1)
        if len(calls) > 5:
            raise RuntimeError("decoding failed half way")
        return real(*args, **kwargs)

    monkeypatch.setattr(output, "hypothesis_lines", failing_after_five)
    with pytest.raises(RuntimeError, match="half way"):
        gen_cli.run([str(data), "--path", str(ck), "--max-len-b", "3", "--batch-size", "2", "--decode-workers", "1",
                     "--results-path", str(folder)])
    import gc

    gc.collect()
    assert (folder / "generate-test.txt").read_text() == "the previous run's lines\n"
    assert sorted(p.name for p in folder.iterdir()) == ["generate-test.txt"]


def test_prefix_size_forces_the_references_first_tokens(setup_dir, capsys):
    """--prefix-size N: every hypothesis starts with the first N tokens of its binarized reference (read here from
    the data-bin), also where the model alone starts otherwise; the P- scores cover the forced tokens too."""
    from nmt_toolkit.data.indexed_dataset import MMapIndexedDataset

    root, data, ck = setup_dir
    d = Dictionary.load(str(data / "dict.de.txt"))
    refs = MMapIndexedDataset(str(data / "test.en-de.de"))
    want = [[d[int(i)] for i in refs[k][:2]] for k in range(len(refs))]
    argv = [data, "--path", ck, "--beam", "2", "--max-len-b", "6", "--decode-workers", "1"]
    rc, free, err = _run(capsys, argv)
    assert rc == 0, err
    rc, out, err = _run(capsys, argv + ["--prefix-size", "2"])
    assert rc == 0, err
    hyps = [h.split() for h in _tagged(out, "H")]
    assert len(hyps) == len(want) == 23
    assert [h[:2] for h in hyps] == want
    assert [h.split()[:2] for h in _tagged(free, "H")] != want  # the prefix changed what the model outputs
    assert [len(p.split()) for p in _tagged(out, "P")] == [len(h) + 1 for h in hyps]

"""nmt-average-checkpoints: element-wise mean, float64 accumulation, dtype kept, selection of the last N."""
from __future__ import annotations

import pytest
import torch

from nmt_toolkit.cli import average_checkpoints as avg_cli
from nmt_toolkit.training.averaging import average_checkpoints, select_checkpoints
from nmt_toolkit.checkpoints import save_checkpoint


def _ck(path, seed, dtype=torch.float32, extra=None):
    g = torch.Generator().manual_seed(seed)
    model = {"enc.weight": torch.randn(4, 3, generator=g).to(dtype), "dec.bias": torch.randn(5, generator=g).to(dtype),
             "steps": torch.tensor([7])}
    if extra:
        model.update(extra)
    save_checkpoint({"model": model, "config": {"components": {"model": "transformer"}, "model": {"embed_dim": 3}},
                     "optimizer": {"state": {"x": torch.ones(3)}}, "version": 1,
                     "train_state": {"epoch": seed, "num_updates": 100 * seed}}, str(path))
    return model


def test_average_of_two_is_elementwise_mean(tmp_path):
    a, b = _ck(tmp_path / "a.pt", 1), _ck(tmp_path / "b.pt", 2)
    out = tmp_path / "avg.pt"
    assert avg_cli.run(["--inputs", f"{tmp_path / 'a.pt'},{tmp_path / 'b.pt'}", "--output", str(out)]) == 0
    state = torch.load(out, weights_only=True)
    for k in ("enc.weight", "dec.bias"):
        torch.testing.assert_close(state["model"][k], (a[k] + b[k]) / 2)
    assert torch.equal(state["model"]["steps"], a["steps"])
    assert state["config"] == {"components": {"model": "transformer"}, "model": {"embed_dim": 3}}
    assert "optimizer" not in state


def test_inputs_take_fairseqs_space_separated_spelling(tmp_path):
    """``--inputs a.pt b.pt c.pt`` (fairseq's average_checkpoints.py) averages all three."""
    models = [_ck(tmp_path / f"s{i}.pt", i + 1) for i in range(3)]
    out = tmp_path / "avg.pt"
    argv = ["--inputs"] + [str(tmp_path / f"s{i}.pt") for i in range(3)] + ["--output", str(out)]
    assert avg_cli.run(argv) == 0
    state = torch.load(out, weights_only=True)
    torch.testing.assert_close(state["model"]["dec.bias"], sum(m["dec.bias"] for m in models) / 3)


def test_float64_accumulation_and_dtype(tmp_path):
    paths = []
    for i in range(3):
        _ck(tmp_path / f"h{i}.pt", i + 1, dtype=torch.float16)
        paths.append(str(tmp_path / f"h{i}.pt"))
    state = average_checkpoints(paths)
    models = [torch.load(p, weights_only=True)["model"] for p in paths]
    expect = sum(m["enc.weight"].double() for m in models) / 3
    assert state["model"]["enc.weight"].dtype == torch.float16
    assert torch.equal(state["model"]["enc.weight"], expect.half())


def test_mismatch_names_checkpoint_and_tensor(tmp_path):
    _ck(tmp_path / "a.pt", 1)
    _ck(tmp_path / "b.pt", 2, extra={"enc.weight": torch.zeros(2, 2)})
    with pytest.raises(Exception) as err:
        average_checkpoints([str(tmp_path / "a.pt"), str(tmp_path / "b.pt")])
    assert "b.pt" in str(err.value) and "enc.weight" in str(err.value)


def test_select_last_n_by_update_and_epoch(tmp_path):
    for e, u in ((1, 100), (1, 200), (2, 1000), (2, 300)):
        _ck(tmp_path / f"checkpoint_{e}_{u}.pt", 1)
    for e in (1, 2, 10):
        _ck(tmp_path / f"checkpoint{e}.pt", 1)
    names = [p.rsplit("/", 1)[1] for p in select_checkpoints(str(tmp_path), num_update_checkpoints=3)]
    assert names == ["checkpoint_1_200.pt", "checkpoint_2_300.pt", "checkpoint_2_1000.pt"]
    names = [p.rsplit("/", 1)[1] for p in select_checkpoints(str(tmp_path), num_epoch_checkpoints=2)]
    assert names == ["checkpoint2.pt", "checkpoint10.pt"]
    out = tmp_path / "avg.pt"
    assert avg_cli.run(["--inputs", str(tmp_path), "--num-update-checkpoints", "2", "--output", str(out)]) == 0
    assert avg_cli.run(["--inputs", str(tmp_path), "--num-update-checkpoints", "9", "--output", str(out)]) == 1


def _one_error_line(capsys, *words):
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    for w in words:
        assert w in err[0], (w, err[0])


def test_unwritable_output_and_user_dir_are_one_line_errors(tmp_path, capsys, monkeypatch):
    """--output as a folder, inside a file or where nothing can be written is one error line, no traceback;
    --user-dir is imported as in every program (a plugin with a syntax error is an error)."""
    from nmt_toolkit import outputs

    _ck(tmp_path / "a.pt", 1)
    inputs = ["--inputs", str(tmp_path / "a.pt")]
    (tmp_path / "afile").write_text("x\n")
    for output, words in ((tmp_path, ("is a folder",)), (tmp_path / "afile" / "avg.pt", ("afile", "not a folder"))):
        assert avg_cli.run(inputs + ["--output", str(output)]) == 1
        _one_error_line(capsys, "--output", *words)

    def denied(*a, **k):  # the tests may run as root, for whom chmod 0o500 denies nothing
        raise PermissionError(13, "Permission denied")

    with monkeypatch.context() as patch:
        patch.setattr(outputs.tempfile, "mkdtemp", denied)
        assert avg_cli.run(inputs + ["--output", str(tmp_path / "ro" / "avg.pt")]) == 1
    _one_error_line(capsys, "--output", "cannot write there (Permission denied)")
    broken = tmp_path / "plugin.py"
    broken.write_text("def oops(:\n")
    assert avg_cli.run(["--user-dir", str(broken)] + inputs + ["--output", str(tmp_path / "avg.pt")]) == 2
    _one_error_line(capsys, "plugin.py", "SyntaxError")
    assert not (tmp_path / "avg.pt").exists()



def test_checkpoint_upper_bound_keeps_later_checkpoints_out(tmp_path, capsys):
    """fairseq's rule: with --num-*-checkpoints N --checkpoint-upper-bound B, the last N numbered <= B are averaged
    (B itself included); the average is the mean of exactly those files, worked out here from their tensors."""
    models = {}
    for e, u in ((1, 100), (1, 200), (2, 300), (2, 400), (3, 500)):
        models[f"checkpoint_{e}_{u}.pt"] = _ck(tmp_path / f"checkpoint_{e}_{u}.pt", u)
    for e in (1, 2, 3, 4):
        models[f"checkpoint{e}.pt"] = _ck(tmp_path / f"checkpoint{e}.pt", 10 + e)
    names = [p.rsplit("/", 1)[1] for p in select_checkpoints(str(tmp_path), num_update_checkpoints=2, upper_bound=300)]
    assert names == ["checkpoint_1_200.pt", "checkpoint_2_300.pt"]
    names = [p.rsplit("/", 1)[1] for p in select_checkpoints(str(tmp_path), num_epoch_checkpoints=2, upper_bound=3)]
    assert names == ["checkpoint2.pt", "checkpoint3.pt"]
    out = tmp_path / "avg.pt"
    assert avg_cli.run(["--inputs", str(tmp_path), "--num-update-checkpoints", "3", "--checkpoint-upper-bound", "450",
                        "--output", str(out)]) == 0
    got = torch.load(out, weights_only=True)["model"]["enc.weight"]
    want = sum(models[n]["enc.weight"].double() for n in ("checkpoint_1_200.pt", "checkpoint_2_300.pt",
                                                          "checkpoint_2_400.pt")) / 3
    assert torch.equal(got, want.float())
    capsys.readouterr()
    # fewer than N at or below the bound: an error that says so, not an average of fewer files
    assert avg_cli.run(["--inputs", str(tmp_path), "--num-epoch-checkpoints", "3", "--checkpoint-upper-bound", "2",
                        "--output", str(out)]) == 1
    _one_error_line(capsys, "asked for the last 3 checkpoint<epoch>.pt files but found 2 (<= 2)")


def _refused(argv, capsys, *names):
    assert avg_cli.run([str(a) for a in argv]) != 0
    err = [line for line in capsys.readouterr().err.splitlines() if ": error:" in line]
    assert len(err) == 1 and all(n in err[0] for n in names), err
    return err[0]


def test_an_existing_output_is_kept_without_overwrite(tmp_path, capsys):
    _ck(tmp_path / "a.pt", 1), _ck(tmp_path / "b.pt", 2)
    out = tmp_path / "avg.pt"
    out.write_bytes(b"keep me")
    _refused(["--inputs", f"{tmp_path / 'a.pt'},{tmp_path / 'b.pt'}", "--output", out], capsys, str(out),
             "--overwrite")
    assert out.read_bytes() == b"keep me"
    # --overwrite replaces only a checkpoint: a file of the user's stays, even then
    assert avg_cli.run(["--inputs", f"{tmp_path / 'a.pt'},{tmp_path / 'b.pt'}", "--output", str(out),
                        "--overwrite"]) == 1
    _one_error_line(capsys, f"--output {out}", "exists and is not a checkpoint")
    assert out.read_bytes() == b"keep me"
    _ck(out, 3)  # an earlier average
    assert avg_cli.run(["--inputs", f"{tmp_path / 'a.pt'},{tmp_path / 'b.pt'}", "--output", str(out),
                        "--overwrite"]) == 0
    a, b = (torch.load(tmp_path / n, weights_only=True)["model"]["enc.weight"] for n in ("a.pt", "b.pt"))
    assert torch.allclose(torch.load(out, weights_only=True)["model"]["enc.weight"], (a + b) / 2)


@pytest.mark.parametrize("spelling", ["same", "dot", "symlink"])
def test_an_input_is_never_the_output_even_with_overwrite(tmp_path, capsys, monkeypatch, spelling):
    _ck(tmp_path / "a.pt", 1), _ck(tmp_path / "b.pt", 2)
    before = (tmp_path / "b.pt").read_bytes()
    monkeypatch.chdir(tmp_path)
    out = {"same": str(tmp_path / "b.pt"), "dot": "./sub/../b.pt", "symlink": str(tmp_path / "link.pt")}[spelling]
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.pt").symlink_to(tmp_path / "b.pt")
    _refused(["--inputs", f"{tmp_path / 'a.pt'},{tmp_path / 'b.pt'}", "--output", out, "--overwrite"], capsys,
             out, "input")
    assert (tmp_path / "b.pt").read_bytes() == before


def test_an_input_holding_nan_is_refused_by_name(tmp_path, capsys):
    _ck(tmp_path / "a.pt", 1)
    _ck(tmp_path / "nan.pt", 2, extra={"dec.w2": torch.tensor([1.0, float("nan")])})
    _ck(tmp_path / "a.pt", 1, extra={"dec.w2": torch.tensor([1.0, 2.0])})
    line = _refused(["--inputs", f"{tmp_path / 'a.pt'},{tmp_path / 'nan.pt'}", "--output", tmp_path / "avg.pt"],
                    capsys, str(tmp_path / "nan.pt"), "dec.w2")
    assert "NaN" in line
    assert not (tmp_path / "avg.pt").exists()

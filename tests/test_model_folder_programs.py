"""Model folders through the programs: nmt-export --format folder writes one from a checkpoint and its data-bin,
and nmt-generate, nmt-interactive, nmt-export and the Translator take it as --path with no data-bin, giving
what the data-bin route gives on the same model."""
from __future__ import annotations

import torch

from nmt_toolkit.model_folder import read_model_folder


def _export(trained, out, *extra):
    from nmt_toolkit.cli.export import run as export

    return export([str(trained.data), "--path", str(trained.first), "--format", "folder", "--output-dir", str(out),
                   *extra])


def test_export_folder_holds_the_checkpoint_and_the_data_bin(trained_translation, tmp_path):
    out = tmp_path / "model"
    assert _export(trained_translation, out) == 0
    folder = read_model_folder(str(out))
    state = torch.load(trained_translation.first, map_location="cpu", weights_only=True)
    weights = folder.state_dict()
    assert set(weights) == set(state["model"])
    assert all(torch.equal(weights[k], v) for k, v in state["model"].items())
    assert folder.config["components"]["arch"] == state["config"]["components"]["arch"]
    assert folder.config["model"] == state["config"]["model"]
    assert (out / "spm.model").read_bytes() == (trained_translation.data / "spm.model").read_bytes()
    assert (out / "dict.en.txt").read_text() == (trained_translation.data / "dict.en.txt").read_text()
    assert oct((out / "model.safetensors").stat().st_mode & 0o777) != oct(0o600)


def test_export_folder_refuses_a_non_empty_output_dir(trained_translation, tmp_path, capsys):
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert _export(trained_translation, out) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"--output-dir {out}: exists and is not empty (pass --overwrite to replace it)")
    assert (out / "keep.txt").read_text() == "mine"
    assert _export(trained_translation, out, "--overwrite") == 0
    assert not (out / "keep.txt").exists()

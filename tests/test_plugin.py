"""The example plugin (examples/plugin): found through --user-dir and through the entry-point group,
its options shown in --help, and trained for a few updates."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
PLUGIN = REPO / "examples" / "plugin"
USER_DIR = PLUGIN / "my_plugin"
SELECT = ["--arch", "glu_transformer_tiny", "--criterion", "focal_cross_entropy", "--lr-scheduler", "linear_decay"]
PLUGIN_FLAGS = ["--glu-gate", "--glu-bias", "--focal-gamma", "--focal-label-smoothing", "--decay-warmup-updates",
                "--decay-total-updates", "--decay-final-lr-scale"]


def _nmt(program: str, *args, env_extra=None, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(env_extra or {})
    code = f"import sys; from nmt_toolkit.cli.{program} import main; sys.argv[0] = 'nmt-{program}'; main()"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd or REPO, timeout=600)


@pytest.mark.slow
def test_user_dir_options_appear_in_help():
    proc = _nmt("train", "--user-dir", USER_DIR, *SELECT, "--help")
    assert proc.returncode == 0, proc.stderr
    for flag in PLUGIN_FLAGS:
        assert flag in proc.stdout, flag
    assert "--embed-dim" in proc.stdout  # the built-in model options are inherited


@pytest.mark.slow
def test_without_the_plugin_its_names_are_unknown():
    proc = _nmt("train", "--arch", "glu_transformer_tiny", "--help")
    assert proc.returncode == 2
    assert "glu_transformer_tiny" in proc.stderr


@pytest.mark.slow
def test_entry_point_discovery(tmp_path):
    """An installed distribution declaring the ``nmt_toolkit.plugins`` group is imported without --user-dir."""
    site = tmp_path / "site"
    shutil.copytree(USER_DIR, site / "my_plugin")
    dist = site / "nmt_toolkit_my_plugin-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nmt-toolkit-my-plugin\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[nmt_toolkit.plugins]\nmy_plugin = my_plugin\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    proc = _nmt("train", *SELECT, "--help", env_extra=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for flag in PLUGIN_FLAGS:
        assert flag in proc.stdout, flag


def test_pyproject_declares_the_entry_point():
    text = (PLUGIN / "pyproject.toml").read_text()
    assert '[project.entry-points."nmt_toolkit.plugins"]' in text
    assert 'my_plugin = "my_plugin"' in text


@pytest.mark.slow
def test_train_a_few_updates_through_user_dir(tmp_path):
    sys.path.insert(0, str(REPO / "examples" / "quickstart"))
    try:
        import make_task
    finally:
        sys.path.pop(0)
    make_task.make_task(str(tmp_path / "raw"), {"train": 300, "valid": 20, "test": 20}, seed=5)
    bin_dir, save_dir = tmp_path / "bin", tmp_path / "ckpt"
    proc = _nmt("preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", tmp_path / "raw" / "train",
                "--validpref", tmp_path / "raw" / "valid", "--testpref", tmp_path / "raw" / "test",
                "--joined-dictionary", "--destdir", bin_dir)
    assert proc.returncode == 0, proc.stderr
    proc = _nmt("train", bin_dir, "--user-dir", USER_DIR, *SELECT, "--share-all-embeddings",
                "--glu-gate", "gelu", "--focal-gamma", "2.0", "--decay-warmup-updates", "2", "--lr", "1e-3",
                "--max-tokens", "1024", "--max-update", "4", "--save-dir", save_dir, "--no-epoch-checkpoints",
                "--log-format", "simple", "--log-interval", "1")
    assert proc.returncode == 0, proc.stderr
    ckpt = torch.load(save_dir / "checkpoint_last.pt", weights_only=True, map_location="cpu")
    components = ckpt["config"]["components"]
    assert components["model"] == "glu_transformer"
    assert components["criterion"] == "focal_cross_entropy"
    assert components["lr_scheduler"] == "linear_decay"
    assert ckpt["config"]["model"]["glu_gate"] == "gelu"
    assert any(".ffn.w_gate." in name for name in ckpt["model"])
    assert ckpt["train_state"]["num_updates"] == 4
    # the model generates with the plugin loaded (and its checkpoint keeps the plugin's model name)
    proc = _nmt("generate", bin_dir, "--user-dir", USER_DIR, "--path", save_dir / "checkpoint_last.pt",
                "--gen-subset", "test", "--beam", "2", "--max-len-a", "0", "--max-len-b", "10")
    assert proc.returncode == 0, proc.stderr
    assert sum(line.startswith("H-") for line in proc.stdout.splitlines()) == 20


def test_linear_decay_schedule_shape():
    sys.path.insert(0, str(PLUGIN))
    try:
        from my_plugin.linear_decay import LinearDecayConfig, LinearDecaySchedule
    finally:
        sys.path.pop(0)
    sched = LinearDecaySchedule(LinearDecayConfig(decay_warmup_updates=4, decay_total_updates=12,
                                                  decay_final_lr_scale=0.5), None, 1.0)
    lrs = [sched.lr_at(step) for step in range(14)]
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[11] == pytest.approx(0.5) and lrs[13] == pytest.approx(0.5)
    assert all(a >= b for a, b in zip(lrs[3:], lrs[4:]))

"""2 gloo processes == 1 process with --update-freq 2 (both launchers); a failing rank does not hang."""
import os
import subprocess
import sys

import pytest
import torch

from nmt_toolkit.cli.train import run as train
from nmt_toolkit.training.distributed import free_port
from tests.train_helpers import TINY, load, make_bin, max_diff

# --cpu: these ranks are gloo processes on the CPU, also on a machine with fewer GPUs than ranks
NODROP = ["--dropout", "0", "--attention-dropout", "0", "--max-update", "5", "--disable-validation", "--cpu"]


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_bin(tmp_path_factory.mktemp("tinyd"))


@pytest.fixture(scope="module")
def reference(tiny_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref")
    assert train([tiny_bin, *TINY, *NODROP, "--update-freq", "2", "--save-dir", str(out)]) == 0
    return load(out / "checkpoint_last.pt")


def test_spawned_world_size_2_equals_update_freq_2(tiny_bin, reference, tmp_path):
    assert train([tiny_bin, *TINY, *NODROP, "--distributed-world-size", "2", "--save-dir", str(tmp_path)]) == 0
    got = load(tmp_path / "checkpoint_last.pt")
    assert got["train_state"]["num_updates"] == 5
    assert max_diff(reference["model"], got["model"]) <= 1e-5


def test_torchrun_equals_update_freq_2(tiny_bin, tmp_path):
    # The reference runs as a fresh process with the ranks' OMP_NUM_THREADS: a CPU matrix product sums in an
    # order that depends on the thread count, and Adam turns a last-digit difference in a near-zero gradient
    # into ~5e-4 after 5 updates (seen on a 16-core machine, where a fresh process differs from this one).
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    ref = [sys.executable, "-m", "nmt_toolkit.cli.train", tiny_bin, *TINY, *NODROP, "--update-freq", "2",
           "--save-dir", str(tmp_path / "ref")]
    p = subprocess.run(ref, capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "nmt_toolkit.cli.train", tiny_bin, *TINY, *NODROP, "--save-dir", str(tmp_path / "ddp")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "world size 2 (gloo)" in p.stdout + p.stderr  # the log names the process group's backend
    want = load(tmp_path / "ref" / "checkpoint_last.pt")["model"]
    assert max_diff(want, load(tmp_path / "ddp" / "checkpoint_last.pt")["model"]) <= 1e-5


def test_a_failing_rank_fails_the_run(tiny_bin, tmp_path):
    # rank 1 cannot read its (missing) restore file: everyone must exit with an error, not hang
    cmd = [sys.executable, "-m", "nmt_toolkit.cli.train", tiny_bin, *TINY, *NODROP, "--distributed-world-size", "2",
           "--restore-file", str(tmp_path / "missing.pt"), "--save-dir", str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert p.returncode != 0 and "missing.pt" in p.stderr

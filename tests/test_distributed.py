"""2 gloo processes == 1 process with --update-freq 2 (both launchers, resumes across world sizes, uneven shards
at an epoch end); a failing rank does not hang."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

from nmt_toolkit.cli.train import run as train
from nmt_toolkit.training.distributed import free_port
from tests.train_helpers import TINY, load, make_bin, max_diff

# --cpu: these ranks are gloo processes on the CPU, also on a machine with fewer GPUs than ranks
NODROP = ["--dropout", "0", "--attention-dropout", "0", "--max-update", "5", "--disable-validation", "--cpu"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread_everywhere():
    """Ranks and references alike compute with one thread: a CPU matrix product sums in an order that depends
    on the thread count, and Adam turns a last-digit difference in a near-zero gradient into ~5e-4 after 5
    updates (seen on a 16-core machine), so on a many-core machine the spawned ranks (torch's default: one
    thread per core) and this process (the conftest's min(2, cores)) must not differ."""
    before = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")  # read by every process started from here (spawn, torchrun, -m)
        torch.set_num_threads(1)
        yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_bin(tmp_path_factory.mktemp("tinyd"))


@pytest.fixture(scope="module")
def reference(tiny_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref")
    assert train([tiny_bin, *TINY, *NODROP, "--update-freq", "2", "--save-dir", str(out)]) == 0
    return load(out / "checkpoint_last.pt")


@pytest.mark.slow
def test_spawned_world_size_2_equals_update_freq_2(tiny_bin, reference, tmp_path):
    assert train([tiny_bin, *TINY, *NODROP, "--distributed-world-size", "2", "--save-dir", str(tmp_path)]) == 0
    got = load(tmp_path / "checkpoint_last.pt")
    assert got["train_state"]["num_updates"] == 5
    assert max_diff(reference["model"], got["model"]) <= 1e-5


@pytest.mark.slow
def test_torchrun_equals_update_freq_2(tiny_bin, tmp_path):
    env = {**os.environ}  # OMP_NUM_THREADS=1 on both sides (_one_thread_everywhere)
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


@pytest.mark.slow
def test_a_failing_rank_fails_the_run(tiny_bin, tmp_path):
    # rank 1 cannot read its (missing) restore file: everyone must exit with an error, not hang
    cmd = [sys.executable, "-m", "nmt_toolkit.cli.train", tiny_bin, *TINY, *NODROP, "--distributed-world-size", "2",
           "--restore-file", str(tmp_path / "missing.pt"), "--save-dir", str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert p.returncode != 0 and "missing.pt" in p.stderr


@pytest.mark.slow
def test_resume_under_ddp_and_with_a_changed_world_size(tiny_bin, tmp_path):
    """2 ranks stopped at update 3 and resumed as 2 ranks, or as 1 process with --update-freq 2; and 1 process
    stopped at 3 resumed as 2 ranks: each ends where 1 process with --update-freq 2 for 6 updates ends.

    Rank r reads batches r, r+2, ... of the epoch, so 3 updates on 2 ranks consumed batches 0-5, as 3 updates
    of --update-freq 2 do; a resume on another world size must start at batch 6 (training.resume.reshard)."""
    six = [tiny_bin, *TINY, *NODROP, "--max-update", "6"]
    assert train([*six, "--update-freq", "2", "--save-dir", str(tmp_path / "ref")]) == 0
    want = load(tmp_path / "ref" / "checkpoint_last.pt")
    assert want["train_state"]["iterator"]["iterations_in_epoch"] == 12

    ddp3 = tmp_path / "ddp"
    assert train([*six, "--max-update", "3", "--distributed-world-size", "2", "--save-dir", str(ddp3)]) == 0
    assert load(ddp3 / "checkpoint_last.pt")["train_state"]["iterator"]["iterations_in_epoch"] == 3  # per rank
    shutil.copytree(ddp3, tmp_path / "ddp_to_1")
    assert train([*six, "--distributed-world-size", "2", "--save-dir", str(ddp3)]) == 0  # resume under DDP
    assert train([*six, "--update-freq", "2", "--save-dir", str(tmp_path / "ddp_to_1")]) == 0  # 2 ranks -> 1
    one3 = tmp_path / "one_to_2"
    assert train([*six, "--max-update", "3", "--update-freq", "2", "--save-dir", str(one3)]) == 0
    assert train([*six, "--distributed-world-size", "2", "--save-dir", str(one3)]) == 0  # 1 -> 2 ranks

    for folder, iterations in ((ddp3, 6), (tmp_path / "ddp_to_1", 12), (one3, 6)):
        got = load(folder / "checkpoint_last.pt")
        assert got["train_state"]["num_updates"] == 6, folder
        assert got["train_state"]["iterator"]["iterations_in_epoch"] == iterations, folder
        assert max_diff(want["model"], got["model"]) <= 1e-5, folder



@pytest.mark.slow
def test_uneven_shards_reach_the_epoch_end_under_ddp(tiny_bin, tmp_path):
    """--max-tokens 210 cuts an epoch into 15 batches: at the end of each epoch rank 1 has no batch of its own (it
    takes part with an empty one), where 1 process with --update-freq 2 makes its last update of one batch. Two
    epochs on 2 ranks end where that run ends, and past the epoch end both are in epoch 2 with 16 updates."""
    two_epochs = [tiny_bin, *TINY, *NODROP, "--max-update", "0", "--max-epoch", "2", "--max-tokens", "210"]
    assert train([*two_epochs, "--update-freq", "2", "--save-dir", str(tmp_path / "ref")]) == 0
    want = load(tmp_path / "ref" / "checkpoint_last.pt")
    assert (want["train_state"]["num_updates"], want["train_state"]["epoch"]) == (16, 2)  # 2 x ceil(15 / 2)
    assert train([*two_epochs, "--distributed-world-size", "2", "--save-dir", str(tmp_path / "ddp")]) == 0
    got = load(tmp_path / "ddp" / "checkpoint_last.pt")
    assert (got["train_state"]["num_updates"], got["train_state"]["epoch"]) == (16, 2)
    assert max_diff(want["model"], got["model"]) <= 1e-5


def test_reshard_rule():
    """k batches per rank on N ranks = k*N batches of the epoch read; on M ranks k*N // M each."""
    from nmt_toolkit.training.resume import reshard as _reshard

    state = {"epoch": 2, "iterations_in_epoch": 7, "shuffle": True}
    assert _reshard(state, 2, 2) is state
    assert _reshard(state, 2, 1) == {**state, "iterations_in_epoch": 14}
    assert _reshard(state, 1, 2) == {**state, "iterations_in_epoch": 3}  # batch 6 is read again, with a warning
    assert _reshard(state, 4, 8)["iterations_in_epoch"] == 3
    assert _reshard({**state, "iterations_in_epoch": 0}, 1, 2)["iterations_in_epoch"] == 0

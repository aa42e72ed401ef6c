"""Faults on the training side: kill -9 during training and inside a save, damaged checkpoint names, a full disk.

The reference is the same run never interrupted (``--max-update 14``, one process): after any fault,
running the same command again must end in exactly its state (model, optimizer, scheduler, iterator), every
``checkpoint*.pt`` on disk must load at every moment, and no temp file may survive the next start.

A killed process is a subprocess (``SIGKILL`` runs no cleanup, so the files are what a crash leaves). Kills
at exact points of a save come from a small wrapper around ``outputs.replace_file`` in the child
that SIGKILLs its own process: half-way through writing a temp file, or right after a rename (before the
copies to the other names). Kills at random moments come from the parent, at seeded random delays.
"""
import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from nmt_toolkit.cli.train import run as train
from nmt_toolkit import checkpoints as C
from tests.train_helpers import TINY, make_bin, same_state

MAX_UPDATE = 14
# a save after every update (so kills land in saves often), pruning, a best checkpoint every 4 updates
# (--cpu: bit-exact comparisons on a GPU machine too, where CUDA kernels need not be deterministic)
FLAGS = [*TINY, "--save-interval-updates", "1", "--keep-interval-updates", "2", "--validate-interval-updates", "4",
         "--keep-best-checkpoints", "2", "--log-format", "none", "--cpu"]

# Runs nmt-train; KILL_AT="<n>:<mid|after>" SIGKILLs this process inside the n-th atomic file write (1-based;
# config.yaml is the first): "mid" after half of the temp file's bytes are on disk, "after" once it is renamed.
CHILD = r"""
import io, os, signal, sys
from nmt_toolkit import outputs as O
n, phase = os.environ["KILL_AT"].split(":") if os.environ.get("KILL_AT") else ("0", "")
count = [0]
orig = O.replace_file

def killing(path, write, *a, **k):
    count[0] += 1
    if count[0] != int(n):
        return orig(path, write, *a, **k)
    if phase == "after":
        orig(path, write, *a, **k)
        os.kill(os.getpid(), signal.SIGKILL)

    def half(handle):
        buf = io.BytesIO()
        write(buf)
        data = buf.getvalue()
        handle.write(data[: len(data) // 2])
        handle.flush()
        os.fsync(handle.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    return orig(path, half, *a, **k)

if n != "0":
    O.replace_file = killing
from nmt_toolkit.cli.train import run
sys.exit(run(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_bin(tmp_path_factory.mktemp("tinyf"))


@pytest.fixture(scope="module")
def reference(tiny_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref")
    assert train([tiny_bin, *FLAGS, "--max-update", str(MAX_UPDATE), "--save-dir", str(out)]) == 0
    return C.load_checkpoint(str(out / "checkpoint_last.pt"))


def _env():
    # the child computes the updates the resumed run continues from: same thread count as this process
    return {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}


def _child(tiny_bin, save_dir, kill_at="", delay=None, preexec=None):
    """Run the child; with ``delay``, SIGKILL it that many seconds after its first "saved" log line (when the
    start-up is over and training is under way), or at once if it ends earlier. Returns (status, stderr,
    seconds from the first save to the end)."""
    cmd = [sys.executable, "-c", CHILD, tiny_bin, *FLAGS, "--max-update", str(MAX_UPDATE), "--save-dir", str(save_dir)]
    p = subprocess.Popen(cmd, env={**_env(), "KILL_AT": kill_at}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, preexec_fn=preexec)
    lines, first_save, done = [], None, None
    for line in p.stderr:
        lines.append(line)
        if first_save is None and " saved " in line:
            first_save = time.perf_counter()
            if delay is not None:
                threading.Timer(delay, p.send_signal, (signal.SIGKILL,)).start()  # no-op once it has ended
        if done is None and "done training" in line:
            done = time.perf_counter()
    rc = p.wait(timeout=240)
    return rc, "".join(lines), (done or time.perf_counter()) - (first_save or time.perf_counter())


def _temp_files(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".tmp") or f.endswith(".link"))


def _all_checkpoints_load(folder):
    names = sorted(f for f in os.listdir(folder) if f.startswith("checkpoint") and f.endswith(".pt"))
    for name in names:
        C.load_checkpoint(os.path.join(folder, name))  # raises DataError for a damaged file
    return names


def _resume_and_compare(tiny_bin, save_dir, reference):
    assert train([tiny_bin, *FLAGS, "--max-update", str(MAX_UPDATE), "--save-dir", str(save_dir)]) == 0
    assert _temp_files(save_dir) == []  # the next start cleaned what the kill left
    _all_checkpoints_load(save_dir)
    same_state(reference, C.load_checkpoint(str(save_dir / "checkpoint_last.pt")),
               ("num_updates", "iterator", "epoch", "best"))
    best = C.load_checkpoint(str(save_dir / "checkpoint_best.pt"))["train_state"]
    assert best["best"] == reference["train_state"]["best"]


# The atomic writes of the run: 1 config.yaml; update 1: 2 checkpoint_1_1.pt (torch.save), 3 checkpoint_last.pt
# (a copy); update 2: 4, 5; update 3: 6, 7; update 4 validates: 8 checkpoint_1_4.pt, 9 checkpoint_best.pt,
# 10 checkpoint.best_loss_*.pt, 11 checkpoint_last.pt; update 5: 12, 13 (then pruning). So: inside a torch.save,
# inside a copy to best, inside a copy to last, between the first name and its copies, between a save and pruning,
# and right after the save of a validation with a new best (the resume starts at update 4).
@pytest.mark.parametrize("kill_at, half_written", [("4:mid", "checkpoint_1_2.pt"), ("9:mid", "checkpoint_best.pt"),
                                                   ("11:mid", "checkpoint_last.pt"), ("8:after", None), ("11:after", None),
                                                   ("13:after", None)])
@pytest.mark.slow
def test_kill_inside_a_save_then_resume_is_exact(tiny_bin, reference, tmp_path, kill_at, half_written):
    rc, err, _ = _child(tiny_bin, tmp_path, kill_at=kill_at)
    assert rc == -signal.SIGKILL, err[-2000:]
    names = _all_checkpoints_load(tmp_path)  # no checkpoint is ever unreadable
    assert "checkpoint_last.pt" in names
    if half_written:  # the half-written temp file is there until the next start
        assert [f.split(".pt.")[0] + ".pt" for f in _temp_files(tmp_path)] == [half_written]
    _resume_and_compare(tiny_bin, tmp_path, reference)


@pytest.mark.slow
def test_kill_at_random_moments_then_resume_is_exact(tiny_bin, reference, tmp_path):
    rc, err, train_s = _child(tiny_bin, tmp_path / "timing")  # training time from its first save to its end
    assert rc == 0, err[-2000:]
    rng = random.Random(19)
    killed = 0
    for i in range(2):
        folder = tmp_path / f"k{i}"
        folder.mkdir()
        for _ in range(2):  # two kills of one run in a row: the second resumes what the first left
            rc, err, _ = _child(tiny_bin, folder, delay=rng.uniform(0.0, train_s))
            killed += rc == -signal.SIGKILL
            assert rc in (0, -signal.SIGKILL), err[-2000:]
            _all_checkpoints_load(folder)
        _resume_and_compare(tiny_bin, folder, reference)
    assert killed >= 2, "the random kills came too late to test anything"


def test_damaged_checkpoint_last_leaves_the_other_names_intact(tiny_bin, reference, tmp_path, capsys):
    assert train([tiny_bin, *FLAGS, "--max-update", "8", "--save-dir", str(tmp_path)]) == 0
    others = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)
              if n.startswith("checkpoint") and n != "checkpoint_last.pt"}
    assert "checkpoint_1_7.pt" in others and "checkpoint_best.pt" in others
    # truncated (a full disk, a copy cut short): a one-line error naming it; the others still load
    with open(tmp_path / "checkpoint_last.pt", "r+b") as handle:
        handle.truncate(os.path.getsize(tmp_path / "checkpoint_last.pt") // 3)
    capsys.readouterr()
    assert train([tiny_bin, *FLAGS, "--max-update", str(MAX_UPDATE), "--save-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "checkpoint_last.pt: not a readable nmt_toolkit checkpoint" in err[-1]
    assert {n: (tmp_path / n).read_bytes() for n in others} == others
    for n in others:
        C.load_checkpoint(str(tmp_path / n))
    # overwritten by hand with an older checkpoint, as `cp` does (truncate and write the same inode)
    with open(tmp_path / "checkpoint_last.pt", "r+b") as handle:
        handle.truncate(0)
        handle.write(others["checkpoint_1_7.pt"])
    assert {n: (tmp_path / n).read_bytes() for n in others} == others
    assert C.load_checkpoint(str(tmp_path / "checkpoint_best.pt"))["train_state"]["num_updates"] == 8
    _resume_and_compare(tiny_bin, tmp_path, reference)  # resumes at update 7 and ends where the reference ends


def _limit_file_size(limit):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


@pytest.mark.slow
def test_disk_full_during_a_save_keeps_the_previous_checkpoint(tiny_bin, reference, tmp_path):
    assert train([tiny_bin, *FLAGS, "--max-update", "3", "--save-dir", str(tmp_path)]) == 0
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path) if n.endswith(".pt")}
    size = len(before["checkpoint_last.pt"])
    # files may grow to half a checkpoint: config.yaml and the logs fit, the next checkpoint does not
    rc, err, _ = _child(tiny_bin, tmp_path, preexec=_limit_file_size(size // 2))
    lines = err.strip().splitlines()
    assert rc == 1, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    # the log's tail on failure (seen once on a loaded machine, naming checkpoint_best.pt instead: keep the evidence)
    assert lines[-1].startswith("nmt-train: error: ") and lines[-1].endswith(
        "checkpoint_1_4.pt: writing the checkpoint failed: File too large"), err[-3000:]
    assert _temp_files(tmp_path) == []
    assert {n: (tmp_path / n).read_bytes() for n in before} == before  # nothing already written is touched
    _resume_and_compare(tiny_bin, tmp_path, reference)


def _preprocess(dest, prefix, preexec=None, *extra):
    cmd = [sys.executable, "-m", "nmt_toolkit.cli.preprocess", "--source-lang", "xx", "--target-lang", "yy",
           "--trainpref", str(prefix), "--validpref", str(prefix), "--destdir", str(dest), "--workers", "1",
           "--no-progress-bar", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), preexec_fn=preexec, timeout=240)


def _files(folder):
    return {p: (folder / p).read_bytes() for p in sorted(os.listdir(folder))}


def test_disk_full_during_binarization_leaves_the_folder_as_it_was(tmp_path):
    """A file-size limit (RLIMIT_FSIZE: EFBIG, what a full disk does to a writer) while nmt-preprocess binarizes:
    one line naming --destdir, exit 1; a new --destdir is not created half-way, an existing one keeps every byte
    (with --overwrite too), no staging or trash folder is left beside it, and the same command with room to write
    succeeds and gives a loadable data-bin."""
    from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask

    rng = random.Random(19)
    words = [f"w{i}" for i in range(50)]
    for lang in ("xx", "yy"):  # ~60 KB per side: each .bin is larger than the limit below
        (tmp_path / f"big.{lang}").write_text(
            "".join(" ".join(rng.choice(words) for _ in range(12)) + "\n" for _ in range(4000)))
    limit = _limit_file_size(16 << 10)
    dest = tmp_path / "bin"
    for extra in ((), ("--overwrite",)):
        before = _files(dest) if dest.exists() else None
        p = _preprocess(dest, tmp_path / "big", limit, *extra)
        lines = [line for line in p.stderr.splitlines() if line.strip()]
        assert p.returncode == 1 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
        assert lines[0].startswith("nmt-preprocess: error: --destdir ") and "File too large" in lines[0], lines[0]
        assert "was left as it was" in lines[0], lines[0]
        if before is None:
            assert not dest.exists()
        else:
            assert _files(dest) == before
        assert sorted(os.listdir(tmp_path)) == ["big.xx", "big.yy"] + (["bin"] if before is not None else [])
        if before is None:  # an earlier, smaller data-bin for the --overwrite round
            (tmp_path / "small.xx").write_text("w1 w2\nw3\n")
            (tmp_path / "small.yy").write_text("w2 w1\nw3\n")
            assert _preprocess(dest, tmp_path / "small").returncode == 0
            os.remove(tmp_path / "small.xx"), os.remove(tmp_path / "small.yy")
    p = _preprocess(dest, tmp_path / "big", None, "--overwrite")
    assert p.returncode == 0, p.stderr[-2000:]
    task = TranslationTask.setup_task(TranslationConfig(data=str(dest)))
    assert len(task.load_dataset("train")) == len(task.load_dataset("valid")) == 4000


@pytest.mark.slow
def test_kill_during_binarization_then_the_next_run_removes_the_staging_folder(tmp_path):
    """kill -9 while nmt-preprocess binarizes leaves its staging folder beside --destdir (nothing runs at a
    SIGKILL); the next run into that --destdir removes it, and keeps a staging folder whose process still runs."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(200)]
    for lang in ("xx", "yy"):  # large enough that binarizing takes a while after the staging folder appears
        (tmp_path / f"big.{lang}").write_text(
            "".join(" ".join(rng.choice(words) for _ in range(20)) + "\n" for _ in range(150_000)))
    dest = tmp_path / "bin"
    cmd = [sys.executable, "-m", "nmt_toolkit.cli.preprocess", "--source-lang", "xx", "--target-lang", "yy",
           "--trainpref", str(tmp_path / "big"), "--destdir", str(dest), "--workers", "1", "--no-progress-bar"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and \
                not [p for p in os.listdir(tmp_path) if p.startswith(".bin.tmp-")]:
            time.sleep(0.005)
        assert proc.poll() is None, "nmt-preprocess finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    left = [p for p in os.listdir(tmp_path) if p.startswith(".bin.tmp-")]
    assert len(left) == 1 and not dest.exists()
    running = tmp_path / f".bin.tmp-{os.getpid()}-another-run"  # a run in progress (this process is alive)
    running.mkdir()
    (tmp_path / "small.xx").write_text("w1 w2\nw3\n")
    (tmp_path / "small.yy").write_text("w2 w1\nw3\n")
    p = _preprocess(dest, tmp_path / "small")
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"removed {tmp_path / left[0]}, left by a run that was interrupted" in p.stderr
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(".")) == [running.name]

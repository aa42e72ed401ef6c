"""``--log-format tqdm``: a training run shows, while it trains, how far it is towards its budget.

The budget arithmetic is checked against numbers worked by hand on a fake clock; the display is checked on
real ``nmt-train`` output, read line by line while the process still runs (a log file or pipe) and through a
pseudo-terminal (the bar redrawn in place).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from nmt_toolkit.training import progress as progress_mod
from nmt_toolkit.training.progress import Budget

from train_helpers import make_bin

# a very small model, so 40 updates take about a second on a CPU
FLAGS = ["--arch", "transformer_tiny", "--embed-dim", "32", "--ffn-embed-dim", "64", "--encoder-layers", "1",
         "--decoder-layers", "1", "--attention-heads", "2", "--max-tokens", "200", "--optimizer", "adam",
         "--lr", "1e-3", "--seed", "3", "--no-epoch-checkpoints", "--cpu"]


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_bin(tmp_path_factory.mktemp("tinyp"))


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_budget_fraction_and_time_left_worked_by_hand(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(progress_mod.time, "perf_counter", clock)
    # --max-update 100 --stop-time-hours 1/60 (60 s): after 10 s and 5 updates the clock binds
    b = Budget(max_update=100, stop_time_hours=1 / 60)
    b.start_epoch(1, 50, 0)
    clock.now += 10
    for _ in range(5):
        b.advance(1, b.updates + 1)
    assert b.done() == pytest.approx(10 / 60)  # max(5/100, 10/60)
    assert b.left() == pytest.approx(50.0)  # min(60 - 10, 10 s * 0.95 / 0.05 = 190 s)
    assert b.describe(3.25) == "update 5/100 | epoch 1 | 0:10 of 1:00 | loss 3.250 | 0:50 left"
    # updates bind: 95 updates in 40 s more -> 100 in 50 s, i.e. 5 updates (2.5 s) left
    clock.now += 40
    for _ in range(90):
        b.advance(1, b.updates + 1)
    assert b.done() == pytest.approx(0.95)
    assert b.left() == pytest.approx(50 * 0.05 / 0.95)
    # a resumed run (50 updates and 1000 s before) is timed on its own pace: 10 updates in 20 s -> 80 s left
    r = Budget(max_update=100, num_updates=50, elapsed=1000.0)
    r.start_epoch(3, 40, 20)
    clock.now += 20
    for _ in range(10):
        r.advance(1, r.updates + 1)
    assert r.done() == pytest.approx(0.6)
    assert r.left() == pytest.approx(80.0)
    assert r.describe(None) == "update 60/100 | epoch 3 | 17:00 elapsed | 1:20 left"
    # --max-epoch 4 with 40 batches an epoch: epoch 2, 10 batches into it = (1 + 10/40) / 4
    e = Budget(max_epoch=4)
    e.start_epoch(2, 40, 0)
    clock.now += 25
    for _ in range(10):
        e.advance(1, e.updates + 1)
    assert e.done() == pytest.approx(1.25 / 4)
    assert e.left() == pytest.approx(25 * (1 - 1.25 / 4) / (0.25 / 4))
    # no limit at all: no fraction, no estimate
    n = Budget()
    n.start_epoch(1, 10, 0)
    n.advance(1, 1)
    assert n.done() is None and n.left() is None
    assert n.describe(None).endswith("elapsed")


def test_budget_says_how_far_the_time_limit_lets_the_updates_go(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(progress_mod.time, "perf_counter", clock)
    # --max-update 1200 --stop-time-hours 1/6 (10 min): 100 updates in the first 100 s, so the time limit ends
    # the run after 100 + 500 s at 1 update/s = 600 updates, half the budget
    b = Budget(max_update=1200, stop_time_hours=1 / 6)
    b.start_epoch(1, 200, 0)
    clock.now += 100
    for _ in range(100):
        b.advance(1, b.updates + 1)
    assert b.updates_by_time_limit() == pytest.approx(600)
    assert b.describe(2.5) == ("update 100/1200 | epoch 1 | 1:40 of 10:00 | loss 2.500 | 8:20 left | "
                               "~600 of 1200 updates by the time limit")
    # fast enough: 1100 updates more in the next 100 s reach the budget well before the limit
    clock.now += 100
    for _ in range(1100):
        b.advance(1, b.updates + 1)
    assert b.updates_by_time_limit() is None
    assert b.describe(None).endswith(" left")
    # too few updates measured to tell (the first ones include the start-up): nothing said yet
    early = Budget(max_update=1200, stop_time_hours=1 / 6)
    early.start_epoch(1, 200, 0)
    clock.now += 30
    for _ in range(3):
        early.advance(1, early.updates + 1)
    assert early.updates_by_time_limit() is None


def _train_cmd(tiny_bin, tmp_path, *extra):
    return [sys.executable, "-m", "nmt_toolkit.cli.train", tiny_bin, *FLAGS, "--save-dir", str(tmp_path / "ck"),
            *extra]


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", COLUMNS="120")


@pytest.mark.slow
def test_log_file_gets_progress_lines_while_training_runs(tiny_bin, tmp_path):
    """stderr a pipe: plain ``progress |`` lines arrive while nmt-train still runs, at most one per 5%."""
    cmd = _train_cmd(tiny_bin, tmp_path, "--max-update", "40", "--log-format", "tqdm", "--log-interval", "10")
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=_env())
    lines, while_running = [], []
    for line in proc.stderr:
        lines.append(line.rstrip("\n"))
        if line.startswith("progress |"):
            while_running.append(proc.poll() is None)
    assert proc.wait() == 0, "\n".join(lines[-30:])
    progress = [l for l in lines if l.startswith("progress |")]
    assert progress and all(while_running), lines
    updates = [int(re.search(r"update (\d+)/40 ", l).group(1)) for l in progress]
    assert updates[0] == 1 and updates == sorted(updates) and len(updates) <= 21, progress
    # after the first interval read (update 10) the lines show its loss, and the time left
    assert any(re.search(r"update (1\d|2\d|3\d)/40 \| epoch \d+ \| [\d:]+ elapsed \| loss [\d.]+ \| [\d:]+ left$", l)
               for l in progress), progress
    # the loss shown is the one of the latest interval line (read from the device only at log intervals)
    last_loss = None
    for line in lines:
        m = re.match(r"train_inner \| loss ([\d.]+) ", line)
        if m:
            last_loss = m.group(1)
        elif line.startswith("progress |"):
            shown = re.search(r"\| loss ([\d.]+) \|", line)
            assert (shown.group(1) if shown else None) == last_loss, line
    # a progress line comes before training ends, and the run's summary lines are all still there
    done = next(i for i, l in enumerate(lines) if l.startswith("done training"))
    assert lines.index(progress[0]) < done
    assert sum(l.startswith("train_inner |") for l in lines) == 4
    assert any(l.startswith("valid |") for l in lines)


@pytest.mark.slow
def test_no_flood_in_a_log_file(tiny_bin, tmp_path):
    """200 updates: still at most ~20 progress lines (one per 5% of the budget)."""
    proc = subprocess.run(_train_cmd(tiny_bin, tmp_path, "--max-update", "200", "--log-format", "tqdm",
                                     "--log-interval", "100", "--disable-validation", "--no-save"),
                          capture_output=True, text=True, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    progress = [l for l in proc.stderr.splitlines() if l.startswith("progress |")]
    assert 15 <= len(progress) <= 21, progress
    assert "\r" not in proc.stderr


@pytest.mark.slow
def test_terminal_bar_is_redrawn_in_place(tiny_bin, tmp_path):
    """stderr a terminal: one bar redrawn with carriage returns; summary lines are written above it."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    cmd = _train_cmd(tiny_bin, tmp_path, "--max-update", "40", "--log-format", "tqdm", "--log-interval", "10")
    proc = subprocess.Popen(cmd, stdout=slave, stderr=slave, env=_env())
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait() == 0, out[-3000:]
    text = out.decode("utf-8", "replace")
    assert "progress |" not in text  # no plain lines on a terminal
    redraws = re.findall(r"\r *(\d+)%\|[^|\r\n]*\| update (\d+)/40 \| epoch \d+ \| [\d:]+ elapsed([^\r\n]*)", text)
    assert len({u for _, u, _ in redraws}) >= 2, text[-3000:]
    assert redraws[-1][:2] == ("100", "40")
    assert any("loss" in rest and " left" in rest for _, _, rest in redraws)
    assert "train_inner |" not in text  # interval lines only update the bar, as in fairseq
    assert re.search(r"(^|\n|\r)valid \| epoch \d+ \| loss", text)  # summaries on lines of their own
    # log records (a save) go above the bar too, never into the middle of it
    assert re.search(r"\r\s*\r[^\r\n]*INFO \| nmt_toolkit.train \| saved", text), text[-3000:]

"""Training progress on stderr: ``--log-format tqdm|simple|json``, and optional TensorBoard.

A logger gets ``log(stats, tag, step)`` for interval lines and ``print(stats, tag, step)`` for end-of-epoch
and validation summaries. JSON lines carry prefixed keys (``train_loss``, ``valid_loss``…) plus ``tag``,
so a machine can grep them; the human formats show ``key value`` pairs. Under ``tqdm`` the logger also
shows how far the run is towards the limit that ends it (:class:`Budget`), so a long run is never silent.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Optional

from nmt_toolkit.criterions import derived_metrics
from nmt_toolkit.errors import UsageError
from nmt_toolkit.outputs import OutputKind, claim_folder
from nmt_toolkit.training.efficiency import mfu

#: what --tensorboard-logdir holds after a run: a folder of event files per tag (train, train_inner, valid…)
TENSORBOARD_LOGS = OutputKind("a TensorBoard log folder", markers=("train", "train_inner", "valid*"))

_PRECISION = {"loss": 3, "nll_loss": 3, "ppl": 2, "wps": 0, "ups": 2, "wpb": 1, "bsz": 1, "gnorm": 3, "clip": 3,
              "loss_scale": 4, "wall": 0, "mfu": 3, "gflops": 1}


def _fmt(key: str, value) -> str:
    if isinstance(value, float):
        if key == "lr":
            return f"{value:.4g}"
        p = _PRECISION.get(key)
        return f"{value:.{p}f}" if p is not None else f"{value:.4g}"
    return str(value)


def _clock(seconds: float) -> str:
    """``1:02:03`` / ``2:03``: a duration as people read it on a progress line."""
    seconds = max(int(round(seconds)), 0)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Budget:
    """How far a run is towards the limit that will end it, and how long the rest will take.

    The run stops at the first of ``--max-update``, ``--max-epoch`` and ``--stop-time-hours`` (0: no such
    limit), so the fraction done is the largest of the three fractions and the time left the smallest of the
    three estimates: the clock's own for the time limit, this process's pace so far for the others (from the
    first epoch it started, so a resumed run is not credited with the updates it loaded). Everything here is
    known on the host (the update count, batches of the epoch, the clock): no read of the device.
    """

    def __init__(self, max_update: int = 0, max_epoch: int = 0, stop_time_hours: float = 0.0,
                 num_updates: int = 0, elapsed: float = 0.0):
        self.max_update, self.max_epoch = max_update or 0, max_epoch or 0
        self.stop_seconds = (stop_time_hours or 0.0) * 3600
        self.updates = num_updates
        self.epoch, self.epoch_batches, self.epoch_done = 1, None, 0
        self.elapsed_before = elapsed
        self.t0 = time.perf_counter()
        self.anchor: Optional[tuple[float, dict]] = None  # (time, fractions) where this process started

    def elapsed(self) -> float:
        """Wall-clock seconds of the run, the time before a resume included (as --stop-time-hours counts)."""
        return self.elapsed_before + time.perf_counter() - self.t0

    def fractions(self) -> dict:
        out = {}
        if self.max_update:
            out["update"] = self.updates / self.max_update
        if self.max_epoch and self.epoch_batches:
            out["epoch"] = (self.epoch - 1 + self.epoch_done / self.epoch_batches) / self.max_epoch
        if self.stop_seconds:
            out["time"] = self.elapsed() / self.stop_seconds
        return out

    def start_epoch(self, epoch: int, batches: Optional[int], done: int) -> None:
        self.epoch, self.epoch_batches, self.epoch_done = epoch, batches, done
        if self.anchor is None:
            self.anchor = (time.perf_counter(), self.fractions())

    def advance(self, batches: int, num_updates: int) -> None:
        self.epoch_done += batches
        self.updates = num_updates

    def done(self) -> Optional[float]:
        """Fraction of the run done (0..1), None without any limit."""
        f = self.fractions()
        return min(max(f.values()), 1.0) if f else None

    def left(self) -> Optional[float]:
        """Estimated seconds to the end, None while unknown (no limit, or no progress to measure a pace on)."""
        estimates = []
        if self.stop_seconds:
            estimates.append(max(self.stop_seconds - self.elapsed(), 0.0))
        if self.anchor is not None:
            t_anchor, f_anchor = self.anchor
            spent = time.perf_counter() - t_anchor
            for key, f in self.fractions().items():
                if key != "time" and f > f_anchor.get(key, 0.0):
                    estimates.append(spent * max(1.0 - f, 0.0) / (f - f_anchor.get(key, 0.0)))
        return min(estimates) if estimates else None

    MIN_UPDATES_FOR_PACE = 10  # the first updates include the start-up: too few of them misjudge the pace

    def updates_by_time_limit(self) -> Optional[float]:
        """The update count the time limit will stop the run at, at this process's pace so far, when that falls
        short of ``--max-update``; None when the budget will be reached first, or while it cannot be told."""
        if not (self.max_update and self.stop_seconds) or self.anchor is None:
            return None
        t_anchor, f_anchor = self.anchor
        done_here = self.updates - f_anchor.get("update", 0.0) * self.max_update
        if done_here < self.MIN_UPDATES_FOR_PACE:
            return None
        pace = done_here / max(time.perf_counter() - t_anchor, 1e-9)  # updates per second
        reached = self.updates + pace * max(self.stop_seconds - self.elapsed(), 0.0)
        return reached if reached < self.max_update else None

    def describe(self, loss: Optional[float]) -> str:
        """``update 5/20 | epoch 1 | 0:12 elapsed | loss 8.247 | 0:36 left``, and when the time limit will
        stop the run short of its updates, how far it will get: ``~600 of 1200 updates by the time limit``."""
        parts = [f"update {self.updates}/{self.max_update}" if self.max_update else f"update {self.updates}",
                 f"epoch {self.epoch}/{self.max_epoch}" if self.max_epoch else f"epoch {self.epoch}",
                 f"{_clock(self.elapsed())} of {_clock(self.stop_seconds)}" if self.stop_seconds
                 else f"{_clock(self.elapsed())} elapsed"]
        if loss is not None:
            parts.append(f"loss {loss:.3f}")
        left = self.left()
        if left is not None:
            parts.append(f"{_clock(left)} left")
        reached = self.updates_by_time_limit()
        if reached is not None:
            parts.append(f"~{int(reached)} of {self.max_update} updates by the time limit")
        return " | ".join(parts)


class ProgressLogger:
    """Interval and summary lines, and under ``--log-format tqdm`` the run's progress towards its budget.

    With tqdm on a terminal, one bar for the whole run is redrawn in place (at most twice a second): the
    fraction of the budget done, updates (and epochs) of their limits, the loss of the latest log interval,
    the time left; summary lines are written above it, interval lines only update it (as in fairseq).
    When stderr is not a terminal (a log file, a pipe), the bar becomes plain ``progress | ...`` lines: after
    the first update, then each time another 5% of the budget is done or 10 minutes passed — at most ~20
    lines plus one per 10 minutes, whatever the speed — and interval lines are printed as with ``simple``.
    """

    LINE_EVERY = 0.05  # of the budget, between two plain progress lines
    LINE_AT_LEAST_EVERY = 600.0  # seconds
    REDRAW_EVERY = 0.5  # seconds, on a terminal

    def __init__(self, log_format: str = "simple", prefix: str = "", tensorboard_logdir: Optional[str] = None,
                 enabled: bool = True, stream=None):
        self.format = log_format
        self.prefix = prefix
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if hasattr(self.stream, "isatty") else False
        self.bar = None  # the tqdm bar on a terminal
        self.redirect = None  # logging_redirect_tqdm while the bar is shown
        self.budget: Optional[Budget] = None
        self.loss: Optional[float] = None  # at the latest interval read
        self.last_line: Optional[tuple[float, float]] = None  # (time, fraction) of the latest plain line
        self.last_draw = 0.0
        self.writers: dict = {}
        self.tb_dir = tensorboard_logdir if enabled else None
        if self.tb_dir:
            try:
                from torch.utils.tensorboard import SummaryWriter  # noqa: F401
            except ImportError:
                raise UsageError("--tensorboard-logdir needs the tensorboard package: pip install tensorboard "
                                 "(or pip install nmt_toolkit[tb])") from None
            claim_folder(self.tb_dir, TENSORBOARD_LOGS, f"--tensorboard-logdir {self.tb_dir}")

    def _tb(self, tag: str):
        if not self.tb_dir:
            return None
        if tag not in self.writers:
            import os
            from torch.utils.tensorboard import SummaryWriter
            self.writers[tag] = SummaryWriter(os.path.join(self.tb_dir, tag))
        return self.writers[tag]

    def _tb_write(self, stats: dict, tag: str, step: int) -> None:
        writer = self._tb(tag)
        if writer is None:
            return
        for k, v in stats.items():
            if isinstance(v, (int, float)):
                writer.add_scalar(k, v, step)
        writer.flush()

    @property
    def _shows_budget(self) -> bool:
        return self.enabled and self.format == "tqdm"

    def set_budget(self, max_update: int = 0, max_epoch: int = 0, stop_time_hours: float = 0.0,
                   num_updates: int = 0, elapsed: float = 0.0) -> None:
        """The limits that end the run, the updates already done and the wall time already spent (a resume)."""
        self.budget = Budget(max_update, max_epoch, stop_time_hours, num_updates, elapsed)

    def start_epoch(self, epoch: int, total: Optional[int], initial: int = 0) -> None:
        """``total`` batches in the epoch, ``initial`` of them already done (a resume in mid-epoch)."""
        if self.budget is None:
            self.budget = Budget()
        self.budget.start_epoch(epoch, total, initial)
        if self._shows_budget and self.tty and self.bar is None:
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            fmt = "{percentage:3.0f}%|{bar}| {desc}" if self.budget.done() is not None else "{desc}"
            self.bar = tqdm(total=1000, file=self.stream, bar_format=fmt, dynamic_ncols=True, leave=True,
                            mininterval=self.REDRAW_EVERY)
            self.redirect = logging_redirect_tqdm()  # log records above the bar, not through it
            self.redirect.__enter__()
            self._draw(force=True)

    def advance(self, n: int = 1, num_updates: Optional[int] = None) -> None:
        """``n`` batches done, ``num_updates`` the trainer's count after them (a host int: no device read)."""
        if self.budget is None:
            return
        self.budget.advance(n, self.budget.updates + 1 if num_updates is None else num_updates)
        if not self._shows_budget:
            return
        if self.bar is not None:
            self._draw()
        elif not self.tty:
            now, done = time.perf_counter(), self.budget.done()
            if (self.last_line is None or (done is not None and done - self.last_line[1] >= self.LINE_EVERY - 1e-9)
                    or now - self.last_line[0] >= self.LINE_AT_LEAST_EVERY):
                self.last_line = (now, done or 0.0)
                self._plain(self._progress_line())

    def _progress_line(self) -> str:
        done = self.budget.done()
        head = f"{self.prefix}progress | " + (f"{100 * done:3.0f}% | " if done is not None else "")
        return head + self.budget.describe(self.loss)

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last_draw < self.REDRAW_EVERY:
            return
        self.last_draw = now
        done = self.budget.done()
        self.bar.n = int(1000 * done) if done is not None else 0
        self.bar.set_description_str(self.budget.describe(self.loss), refresh=False)
        self.bar.refresh()

    def end_epoch(self) -> None:
        """Nothing to close: the bar spans the whole run (``close``)."""

    def _line(self, stats: dict, tag: str, step: int) -> str:
        if self.format == "json":
            record = {"tag": tag, "num_updates": step}
            record.update({f"{tag}_{k}" if not k.startswith(tag) else k: v for k, v in stats.items()})
            return json.dumps(record)
        head = f"{self.prefix}{tag} | " if tag else self.prefix
        return head + " | ".join(f"{k} {_fmt(k, v)}" for k, v in stats.items())

    def _plain(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def log(self, stats: dict, tag: str = "train_inner", step: int = 0) -> None:
        """An interval line (every --log-interval updates); on a terminal under tqdm only the bar shows it."""
        if not self.enabled:
            return
        self._tb_write(stats, tag, step)
        if isinstance(stats.get("loss"), float):
            self.loss = stats["loss"]
        if self.bar is not None:
            self._draw(force=True)
            return
        print(self._line(stats, tag, step), file=self.stream, flush=True)

    def print(self, stats: dict, tag: str = "train", step: int = 0) -> None:
        """A summary line (end of epoch, validation): always printed, also under tqdm."""
        if not self.enabled:
            return
        self._tb_write(stats, tag, step)
        self._plain(self._line(stats, tag, step))

    def message(self, text: str) -> None:
        if self.enabled:
            self._plain(text)

    def close(self) -> None:
        if self.bar is not None:
            self._draw(force=True)
            self.bar.close()
            self.bar = None
            self.redirect.__exit__(None, None, None)
            self.redirect = None
        for writer in self.writers.values():
            writer.close()


class Meter:
    """Sums of logged values over an interval; ``state_dict`` is plain for checkpoints."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.sums: dict[str, float] = {}
        self.count = 0
        self.start = time.perf_counter()
        self.elapsed_before = 0.0

    def add(self, values: dict, count: int = 1) -> None:
        """Add one update's values (``count=0``: values that are not an update's, e.g. a skipped one)."""
        self.count += count
        for k, v in values.items():
            self.sums[k] = self.sums.get(k, 0.0) + float(v)

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.start

    def state_dict(self) -> dict:
        return {"sums": dict(self.sums), "count": self.count, "elapsed": self.elapsed()}

    def load_state_dict(self, state: dict) -> None:
        self.sums = {k: float(v) for k, v in state.get("sums", {}).items()}
        self.count = int(state.get("count", 0))
        self.start = time.perf_counter()
        self.elapsed_before = float(state.get("elapsed", 0.0))


def train_stats(meter: Meter, lr: float, loss_scale: Optional[float], model, peak: Optional[float], world_size: int,
                wall: float) -> dict:
    """The values of a ``train_inner`` or ``train`` line from a meter's sums: losses per token (base 2), speed,
    batch sizes, the averaged gradient norm and clip rate, ``skipped`` updates when there were any, and the
    model's GFLOP/s (and ``mfu`` where the device has a peak; ``peak`` None: the CPU)."""
    s = meter.sums
    if not meter.count:  # every update of the interval was skipped: nothing to average
        return {"skipped": int(s.get("skipped", 0)), "lr": lr, "wall": wall}
    m = derived_metrics(s)
    elapsed = max(meter.elapsed(), 1e-9)
    count = max(meter.count, 1)
    wps = s.get("ntokens", 0.0) / elapsed
    out = {"loss": m["loss"], "nll_loss": m["nll_loss"], "ppl": m["ppl"], "wps": wps, "ups": count / elapsed,
           "wpb": s.get("ntokens", 0.0) / count, "bsz": s.get("nsentences", 0.0) / count,
           "lr": lr, "gnorm": s.get("gnorm", 0.0) / count, "clip": s.get("clip", 0.0) / count}
    if s.get("skipped"):
        out["skipped"] = int(s["skipped"])  # updates skipped as non-finite (or fp16 overflows)
    if loss_scale is not None:
        out["loss_scale"] = loss_scale
    tok_len = s.get("ntokens", 0.0) / max(s.get("nsentences", 1.0), 1.0)
    try:
        flops = 3 * model.flops_per_target_token(max(int(tok_len), 1), max(int(tok_len), 1))
        gflops = flops * wps / 1e9
        out["gflops"] = gflops
        ratio = mfu(gflops, peak, world_size)
        if ratio is not None:
            out["mfu"] = ratio
    except Exception:  # a plugin model without flops_per_target_token
        pass
    out["wall"] = wall
    return out

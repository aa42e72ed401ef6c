"""Training progress on stderr: ``--log-format tqdm|simple|json``, and optional TensorBoard.

A logger gets ``log(stats, tag, step)`` for interval lines and ``print(stats, tag, step)`` for end-of-epoch
and validation summaries. JSON lines carry prefixed keys (``train_loss``, ``valid_loss``…) plus ``tag``,
so a machine can grep them; the human formats show ``key value`` pairs.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Optional

from nmt_toolkit.criterions import derived_metrics
from nmt_toolkit.errors import UsageError
from nmt_toolkit.training.efficiency import mfu

_PRECISION = {"loss": 3, "nll_loss": 3, "ppl": 2, "wps": 0, "ups": 2, "wpb": 1, "bsz": 1, "gnorm": 3, "clip": 3,
              "loss_scale": 4, "wall": 0, "mfu": 3, "gflops": 1}


def _fmt(key: str, value) -> str:
    if isinstance(value, float):
        if key == "lr":
            return f"{value:.4g}"
        p = _PRECISION.get(key)
        return f"{value:.{p}f}" if p is not None else f"{value:.4g}"
    return str(value)


class ProgressLogger:
    def __init__(self, log_format: str = "simple", prefix: str = "", tensorboard_logdir: Optional[str] = None,
                 enabled: bool = True, stream=None):
        self.format = log_format
        self.prefix = prefix
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.bar = None
        self.writers: dict = {}
        self.tb_dir = tensorboard_logdir if enabled else None
        if self.tb_dir:
            try:
                from torch.utils.tensorboard import SummaryWriter  # noqa: F401
            except ImportError:
                raise UsageError("--tensorboard-logdir needs the tensorboard package: pip install tensorboard "
                                 "(or pip install nmt_toolkit[tb])") from None

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

    def start_epoch(self, epoch: int, total: Optional[int], initial: int = 0) -> None:
        if self.enabled and self.format == "tqdm":
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=initial, desc=f"epoch {epoch:03d}", file=self.stream,
                            leave=False, dynamic_ncols=True, mininterval=1.0)

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def end_epoch(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _line(self, stats: dict, tag: str, step: int) -> str:
        if self.format == "json":
            record = {"tag": tag, "num_updates": step}
            record.update({f"{tag}_{k}" if not k.startswith(tag) else k: v for k, v in stats.items()})
            return json.dumps(record)
        head = f"{self.prefix}{tag} | " if tag else self.prefix
        return head + " | ".join(f"{k} {_fmt(k, v)}" for k, v in stats.items())

    def log(self, stats: dict, tag: str = "train_inner", step: int = 0) -> None:
        """An interval line (every --log-interval updates)."""
        if not self.enabled:
            return
        self._tb_write(stats, tag, step)
        if self.bar is not None:
            self.bar.set_postfix({k: _fmt(k, v) for k, v in stats.items() if k in ("loss", "ppl", "wps", "lr", "gnorm")},
                                 refresh=False)
            return
        print(self._line(stats, tag, step), file=self.stream, flush=True)

    def print(self, stats: dict, tag: str = "train", step: int = 0) -> None:
        """A summary line (end of epoch, validation): always printed, also under tqdm."""
        if not self.enabled:
            return
        self._tb_write(stats, tag, step)
        line = self._line(stats, tag, step)
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def message(self, text: str) -> None:
        if self.enabled:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        self.end_epoch()
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

"""A real nmt-serve process on a loopback port, for the server tests: started as users start it (the installed
console script), waited for until /health answers, stopped with SIGTERM."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

import httpx

READY = re.compile(r"serving .+ on (http://\S+) \(engine")


class ServerProcess:
    """``nmt-serve DATA --path CK --cpu --threads 1 --port 0 *extra`` (no DATA when ``data`` is None: a model
    folder); ``url`` once ready, ``stderr`` as read."""

    def __init__(self, data, checkpoint, *extra: str, startup_timeout: float = 120.0):
        script = Path(sys.executable).parent / "nmt-serve"
        command = [str(script), *([] if data is None else [str(data)]), "--path", str(checkpoint), "--cpu",
                   "--threads", "1", "--port", "0", *map(str, extra)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "OMP_NUM_THREADS": "1"})
        self.lines: list[str] = []
        self.url: Optional[str] = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._wait_ready(startup_timeout)

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            found = READY.search(line)
            if found and self.url is None:
                self.url = found.group(1)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nmt-serve exited with {self.proc.returncode}:\n{self.stderr}")
            if self.url:
                try:
                    if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
            time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError(f"nmt-serve not ready after {timeout} s:\n{self.stderr}")

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def metrics(self) -> dict[str, float]:
        """The /metrics samples as ``{'name{labels}': value}`` (comments left out)."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit status (the process is killed if it does not end within ``timeout``)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self._reader.join(5)
        return status


def rss_kib(pid: int) -> int:
    """The resident memory of process ``pid`` (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def post_json(url: str, body, timeout: float = 60.0, headers: Optional[dict] = None) -> httpx.Response:
    return httpx.post(url, json=body, timeout=timeout, headers=headers)


def words(n: int, seed: int = 0) -> Sequence[str]:
    """``n`` short sentences over the trained model's words (tests/trained_model.py)."""
    import random

    from trained_model import sentences

    return sentences(random.Random(seed), n)

"""Where nmt-generate writes its lines: stdout, or a file in ``--results-path`` replaced only when the run
succeeds (both of its routes, the Translator's and the CTranslate2 text route, write through it)."""
from __future__ import annotations

import os
import sys

from nmt_toolkit.errors import DataError


def open_output(io, subset: str) -> "GenerateOutput":
    """Where nmt-generate's lines go: stdout, or ``--results-path``'s file for ``subset`` (this shard's)."""
    if not io.results_path:
        return GenerateOutput(sys.stdout, "stdout")
    from nmt_toolkit.outputs import ReplacingFile

    name = f"generate-{subset}.txt" if io.num_shards == 1 else \
        f"generate-{subset}.shard{io.shard_id}-of-{io.num_shards}.txt"
    path = os.path.join(io.results_path, name)
    return GenerateOutput(ReplacingFile(path), f"--results-path {path}")  # an earlier file is kept on error


class GenerateOutput:
    """Where the lines go. A failed write (a full disk) is one error naming the place, and a results file
    is discarded then, never left half-written beside the earlier one."""

    def __init__(self, handle, name: str):
        self.handle, self.name = handle, name

    def _do(self, method: str, *args):
        try:
            return getattr(self.handle, method)(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.discard()
            raise DataError(f"{self.name}: writing failed: {exc.strerror or exc}") from None

    def discard(self) -> None:
        if hasattr(self.handle, "discard"):
            self.handle.discard()

    def write(self, text: str) -> int:
        return self._do("write", text)

    def flush(self) -> None:
        self._do("flush")

    def close(self) -> None:
        self._do("flush" if self.handle is sys.stdout else "close")

"""What every bad-input test checks: the program refuses with one line naming the culprit, exits non-zero,
prints no traceback, and leaves every file it was given exactly as it was.

Two ways to run a program:

* :func:`run_in_process` calls the program's ``run(argv)`` (the same code ``main`` runs) and captures
  stderr: cheap enough for a matrix of hundreds of cases. An exception escaping ``run`` is a traceback a
  user would have seen, and fails the test with it.
* :func:`run_process` starts the installed console script as a real process: for crafted files (what the
  process does before it refuses matters) and for anything that touches process-wide state.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

#: program name -> module in nmt_toolkit.cli
PROGRAMS = {
    "nmt-preprocess": "preprocess", "nmt-train": "train", "nmt-generate": "generate",
    "nmt-interactive": "interactive", "nmt-average-checkpoints": "average_checkpoints", "nmt-score": "score",
    "nmt-export": "export", "nmt-convert": "convert", "nmt-translate-file": "translate_file",
}


@dataclass
class Result:
    status: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if ": error:" in line]


def run_in_process(prog: str, args: Sequence[str], stdin: str = "") -> Result:
    """``prog``'s ``run(args)`` in this process, with stdin/stdout/stderr captured."""
    module = importlib.import_module(f"nmt_toolkit.cli.{PROGRAMS[prog]}")
    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            import logging
            status = module.run([str(a) for a in args])
            for handler in logging.getLogger().handlers:  # run_cli points logging at the captured stderr
                handler.flush()
    finally:
        sys.stdin = old_stdin
    return Result(status, out.getvalue(), err.getvalue())


def program_path(prog: str) -> str:
    """The installed console script beside this interpreter (the virtual environment's bin/)."""
    path = pathlib.Path(sys.executable).parent / prog
    if not path.exists():
        raise FileNotFoundError(f"{prog} is not installed beside {sys.executable} (pip install -e .)")
    return str(path)


def run_process(prog: str, args: Sequence[str], cwd=None, env: Optional[dict] = None, stdin: str = "",
                timeout: float = 300) -> Result:
    """The installed ``prog`` as a real process."""
    proc = subprocess.run([program_path(prog), *[str(a) for a in args]], cwd=cwd, input=stdin, text=True,
                          capture_output=True, timeout=timeout, env={**os.environ, **(env or {})})
    return Result(proc.returncode, proc.stdout, proc.stderr)


def snapshot(*roots) -> dict[str, str]:
    """Every file under ``roots`` (files or folders) → sha256 of its bytes, with its mode bits."""
    found: dict[str, str] = {}
    for root in roots:
        root = pathlib.Path(root)
        paths: Iterable[pathlib.Path] = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for p in paths:
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            found[str(p)] = f"{digest} {oct(p.stat().st_mode & 0o7777)}"
        if root.is_dir():
            for p in root.rglob("*"):
                if p.is_dir():
                    found.setdefault(str(p) + "/", "dir")
    return found


def assert_refused(result: Result, *names: str, status: Optional[int] = None) -> str:
    """The program said no properly: exit status non-zero (or exactly ``status``), no traceback, exactly one
    ``prog: error: …`` line, and that line names each of ``names`` (an option, a file, a key). Returns it."""
    assert "Traceback (most recent call last)" not in result.stderr, result.stderr[-3000:]
    assert result.status != 0, f"exit status 0; stderr: {result.stderr[-2000:]}"
    if status is not None:
        assert result.status == status, (result.status, result.stderr[-2000:])
    lines = result.error_lines
    assert len(lines) == 1, f"expected one error line, got {len(lines)}: {result.stderr[-2000:]}"
    for name in names:
        assert name in lines[0], f"{name!r} not named in: {lines[0]}"
    return lines[0]


def assert_unchanged(before: dict[str, str], *roots) -> None:
    """Nothing under ``roots`` was created, removed or changed since ``before`` (a :func:`snapshot`)."""
    after = snapshot(*roots)
    created = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in before if k in after and before[k] != after[k])
    assert not (created or removed or changed), f"created {created}, removed {removed}, changed {changed}"


def tiny_trained_model(root) -> tuple:
    """``(root, data-bin, checkpoint)``: the tiny synthetic data-bin and a one-update model trained on it, for
    tests that need a real checkpoint to refuse inputs against (what it learned does not matter)."""
    from tests.train_helpers import TINY, make_bin

    data = make_bin(root)
    assert run_in_process("nmt-train", [data, *TINY, "--save-dir", root / "ck", "--max-update", "1"]).status == 0
    return root, data, root / "ck" / "checkpoint_last.pt"


#: the tiny Hugging Face Marian fixture (tests/fixtures/make_marian_fixtures.py); imported, a model folder
MARIAN_FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "marian" / "en-de"


def tiny_model_folder(root) -> pathlib.Path:
    """``root``, holding ``model`` (the Marian fixture imported: a model folder with sentencepiece models) and
    ``raw.en`` (two sentences), for tests that craft model folders and decode raw text with them."""
    from nmt_toolkit.importers.marian import import_marian

    root = pathlib.Path(root)
    import_marian(str(MARIAN_FIXTURE)).write(str(root / "model"))
    (root / "raw.en").write_text("A dog runs.\nTwo men talk.\n")
    return root


def record_in_manifest(folder, name: str) -> None:
    """A model folder crafted consistently, as a hostile one would be: its manifest records the size and sha256
    of the edited file ``name`` (when it records fingerprints), so a check of the content must refuse it."""
    folder = pathlib.Path(folder)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    if "files" in manifest:
        data = (folder / name).read_bytes()
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")

"""No code is compiled, downloaded or dlopen'ed at run time.

The package ships no native source or library, and a whole train → generate → interactive run, watched
through Python's audit hooks in a fresh interpreter, loads no shared object from the package (or from any
cache folder), starts no process (no compiler) and leaves no file under the package folder.
"""
from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

import nmt_toolkit

PACKAGE = pathlib.Path(nmt_toolkit.__file__).resolve().parent
CLI = (PACKAGE.parent / "cli").resolve()
NATIVE = {".c", ".cc", ".cpp", ".cu", ".h", ".so", ".dll", ".dylib", ".pyd", ".o"}
LOADERS = ("ctypes", "cffi", "cpp_extension", "load_inline", "dlopen", "CDLL", "load_library")
#: the one ctypes use: glibc's mallopt in the C library the process has already loaded (nmt-train's allocator)
SYSTEM_LIBRARIES = {"allocator.py": ['ctypes.CDLL("libc.so.6")']}


def test_the_package_holds_no_native_code_and_no_loader():
    for root in (PACKAGE, CLI):
        for path in root.rglob("*"):
            assert path.suffix not in NATIVE, path
            if path.suffix != ".py":
                continue
            text = path.read_text(encoding="utf-8")
            if path.name in SYSTEM_LIBRARIES and path.parent == PACKAGE:
                assert re.findall(r"ctypes\.CDLL\([^)]*\)", text) == SYSTEM_LIBRARIES[path.name]
                continue
            for word in LOADERS:
                assert word not in text, (path, word)


_WATCH = r"""
import json, os, sys
events = []
def hook(event, args):
    if event == "ctypes.dlopen":
        events.append(["dlopen", str(args[0])])
    elif event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.system", "os.fork"):
        events.append([event, str(args[0]) if args else ""])
sys.addaudithook(hook)
sys.path.insert(0, sys.argv[2])
import pathlib, torch
torch.set_num_threads(1)
from train_helpers import TINY, make_bin
from nmt_toolkit.cli.train import run as train
from nmt_toolkit.cli.generate import run as generate
from nmt_toolkit.cli.interactive import run as interactive
root = pathlib.Path(sys.argv[1])
data = make_bin(root)
assert train([data, *TINY, "--max-update", "2", "--save-dir", str(root / "ck")]) == 0
assert generate([data, "--path", str(root / "ck" / "checkpoint_last.pt"), "--gen-subset", "valid", "--cpu",
                 "--results-path", str(root / "out")]) == 0
sys.stdin = open(root / "raw" / "valid.xx")
assert interactive([data, "--path", str(root / "ck" / "checkpoint_last.pt"), "--cpu", "--buffer-size", "4"]) == 0
print("EVENTS " + json.dumps(events))
"""


@pytest.mark.slow
def test_a_train_generate_interactive_run_compiles_and_loads_nothing(tmp_path):
    before = sorted(str(p) for p in PACKAGE.rglob("*") if "__pycache__" not in p.parts)
    script = tmp_path / "watch.py"
    script.write_text(_WATCH, encoding="utf-8")
    tests = pathlib.Path(__file__).resolve().parent
    proc = subprocess.run([sys.executable, str(script), str(tmp_path), str(tests)], capture_output=True, text=True,
                          timeout=600, env={"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin",
                                            "OMP_NUM_THREADS": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("EVENTS "))
    events = json.loads(line[len("EVENTS "):])
    spawned = [e for e in events if e[0] != "dlopen"]
    assert spawned == []  # no compiler, no helper process
    for _, path in events:
        resolved = str(pathlib.Path(path).resolve()) if path not in ("None", "") else path
        assert not resolved.startswith(str(PACKAGE)), path
        assert not resolved.startswith(str(tmp_path)), path  # nothing built into HOME or a cache folder
    assert not (tmp_path / "home").exists() and not (tmp_path / "cache").exists()
    after = sorted(str(p) for p in PACKAGE.rglob("*") if "__pycache__" not in p.parts)
    assert after == before

"""Crafted files given to every program that opens a model, configuration or dictionary file the user names:
each program refuses with one error line, exits non-zero, and no file is created anywhere.

The payloads write (or touch) files in a folder of the test's own temp dir, as a real attack would aim at a
``sitecustomize.py`` or ``.pth`` file; the programs run as real processes with a fresh empty working folder,
and the test compares listings of that folder, of the payload's target folder and of site-packages before
and after. The reference for "nothing ran" is the file system itself, not anything the program reports.
"""
from __future__ import annotations

import os
import pickle
import shutil
import site
import sys
import zipfile

import pytest
import torch

from tests.reliability.harness import assert_refused, run_in_process, run_process, snapshot
from tests.train_helpers import TINY, make_bin

PAYLOAD_BYTES = [104, 97, 99, 107, 101, 100]  # "hacked"


def _site_packages() -> list[str]:
    return [p for p in site.getsitepackages() if os.path.isdir(p) and p.startswith(sys.prefix)]


def _listing(root: str) -> set[str]:
    """Every path under ``root`` (names only: site-packages is too big to hash on each run)."""
    found = set()
    for folder, dirs, files in os.walk(root):
        found.update(os.path.join(folder, n) for n in dirs + files)
    return found


def torchscript_archive(path, target) -> None:
    """A TorchScript module whose ``__setstate__`` (run by torch.jit.load) writes ``target``."""
    source = f'''
import torch


class Evil(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.x = torch.zeros(1)

    @torch.jit.export
    def __getstate__(self):
        return (self.x, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, bool]):
        t = torch.from_file({str(target)!r}, True, {len(PAYLOAD_BYTES)}, dtype=torch.uint8)
        t.copy_(torch.tensor({PAYLOAD_BYTES!r}, dtype=torch.uint8))
        self.x = t
        self.training = state[1]

    def forward(self, x):
        return x


torch.jit.save(torch.jit.script(Evil()), {str(path)!r})
'''
    script = path.parent / (path.name + ".make.py")
    script.write_text(source)  # TorchScript compiles from source files, not from a test's closure
    import subprocess

    subprocess.run([sys.executable, str(script)], check=True, capture_output=True)
    script.unlink()


class _System:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class _OpenForWrite:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def _checkpoint_like(payload) -> dict:
    return {"model": {"w": torch.zeros(2)}, "config": {"components": {"model": "transformer"}}, "version": 1,
            "args": None, "cfg": {"model": {"arch": "transformer"}}, "extra": payload}


def make_payloads(folder, target_dir) -> dict:
    """name -> crafted file; each would create a file in ``target_dir`` if anything ran it."""
    folder.mkdir()
    files = {}
    files["torchscript"] = folder / "torchscript.pt"
    torchscript_archive(files["torchscript"], target_dir / "sitecustomize.py")
    files["zip-os-system"] = folder / "zip-os-system.pt"
    torch.save(_checkpoint_like(_System(f"touch {target_dir / 'system-ran'}")), files["zip-os-system"])
    files["legacy-open-write"] = folder / "legacy-open-write.pt"
    torch.save(_checkpoint_like(_OpenForWrite(str(target_dir / "evil.pth"))), files["legacy-open-write"],
               _use_new_zipfile_serialization=False)
    files["plain-pickle"] = folder / "plain-pickle.pt"
    files["plain-pickle"].write_bytes(pickle.dumps(_checkpoint_like(_System(f"touch {target_dir / 'pickle-ran'}"))))
    files["zip-traversal"] = folder / "zip-traversal.pt"
    with zipfile.ZipFile(files["zip-traversal"], "w") as z:  # entries that an extracting reader would write outside
        z.writestr("archive/data.pkl", pickle.dumps(_checkpoint_like(_System(f"touch {target_dir / 'zip-ran'}"))))
        z.writestr("../../../" + str(target_dir / "traversal.pth").lstrip("/"), "import os\n")
        z.writestr("archive/version", "3\n")
        z.writestr("archive/byteorder", "little")
    return files


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("crafted")
    data = make_bin(root)
    target = root / "target"
    target.mkdir()
    return {"root": root, "data": data, "target": target, "payloads": make_payloads(root / "payloads", target)}


def _programs(data, model, out):
    return {
        "nmt-generate": (["nmt-generate", data, "--path", model, "--gen-subset", "valid"], ""),
        "nmt-interactive": (["nmt-interactive", data, "--path", model], "w1 w2\n"),
        "nmt-convert": (["nmt-convert", "--path", model, "--output", out / "converted.pt"], ""),
        "nmt-export": (["nmt-export", data, "--path", model, "--output-dir", out / "exported"], ""),
        "nmt-export-fairseq": (["nmt-export", data, "--path", model, "--format", "fairseq",
                                "--output-dir", out / "exported"], ""),
        "nmt-average-checkpoints": (["nmt-average-checkpoints", "--inputs", model, "--output",
                                     out / "averaged.pt"], ""),
        "nmt-train-restore": (["nmt-train", data, *TINY, "--save-dir", out / "ck", "--restore-file", model,
                               "--max-update", "1"], ""),
    }


PROGRAMS = list(_programs("d", "m", __import__("pathlib").Path("o")))
PAYLOADS = ["torchscript", "zip-os-system", "legacy-open-write", "plain-pickle", "zip-traversal"]


def _refused_without_a_trace(world, tmp_path, argv, stdin, *names):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    roots = [cwd, world["target"], world["payloads"]["torchscript"].parent]
    before = snapshot(*roots)
    site_before = {p: _listing(p) for p in _site_packages()}
    result = run_process(argv[0], argv[1:], cwd=cwd, stdin=stdin)
    line = assert_refused(result, *names)
    after = snapshot(*roots)
    assert after == before, f"created or changed: {sorted(set(after) ^ set(before))}"
    for p, listing in site_before.items():
        assert _listing(p) == listing, f"site-packages changed: {sorted(_listing(p) ^ listing)[:5]}"
    return line


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.slow
def test_a_crafted_model_file_is_refused_and_runs_nothing(world, tmp_path, program, payload):
    model = world["payloads"][payload]
    argv, stdin = _programs(world["data"], model, tmp_path / "out")[program]
    _refused_without_a_trace(world, tmp_path, [str(a) for a in argv], stdin, str(model))


@pytest.mark.slow
def test_a_yaml_config_with_python_tags_is_refused_and_runs_nothing(world, tmp_path):
    config = world["root"] / f"evil-{tmp_path.name}.yaml"
    config.write_text(f"lr: !!python/object/apply:os.system ['touch {world['target'] / 'yaml-ran'}']\n"
                      f"seed: !!python/object/new:os.system ['touch {world['target'] / 'yaml-new'}']\n")
    argv = ["nmt-train", world["data"], *TINY, "--save-dir", tmp_path / "ck", "--config", config]
    _refused_without_a_trace(world, tmp_path, [str(a) for a in argv], "", str(config))


@pytest.mark.parametrize("kind", ["pickle", "torchscript"])
@pytest.mark.slow
def test_a_dictionary_that_is_a_pickle_or_archive_is_refused_and_runs_nothing(world, tmp_path, kind):
    data = tmp_path / "bin"
    shutil.copytree(world["data"], data)
    source = world["payloads"]["plain-pickle" if kind == "pickle" else "torchscript"]
    shutil.copyfile(source, data / "dict.xx.txt")
    argv = ["nmt-train", data, *TINY, "--save-dir", tmp_path / "ck", "--max-update", "1"]
    _refused_without_a_trace(world, tmp_path, [str(a) for a in argv], "", "dict.xx.txt")


@pytest.fixture(scope="module")
def trained(world):
    from nmt_toolkit.cli.train import run as train

    save_dir = world["root"] / "ck"
    assert train([world["data"], *TINY, "--save-dir", str(save_dir), "--max-update", "2", "--no-progress-bar"]) == 0
    return str(save_dir / "checkpoint_last.pt")


@pytest.mark.slow
def test_a_config_that_builds_a_huge_model_is_refused_before_the_memory_is_taken(world, trained, tmp_path):
    """The stored weights are 32 wide, the stored config says 4096: building that model first would take
    ~400 MB for a file of a few hundred KB (65536 would take gigabytes). The reference is the process's peak
    resident memory, from the OS."""
    state = torch.load(trained, weights_only=True)
    state["config"]["model"]["embed_dim"] = 4096
    crafted = tmp_path / "wide.pt"
    torch.save(state, crafted)
    script = f"""
import resource
from nmt_toolkit.cli import generate
import nmt_toolkit.models, nmt_toolkit.generation.beam_search, nmt_toolkit.tasks.translation
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
status = generate.run([{world["data"]!r}, "--path", {str(crafted)!r}, "--gen-subset", "valid"])
print("RESULT", status, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    status, growth_kb = proc.stdout.split("RESULT")[-1].split()
    assert int(status) != 0, proc.stderr[-2000:]
    assert "embed" in proc.stderr or "shape" in proc.stderr, proc.stderr[-2000:]
    assert int(growth_kb) < 100 * 1024, f"peak memory grew by {int(growth_kb) // 1024} MiB"


@pytest.mark.parametrize("program", ["nmt-generate", "nmt-average-checkpoints"])
def test_a_checkpoint_of_a_newer_format_is_refused_in_one_line(world, trained, tmp_path, program):
    state = torch.load(trained, weights_only=True)
    state["version"] = 999
    crafted = tmp_path / "v999.pt"
    torch.save(state, crafted)
    argv = {"nmt-generate": [world["data"], "--path", crafted, "--gen-subset", "valid"],
            "nmt-average-checkpoints": ["--inputs", crafted, "--output", tmp_path / "avg.pt"]}[program]
    assert_refused(run_in_process(program, argv), str(crafted), "version 999")

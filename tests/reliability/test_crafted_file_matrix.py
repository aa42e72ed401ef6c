"""A generated matrix of crafted values in the JSON files a user hands the programs: every option of a model
folder's config.json (the model config dataclass's fields), every value of its manifest.json (the keys the
writer writes, nested ones included) and every config.json key the Marian importer reads (the importer's own
tables), each set to NaN, a negative number, zero, a huge number, a string, a 4,000-digit integer and an
array nested 100,000 deep.

A value the dataclass declares invalid (type, range, choices) is refused: one error line naming the file and
the key, exit status != 0, no traceback, nothing written. A value it declares valid (a dropout of 0) may be
used; then the program succeeds, or refuses in one line what the weights contradict. A new field joins the
matrix by itself. The folders are crafted consistently, as a hostile one would be: a config.json's size and
sha256 in the manifest are those of the crafted file, so the value itself must be refused. Runs in process,
on one tiny model (the Marian fixture imported): cheap enough for hundreds of cases.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import shutil
import typing

import pytest

from nmt_toolkit.importers.marian import OTHER_KEYS, SHARED_FIELDS, import_marian
from nmt_toolkit.models.transformer import TransformerConfig
from tests.reliability.harness import (MARIAN_FIXTURE, assert_refused, assert_unchanged, record_in_manifest,
                                       run_in_process, snapshot, tiny_model_folder)

NESTED = "[" * 100_000 + "]" * 100_000
DIGITS = "9" * 4000
#: crafted value name → the value, or a marker replaced by raw JSON text that json.dumps cannot write
VALUES = {"nan": math.nan, "negative": -1, "zero": 0, "huge": 10 ** 9, "string": "high",
          "4000-digit": "@DIGITS@", "nested": "@NESTED@"}
#: manifest values nothing reads (a record of who wrote the folder, and when)
INFORMATIONAL = {("made_by",), ("created",)}
#: the manifest, having no dataclass, declares a value's JSON type by what its writer writes there
JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null", dict: "object"}


def dumps(value) -> str:
    return json.dumps(value, indent=1).replace('"@DIGITS@"', DIGITS).replace('"@NESTED@"', NESTED)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return tiny_model_folder(tmp_path_factory.mktemp("matrix"))


def leaves(value, path=()):
    """Every leaf of a JSON value as its key path."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in leaves(item, path + (key,))]
    return [path]


def _get(tree: dict, path: tuple):
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


def _declared_valid(field: dataclasses.Field, value) -> bool:
    """Whether TransformerConfig declares ``value`` valid for ``field``: its type, range and choices."""
    kind = typing.get_type_hints(TransformerConfig)[field.name]
    kind = next((k for k in typing.get_args(kind) if k is not type(None)), kind)
    if isinstance(value, str) and value.startswith("@"):  # not JSON this program reads at all
        return False
    if kind is bool:
        return value in (0, 1)
    if kind in (int, float):
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and \
            (kind is float or float(value).is_integer())
        return number and field.metadata["range"].contains(value)
    return value in (field.metadata.get("choices") or ())


def _generate(folder: pathlib.Path, raw: pathlib.Path):
    return run_in_process("nmt-generate", ["--path", folder, "--input", raw, "--beam", "1"])


MODEL_FIELDS = [f.name for f in dataclasses.fields(TransformerConfig)]


@pytest.mark.parametrize("crafted", list(VALUES))
@pytest.mark.parametrize("name", MODEL_FIELDS)
def test_a_crafted_model_option_in_config_json(world, tmp_path, monkeypatch, name, crafted):
    folder = pathlib.Path(shutil.copytree(world / "model", tmp_path / "model"))
    config = json.loads((folder / "config.json").read_text())
    config["model"][name] = VALUES[crafted]
    (folder / "config.json").write_text(dumps(config))
    record_in_manifest(folder, "config.json")  # crafted consistently: the manifest records the crafted file
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    result = _generate(folder, world / "raw.en")
    assert_unchanged(before, tmp_path)
    field = next(f for f in dataclasses.fields(TransformerConfig) if f.name == name)
    if _declared_valid(field, VALUES[crafted]) and result.status == 0:
        assert "D-0\t" in result.stdout, result.stdout  # the valid value was used: a translation
        return
    names = [str(folder)] if _declared_valid(field, VALUES[crafted]) else [str(folder / "config.json")]
    line = assert_refused(result, *names)
    if not _declared_valid(field, VALUES[crafted]) and crafted not in ("4000-digit", "nested"):
        assert name in line or "--" + name.replace("_", "-") in line, line


def _manifest_leaves() -> list[tuple]:
    """The manifest's leaves, from a folder written by the code under test (so a new key joins by itself)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        import_marian(str(MARIAN_FIXTURE)).write(os.path.join(tmp, "m"))
        manifest = json.loads(pathlib.Path(tmp, "m", "manifest.json").read_text())
    return leaves(manifest)


@pytest.mark.parametrize("crafted", list(VALUES))
@pytest.mark.parametrize("path", _manifest_leaves(), ids=".".join)
def test_a_crafted_value_in_manifest_json(world, tmp_path, monkeypatch, path, crafted):
    folder = pathlib.Path(shutil.copytree(world / "model", tmp_path / "model"))
    manifest = json.loads((folder / "manifest.json").read_text())
    written = _get(manifest, path)
    _set(manifest, path, VALUES[crafted])
    (folder / "manifest.json").write_text(dumps(manifest))
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    result = _generate(folder, world / "raw.en")
    assert_unchanged(before, tmp_path)
    same_type = JSON_TYPES[type(written)] == JSON_TYPES[type(VALUES[crafted])] and crafted not in ("4000-digit",
                                                                                                      "nested")
    if (path in INFORMATIONAL or same_type) and result.status == 0:  # e.g. source_lang "high": a language code
        return
    line = assert_refused(result, str(folder))
    described = {"dictionaries": "dict.", "files": path[1] if len(path) > 1 else "manifest.json"}
    assert "manifest.json" in line or described.get(path[0], "manifest.json") in line, line


def _marian_keys() -> list[str]:
    return sorted(set(SHARED_FIELDS) | set(OTHER_KEYS))


def _marian_declared_valid(key: str, value) -> bool:
    if isinstance(value, str) and value.startswith("@"):
        return False
    if key in SHARED_FIELDS:
        field = next(f for f in dataclasses.fields(TransformerConfig) if f.name == SHARED_FIELDS[key])
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and \
            (isinstance(field.default, float) or isinstance(value, int))
        return number and field.metadata["range"].contains(value)
    kind = OTHER_KEYS[key]
    if kind is int:  # token ids and vocabulary sizes: whole numbers >= 0 (which are right, the files decide)
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return isinstance(value, kind)


@pytest.mark.parametrize("crafted", list(VALUES))
@pytest.mark.parametrize("key", _marian_keys())
def test_a_crafted_value_in_a_marian_config_json(tmp_path, monkeypatch, key, crafted):
    marian = pathlib.Path(shutil.copytree(MARIAN_FIXTURE, tmp_path / "marian"))
    config = json.loads((marian / "config.json").read_text())
    config[key] = VALUES[crafted]
    (marian / "config.json").write_text(dumps(config))
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    result = run_in_process("nmt-convert", ["--from", "marian", "--path", marian, "--output", out])
    if _marian_declared_valid(key, VALUES[crafted]) and result.status == 0:
        from nmt_toolkit.loading import load_models
        from nmt_toolkit.model_folder import read_model_folder

        folder = read_model_folder(str(out))  # what it wrote, every program reads
        load_models([str(out)], folder.src_dict, folder.tgt_dict)
        return
    assert_unchanged(before, tmp_path)
    line = assert_refused(result, str(marian / "config.json"))
    if not _marian_declared_valid(key, VALUES[crafted]) and crafted not in ("4000-digit", "nested"):
        assert key in line, line

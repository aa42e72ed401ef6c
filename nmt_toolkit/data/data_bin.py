"""The data-bin folder as a whole: where nmt-preprocess stages a run, how the run's set replaces the
folder's, and the ``preprocess.json`` record that says which splits the folder holds.

A run writes everything into a staging folder beside ``destdir`` and swaps it in at the end, so an error (a
full disk included) leaves ``destdir`` as it was. Into an existing folder the run adds its splits (the
dictionaries must be the folder's: binarize.py checks) and the record lists old and new splits, or, for
another direction, adds the direction (data/directions.py); with
``--overwrite`` the new set replaces everything earlier runs wrote (other files stay). The translation
task refuses a split the record does not list, so stale ``.bin/.idx`` files are never decoded with another
dictionary.
"""
from __future__ import annotations

import json
import logging
import os
import re
from typing import Optional

from nmt_toolkit import locking, outputs
from nmt_toolkit.data.json_files import read_json
from nmt_toolkit.data.language_codes import is_language_code
from nmt_toolkit.errors import DataError
from nmt_toolkit.outputs import OutputKind

logger = logging.getLogger(__name__)

_SHARD_DIR = re.compile(r"shard\d+$")
_TRAIN_SPLIT = re.compile(r"train\d*$")  # the training corpora: train, train1, …
_TRAIN_FILE = re.compile(r"train\d*\.")
# what nmt-preprocess writes into a folder (other files there are the user's and stay)
_OURS = re.compile(r"(dict\.[^/]+\.txt|preprocess\.json|spm\.model|bpe\.codes|shard\d+"
                   r"|[^/.]+\.[^/.]+-[^/.]+\.[^/.]+\.(bin|idx))$")


#: a data-bin as an output: a folder holding a record or dictionaries (fairseq's data-bins have no record)
DATA_BIN = OutputKind("a data-bin", markers=("preprocess.json", "dict.*.txt", "dict.txt"))


def claim(destdir: str, shown: str) -> None:
    """Refuse, before any work, a ``--destdir`` that is a file, a protected place (the working folder, one of
    its parents, the home folder, a mount point) or a non-empty folder that is not a data-bin: a run adds to
    or replaces only a data-bin's own files, never a folder of someone else's."""
    outputs.refuse_protected(destdir, f"--destdir {shown}")
    outputs.check_writable_place(destdir, f"--destdir {shown}")
    if os.path.lexists(destdir) and not os.path.isdir(destdir):
        raise DataError(f"--destdir {shown}: exists and is not a folder")
    if os.path.isdir(destdir):
        entries = os.listdir(destdir)
        if entries and not DATA_BIN.recognises(destdir, entries):
            raise DataError(f"--destdir {shown}: a non-empty folder that is not a data-bin (no preprocess.json or "
                            f"dict.*.txt; it holds {', '.join(sorted(entries)[:3])}); name a new or empty folder")


def staging_folder(destdir: str, shown: str) -> str:
    """A new private folder beside ``destdir`` (same file system: the final moves are renames).

    ``shown`` is ``--destdir`` as the user typed it, for the one-line errors."""
    claim(destdir, shown)
    parent = os.path.dirname(destdir)
    existing = parent
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise DataError(f"--destdir {shown}: {existing} is a file, not a folder")
    return outputs.staging_beside(destdir, f"--destdir {shown}")


def lock(destdir: str, shown: str):
    """Held for a whole run: a second nmt-preprocess on the same ``destdir`` is refused at once, instead of
    both adding splits and one record overwriting the other's. The lock file sits beside the folder (which
    may not exist yet), as the staging folders do."""
    path = os.path.join(os.path.dirname(destdir), f".{os.path.basename(destdir)}.lock")
    return locking.exclusive(path, f"--destdir {shown}", "nmt-preprocess")


def remove_abandoned(destdir: str) -> list[str]:
    """Remove the staging and trash folders a killed run left beside ``destdir`` (see
    :func:`nmt_toolkit.outputs.remove_abandoned`)."""
    return outputs.remove_abandoned(destdir)


def previous_record(destdir: str, shown: str, src: str, tgt: str) -> Optional[dict]:
    """The record of an existing ``destdir`` that a run of ``src-tgt`` adds splits or a direction to (None for a
    new or empty folder; a folder of another direction becomes multilingual: data/directions.py)."""
    path = os.path.join(destdir, "preprocess.json")
    if not os.path.isdir(destdir):
        return None
    if not os.path.isfile(path):  # fairseq's folders have none: keep their splits loadable after ours are added
        found = _unrecorded_splits(destdir, src, tgt)
        return {"source_lang": src, "target_lang": tgt, "splits": found} if found else None
    try:
        previous = read_json(path, "the data-bin's record")
    except DataError as exc:
        raise DataError(f"{exc}; use --overwrite to replace the folder's contents") from None
    check_record(path, previous)
    return previous


_RECORD_KEYS = {"source_lang": str, "target_lang": str, "splits": dict}
_OPTIONAL_KEYS = {"subword": dict, "num_shards": int, "dictionaries": dict}


def check_record(path: str, record) -> None:
    """Refuse a ``preprocess.json`` whose shape is not the one nmt-preprocess writes, naming the key, before
    any code reads a field of it (a list or a string there would otherwise fail as a traceback)."""
    def wrong(key: str, expected: str) -> DataError:
        return DataError(f"{path}: {key} must be {expected}; the file is damaged: run nmt-preprocess again "
                         f"(--overwrite replaces it)")

    if not isinstance(record, dict):
        raise wrong("the whole file", f"a JSON object, not {type(record).__name__}")
    if "lang_pairs" in record:  # a multilingual data-bin: one bilingual record per direction under "pairs"
        if not isinstance(record["lang_pairs"], list) or not isinstance(record.get("pairs"), dict):
            raise wrong("key 'lang_pairs'", "a JSON list beside an object 'pairs'")
        for pair in record["lang_pairs"]:
            if not isinstance(pair, str) or pair.count("-") != 1 or not all(map(is_language_code, pair.split("-"))):
                raise wrong("key 'lang_pairs'", f"a list of directions such as en-de between language codes, not "
                                                f"holding {ascii(pair)[:40]}")
        for pair in record["lang_pairs"]:
            if not isinstance(record["pairs"].get(pair), dict):
                raise wrong(f"key 'pairs.{pair}'", "a JSON object")
            check_record(path, {**record["pairs"][pair], "subword": record.get("subword")})
        return
    for key, kind in _RECORD_KEYS.items():
        if key not in record:
            raise wrong(f"key {key!r}", "present")
        if not isinstance(record[key], kind):
            raise wrong(f"key {key!r}", f"a JSON {_JSON_NAMES[kind]}")
    for key in ("source_lang", "target_lang"):
        if not is_language_code(record[key]):
            raise wrong(f"key {key!r}", f"a language code (ASCII letters, digits and _), not {ascii(record[key])[:40]}")
    if record.get("target_lang_tag") is not None and not isinstance(record["target_lang_tag"], str):
        raise wrong("key 'target_lang_tag'", "a string or null")
    for key, kind in _OPTIONAL_KEYS.items():
        if record.get(key) is not None and (not isinstance(record[key], kind) or isinstance(record[key], bool)):
            raise wrong(f"key {key!r}", f"a JSON {_JSON_NAMES[kind]} or null")
    for name, entry in record["splits"].items():
        if not isinstance(entry, dict):
            raise wrong(f"key 'splits.{name}'", "a JSON object")
        if entry.get("dictionaries") is not None and not isinstance(entry["dictionaries"], dict):
            raise wrong(f"key 'splits.{name}.dictionaries'", "a JSON object or null")
    subword = record.get("subword")
    if subword is not None and not all(isinstance(subword.get(k), str) for k in ("type", "model")):
        raise wrong("key 'subword'", "an object with the strings 'type' and 'model'")


_JSON_NAMES = {str: "string", dict: "object", int: "integer"}


def pair_record(record: dict, src: Optional[str], tgt: Optional[str]) -> dict:
    """The record of the direction ``src-tgt``: a multilingual folder's entry for it (``{}`` when it has
    none), else the folder's own record."""
    if "lang_pairs" in record:
        return record["pairs"].get(f"{src}-{tgt}") or {}
    return record


def _unrecorded_splits(destdir: str, src: str, tgt: str) -> dict:
    """Splits of a folder without ``preprocess.json`` (their dictionary is the folder's, which a run adding
    splits must reuse), listed without checksums."""
    pattern = re.compile(rf"([^.]+)\.{re.escape(src)}-{re.escape(tgt)}\.{re.escape(src)}\.idx$")
    roots = [destdir] + [os.path.join(destdir, n) for n in os.listdir(destdir) if _SHARD_DIR.match(n)]
    names = {m.group(1) for root in roots if os.path.isdir(root) for n in os.listdir(root) if (m := pattern.match(n))}
    return {name: {"unrecorded": "binarized before the folder had a preprocess.json"} for name in sorted(names)}


def merged_splits(old: dict, new: dict) -> dict:
    """A direction's splits once a run added ``new`` to ``old``: new training data replaces every old corpus
    (train, train1, …); other splits of the same name are replaced, the rest stay."""
    splits = dict(old or {})
    if "train" in new:
        splits = {name: entry for name, entry in splits.items() if not _TRAIN_SPLIT.match(name)}
    splits.update(new)
    return splits


def merged(previous: dict, record: dict) -> dict:
    """The record of a run that added splits to an existing folder: its splits over the folder's old ones."""
    splits = merged_splits(previous.get("splits"), record["splits"])
    return {**record, "splits": splits,
            "subword": record["subword"] or previous.get("subword"),
            "num_shards": record["num_shards"] if "train" in record["splits"] else previous.get("num_shards")}


def write_record(folder: str, record: dict) -> None:
    with open(os.path.join(folder, "preprocess.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def swap_in(tmp: str, destdir: str, wrote_train: bool, overwrite: bool, direction: Optional[str] = None) -> None:
    """Move the finished files of ``tmp`` into ``destdir`` (a rename when it does not exist yet).

    The entries the new set replaces — with ``overwrite`` everything an earlier run wrote, else the same
    names and, with new training data, the old ``train.*`` files of the run's ``direction`` (``en-de``; every
    direction's when None) and the shard folders — go first (renamed aside, removed once the new set is in);
    if a rename fails every move is undone, so ``destdir`` holds either the old set or the new one
    (:func:`nmt_toolkit.outputs.merge_into`). Other files in the folder stay, other directions' too."""
    def replaced(name: str) -> bool:
        if overwrite:
            return bool(_OURS.match(name))
        train_file = bool(_TRAIN_FILE.match(name)) and name.endswith((".bin", ".idx")) and \
            (direction is None or name.split(".")[1] == direction)
        return wrote_train and (bool(_SHARD_DIR.match(name)) or train_file)

    outputs.merge_into(tmp, destdir, replaced)

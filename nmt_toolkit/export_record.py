"""The record ``nmt-export --format ctranslate2`` writes beside a CTranslate2 model (``nmt_export.json``: what was
exported, from which checkpoint, with which dictionaries, subword model, languages and position rows), read and
checked. Opening a ``--path`` (``loading.py``) and the CTranslate2 engine read it; the exporter writes it."""
from __future__ import annotations

import os
from typing import Optional

from nmt_toolkit.data.folder_files import check_inside
from nmt_toolkit.data.json_files import read_json_object
from nmt_toolkit.data.language_codes import check_language_tag, is_language_code
from nmt_toolkit.errors import DataError

EXPORT_JSON = "nmt_export.json"


def is_export_folder(path: str) -> bool:
    """A folder ``nmt-export --format ctranslate2`` wrote (it holds ``nmt_export.json``)."""
    return bool(path) and os.path.isfile(os.path.join(path, EXPORT_JSON))


def read_export(folder: str) -> Optional[dict]:
    """The ``nmt_export.json`` record of an exported folder, or None when ``folder`` is not one. CTranslate2
    and we read the folder's files, so one that is a link leading out of the folder is refused; so is a
    record whose fields differ in shape from what nmt-export writes, naming the key."""
    path = os.path.join(folder, EXPORT_JSON)
    if not os.path.isfile(path):
        return None
    for name in sorted(os.listdir(folder)):
        check_inside(folder, os.path.join(folder, name))
    record = read_json_object(path, "the export record")
    _check_export_record(record, path)
    return record


def export_dictionaries(folder: str, record: dict) -> tuple:
    """The source and target dictionaries an export holds beside its model, its ``target_lang_tag`` (if any)
    checked to be a language tag of the source dictionary."""
    from nmt_toolkit.data.dictionary import Dictionary

    dictionaries = []
    for side in ("source", "target"):
        path = os.path.join(folder, record["dictionaries"][side])
        if not os.path.exists(path):
            raise DataError(f"{path}: no such dictionary file")
        dictionaries.append(Dictionary.load(path))
    tag = record.get("target_lang_tag")
    if tag is not None:
        check_language_tag(tag, dictionaries[0].symbols, f"{os.path.join(folder, EXPORT_JSON)}: target_lang_tag",
                           owner=os.path.join(folder, record["dictionaries"]["source"]))
    return tuple(dictionaries)


def _check_export_record(record: dict, path: str) -> None:
    def wrong(key: str, expected: str):
        raise DataError(f"{path}: {key} must be {expected} (the file was edited; export the model again)")

    names = record.get("dictionaries")
    if not isinstance(names, dict) or not all(isinstance(names.get(side), str) and names[side] and
                                              os.path.basename(names[side]) == names[side] not in (".", "..")
                                              for side in ("source", "target")):
        wrong("dictionaries", "an object naming the source and target dictionary files of the folder")
    positions = record.get("max_positions")
    if not isinstance(positions, int) or isinstance(positions, bool) or not 1 <= positions <= 1_000_000:
        wrong("max_positions", "an integer in [1, 1000000]")
    heads = record.get("alignment_heads")
    if heads is not None and (not isinstance(heads, int) or isinstance(heads, bool) or heads < 1):
        wrong("alignment_heads", "null or an integer >= 1")
    for key in ("source_lang", "target_lang"):
        if record.get(key) is not None and not is_language_code(record[key]):
            wrong(key, "null or a language code (ASCII letters, digits and _)")
    languages = record.get("languages")
    if languages is not None and (not isinstance(languages, list) or not all(map(is_language_code, languages))):
        wrong("languages", "null or a list of language codes")
    tag = record.get("target_lang_tag")
    if tag is not None and (not isinstance(tag, str) or not tag):
        wrong("target_lang_tag", "null or a symbol of the source dictionary")
    if record.get("task") is not None and not isinstance(record["task"], dict):
        wrong("task", "null or an object")

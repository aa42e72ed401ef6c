"""A data-bin that grows one direction per ``nmt-preprocess`` run: fairseq's documented way to build a
multilingual data-bin (one ``fairseq-preprocess`` per pair into one ``--destdir``, each with the same
``--srcdict``/``--tgtdict``), which ``--lang-pairs`` does in one run (data/multilingual.py).

A run of ``SRC-TGT`` into a folder that holds another direction (or a multilingual folder without it) adds
the direction: its files sit beside the others' (``<split>.<src>-<tgt>.<lang>``, one shard), and the folder's
``preprocess.json`` becomes, or stays, the multilingual record ``--lang-pairs`` writes (``lang_pairs``,
``langs``, one bilingual record per direction under ``pairs``), so ``--task translation_multi_simple_epoch``
reads it as it reads a ``--lang-pairs`` data-bin. A run of a direction the multilingual folder holds adds
splits to that direction, as a run into a bilingual folder does. The record is read, merged and replaced
under the folder's lock (data_bin.lock), so two runs cannot each write a record without the other's pair.

A multilingual data-bin has one joint dictionary and at most one subword model, and no shards or source
tags: a run that would break that is refused by name before it binarizes anything (the dictionary once it is
built, before any split is written).
"""
from __future__ import annotations

import filecmp
import os
from typing import Optional

from nmt_toolkit.data import data_bin
from nmt_toolkit.data.dictionary import fingerprint_mismatch
from nmt_toolkit.data.lang_pairs import languages
from nmt_toolkit.errors import DataError, UsageError


def joins_multilingual(previous: Optional[dict], src: str, tgt: str) -> bool:
    """Whether a run of ``src-tgt`` into the folder whose record is ``previous`` leaves a multilingual record:
    the folder is multilingual already, or holds another direction."""
    if not previous:
        return False
    return "lang_pairs" in previous or (previous.get("source_lang"), previous.get("target_lang")) != (src, tgt)


def _pairs(previous: dict) -> list[str]:
    return list(previous["lang_pairs"]) if "lang_pairs" in previous else \
        [f"{previous.get('source_lang')}-{previous.get('target_lang')}"]


def _holds(previous: dict, shown: str) -> str:
    return f"--destdir {shown} holds {', '.join(_pairs(previous))} data"


def check_options(cfg, previous: dict, destdir: str) -> None:
    """What a multilingual data-bin cannot hold, refused before any work: shards, a source tag, a subword model
    per side, and a subword model other than the folder's (its splits were encoded with the folder's)."""
    held = _holds(previous, cfg.destdir)
    if cfg.num_shards > 1 or (previous.get("num_shards") or 1) > 1:
        flag = f"--num-shards {cfg.num_shards}" if cfg.num_shards > 1 else f"{held} in shards"
        raise UsageError(f"{flag}: a data-bin of several directions holds each in one piece; binarize "
                         f"{cfg.source_lang}-{cfg.target_lang} without --num-shards, or into another --destdir")
    for flag, value in (("--target-lang-tag", cfg.target_lang_tag), ("--bpe-model-target", cfg.bpe_model_target),
                        ("its target_lang_tag", previous.get("target_lang_tag"))):
        if value:
            raise UsageError(f"{held}; adding {cfg.source_lang}-{cfg.target_lang} makes it multilingual, which "
                             f"takes no {flag.removeprefix('its ')} ({value}): use another --destdir")
    _check_subword(cfg, previous, destdir, held)


def _check_subword(cfg, previous: dict, destdir: str, held: str) -> None:
    theirs = previous.get("subword") or None
    same = (theirs is None and not cfg.bpe) or (
        theirs is not None and cfg.bpe == theirs.get("type") and cfg.bpe_model is not None
        and os.path.isfile(os.path.join(destdir, theirs["model"]))
        and filecmp.cmp(cfg.bpe_model, os.path.join(destdir, theirs["model"]), shallow=False))
    if same:
        return
    if theirs is None:
        raise UsageError(f"--bpe {cfg.bpe}: {held} without a subword model; its directions share one: add "
                         f"{cfg.source_lang}-{cfg.target_lang} without --bpe, or binarize into another --destdir")
    model = os.path.join(cfg.destdir, theirs["model"])
    raise UsageError(f"{held}, encoded with its {theirs['type']} model {model}; its directions share one: add "
                     f"{cfg.source_lang}-{cfg.target_lang} with --bpe {theirs['type']} --bpe-model {model}")


def check_dictionaries(previous: dict, dicts: dict, shown: str) -> None:
    """The run's dictionaries and the folder's must be one joint dictionary: a multilingual model reads every
    language with one (fairseq's recipe gives each run the same --srcdict and --tgtdict)."""
    held = _holds(previous, shown)
    recorded = previous.get("dictionaries") or {}
    entries = [(f"dict.{lang}.txt", recorded.get(lang)) for lang in sorted(recorded)]
    entries += [(f"this run's {lang} dictionary", d.fingerprint()) for lang, d in dicts.items()]
    first_name, first = entries[0]
    for name, entry in entries[1:]:
        problem = fingerprint_mismatch(first, entry, required=True)
        if problem:
            raise DataError(f"{held}; adding a direction needs one dictionary for every language, and {first_name} "
                            f"and {name} differ ({problem}): give every run the same --srcdict and --tgtdict "
                            f"(as fairseq-preprocess's multilingual recipe does), or use another --destdir")


def merged(previous: dict, record: dict) -> dict:
    """The multilingual record of the folder once this run's bilingual ``record`` is in it: its direction added,
    or its splits added to the direction's (new training data replacing the old, as in a bilingual folder)."""
    src, tgt = record["source_lang"], record["target_lang"]
    joint = record["dictionaries"][src]
    pairs = {pair: _pair_record(entry) for pair, entry in _pair_records(previous).items()}
    key = f"{src}-{tgt}"
    new = _pair_record(record)
    if key in pairs:
        new["splits"] = data_bin.merged_splits(pairs[key]["splits"], new["splits"])
    pairs[key] = new
    directions = [tuple(pair.split("-")) for pair in pairs]
    langs = languages(directions)
    for entry in pairs.values():
        entry["dictionaries"] = {lang: {**joint, "file": f"dict.{lang}.txt"}
                                 for lang in (entry["source_lang"], entry["target_lang"])}
    return {"version": record["version"], "command": record["command"], "lang_pairs": list(pairs), "langs": langs,
            "joined_dictionary": True,
            "dictionaries": {lang: {**joint, "file": f"dict.{lang}.txt"} for lang in langs},
            "subword": record.get("subword") or previous.get("subword"), "num_shards": None, "pairs": pairs}


def _pair_records(previous: dict) -> dict:
    if "lang_pairs" in previous:
        return {pair: previous["pairs"][pair] for pair in previous["lang_pairs"]}
    return {f"{previous['source_lang']}-{previous['target_lang']}": previous}


def _pair_record(record: dict) -> dict:
    """One direction's entry under ``pairs``: its languages, splits and (when a run of its own wrote it) the
    command that did."""
    entry = {"source_lang": record["source_lang"], "target_lang": record["target_lang"],
             "splits": dict(record.get("splits") or {})}
    if record.get("command") is not None:
        entry["command"] = record["command"]
    return entry

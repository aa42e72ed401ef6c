"""``nmt-preprocess --lang-pairs en-de,en-fr,de-en``: several translation directions binarized into one
data-bin, in the layout of fairseq's multilingual tasks (``translation_multi_simple_epoch``)::

    destdir/dict.en.txt dict.de.txt dict.fr.txt   (one joint dictionary, written once per language)
    destdir/spm.model | bpe.codes                  (one joint subword model, learned on every language)
    destdir/train.en-de.en.{bin,idx}  train.en-de.de.{bin,idx}  train.en-fr.en.{bin,idx} …
    destdir/valid.en-de.en.{bin,idx} … test.… (test1, valid1 as for one pair)
    destdir/preprocess.json

fairseq-preprocess binarizes one pair per run and reuses the first run's dictionary (``--srcdict``) in
the others (nmt-preprocess does that too: data/directions.py); this is the same in one command. A prefix names one file per language, ``PREFIX.<lang>``
(line-parallel multi-way corpora such as Multi30k), or, where it exists, ``PREFIX.<src>-<tgt>.<lang>``
(a corpus of that pair only). Each training file is counted once for the dictionary and the subword model
however many pairs read it.

The record (``preprocess.json``) lists ``lang_pairs`` and ``langs`` and, under ``pairs``, one bilingual
record per direction (its languages and splits, with dictionary checksums), so the translation task can
read and check one direction of the folder as a bilingual data-bin. This run writes the data-bin whole: into
a new or empty folder, or replacing everything with ``--overwrite``.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from collections import Counter
from typing import Optional, Sequence

from nmt_toolkit import outputs
from nmt_toolkit.data import binarize, data_bin
from nmt_toolkit.data.binarize import FileScan, PreprocessConfig
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.data.lang_pairs import languages, parse_lang_pairs
from nmt_toolkit.errors import DataError

logger = logging.getLogger(__name__)


def pair_file(prefix: str, src: str, tgt: str, lang: str) -> str:
    """The text of ``lang`` for the direction ``src-tgt``: ``PREFIX.<src>-<tgt>.<lang>`` where it exists,
    else the language's file of a multi-way corpus ``PREFIX.<lang>``."""
    own = f"{prefix}.{src}-{tgt}.{lang}"
    return own if os.path.isfile(own) else f"{prefix}.{lang}"


def _scan_all(cfg: PreprocessConfig, pairs, splits) -> tuple[dict, dict]:
    """``(files, scans)``: ``files[(split, pair)] = {lang: path}`` and every distinct path scanned once;
    sides of different lengths, an empty training file or an empty valid/test file are refused by name."""
    files = {(name, pair): {lang: pair_file(pref, *pair, lang) for lang in pair}
             for name, pref in splits for pair in pairs}
    paths = sorted({p for sides in files.values() for p in sides.values()})
    chunk_bytes = binarize._chunk_bytes(paths, cfg.workers)
    scans = {path: binarize.scan_file(path, chunk_bytes) for path in paths}
    for (name, pair), sides in files.items():
        a, b = (scans[sides[lang]] for lang in pair)
        if a.lines != b.lines:
            raise DataError(f"{name} files of {pair[0]}-{pair[1]} differ in length: {a.path} has {a.lines} "
                            f"lines, {b.path} has {b.lines}")
        if a.lines == 0:
            option = "--trainpref" if name == "train" else "--validpref" if name.startswith("valid") else "--testpref"
            raise DataError(f"{option}: {a.path} and {b.path} have no lines; give files with sentences")
    return files, scans


def preprocess_pairs(cfg: PreprocessConfig, command: Optional[Sequence[str]] = None) -> dict:
    """The multilingual pipeline (module docstring); returns the ``preprocess.json`` record."""
    cfg.validate()
    data_bin.claim(os.path.realpath(cfg.destdir), cfg.destdir)
    pairs = parse_lang_pairs(cfg.lang_pairs)
    if cfg.srcdict and not os.path.isfile(cfg.srcdict):
        raise DataError(f"--srcdict {cfg.srcdict}: no such file")
    if cfg.bpe_model and not os.path.isfile(cfg.bpe_model):
        raise DataError(f"--bpe-model {cfg.bpe_model}: no such file")
    splits = binarize._split_prefixes(cfg)
    files, scans = _scan_all(cfg, pairs, splits)
    cfg = dataclasses.replace(cfg, workers=binarize._workers(cfg.workers, {"all": scans}))
    destdir = os.path.realpath(cfg.destdir)
    if os.path.isdir(destdir) and os.listdir(destdir) and not cfg.overwrite:
        raise DataError(f"--destdir {cfg.destdir}: not empty; a multilingual data-bin is written whole: use "
                        f"--overwrite to replace what earlier runs wrote, or a new folder")
    tmp = data_bin.staging_folder(destdir, cfg.destdir)
    try:
        with data_bin.lock(destdir, cfg.destdir):
            record = _build(cfg, pairs, splits, files, scans, tmp, command)
            data_bin.swap_in(tmp, destdir, True, overwrite=True)
        return record
    except OSError as exc:
        raise DataError(f"--destdir {cfg.destdir}: writing failed: {exc.strerror} ({exc.filename}); "
                        f"{cfg.destdir} was left as it was") from None
    finally:
        outputs.discard_staging(tmp)


def _build(cfg, pairs, splits, files, scans, tmp, command) -> dict:
    """The subword model, the joint dictionary and every direction's splits, written into ``tmp``."""
    train = {sides[lang]: lang for (name, _), sides in files.items() if name == "train" for lang in sides}
    codec, subword_record = binarize._subword_model(cfg, sorted(train), tmp)
    dictionary = _joint_dictionary(cfg, [scans[p] for p in sorted(train)], [train[p] for p in sorted(train)], codec)
    langs = languages(pairs)
    dicts = {lang: dictionary for lang in langs}
    for lang in langs:
        dictionary.save(os.path.join(tmp, f"dict.{lang}.txt"))
    entry = {"file": "dict.{lang}.txt", **dictionary.fingerprint()}
    record = {"version": 2, "command": list(command) if command is not None else None,
              "lang_pairs": [f"{s}-{t}" for s, t in pairs], "langs": langs, "joined_dictionary": True,
              "dictionaries": {lang: {**entry, "file": f"dict.{lang}.txt"} for lang in langs},
              "subword": subword_record, "num_shards": None, "pairs": {}}
    with binarize._Runner(cfg.workers, (*codec, dicts, None)) as runner:
        for src, tgt in pairs:
            pair_cfg = dataclasses.replace(cfg, source_lang=src, target_lang=tgt, num_shards=1)
            pair_record = {"source_lang": src, "target_lang": tgt, "splits": {},
                           "dictionaries": {lang: record["dictionaries"][lang] for lang in (src, tgt)}}
            for name, _ in splits:
                sides = {lang: scans[path] for lang, path in files[(name, (src, tgt))].items()}
                pair_record["splits"][name] = binarize._binarize_split(pair_cfg, name, sides, dicts, pair_record,
                                                                       runner, tmp)
            record["pairs"][f"{src}-{tgt}"] = pair_record
    data_bin.write_record(tmp, record)
    return record


def _joint_dictionary(cfg, train_scans: list[FileScan], langs: list[str], codec: tuple) -> Dictionary:
    """``--srcdict``, or one dictionary counted over every training file (each once), with the source
    side's threshold and size limit."""
    if cfg.srcdict:
        return Dictionary.load(cfg.srcdict)
    counts: Counter = Counter()
    for scan, lang in zip(train_scans, langs):
        counts.update(binarize._train_counts(cfg, scan, lang, codec))
    return Dictionary.from_counts(counts, cfg.thresholdsrc, cfg.nwordssrc, cfg.padding_factor)


def summary_lines(record: dict) -> list[str]:
    """The short summary nmt-preprocess prints for a multilingual record."""
    langs = record["langs"]
    first = record["dictionaries"][langs[0]]
    out = [f"dictionary: {first['size']} types, joint over {', '.join(langs)}"]
    if record.get("subword"):
        out.append(f"subword model: {record['subword']['type']} ({record['subword']['model']})")
    for pair, pair_record in record["pairs"].items():
        src, tgt = pair_record["source_lang"], pair_record["target_lang"]
        for name, entry in pair_record["splits"].items():
            parts = [f"{name} {pair}: {entry['sentences']} sentences"]
            parts += [f"[{lang}] {entry[lang]['tokens']} tokens, {100 * entry[lang]['unk_rate']:.2f}% <unk>"
                      for lang in (src, tgt)]
            out.append(", ".join(parts))
    return out

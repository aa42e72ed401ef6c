"""``nmt-preprocess``'s library half: text files → dictionaries, subword model and ``.bin/.idx`` shards.

Pipeline (:func:`preprocess`):

1. every input file is scanned once: line count, strict UTF-8 check (the error names file and line), and
   line-aligned byte ranges ("chunks") for the workers;
2. optionally one joint subword model is learned on both training sides (or ``--bpe-model`` is reused);
3. dictionaries are counted from the (encoded) training text, chunk by chunk in ``--workers`` processes;
4. every split is binarized chunk by chunk; chunks are contiguous and written in file order, so the output
   is byte-identical for any number of workers; only one chunk per worker is ever in memory.

Everything is written into a staging folder beside ``destdir`` and swapped in at the end (data_bin.py: a run
adds its splits to an existing folder, with ``--overwrite`` replaces the folder's whole set), so an error (a
full disk included) leaves ``destdir`` as it was. Each split of ``preprocess.json`` records the checksum of
the dictionaries it was encoded with; the translation task refuses a split that is not listed there or whose
checksum differs. Layout with ``--num-shards K`` (K > 1)::

    destdir/dict.<src>.txt dict.<tgt>.txt preprocess.json [spm.model | bpe.codes]
    destdir/valid.<src>-<tgt>.<lang>.{bin,idx}   destdir/test.<src>-<tgt>.<lang>.{bin,idx}
    destdir/shard0/train.<src>-<tgt>.<lang>.{bin,idx} … destdir/shard<K-1>/…

(shard ``k`` holds the contiguous lines ``[k·N/K, (k+1)·N/K)``); with K = 1 ``train.*`` sits at the top.

Several training corpora (``--trainpref a,b``) are kept apart as the splits ``train`` and ``train1``
(fairseq's layout, which its translation task concatenates): the subword model and the dictionaries are
learned over all of them, and ``nmt-train`` draws each epoch from them by weight or temperature
(data/corpora.py).
"""
from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from itertools import chain
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from nmt_toolkit import outputs
from nmt_toolkit.config import option
from nmt_toolkit.data import data_bin, directions, subword, suggestions
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.data.indexed_dataset import IndexedDatasetBuilder, best_dtype
from nmt_toolkit.data.lang_pairs import parse_lang_pairs
from nmt_toolkit.data.language_codes import check_language_code, check_language_tag
from nmt_toolkit.errors import DataError, UsageError

logger = logging.getLogger(__name__)


@dataclass
class PreprocessConfig:
    source_lang: Optional[str] = option(None, "source language (file suffix), e.g. en", metavar="LANG")
    target_lang: Optional[str] = option(None, "target language (file suffix), e.g. de", metavar="LANG")
    trainpref: Optional[str] = option(None, "training files prefix: reads PREFIX.<src> and PREFIX.<tgt>; several "
                                            "comma-separated prefixes are several corpora, kept apart as the "
                                            "splits train, train1, … (nmt-train --corpus-weights samples them); "
                                            "sqlite:DB reads the (text, suggestion) pairs of <src> → <tgt> from "
                                            "nmt-serve's --suggestions database DB",
                                      metavar="PREFIX")
    validpref: Optional[str] = option(None, "validation files prefix(es), comma-separated (valid, valid1, …; "
                                            "sqlite:DB as for --trainpref)", metavar="PREFIX")
    testpref: Optional[str] = option(None, "test files prefix(es), comma-separated (test, test1, …; sqlite:DB as "
                                           "for --trainpref)", metavar="PREFIX")
    destdir: str = option("data-bin", "output folder (new, empty, or a data-bin)", metavar="DIR", output="folder")
    joined_dictionary: bool = option(False, "one dictionary for both languages (written as both dict files)")
    srcdict: Optional[str] = option(None, "reuse this source dictionary instead of building one", metavar="FILE")
    tgtdict: Optional[str] = option(None, "reuse this target dictionary instead of building one", metavar="FILE")
    thresholdsrc: int = option(0, "drop source symbols seen fewer times than this", low=0)
    thresholdtgt: int = option(0, "drop target symbols seen fewer times than this", low=0)
    nwordssrc: int = option(-1, "keep at most this many source symbols (-1: all)", low=1, also=(-1,))
    nwordstgt: int = option(-1, "keep at most this many target symbols (-1: all)", low=1, also=(-1,))
    padding_factor: int = option(8, "pad the dictionary size to a multiple of this (madeupword fillers)", low=1,
                                 high=1024)
    workers: int = option(1, "parallel processes for counting and binarizing, at most one per CPU (output is identical for any N)", low=1)
    bpe: Optional[str] = option(None, "learn and apply a joint subword model (sentencepiece or subword_nmt) on the training text of both sides",
                                choices=list(subword.KINDS))
    bpe_vocab_size: int = option(8000, "sentencepiece vocabulary size (--bpe sentencepiece)", low=1,
                                 high=1_000_000)
    bpe_merges: int = option(32000, "number of BPE merge operations (--bpe subword_nmt)", low=1)
    bpe_model: Optional[str] = option(None, "reuse this sentencepiece model / subword-nmt codes file instead of learning one",
                                      metavar="FILE")
    lang_pairs: Optional[str] = option(None, "binarize these translation directions into one multilingual data-bin, "
                                             "comma-separated (e.g. en-de,en-fr,de-en): one joint dictionary and "
                                             "subword model over all languages, files <split>.<src>-<tgt>.<lang> "
                                             "as fairseq's translation_multi_simple_epoch reads them; each "
                                             "--trainpref/--validpref/--testpref PREFIX is read as PREFIX.<lang> "
                                             "(or PREFIX.<src>-<tgt>.<lang> where that file exists)",
                                       metavar="SRC-TGT,...")
    bpe_model_target: Optional[str] = option(None, "apply this subword model to the target side instead of --bpe-model "
                                                   "(a model with one model per side, as Marian's source.spm and "
                                                   "target.spm)", metavar="FILE")
    target_lang_tag: Optional[str] = option(None, "put this token first in every source sentence: a multilingual "
                                                  "model's target-language tag, such as >>fra<< (--model-folder "
                                                  "sets the folder's)", metavar="TAG")
    num_shards: int = option(1, "split the training data into this many shard folders (shard0, shard1, …)", low=1)
    overwrite: bool = option(False, "replace everything earlier runs wrote into --destdir (dictionaries, subword "
                                    "model, every split) by the new set; without it, new splits are added to the old "
                                    "ones, and a new direction to the folder's (docs/multilingual.md), which needs "
                                    "the same dictionaries")
    no_progress_bar: bool = option(False, "no progress bar on stderr")

    def validate(self) -> None:
        if self.lang_pairs is not None:
            self._validate_multilingual()
        elif not self.source_lang or not self.target_lang:
            raise UsageError("--source-lang and --target-lang are required")
        else:  # codes name the data-bin's files: dict.<lang>.txt, train.<src>-<tgt>.<lang>.bin
            check_language_code(self.source_lang, "--source-lang", UsageError)
            check_language_code(self.target_lang, "--target-lang", UsageError)
        if not self.destdir.strip():  # '' would be the working directory, where nobody means to write
            raise UsageError(f"--destdir {self.destdir!r}: empty; give the folder to write the data-bin into")
        if not os.path.basename(os.path.abspath(self.destdir)):
            raise UsageError(f"--destdir {self.destdir}: the file system's root; give a folder for the data-bin")
        if self.source_lang == self.target_lang and self.lang_pairs is None:
            raise UsageError(f"--source-lang and --target-lang are both {self.source_lang!r}")
        if self.workers < 1:
            raise UsageError(f"--workers must be ≥ 1, got {self.workers}")
        if self.num_shards < 1:
            raise UsageError(f"--num-shards must be ≥ 1, got {self.num_shards}")
        if self.padding_factor < 1:
            raise UsageError(f"--padding-factor must be ≥ 1, got {self.padding_factor}")
        if self.trainpref is not None and not training_prefixes(self.trainpref):
            raise UsageError(f"--trainpref {self.trainpref!r}: names no file prefix")
        if self.num_shards > 1 and len(training_prefixes(self.trainpref)) > 1:
            raise UsageError(f"--num-shards {self.num_shards}: shards are for one training corpus, and "
                             f"--trainpref names {len(training_prefixes(self.trainpref))}; binarize them "
                             f"without --num-shards")
        if not self.trainpref and not (self.srcdict and (self.tgtdict or self.joined_dictionary or self.lang_pairs)):
            raise UsageError("--trainpref is required unless dictionaries are given with --srcdict/--tgtdict")
        if self.bpe and not self.trainpref and not self.bpe_model:
            raise UsageError("--bpe needs --trainpref to learn a model, or --bpe-model to reuse one")
        if self.bpe_model_target and not self.bpe_model:
            raise UsageError("--bpe-model-target needs --bpe-model (the source side's model)")
        if self.bpe_model and not self.bpe:
            raise UsageError("--bpe-model needs --bpe sentencepiece|subword_nmt to say what kind of model it is")
        if self.bpe == "sentencepiece" and self.bpe_vocab_size < 8 and not self.bpe_model:
            raise UsageError(f"--bpe-vocab-size must be ≥ 8, got {self.bpe_vocab_size}")

    def _validate_multilingual(self) -> None:
        """--lang-pairs names the languages itself and writes one joint dictionary: the options that would
        say otherwise are refused by name."""
        for flag, value in (("--source-lang", self.source_lang), ("--target-lang", self.target_lang),
                            ("--tgtdict", self.tgtdict), ("--bpe-model-target", self.bpe_model_target),
                            ("--target-lang-tag", self.target_lang_tag)):
            if value:
                raise UsageError(f"{flag} {value}: not with --lang-pairs, which names the languages and "
                                 f"writes one dictionary for all (give it as --srcdict)")
        parse_lang_pairs(self.lang_pairs)
        if self.num_shards > 1:
            raise UsageError(f"--num-shards {self.num_shards}: not with --lang-pairs")
        if any(suggestions.names_database(p) for p in (self.trainpref, self.validpref, self.testpref)):
            raise UsageError("sqlite: prefixes (nmt-serve's suggestions) are read for one direction; binarize them "
                             "with --source-lang/--target-lang, not --lang-pairs")
        if len(training_prefixes(self.trainpref)) > 1:
            raise UsageError(f"--trainpref {self.trainpref}: one prefix with --lang-pairs (each language's "
                             f"file is PREFIX.<lang>)")


def training_prefixes(trainpref: Optional[str]) -> list[str]:
    """The corpora of ``--trainpref a,b``: one file prefix each, in the order given."""
    return [p for p in (trainpref or "").split(",") if p.strip()]


def training_split_names(splits) -> list[str]:
    """The training corpora among split names (``train``, ``train1``, …), in order."""
    return [name for name in splits if re.fullmatch(r"train\d*", name)]


# ------------------------------------------------------------------------------------------ scanning


@dataclass
class FileScan:
    path: str
    lines: int
    chunks: list  # (start byte, end byte, first line number (0-based), line count)


def scan_file(path: str, chunk_bytes: int) -> FileScan:
    """Count lines, check UTF-8 strictly, and cut the file into line-aligned chunks of ~``chunk_bytes``."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    chunks = []
    line = 0
    pos = 0
    carry = b""
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    with handle:
        while True:
            block = handle.read(chunk_bytes)
            data = carry + block
            if not block:  # end of file: whatever is left is the last line (no trailing newline)
                cut = len(data)
            else:
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    carry = data
                    continue
            piece, carry = data[:cut], data[cut:]
            if piece:
                try:
                    piece.decode("utf-8")
                except UnicodeDecodeError as exc:
                    bad = line + piece.count(b"\n", 0, exc.start) + 1
                    col = exc.start - piece.rfind(b"\n", 0, exc.start)
                    raise DataError(f"{path} line {bad}: invalid UTF-8 ({exc.reason} at byte {col})") from None
                n = piece.count(b"\n") + (0 if piece.endswith(b"\n") else 1)
                chunks.append((pos, pos + len(piece), line, n))
                line += n
                pos += len(piece)
            if not block:
                break
    return FileScan(path, line, chunks)


# ------------------------------------------------------------------------------------------ workers

_W: dict[str, Any] = {}  # per-process state set by the pool initializer: codec, dictionaries


def _init_worker(codec_kind: Optional[str], codec_path: Optional[str], target: Optional[tuple],
                 dicts: Optional[dict], source_tag: Optional[tuple] = None) -> None:
    """``target``: ``(target language, model path)`` when the target side has a subword model of its own;
    ``source_tag``: ``(source language, token)`` put first in every source sentence."""
    _W["codec"] = subword.load_codec(codec_kind, codec_path) if codec_kind else None
    _W["target"] = (target[0], subword.load_codec(codec_kind, target[1])) if target else None
    _W["dicts"] = dicts
    _W["source_tag"] = source_tag


def _read_lines(path: str, start: int, end: int) -> list[str]:
    """The lines of a chunk, one per ``\n`` as everywhere else (data/lines.py); a CRLF's ``\r`` dropped."""
    with open(path, "rb") as handle:
        handle.seek(start)
        text = handle.read(end - start).decode("utf-8")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    if "\r" in text:
        lines = [l.rstrip("\r") for l in lines]
    return lines


def _tokenized(lines: list[str], lang: str) -> Iterator[list[str]]:
    target = _W.get("target")
    codec = target[1] if target is not None and target[0] == lang else _W.get("codec")
    tokens = map(str.split, lines) if codec is None else iter(codec.encode_pieces_batch(lines))
    tag = _W.get("source_tag")
    if tag is not None and tag[0] == lang:
        return ([tag[1], *t] for t in tokens)
    return tokens


def _count_chunk(task) -> Counter:
    path, start, end, lang = task
    counts: Counter = Counter()
    counts.update(chain.from_iterable(_tokenized(_read_lines(path, start, end), lang)))
    return counts


def _binarize_chunk(task):
    """Ids of a chunk's lines back to back (EOS appended to each), their sizes, and the <unk> count."""
    path, start, end, lang, dtype = task
    d: Dictionary = _W["dicts"][lang]
    get = d.indices.__getitem__
    eos = d.eos_index
    flat: list[int] = []
    sizes: list[int] = []
    extend, append, add_size = flat.extend, flat.append, sizes.append
    for toks in _tokenized(_read_lines(path, start, end), lang):
        extend(map(get, toks))
        append(eos)
        add_size(len(toks) + 1)
    ids = np.array(flat, dtype=dtype)
    return ids, np.array(sizes, dtype=np.int32), int(np.count_nonzero(ids == d.unk_index))


class _Runner:
    """Maps a chunk function over tasks in order, in-process (workers=1) or in a pool."""

    def __init__(self, workers: int, init_args: tuple):
        self.workers = workers
        self.init_args = init_args
        self.pool = None

    def __enter__(self):
        if self.workers > 1:
            self.pool = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn").Pool(
                self.workers, initializer=_init_worker, initargs=self.init_args)
        else:
            _init_worker(*self.init_args)
        return self

    def map(self, fn: Callable, tasks: Sequence) -> Iterator:
        if self.pool is None:
            return map(fn, tasks)
        return self.pool.imap(fn, tasks)

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.terminate() if exc[0] else self.pool.close()
            self.pool.join()
        _W.clear()


def _progress(total: int, desc: str, disable: bool):
    from tqdm import tqdm  # 45 ms at import, which nmt-preprocess --help (it imports this module) need not pay

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, file=sys.stderr, leave=False,
                disable=disable or None)


# ------------------------------------------------------------------------------------------ main


def _split_prefixes(cfg: PreprocessConfig) -> list[tuple[str, str]]:
    splits = []
    for name, prefs in (("train", cfg.trainpref), ("valid", cfg.validpref), ("test", cfg.testpref)):
        for k, pref in enumerate(p for p in (prefs or "").split(",") if p):
            splits.append((name if k == 0 else f"{name}{k}", pref))
    return splits


def _workers(asked: int, scans: dict) -> int:
    """``--workers``, at most one per CPU and one per chunk of the longest file: more processes only cost
    memory and start-up time (the output is the same for any number), and an absurd number would fork
    that many processes."""
    chunks = max(len(scan.chunks) for sides in scans.values() for scan in sides.values())
    cpus = os.cpu_count() or 1
    if asked > cpus:
        logger.warning("--workers %d: this machine has %d CPUs; using %d", asked, cpus, min(cpus, chunks))
    return max(1, min(asked, cpus, chunks))


def _chunk_bytes(paths: Sequence[str], workers: int) -> int:
    biggest = max((os.path.getsize(p) for p in paths if os.path.isfile(p)), default=0)
    return int(min(4 << 20, max(256 << 10, biggest // max(1, 4 * workers))))


class _ShardWriter:
    """Routes consecutive lines to shard builders by line number (contiguous ranges)."""

    def __init__(self, prefixes: list[str], bounds: list[int], dtype):
        self.builders = [IndexedDatasetBuilder(p, dtype) for p in prefixes]
        self.bounds = bounds  # shard k holds lines [bounds[k], bounds[k+1])

    def add(self, first_line: int, ids: np.ndarray, sizes: np.ndarray) -> None:
        ends = np.cumsum(sizes, dtype=np.int64)
        starts = ends - sizes
        n = len(sizes)
        for k, builder in enumerate(self.builders):
            lo = max(self.bounds[k], first_line) - first_line
            hi = min(self.bounds[k + 1], first_line + n) - first_line
            if lo < hi:
                builder.add_chunk(ids[starts[lo]: ends[hi - 1]], sizes[lo:hi])

    def finalize(self) -> None:
        for b in self.builders:
            b.finalize()


def preprocess(cfg: PreprocessConfig, command: Optional[Sequence[str]] = None) -> dict:
    """Run the whole pipeline; returns this run's ``preprocess.json`` record. Raises DataError/UsageError.

    A ``sqlite:DB`` prefix (nmt-serve's suggestions) is first written out as a pair of text files in a
    temporary folder, which then stands in for it: the rest of the pipeline (scanning, chunking, workers)
    reads text files only, and the database is only read."""
    cfg.validate()
    prefs = (cfg.trainpref, cfg.validpref, cfg.testpref)
    if not any(suggestions.names_database(p) for p in prefs):
        return _preprocess_files(cfg, command)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nmt-suggestions.") as folder:
        train, valid, test = (_from_databases(cfg, p, option, folder) for p, option in
                              zip(prefs, ("--trainpref", "--validpref", "--testpref")))
        return _preprocess_files(dataclasses.replace(cfg, trainpref=train, validpref=valid, testpref=test), command)


def _from_databases(cfg: PreprocessConfig, prefixes: Optional[str], option: str, folder: str) -> Optional[str]:
    """``prefixes`` with each ``sqlite:DB`` entry replaced by the prefix of text files holding its pairs of the
    run's direction; a database without any is refused, as an empty text corpus is."""
    if not suggestions.names_database(prefixes):
        return prefixes
    entries = [p for p in prefixes.split(",") if p]
    for k, path in suggestions.database_prefixes(prefixes):
        prefix = os.path.join(folder, f"{option.strip('-')}{k}")
        n = suggestions.write_corpus(path, cfg.source_lang, cfg.target_lang, prefix, f"{option} {entries[k]}")
        if n == 0:  # named here: the text files standing in for it are temporary
            raise DataError(f"{option} {entries[k]}: no suggestions of {cfg.source_lang}-{cfg.target_lang} in it")
        logger.info("%s %s: %d suggestions of %s-%s", option, entries[k], n, cfg.source_lang, cfg.target_lang)
        entries[k] = prefix
    return ",".join(entries)


def _preprocess_files(cfg: PreprocessConfig, command: Optional[Sequence[str]]) -> dict:
    data_bin.claim(os.path.realpath(cfg.destdir), cfg.destdir)
    src, tgt = cfg.source_lang, cfg.target_lang
    splits = _split_prefixes(cfg)
    for opt, path in (("--srcdict", cfg.srcdict), ("--tgtdict", cfg.tgtdict), ("--bpe-model", cfg.bpe_model),
                      ("--bpe-model-target", cfg.bpe_model_target)):
        if path and not os.path.isfile(path):
            raise DataError(f"{opt} {path}: " + ("a folder, not a file" if os.path.isdir(path) else "no such file"))
    paths = [f"{pref}.{lang}" for _, pref in splits for lang in (src, tgt)]
    chunk_bytes = _chunk_bytes(paths, cfg.workers)
    scans: dict[str, dict[str, FileScan]] = {}
    for name, pref in splits:
        scans[name] = {lang: scan_file(f"{pref}.{lang}", chunk_bytes) for lang in (src, tgt)}
        a, b = scans[name][src], scans[name][tgt]
        if a.lines != b.lines:
            raise DataError(f"{name} files differ in length: {a.path} has {a.lines} lines, {b.path} has {b.lines}")
    for name in training_split_names(scans):
        if scans[name][src].lines == 0:
            raise DataError(f"empty training set: {scans[name][src].path} and {scans[name][tgt].path} have no lines")
    for name, sides in scans.items():  # an empty valid split would validate as loss 0 and become the best
        if name not in training_split_names(scans) and sides[src].lines == 0:
            option = "--validpref" if name.startswith("valid") else "--testpref"
            raise DataError(f"{option}: {sides[src].path} and {sides[tgt].path} have no lines; give files with "
                            f"sentences, or leave the split out")
    if cfg.trainpref and cfg.num_shards > scans["train"][src].lines:  # a shard without lines is an empty epoch
        n = scans["train"][src].lines
        raise UsageError(f"--num-shards {cfg.num_shards}: more shards than the {n} lines of "
                         f"{scans['train'][src].path}; use at most {n}")
    cfg = dataclasses.replace(cfg, workers=_workers(cfg.workers, scans))

    destdir = os.path.realpath(cfg.destdir)
    tmp = data_bin.staging_folder(destdir, cfg.destdir)
    try:
        with data_bin.lock(destdir, cfg.destdir):  # the folder's record is read, merged and replaced by one run
            previous = None if cfg.overwrite else data_bin.previous_record(destdir, cfg.destdir, src, tgt)
            multilingual = directions.joins_multilingual(previous, src, tgt)
            if multilingual:
                directions.check_options(cfg, previous, destdir)
            record = _build(cfg, splits, scans, tmp, destdir, command, previous if multilingual else None)
            if previous:  # the folder's record lists its old splits too; the summary, this run's
                combined = (directions.merged if multilingual else data_bin.merged)(previous, record)
                data_bin.write_record(tmp, combined)
            data_bin.swap_in(tmp, destdir, bool(cfg.trainpref), cfg.overwrite, f"{src}-{tgt}")
        if multilingual:
            logger.info("--destdir %s holds the directions %s", cfg.destdir, ", ".join(combined["lang_pairs"]))
        return record
    except OSError as exc:  # a full disk (ENOSPC, or EFBIG under a file size limit), a folder gone read-only
        named = os.path.abspath(exc.filename) if isinstance(exc.filename, str) else None
        ours = (destdir + os.sep, os.path.join(os.path.dirname(destdir), f".{os.path.basename(destdir)}."))
        if named and not named.startswith(ours):  # not the staging, trash or data-bin folder: an input file
            raise DataError(f"{exc.filename}: cannot read ({exc.strerror}); --destdir {cfg.destdir} was left "
                            f"as it was") from None
        where = f" ({exc.filename})" if exc.filename else ""
        raise DataError(f"--destdir {cfg.destdir}: writing failed: {exc.strerror}{where}; "
                        f"{cfg.destdir} was left as it was") from None
    finally:
        outputs.discard_staging(tmp)


def _build(cfg, splits, scans, tmp, destdir, command, joined: Optional[dict] = None) -> dict:
    """The data-bin in ``tmp``, in three steps: the subword model, the dictionaries, the binarized splits
    with their ``preprocess.json`` record (returned). ``joined``: the record of the multilingual folder the
    run's direction joins, whose one dictionary the run's must be."""
    codec, subword_record = _subword_model(cfg, training_paths(cfg, scans), tmp)
    dicts = _dictionaries(cfg, scans, codec, tmp, destdir, joined)
    record = _record(cfg, dicts, subword_record, command)
    with _Runner(cfg.workers, (*codec, dicts, _source_tag(cfg))) as runner:
        for name, _ in splits:
            record["splits"][name] = _binarize_split(cfg, name, scans[name], dicts, record, runner, tmp)
    data_bin.write_record(tmp, record)
    return record


def _source_tag(cfg) -> Optional[tuple]:
    return (cfg.source_lang, cfg.target_lang_tag) if cfg.target_lang_tag else None


def training_paths(cfg, scans) -> list[str]:
    """The text files of every training corpus, both sides: what the subword model is learned on."""
    return [scans[name][lang].path for name in training_split_names(scans)
            for lang in (cfg.source_lang, cfg.target_lang)]


def _subword_model(cfg, train: Sequence[str], tmp) -> tuple[tuple, Optional[dict]]:
    """Step 1: the subword model (--bpe-model copied, or learned jointly on the ``train`` files) in ``tmp``;
    returns ``(kind, path)`` (both None without --bpe) and its record."""
    codec_kind = cfg.bpe
    if not codec_kind:
        return (None, None, None), None
    codec_path = os.path.join(tmp, subword.model_file_name(codec_kind))
    if cfg.bpe_model:
        subword.load_codec(codec_kind, cfg.bpe_model)  # fail early on a bad model, naming the user's file
        shutil.copyfile(cfg.bpe_model, codec_path)
    else:
        logger.info("learning a joint %s model on %s", codec_kind, ", ".join(train))
        if codec_kind == "sentencepiece":
            _learn_sentencepiece(cfg, train, codec_path)
        else:
            subword.learn_subword_nmt(train, codec_path, cfg.bpe_merges)
    record = {"type": codec_kind, "model": os.path.basename(codec_path),
              "source": os.path.abspath(cfg.bpe_model) if cfg.bpe_model else None,
              "vocab_size": cfg.bpe_vocab_size if codec_kind == "sentencepiece" and not cfg.bpe_model else None,
              "pieces": (subword.load_codec(codec_kind, codec_path).sp.get_piece_size()
                         if codec_kind == "sentencepiece" else None),
              "merges": cfg.bpe_merges if codec_kind == "subword_nmt" and not cfg.bpe_model else None}
    target = None
    if cfg.bpe_model_target and not os.path.samefile(cfg.bpe_model_target, cfg.bpe_model):
        subword.load_codec(codec_kind, cfg.bpe_model_target)
        target_path = os.path.join(tmp, "target." + subword.model_file_name(codec_kind))
        shutil.copyfile(cfg.bpe_model_target, target_path)
        target = (cfg.target_lang, target_path)
        record["target_model"] = os.path.basename(target_path)  # absent when one model serves both sides
    return (codec_kind, codec_path, target), record


def _learn_sentencepiece(cfg, train: list[str], codec_path: str) -> None:
    subword.learn_sentencepiece(train, codec_path[: -len(".model")], cfg.bpe_vocab_size, cfg.workers)
    vocab_file = codec_path[: -len(".model")] + ".vocab"
    if os.path.exists(vocab_file):
        os.remove(vocab_file)
    learned = subword.load_codec("sentencepiece", codec_path).sp.get_piece_size()
    if learned < cfg.bpe_vocab_size:  # sentencepiece stops early on small corpora (no hard limit)
        logger.warning("--bpe-vocab-size %d: the training text supports only %d pieces; using %d",
                       cfg.bpe_vocab_size, learned, learned)


def _dictionaries(cfg, scans, codec: tuple, tmp, destdir, joined: Optional[dict] = None) -> dict:
    """Step 2: one dictionary per language (given, or counted over the subword-encoded text of every
    training corpus), saved in ``tmp``; a different dictionary already in ``destdir`` is refused unless
    --overwrite, and so is any but the joint one of the multilingual folder the run joins (``joined``)."""
    src, tgt = cfg.source_lang, cfg.target_lang

    def build_dict(given: Optional[str], langs: Sequence[str], threshold: int, nwords: int) -> Dictionary:
        if given:
            return Dictionary.load(given)
        counts: Counter = Counter()
        for lang in langs:
            for name in training_split_names(scans):
                counts.update(_train_counts(cfg, scans[name][lang], lang, codec))
        return Dictionary.from_counts(counts, threshold, nwords, cfg.padding_factor)

    if cfg.joined_dictionary:
        if cfg.srcdict and cfg.tgtdict and Dictionary.load(cfg.srcdict) != Dictionary.load(cfg.tgtdict):
            raise UsageError(f"--joined-dictionary: --srcdict {cfg.srcdict} and --tgtdict {cfg.tgtdict} differ")
        src_dict = build_dict(cfg.srcdict or cfg.tgtdict, (src, tgt), cfg.thresholdsrc, cfg.nwordssrc)
        tgt_dict = src_dict
    else:
        src_dict = build_dict(cfg.srcdict, (src,), cfg.thresholdsrc, cfg.nwordssrc)
        tgt_dict = build_dict(cfg.tgtdict, (tgt,), cfg.thresholdtgt, cfg.nwordstgt)
    dicts = {src: src_dict, tgt: tgt_dict}
    if cfg.target_lang_tag:  # what every reader of the data-bin checks it against, checked before writing it
        check_language_tag(cfg.target_lang_tag, src_dict.symbols, "--target-lang-tag", UsageError,
                           f"the source dictionary {cfg.srcdict or ''}".strip())
    if joined is not None:
        directions.check_dictionaries(joined, dicts, cfg.destdir)
    for lang, d in dicts.items():
        _check_existing_dictionary(cfg, os.path.join(destdir, f"dict.{lang}.txt"), d)
        d.save(os.path.join(tmp, f"dict.{lang}.txt"))
    return dicts


def _train_counts(cfg, scan, lang: str, codec: tuple) -> Counter:
    """Token counts of one training file, its chunks counted by the workers."""
    total: Counter = Counter()
    with _Runner(cfg.workers, (*codec, None, _source_tag(cfg))) as runner, \
            _progress(os.path.getsize(scan.path), f"counting {lang}", cfg.no_progress_bar) as bar:
        for (start, end, _, _), counts in zip(scan.chunks, runner.map(_count_chunk, [(scan.path, s, e, lang) for s, e, _, _ in scan.chunks])):
            total.update(counts)
            bar.update(end - start)
    return total


def _check_existing_dictionary(cfg, existing: str, d: Dictionary) -> None:
    if os.path.exists(existing) and not cfg.overwrite:
        try:
            same = Dictionary.load(existing) == d
        except DataError:
            same = False
        if not same:
            raise DataError(f"--destdir {cfg.destdir} already holds a different dictionary {existing}; "
                            f"use --overwrite to replace it, or another --destdir")


def _record(cfg, dicts: dict, subword_record: Optional[dict], command) -> dict:
    """Step 3a: the ``preprocess.json`` record, its splits filled in by :func:`_binarize_split`."""
    return {
        "version": 2,
        "command": list(command) if command is not None else None,
        "source_lang": cfg.source_lang, "target_lang": cfg.target_lang,
        "joined_dictionary": bool(cfg.joined_dictionary),
        "dictionaries": {lang: {"file": f"dict.{lang}.txt", **d.fingerprint()} for lang, d in dicts.items()},
        "subword": subword_record,
        **({"target_lang_tag": cfg.target_lang_tag} if cfg.target_lang_tag else {}),
        "num_shards": cfg.num_shards if cfg.trainpref else None,
        "splits": {},
    }


def _binarize_split(cfg, name: str, scans: dict, dicts: dict, record: dict, runner, tmp) -> dict:
    """Step 3b: both sides of one split binarized into ``tmp`` (the training split in --num-shards shards);
    returns the split's record entry."""
    src, tgt = cfg.source_lang, cfg.target_lang
    shards = cfg.num_shards if name == "train" else 1
    n = scans[src].lines
    checksums = {lang: entry["sha256"] for lang, entry in record["dictionaries"].items()}
    entry: dict = {"sentences": n, "shards": shards, "dictionaries": checksums}
    for lang in (src, tgt):
        scan = scans[lang]
        dtype = best_dtype(len(dicts[lang]))
        base = f"{name}.{src}-{tgt}.{lang}"
        if shards > 1:
            prefixes = []
            for k in range(shards):
                os.makedirs(os.path.join(tmp, f"shard{k}"), exist_ok=True)
                prefixes.append(os.path.join(tmp, f"shard{k}", base))
        else:
            prefixes = [os.path.join(tmp, base)]
        bounds = [k * n // shards for k in range(shards + 1)]
        writer = _ShardWriter(prefixes, bounds, dtype)
        tokens = unks = 0
        tasks = [(scan.path, s, e, lang, dtype) for s, e, _, _ in scan.chunks]
        with _progress(os.path.getsize(scan.path), f"{name}.{lang}", cfg.no_progress_bar) as bar:
            for (s, e, first, _), (ids, sizes, n_unk) in zip(scan.chunks, runner.map(_binarize_chunk, tasks)):
                writer.add(first, ids, sizes)
                tokens += int(len(ids))
                unks += n_unk
                bar.update(e - s)
        writer.finalize()
        entry[lang] = {"file": scan.path, "tokens": tokens, "unk": unks,
                       "unk_rate": round(unks / tokens, 6) if tokens else 0.0}
    return entry


def summary_lines(record: dict) -> list[str]:
    """A short human summary of a ``preprocess.json`` record (printed on stdout by the CLI)."""
    src, tgt = record["source_lang"], record["target_lang"]
    out = [f"dictionaries: [{src}] {record['dictionaries'][src]['size']} types, "
           f"[{tgt}] {record['dictionaries'][tgt]['size']} types"
           + (" (joined)" if record["joined_dictionary"] else "")]
    if record.get("subword"):
        out.append(f"subword model: {record['subword']['type']} ({record['subword']['model']})")
    for name, entry in record["splits"].items():
        parts = [f"{name}: {entry['sentences']} sentences"]
        for lang in (src, tgt):
            e = entry[lang]
            parts.append(f"[{lang}] {e['tokens']} tokens, {100 * e['unk_rate']:.2f}% <unk>")
        if entry.get("shards", 1) > 1:
            parts.append(f"{entry['shards']} shards")
        out.append(", ".join(parts))
    return out

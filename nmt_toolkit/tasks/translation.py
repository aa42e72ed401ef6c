"""The translation task: a data-bin folder written by ``nmt-preprocess`` → dictionaries, datasets, batches.

A model folder (``nmt_toolkit/model_folder.py``) in place of the data-bin gives a task with the folder's
dictionaries, languages and subword models and no binarized splits: what decoding raw text needs.

``--max-tokens`` counts **padded** tokens: a batch of B pairs whose longest pair (the larger of source and
target length, EOS included) has L tokens costs B × L, as fairseq's ``batch_by_size``. Pairs longer than
``--max-source-positions``/``--max-target-positions`` (or than ``--max-tokens`` alone) are skipped with a
count in the log (in the training split always; in other splits only with
``--skip-invalid-size-inputs-valid-test``, else it is an error).

Sharded training data (``destdir/shard0 …``, ``nmt-preprocess --num-shards K``): epoch ``e`` reads shard
``(e-1) mod K``; the iterator of the training split reloads the right shard itself when the epoch changes.

Several training corpora (``train``, ``train1``, …: ``nmt-preprocess --trainpref a,b``) are read as one
training set once :meth:`TranslationTask.sample_corpora` names the split; each epoch is drawn from them as
data/corpora.py says, and the iterator reloads the draw when the epoch changes.
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from nmt_toolkit.config import check_ranges, option
from nmt_toolkit.data import subword
from nmt_toolkit.data.batching import EpochBatchIterator, batch_by_size
from nmt_toolkit.data.data_bin import check_record, pair_record
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.data.indexed_dataset import MMapIndexedDataset, dataset_exists
from nmt_toolkit.data.json_files import read_json
from nmt_toolkit.data.language_codes import check_language_code, check_language_tag
from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.export_record import export_dictionaries, is_export_folder, read_export
from nmt_toolkit.model_folder import ModelFolder, is_model_folder, read_model_folder
from nmt_toolkit.registry import register_task

if TYPE_CHECKING:  # the datasets import torch: a task's options and dictionaries load without it
    from nmt_toolkit.data import corpora as corpus_mix
    from nmt_toolkit.data.pair_dataset import LanguagePairDataset

logger = logging.getLogger(__name__)


@dataclass
class TranslationConfig:
    data: Optional[str] = option(None, "data-bin folder written by nmt-preprocess", positional=True, metavar="DATA")
    source_lang: Optional[str] = option(None, "source language (default: from preprocess.json or the file names)",
                                        metavar="LANG")
    target_lang: Optional[str] = option(None, "target language (default: from preprocess.json or the file names)",
                                        metavar="LANG")
    max_tokens: Optional[int] = option(4096, "batch budget in padded tokens: batch size × longest pair "
                                             "(max of source and target length)", low=1)
    batch_size: Optional[int] = option(None, "at most this many sentence pairs per batch", low=1)
    required_batch_size_multiple: int = option(8, "make batch sizes a multiple of this when the budget allows", low=1)
    max_source_positions: int = option(1024, "skip pairs whose source is longer than this (tokens, EOS included)",
                                       low=1)
    max_target_positions: int = option(1024, "skip pairs whose target is longer than this (tokens, EOS included)",
                                       low=1)
    skip_invalid_size_inputs_valid_test: bool = option(False, "skip over-long pairs in validation/test splits "
                                                              "too (the training split always skips them)")

    def validate(self) -> None:
        check_ranges(self)
        if self.max_tokens is None and self.batch_size is None:
            raise UsageError("batches need a budget: give --max-tokens or --batch-size")


def read_preprocess_json(data: str) -> dict:
    path = os.path.join(data, "preprocess.json")
    if not os.path.exists(path):
        return {}
    record = read_json(path, "the data-bin's record")
    check_record(path, record)
    return record


def export_data_record(record: dict) -> dict:
    """What a CTranslate2 export records of the data it was made from, shaped as ``preprocess.json`` (the
    subword model, whose file sits in the folder, and the target-language tag)."""
    return {key: record[key] for key in ("subword", "target_lang_tag") if record.get(key) is not None}


def infer_language_pair(data: str) -> tuple[str, str]:
    """``(src, tgt)`` from ``preprocess.json``, else from ``<split>.<src>-<tgt>.<lang>.idx`` file names."""
    record = read_preprocess_json(data)
    if record.get("source_lang") and record.get("target_lang"):
        return record["source_lang"], record["target_lang"]
    if record.get("lang_pairs"):
        raise DataError(f"{data}: a multilingual data-bin ({', '.join(record['lang_pairs'])}); give "
                        f"--source-lang and --target-lang")
    pattern = re.compile(r"^[^.]+\.([^.-]+)-([^.-]+)\.[^.]+\.idx$")
    for root in [data] + [os.path.join(data, d) for d in sorted(os.listdir(data)) if d.startswith("shard")]:
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            m = pattern.match(name)
            if m:
                for lang in m.groups():
                    check_language_code(lang, f"{os.path.join(root, name)}: the language in the file name")
                return m.group(1), m.group(2)
    raise DataError(f"{data}: cannot tell the language pair (no preprocess.json, no <split>.<src>-<tgt>.<lang>.idx); "
                    f"give --source-lang and --target-lang")


@register_task("translation", config=TranslationConfig)
class TranslationTask:
    """Dictionaries and datasets of one data-bin folder; builds batch iterators and models."""

    def __init__(self, cfg: TranslationConfig, src_dict: Dictionary, tgt_dict: Dictionary):
        self.cfg = cfg
        self.src_dict = src_dict
        self.tgt_dict = tgt_dict
        self.datasets: dict[str, LanguagePairDataset] = {}
        self.model_folder: Optional[ModelFolder] = None
        #: every language the model translates from or into (a multilingual task: each with a token)
        self.langs: list[str] = [lang for lang in (cfg.source_lang, cfg.target_lang) if lang]
        self._record = read_preprocess_json(cfg.data) if cfg.data else {}
        self._corpus_sampling: Optional[tuple] = None  # (split, CorpusSamplingConfig, seed)
        self._corpora: Optional[list] = None
        self._codecs: dict[tuple, Any] = {}  # subword(): each model file read once, not once per call

    # ------------------------------------------------------------------ setup
    @classmethod
    def setup_task(cls, cfg: TranslationConfig, model_folder: Optional[ModelFolder] = None,
                   export: Optional[dict] = None, **kwargs) -> "TranslationTask":
        """The task of the data-bin ``cfg.data``, or of the model folder or CTranslate2 export there
        (``model_folder``, ``export``: what was read of it already, so that it is not read twice)."""
        if not cfg.data:
            raise UsageError("the data-bin folder (positional DATA) is required")
        if is_model_folder(cfg.data):
            return cls.from_model_folder(cfg, model_folder or read_model_folder(cfg.data))
        if export is not None or is_export_folder(cfg.data):
            return cls.from_export(cfg, export or read_export(cfg.data))
        if not os.path.isdir(cfg.data):
            raise DataError(f"{cfg.data}: no such data folder (run nmt-preprocess first)")
        for flag, lang in (("--source-lang", cfg.source_lang), ("--target-lang", cfg.target_lang)):
            if lang:  # it names the dictionary and split files
                check_language_code(lang, flag, UsageError)
        if not cfg.source_lang or not cfg.target_lang:
            src, tgt = infer_language_pair(cfg.data)
            cfg.source_lang = cfg.source_lang or src
            cfg.target_lang = cfg.target_lang or tgt
        src_dict = cls.load_dictionary(os.path.join(cfg.data, f"dict.{cfg.source_lang}.txt"))
        tgt_dict = cls.load_dictionary(os.path.join(cfg.data, f"dict.{cfg.target_lang}.txt"))
        for d in (src_dict, tgt_dict):
            if (d.pad(), d.eos(), d.unk()) != (src_dict.pad(), src_dict.eos(), src_dict.unk()):
                raise DataError(f"{cfg.data}: source and target dictionaries disagree on special symbols")
        logger.info("[%s] dictionary: %d types; [%s] dictionary: %d types", cfg.source_lang, len(src_dict),
                    cfg.target_lang, len(tgt_dict))
        task = cls(cfg, src_dict, tgt_dict)
        tag = task._record.get("target_lang_tag")
        if tag is not None:  # put before every source: a tag of the source dictionary, not any symbol
            check_language_tag(tag, src_dict.symbols, f"{os.path.join(cfg.data, 'preprocess.json')}: target_lang_tag",
                               owner=os.path.join(cfg.data, f"dict.{cfg.source_lang}.txt"))
        return task

    @classmethod
    def from_model_folder(cls, cfg: TranslationConfig, folder: ModelFolder) -> "TranslationTask":
        """The task of a model folder: its dictionaries, languages and subword models; no splits to load."""
        for flag, given, own in (("--source-lang", cfg.source_lang, folder.source_lang),
                                 ("--target-lang", cfg.target_lang, folder.target_lang)):
            if given and given != own:
                raise UsageError(f"{flag} {given}: the model folder {folder.path} translates "
                                 f"{folder.source_lang}→{folder.target_lang}")
        cfg.source_lang, cfg.target_lang = folder.source_lang, folder.target_lang
        task = cls(cfg, folder.src_dict, folder.tgt_dict)
        task.model_folder = folder
        if folder.codec_kind:
            task._record = {"subword": {"type": folder.codec_kind, "model": folder.subword_paths["source"]}}
        return task

    @classmethod
    def from_export(cls, cfg: TranslationConfig, record: dict) -> "TranslationTask":
        """The task of a folder ``nmt-export --format ctranslate2`` wrote: the dictionaries, languages, subword
        model and language tag it holds beside the model (``nmt_export.json``); no splits to load."""
        if record.get("task") is not None:
            raise UsageError(f"{cfg.data}: a multilingual CTranslate2 export ({', '.join(record.get('languages') or [])}),"
                             f" decoded with --task translation_multi_simple_epoch")
        for flag, given, own in (("--source-lang", cfg.source_lang, record.get("source_lang")),
                                 ("--target-lang", cfg.target_lang, record.get("target_lang"))):
            if given and given != own:
                raise UsageError(f"{flag} {given}: the export {cfg.data} translates {record.get('source_lang')}→"
                                 f"{record.get('target_lang')}")
        cfg.source_lang, cfg.target_lang = record.get("source_lang"), record.get("target_lang")
        task = cls(cfg, *export_dictionaries(cfg.data, record))
        task._record = export_data_record(record)
        return task

    @staticmethod
    def load_dictionary(path: str) -> Dictionary:
        if not os.path.exists(path):
            raise DataError(f"{path}: no such dictionary file")
        return Dictionary.load(path)

    @property
    def source_dictionary(self) -> Dictionary:
        return self.src_dict

    @property
    def target_dictionary(self) -> Dictionary:
        return self.tgt_dict

    def max_positions(self) -> tuple[int, int]:
        return self.cfg.max_source_positions, self.cfg.max_target_positions

    # ------------------------------------------------------------------ data
    def num_shards(self, split: str = "train") -> int:
        """How many shard folders hold ``split`` (1 when it sits at the top of the data folder)."""
        k = 0
        while os.path.isdir(os.path.join(self.cfg.data, f"shard{k}")) and \
                dataset_exists(self._prefix(os.path.join(self.cfg.data, f"shard{k}"), split, self.cfg.source_lang)):
            k += 1
        return max(k, 1)

    def _prefix(self, folder: str, split: str, lang: str) -> str:
        return os.path.join(folder, f"{split}.{self.cfg.source_lang}-{self.cfg.target_lang}.{lang}")

    def split_folder(self, split: str, epoch: int = 1) -> str:
        data = self.cfg.data
        if dataset_exists(self._prefix(data, split, self.cfg.source_lang)):
            return data
        k = self.num_shards(split)
        folder = os.path.join(data, f"shard{(epoch - 1) % k}")
        if dataset_exists(self._prefix(folder, split, self.cfg.source_lang)):
            return folder
        raise DataError(f"{self._prefix(data, split, self.cfg.source_lang)}.idx: no such split in {data} "
                        f"(splits are written by nmt-preprocess --trainpref/--validpref/--testpref)")

    def check_split(self, split: str) -> None:
        """Refuse a split that ``preprocess.json`` does not list, or that was encoded with other dictionaries.

        Such files are left from an earlier run (ids of another vocabulary): training on or decoding them
        gives garbage without a word. A folder without ``preprocess.json`` (fairseq's) is not checked."""
        record = pair_record(self._record, self.cfg.source_lang, self.cfg.target_lang)
        if not record or (record.get("source_lang"), record.get("target_lang")) != \
                (self.cfg.source_lang, self.cfg.target_lang):
            return
        path = os.path.join(self.cfg.data, "preprocess.json")
        splits = record.get("splits") or {}
        if split not in splits:
            raise DataError(f"{path} does not list the split {split!r} (it lists {', '.join(splits) or 'none'}): "
                            f"its files are left from an earlier nmt-preprocess run; binarize it again")
        recorded = splits[split].get("dictionaries") or {}
        for lang, d in ((self.cfg.source_lang, self.src_dict), (self.cfg.target_lang, self.tgt_dict)):
            if recorded.get(lang) not in (None, d.checksum()):
                raise DataError(f"{path}: the split {split!r} was encoded with another dictionary than "
                                f"{os.path.join(self.cfg.data, f'dict.{lang}.txt')} (checksums differ); "
                                f"binarize it again with this dictionary")

    def sample_corpora(self, split: str, cfg: "corpus_mix.CorpusSamplingConfig", seed: int) -> None:
        """Read ``split`` with its sibling corpora ``split1``, ``split2``, … as one training set, each
        epoch drawn under ``cfg`` with ``seed``; the options are checked against the corpora found (the
        multilingual task draws its directions instead)."""
        cfg.check_corpora(self.corpus_names(split))
        self._corpus_sampling = (split, cfg, seed)

    def corpus_names(self, split: str) -> list[str]:
        """``split`` and the corpora binarized beside it: ``train``, ``train1``, … as fairseq numbers them."""
        names = [split]
        while self.cfg.data and dataset_exists(self._prefix(self.cfg.data, f"{split}{len(names)}",
                                                            self.cfg.source_lang)):
            names.append(f"{split}{len(names)}")
        return names

    def _drawn_epochs(self, split: str) -> bool:
        """Whether ``split`` is several corpora whose epochs are drawn anew (not a fixed concatenation)."""
        sampling = self._corpus_sampling
        return sampling is not None and sampling[0] == split and sampling[1].resamples() and \
            len(self.corpus_names(split)) > 1

    def load_dataset(self, split: str, epoch: int = 1, **kwargs) -> LanguagePairDataset:
        sampling = self._corpus_sampling
        if sampling is not None and sampling[0] == split and len(self.corpus_names(split)) > 1:
            return self._load_mixture(split, epoch, sampling[1], sampling[2])
        dataset = self._read_split(split, epoch)
        self.datasets[split] = dataset
        return dataset

    def _load_mixture(self, split: str, epoch: int, cfg, seed: int) -> LanguagePairDataset:
        from nmt_toolkit.data import corpora as corpus_mix

        names = self.corpus_names(split)
        if self._corpora is None:
            self._corpora = [self._read_split(name, epoch) for name in names]
        mixture = corpus_mix.mix(self._corpora, names, cfg, seed, epoch)
        mixture.split, mixture.epoch = split, epoch
        self.datasets[split] = mixture
        logger.info("%s: epoch %d reads %d pairs: %s", split, epoch, len(mixture), mixture.composition())
        return mixture

    def _read_split(self, split: str, epoch: int) -> LanguagePairDataset:
        from nmt_toolkit.data.pair_dataset import LanguagePairDataset

        folder = self.split_folder(split, epoch)
        self.check_split(split)
        src = MMapIndexedDataset(self._prefix(folder, split, self.cfg.source_lang), len(self.src_dict),
                                 self.src_dict.eos())
        tgt = MMapIndexedDataset(self._prefix(folder, split, self.cfg.target_lang), len(self.tgt_dict),
                                 self.tgt_dict.eos())
        if len(src) != len(tgt):
            raise DataError(f"{src.prefix} and {tgt.prefix}: {len(src)} vs {len(tgt)} sentences")
        if not len(src):  # an empty valid split would validate as loss 0, an empty test split print nothing
            raise DataError(f"{src.prefix}.idx: the split {split!r} holds no sentences; binarize it again from "
                            f"files with lines, or leave it out")
        dataset = LanguagePairDataset(src, src.sizes, self.src_dict, tgt, tgt.sizes, self.tgt_dict)
        dataset.split, dataset.epoch = split, epoch
        logger.info("%s: %d pairs from %s", split, len(dataset), folder)
        return dataset

    def dataset(self, split: str) -> LanguagePairDataset:
        if split not in self.datasets:
            raise DataError(f"split {split!r} is not loaded (call load_dataset first)")
        return self.datasets[split]

    def build_dataset_for_inference(self, src_tokens: list, src_lengths=None) -> LanguagePairDataset:
        """Source-only pairs for generation from raw token id arrays (each ending with EOS)."""
        from nmt_toolkit.data.pair_dataset import LanguagePairDataset

        sizes = np.array([len(t) for t in src_tokens], dtype=np.int64)
        return LanguagePairDataset(src_tokens, sizes, self.src_dict, tgt_dict=self.tgt_dict)

    # ------------------------------------------------------------------ batching
    def _batches(self, dataset, max_tokens, max_sentences, seed, required_batch_size_multiple, max_positions,
                 strict: bool, shuffle_ties: bool = True) -> list:
        indices = dataset.ordered_indices(shuffle=shuffle_ties, seed=seed)
        if max_positions is None:
            max_positions = self.max_positions()
        indices, dropped = dataset.filter_by_size(indices, max_positions)
        if max_tokens:
            fits = dataset.num_tokens_vec()[indices] <= max_tokens
            dropped = np.concatenate([dropped, indices[~fits]])
            indices = indices[fits]
        if len(dropped):
            name = getattr(dataset, "split", "dataset")
            if strict:
                raise DataError(f"{name}: {len(dropped)} pairs are longer than --max-source-positions/"
                                f"--max-target-positions/--max-tokens (e.g. pair {int(dropped[0])}); "
                                f"use --skip-invalid-size-inputs-valid-test to skip them")
            logger.warning("%s: skipped %d pairs longer than max positions %s or --max-tokens %s",
                           name, len(dropped), tuple(max_positions), max_tokens)
        return batch_by_size(indices, dataset.num_tokens_vec(), max_tokens, max_sentences,
                             required_batch_size_multiple)

    def get_batch_iterator(self, dataset: Union[str, LanguagePairDataset, None] = None, max_tokens: Optional[int] = None,
                           max_sentences: Optional[int] = None, seed: int = 1, num_shards: int = 1, shard_id: int = 0,
                           epoch: int = 1, shuffle: bool = True, required_batch_size_multiple: Optional[int] = None,
                           max_positions: Any = None, split: Optional[str] = None) -> EpochBatchIterator:
        """An :class:`EpochBatchIterator` over ``dataset`` (a dataset or a loaded split's name).

        Budgets default to the task's ``--max-tokens``/``--batch-size``/``--required-batch-size-multiple``.
        ``shuffle`` is the default of ``next_epoch_itr``. The training split of sharded data reloads shard
        ``(epoch-1) mod K`` when the epoch moves on.
        """
        if dataset is None or isinstance(dataset, str):
            split = dataset or split or "train"
            dataset = self.datasets.get(split) or self.load_dataset(split, epoch=epoch)
        split = getattr(dataset, "split", split)
        max_tokens = self.cfg.max_tokens if max_tokens is None else max_tokens
        max_sentences = self.cfg.batch_size if max_sentences is None else max_sentences
        if required_batch_size_multiple is None:
            required_batch_size_multiple = self.cfg.required_batch_size_multiple
        strict = split not in (None, "train") and not split.startswith("train") and \
            not self.cfg.skip_invalid_size_inputs_valid_test
        # pairs of equal lengths are batched in a seeded random order, except in the test split, where they
        # keep their order in the file: fairseq's rule, so that nmt-generate forms fairseq-generate's batches
        shuffle_ties = split != "test"

        def batches_for(ds):
            return self._batches(ds, max_tokens, max_sentences, seed, required_batch_size_multiple,
                                 max_positions, strict, shuffle_ties)

        reload = None
        if split is not None and self.cfg.data and (self._drawn_epochs(split) or (
                self.split_folder(split) != self.cfg.data and self.num_shards(split) > 1)):
            def reload(e: int):
                ds = self.load_dataset(split, epoch=e)
                return ds, batches_for(ds)

        itr = EpochBatchIterator(dataset, batches_for(dataset), dataset.collater, seed=seed, num_shards=num_shards,
                                 shard_id=shard_id, epoch=epoch, reload=reload)
        itr.shuffle = shuffle
        return itr

    # ------------------------------------------------------------------ models and text
    def build_model(self, model_name: str, model_cfg: Any):
        from nmt_toolkit.models import build_model

        return build_model(model_name, model_cfg, self.src_dict, self.tgt_dict)

    def subword(self, role: str = "source"):
        """The subword codec recorded in ``preprocess.json`` (``encode``/``decode``), or None. A model folder
        may hold one model per side: ``role`` "source" encodes the input, "target" decodes the output. Read
        once (a server encodes every request with it)."""
        key = (role, id(self.model_folder), id(self._record), self.cfg.data)
        if key not in self._codecs:
            if self.model_folder is not None:
                self._codecs[key] = self.model_folder.codec(role)
            else:
                self._codecs[key] = subword.side_codec(self.cfg.data, self._record.get("subword"), role) \
                    if self.cfg.data else None
        return self._codecs[key]

    def default_target_lang_tag(self) -> Optional[str]:
        """The target-language token the sources were binarized with (``preprocess.json``), or a model
        folder's default one; None for most models."""
        if self.model_folder is not None:
            return self.model_folder.target_lang_tag
        return self._record.get("target_lang_tag")

    def subword_record(self) -> Optional[dict]:
        """``preprocess.json``'s ``subword`` entry (for a model folder: its source model's), or None; a relative
        ``model`` path is inside the data folder."""
        return self._record.get("subword")

    def subword_files(self) -> tuple[Optional[str], dict]:
        """``(codec kind or None, {"source": path, "target": path})``: the subword model file(s) to copy
        into a model folder (one path for both sides when joint)."""
        if self.model_folder is not None:
            return self.model_folder.codec_kind, dict(self.model_folder.subword_paths)
        codec = self.subword()
        if codec is None:
            return None, {}
        return codec.kind, {"source": codec.model_path, "target": self.subword("target").model_path}

    def dictionary_files(self) -> tuple[str, str]:
        """The files the source and target dictionaries were read from (for error messages)."""
        if self.model_folder is not None:
            return self.model_folder.dict_files
        return tuple(os.path.join(self.cfg.data, f"dict.{lang}.txt")
                     for lang in (self.cfg.source_lang, self.cfg.target_lang))

    def bpe_symbol(self) -> Optional[str]:
        """What ``Dictionary.string(..., bpe_symbol=)`` needs to undo the recorded segmentation."""
        record = (self._record.get("subword") or {}).get("type")
        return subword.marker_of(record)

    # ------------------------------------------------------------------ what a multilingual task changes
    # Decoding, training and export ask every task these questions; a task with language tokens
    # (tasks/multilingual.py) answers them otherwise. The answers here leave sources and targets as they are.

    #: --eval-bleu scores every validation split (each direction's), not only the first
    bleu_on_every_split = False

    @property
    def multilingual(self) -> bool:
        """Whether the model translates between several languages, chosen by language tokens."""
        return False

    def language_tokens(self, src: str, tgt: str) -> tuple[Optional[int], Optional[int]]:
        """The ids of the tokens put first in a source and in a target of ``src``→``tgt``: none."""
        return None, None

    def tag_source(self, ids: np.ndarray) -> np.ndarray:
        """A source to decode (ids ending with EOS) as the model reads it: unchanged."""
        return ids

    def decoder_token(self) -> Optional[int]:
        """The token the decoder reads first after EOS when decoding (a forced prefix): none."""
        return None

    def language_token_ids(self) -> set[int]:
        """The ids of the language tokens, kept out of printed text: none."""
        return set()

    def targets_tagged(self) -> bool:
        """Whether the training targets start with a language token (which BLEU validation then forces and
        strips, as decoding does)."""
        return False

    def validation_splits(self, splits: list[str]) -> list[str]:
        """The splits validation reads for ``--valid-subset`` ``splits``: those."""
        return list(splits)

    def multilingual_record(self) -> Optional[dict]:
        """The languages, directions and tag options a model folder or an export records: none."""
        return None

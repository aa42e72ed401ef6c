"""``--task translation_multi_simple_epoch``: one model trained on several directions of a multilingual
data-bin (``nmt-preprocess --lang-pairs``), with fairseq's flags and semantics.

- The joint dictionary gets one token per language, ``__de__``, appended after its last entry in sorted
  language order (or the order of ``--lang-dict``), as fairseq's task appends them (so the ids are
  fairseq's); ``--lang-tok-style opus_mt`` writes them as OPUS-MT's ``>>de<<`` instead.
- ``--encoder-langtok src|tgt`` puts the source's or the target's language token first in every source;
  ``--decoder-langtok`` the target's first in every target (the decoder then reads ``</s> __de__ …``).
- Training epochs are drawn from the directions as data/corpora.py draws corpora: ``--sampling-method
  concat`` reads every pair once, ``temperature`` gives direction ``i`` a share ∝ ``n_i^(1/T)``
  (``--sampling-temperature T``) of an epoch as long as fairseq's (:func:`fairseq_epoch_size`), drawn
  anew each epoch from the seed and the epoch (a resumed run reads what the run that never stopped read).
  fairseq gives the rounding's left-over pairs to random directions; here they go to the largest
  remainders, so counts may differ from fairseq's by one.
- A validation split is read as all directions together (the loss that chooses the best checkpoint) and
  also direction by direction as ``valid.en-de``, …, each logged as its own line.
- The checkpoint's task options record the directions (``lang_pairs``) and the tag style; a multilingual
  model folder (``model_folder.py``) records them too and, given as the data folder, sets up the task alone
  (:meth:`MultilingualTranslationTask.from_model_folder`).
- Decoding (:meth:`MultilingualTranslationTask.setup_decoding`) translates one direction ``--source-lang`` →
  ``--target-lang``, any two of the model's languages (zero-shot ones too): sources get their tag from
  :meth:`~MultilingualTranslationTask.language_tokens` and :func:`prepend`, as training items do, and the
  decoder's tag is the search's forced first token (the translator's job).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from nmt_toolkit.config import option
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.data.indexed_dataset import MMapIndexedDataset, dataset_exists
from nmt_toolkit.data.language_codes import check_language_code
from nmt_toolkit.data.lang_pairs import languages, parse_lang_pairs
from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.model_folder import ModelFolder, is_model_folder, multilingual_task_options, read_model_folder
from nmt_toolkit.registry import register_task
from nmt_toolkit.export_record import EXPORT_JSON, is_export_folder, read_export
from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask, export_data_record, read_preprocess_json

if TYPE_CHECKING:  # the datasets import torch: a task's options and dictionaries load without it
    from nmt_toolkit.data import corpora as corpus_mix
    from nmt_toolkit.data.pair_dataset import LanguagePairDataset

logger = logging.getLogger(__name__)

SAMPLING_METHODS = ("concat", "temperature")


@dataclass
class MultilingualConfig(TranslationConfig):
    lang_pairs: Optional[str] = option(None, "the directions to train, comma-separated, e.g. en-de,en-fr,de-en "
                                             "(default: every direction of the data-bin)", metavar="SRC-TGT,...")
    lang_dict: Optional[str] = option(None, "a file naming the languages, one a line: their tokens are added to "
                                            "the dictionary in this order (default: the directions' languages, "
                                            "sorted)", metavar="FILE")
    lang_tok_style: str = option("multilingual", "how language tokens are written: multilingual (fairseq's "
                                                 "__de__) or opus_mt (>>de<<, with --encoder-langtok tgt as "
                                                 "OPUS-MT's multilingual models)",
                                 choices=["multilingual", "opus_mt"])
    encoder_langtok: Optional[str] = option(None, "put a language token (__de__) first in every source: the "
                                                  "source's language (src) or the target's (tgt)",
                                            choices=["src", "tgt"])
    decoder_langtok: bool = option(False, "put the target language's token first in every target")
    sampling_method: str = option("concat", "how training epochs are drawn from the directions: concat (every "
                                            "pair once) or temperature (shares proportional to "
                                            "size^(1/T))", choices=list(SAMPLING_METHODS))
    sampling_temperature: float = option(1.5, "the T of --sampling-method temperature (1: by size; larger: "
                                               "flatter)", low=0.0, low_open=True, high=1000.0)


def fairseq_epoch_size(sizes: list[int], shares: np.ndarray, max_scale_up: float = 1.5) -> int:
    """The length of a temperature-sampled epoch as fairseq's ``default_virtual_size_func`` sets it: the
    largest direction keeps its size, the others are scaled by their share relative to its share, and
    the sum is capped at ``max_scale_up`` times all pairs."""
    largest = int(np.argmax(sizes))
    scaled = sum(share / shares[largest] * sizes[largest] for share in shares)
    return int(min(scaled, sum(sizes) * max_scale_up))


def language_token(lang: str, style: str = "multilingual") -> str:
    """A language's token: fairseq's ``__de__``, or OPUS-MT's ``>>de<<``."""
    return f">>{lang}<<" if style == "opus_mt" else f"__{lang}__"


def read_lang_dict(path: str, needed: list[str]) -> list[str]:
    """The languages of ``--lang-dict``, in its order; one that a direction needs and the file lacks is
    one line naming both. A language listed again is dropped with a warning naming both lines: fairseq
    adds its token once too (its dictionary's add_symbol keeps the first id), so the ids stay fairseq's,
    and the languages a model records stay distinct (a model folder refuses a repeated one)."""
    try:
        with open(path, encoding="utf-8") as handle:
            numbered = [(number, line.strip()) for number, line in enumerate(handle, 1) if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"--lang-dict {path}: cannot read it ({exc})") from None
    first_line: dict[str, int] = {}
    for number, lang in numbered:
        check_language_code(lang, f"--lang-dict {path} line {number}")
        if lang in first_line:
            logger.warning("--lang-dict %s line %d: %s again (first on line %d); its token is added once",
                           path, number, lang, first_line[lang])
        first_line.setdefault(lang, number)
    langs = list(first_line)
    missing = [lang for lang in needed if lang not in langs]
    if missing:
        raise DataError(f"--lang-dict {path}: lacks {', '.join(missing)}, which --lang-pairs uses")
    return langs


def prepend(token: int, item: np.ndarray) -> np.ndarray:
    """``item`` with ``token`` in front: how a language token enters a training source or target, and a
    decoded source (so decoding tags sources exactly as training did)."""
    item = np.asarray(item)
    return np.concatenate([np.array([token], dtype=item.dtype), item])


class _Prepended:
    """Every item of an indexed dataset with ``token`` in front (fairseq's PrependTokenDataset)."""

    def __init__(self, dataset, token: int):
        self.dataset, self.token = dataset, token
        self.sizes = np.asarray(dataset.sizes, dtype=np.int64) + 1

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> np.ndarray:
        return prepend(self.token, self.dataset[i])


@register_task("translation_multi_simple_epoch", config=MultilingualConfig)
class MultilingualTranslationTask(TranslationTask):
    """Several directions of one data-bin, with language tokens; see the module docstring."""

    bleu_on_every_split = True  # --eval-bleu scores every direction's validation split too

    def __init__(self, cfg: MultilingualConfig, dictionary: Dictionary, pairs: list[tuple[str, str]],
                 langs: Optional[list[str]] = None):
        super().__init__(cfg, dictionary, dictionary)
        self.pairs = pairs
        self.langs = langs or sorted(languages(pairs))  # the languages that have a token
        self.direction: Optional[tuple[str, str]] = None  # set by setup_decoding
        self._train_split: Optional[str] = None
        self._seed = 1

    @classmethod
    def setup_task(cls, cfg: MultilingualConfig, model_folder: Optional[ModelFolder] = None,
                   export: Optional[dict] = None, **kwargs) -> "MultilingualTranslationTask":
        """The task of the data-bin ``cfg.data``, or of the model folder or CTranslate2 export there
        (``model_folder``, ``export``: what was read of it already)."""
        if not cfg.data:
            raise UsageError("the data-bin folder (positional DATA) is required")
        if is_model_folder(cfg.data):
            return cls.from_model_folder(cfg, model_folder or read_model_folder(cfg.data))
        if export is not None or is_export_folder(cfg.data):
            return cls.from_export(cfg, export or read_export(cfg.data))
        if not os.path.isdir(cfg.data):
            raise DataError(f"{cfg.data}: no such data folder (run nmt-preprocess --lang-pairs first)")
        record = read_preprocess_json(cfg.data)
        if cfg.lang_pairs is None and not record.get("lang_pairs"):
            raise UsageError(f"{cfg.data}: not a multilingual data-bin (no lang_pairs in preprocess.json); give "
                             f"--lang-pairs")
        cfg.lang_pairs = cfg.lang_pairs or ",".join(record["lang_pairs"])
        pairs = parse_lang_pairs(cfg.lang_pairs)
        used = sorted(languages(pairs))
        langs = read_lang_dict(cfg.lang_dict, used) if cfg.lang_dict else used
        dicts = [cls.load_dictionary(os.path.join(cfg.data, f"dict.{lang}.txt")) for lang in used]
        for lang, d in zip(used[1:], dicts[1:]):
            if d != dicts[0]:
                raise DataError(f"{os.path.join(cfg.data, f'dict.{lang}.txt')}: differs from "
                                f"dict.{used[0]}.txt; a multilingual model needs one joint dictionary")
        dictionary = dicts[0]
        tokens = [language_token(lang, cfg.lang_tok_style) for lang in langs]
        for token in tokens:
            dictionary.add_symbol(token)
        logger.info("directions %s; joint dictionary: %d types with the language tokens %s", cfg.lang_pairs,
                    len(dictionary), " ".join(tokens))
        return cls(cfg, dictionary, pairs, langs)

    @classmethod
    def from_model_folder(cls, cfg: MultilingualConfig, folder: ModelFolder) -> "MultilingualTranslationTask":
        """The task of a multilingual model folder: its joint dictionary (language tokens included), languages,
        directions, tag options and subword model; no splits to load."""
        if folder.multilingual is None:
            raise UsageError(f"{folder.path}: a bilingual model folder ({folder.source_lang}→{folder.target_lang}), "
                             f"not a multilingual one")
        for key, value in multilingual_task_options(folder.multilingual).items():
            setattr(cfg, key, value)
        missing = [language_token(lang, cfg.lang_tok_style) for lang in folder.languages
                   if language_token(lang, cfg.lang_tok_style) not in folder.src_dict]
        if missing:
            raise DataError(f"{folder.dict_files[0]}: lacks the language tokens {' '.join(missing)} of the languages "
                            f"the manifest lists")
        task = cls(cfg, folder.src_dict, parse_lang_pairs(cfg.lang_pairs), folder.languages)
        task.model_folder = folder
        if folder.codec_kind:
            task._record = {"subword": {"type": folder.codec_kind, "model": folder.subword_paths["source"]}}
        return task

    @classmethod
    def from_export(cls, cfg: MultilingualConfig, record: dict) -> "MultilingualTranslationTask":
        """The task of a multilingual CTranslate2 export: its joint dictionary (language tokens included),
        languages, directions, tag options and subword model, as ``nmt_export.json`` records them."""
        if not isinstance(record.get("task"), dict) or not record.get("languages"):
            raise UsageError(f"{cfg.data}: a bilingual CTranslate2 export ({record.get('source_lang')}→"
                             f"{record.get('target_lang')}), not a multilingual one")
        for key, value in record["task"].items():
            setattr(cfg, key, value)
        dictionary = cls.load_dictionary(os.path.join(cfg.data, record["dictionaries"]["source"]))
        missing = [language_token(lang, cfg.lang_tok_style) for lang in record["languages"]
                   if language_token(lang, cfg.lang_tok_style) not in dictionary]
        if missing:
            raise DataError(f"{os.path.join(cfg.data, record['dictionaries']['source'])}: lacks the language tokens "
                            f"{' '.join(missing)} of the languages {EXPORT_JSON} lists")
        task = cls(cfg, dictionary, parse_lang_pairs(cfg.lang_pairs), list(record["languages"]))
        task._record = export_data_record(record)
        return task

    @classmethod
    def setup_decoding(cls, cfg: MultilingualConfig, model_folder: Optional[ModelFolder] = None,
                       export: Optional[dict] = None) -> "MultilingualTranslationTask":
        """The task set up to translate ``cfg.source_lang`` → ``cfg.target_lang``: any two languages that have
        a token, the directions trained or not (zero-shot); an unknown one is one line naming the known."""
        task = cls.setup_task(cfg, model_folder, export)
        known = ", ".join(task.langs)
        if not cfg.source_lang or not cfg.target_lang:  # an imported many-to-many model lists every direction
            trained = cfg.lang_pairs if len(task.pairs) <= 12 else f"{len(task.pairs)} directions"
            raise UsageError(f"--source-lang and --target-lang: a multilingual model translates between {known} "
                             f"(trained on {trained}); name the direction")
        for flag, lang in (("--source-lang", cfg.source_lang), ("--target-lang", cfg.target_lang)):
            if lang not in task.langs:
                raise UsageError(f"{flag} {lang}: not a language of this model; it knows {known}")
        task.direction = (cfg.source_lang, cfg.target_lang)
        return task

    @property
    def multilingual(self) -> bool:
        return True

    def multilingual_record(self) -> dict:
        """What the model decodes with: its languages (every one with a token), the trained directions and the
        tag options (a model folder's manifest and a CTranslate2 export record it)."""
        cfg = self.cfg
        return {"languages": list(self.langs), "lang_pairs": [f"{src}-{tgt}" for src, tgt in self.pairs],
                "lang_tok_style": cfg.lang_tok_style, "encoder_langtok": cfg.encoder_langtok,
                "decoder_langtok": bool(cfg.decoder_langtok)}

    def targets_tagged(self) -> bool:
        return bool(self.cfg.decoder_langtok)

    def language_tokens(self, src: str, tgt: str) -> tuple[Optional[int], Optional[int]]:
        """The ids of the language tokens put first in the source and in the target of ``src``→``tgt``
        (None where the options put none): for training items and decoding alike."""
        style = self.cfg.lang_tok_style
        source = None
        if self.cfg.encoder_langtok:
            source = self.src_dict.index(language_token(src if self.cfg.encoder_langtok == "src" else tgt, style))
        target = self.tgt_dict.index(language_token(tgt, style)) if self.cfg.decoder_langtok else None
        return source, target

    def tag_source(self, ids: np.ndarray) -> np.ndarray:
        """A source to decode (ids ending with EOS) tagged for the decoding direction as training tags it."""
        token = self.language_tokens(*self.direction)[0]
        return ids if token is None else prepend(token, ids)

    def decoder_token(self) -> Optional[int]:
        """The target-language token the decoder reads first for the decoding direction (a forced prefix)."""
        return self.language_tokens(*self.direction)[1] if self.direction else None

    def language_token_ids(self) -> set[int]:
        """Every language token's id (to keep them out of printed text)."""
        return {self.src_dict.index(language_token(lang, self.cfg.lang_tok_style)) for lang in self.langs}

    def sample_corpora(self, split: str, cfg: corpus_mix.CorpusSamplingConfig, seed: int) -> None:
        """The training split's epochs are drawn over the directions (--sampling-method); the corpus
        options of the translation task do not apply."""
        if cfg.resamples() or cfg.upsample_primary > 1:
            raise UsageError("--corpus-weights/--corpus-sampling/--upsample-primary: not with --task "
                             "translation_multi_simple_epoch; use --sampling-method and --sampling-temperature")
        self._train_split, self._seed = split, seed

    def validation_splits(self, splits: list[str]) -> list[str]:
        """Each validation split, then the same split direction by direction (``valid.en-de``, …)."""
        return [name for split in splits for name in [split, *(f"{split}.{s}-{t}" for s, t in self.pairs)]]

    def split_folder(self, split: str, epoch: int = 1) -> str:
        return self.cfg.data

    def _drawn_epochs(self, split: str) -> bool:
        return split == self._train_split and self.cfg.sampling_method == "temperature" and len(self.pairs) > 1

    def load_dataset(self, split: str, epoch: int = 1, **kwargs) -> LanguagePairDataset:
        from nmt_toolkit.data import corpora as corpus_mix

        if self.direction is not None:  # decoding: the direction's split, references without a tag
            dataset = self._pair_dataset(split, *self.direction, tag_target=False)
            dataset.split, dataset.epoch = split, epoch
            self.datasets[split] = dataset
            return dataset
        base, _, direction = split.partition(".")
        pairs = [tuple(direction.split("-"))] if direction else self.pairs
        if direction and pairs[0] not in self.pairs:
            raise DataError(f"split {split!r}: {direction} is not one of --lang-pairs {self.cfg.lang_pairs}")
        parts = [self._pair_dataset(base, src, tgt) for src, tgt in pairs]
        names = [f"{src}-{tgt}" for src, tgt in pairs]
        sampling = corpus_mix.CorpusSamplingConfig(
            corpus_sampling="temperature" if split == self._train_split and self.cfg.sampling_method ==
            "temperature" else "concat", corpus_temperature=self.cfg.sampling_temperature)
        if len(parts) == 1:
            dataset = parts[0]
        else:
            sizes = [len(p) for p in parts]
            total = fairseq_epoch_size(sizes, corpus_mix.temperature_shares(sizes, self.cfg.sampling_temperature))
            dataset = corpus_mix.mix(parts, names, sampling, self._seed, epoch, total)
        dataset.split, dataset.epoch = split, epoch
        self.datasets[split] = dataset
        if len(parts) > 1:
            logger.info("%s: epoch %d reads %d pairs: %s", split, epoch, len(dataset), dataset.composition())
        return dataset

    def _pair_dataset(self, split: str, src: str, tgt: str, tag_target: bool = True) -> LanguagePairDataset:
        """One direction's split, its language tokens in front as the options say (the target's only with
        ``tag_target``)."""
        from nmt_toolkit.data.pair_dataset import LanguagePairDataset

        sides = []
        for lang in (src, tgt):
            prefix = os.path.join(self.cfg.data, f"{split}.{src}-{tgt}.{lang}")
            if not dataset_exists(prefix):
                raise DataError(f"{prefix}.idx: no such split in {self.cfg.data} (binarize it with "
                                f"nmt-preprocess --lang-pairs)")
            sides.append(MMapIndexedDataset(prefix, len(self.src_dict), self.src_dict.eos()))
        if len(sides[0]) != len(sides[1]) or not len(sides[0]):
            raise DataError(f"{sides[0].prefix}: {len(sides[0])} source and {len(sides[1])} target sentences")
        source, target = sides
        source_token, target_token = self.language_tokens(src, tgt)
        if source_token is not None:
            source = _Prepended(source, source_token)
        if target_token is not None and tag_target:
            target = _Prepended(target, target_token)
        return LanguagePairDataset(source, source.sizes, self.src_dict, target, target.sizes, self.tgt_dict)

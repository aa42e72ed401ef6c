"""Translation as a library call: load a model once, then translate lists of sentences.

    from nmt_toolkit import Translator

    translator = Translator.load("ckpt/averaged.pt", data="data-bin/m30k")
    for result in translator.translate(["A dog runs on the beach.", "Two men talk."], beam=4, nbest=2):
        print(result.text)                                 # the best translation, detokenized
        for hyp in result.hypotheses:                      # the n-best list, best first
            print(f"{hyp.score:.3f}\t{hyp.text}")

nmt-generate and nmt-interactive are this class plus their line formats: the same sentences give the same
translations and scores through either. Sentences are encoded with the data-bin's subword model, batched by
``max_tokens`` as nmt-generate batches them, decoded by the torch engine or by CTranslate2, and returned in
input order. :meth:`Translator.translate_stream` keeps memory flat over inputs of any length.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch

from nmt_toolkit.errors import UsageError
from nmt_toolkit.generation.config import GenerationConfig
from nmt_toolkit.generation.source_text import check_texts, encode_lines
from nmt_toolkit.model_folder import data_folder_of

logger = logging.getLogger("nmt_toolkit.translator")

LN2 = math.log(2.0)
#: the engines Translator.load takes (nmt-generate's --engine)
ENGINES = ("torch", "ctranslate2")


@dataclass(frozen=True)
class Hypothesis:
    """One hypothesis of the n-best list. ``score`` is the length-penalised score the search ranked by and
    ``positional_scores`` the per-token log-probabilities (end token included), both in base 2 as
    nmt-generate prints them; ``pieces`` are the target subword pieces (nmt-generate's H- text)."""

    text: str
    pieces: str
    score: float
    positional_scores: tuple[float, ...]
    alignment: Optional[tuple[int, ...]] = None


@dataclass(frozen=True)
class Translation:
    """A source sentence and its hypotheses, best first."""

    source: str
    hypotheses: tuple[Hypothesis, ...]

    @property
    def text(self) -> str:
        return self.hypotheses[0].text if self.hypotheses else ""

    @property
    def score(self) -> float:
        return self.hypotheses[0].score if self.hypotheses else 0.0


@dataclass(frozen=True)
class Engine:
    """What decodes: ``torch`` (our beam search) or ``ctranslate2``, on which device, with how many
    CTranslate2 threads in all (the torch engine uses torch's process-wide count, which programs set) and
    CTranslate2 replicas among them (``inter_threads``: batches decoded at once, e.g. by nmt-serve's
    workers)."""

    name: str = "torch"
    device: torch.device = torch.device("cpu")
    precision: Optional[str] = None  # "fp16" or "bf16" (GPU only); None: float32
    ct2_threads: int = 0
    seed: int = 1
    ct2_replicas: int = 1


class Translator:
    """A loaded model (or ensemble) with its dictionaries and subword model; see the module docstring."""

    def __init__(self, task, generator, detokenizer, engine: Engine, gen: GenerationConfig, models=None):
        self.task, self.generator, self.detokenize = task, generator, detokenizer
        self.engine, self.gen, self.models = engine, gen, models

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, path: str, data: Optional[str] = None, *, source_lang: Optional[str] = None, target_lang: Optional[str] = None,
             engine: str = "torch", device: Optional[str] = None, max_tokens: Optional[int] = None,
             seed: int = 1, **options: Any) -> "Translator":
        """Load ``path`` (a checkpoint, several joined by ``:``, a model folder, or an nmt-export CTranslate2
        folder with ``engine="ctranslate2"``) with the data-bin ``data`` it was trained on (none for a model
        folder: it holds its dictionaries and subword models). A checkpoint trained with ``--task
        translation_multi_simple_epoch`` translates ``source_lang`` → ``target_lang``, both required, with the
        language tokens its training placed (docs/multilingual.md). ``options`` are
        :class:`GenerationConfig` fields (``beam``, ``nbest``, ``lenpen`` …) with their flags' ranges."""
        from nmt_toolkit.config import from_dict
        from nmt_toolkit.loading import model_task, open_model
        from nmt_toolkit.registry import TASKS, import_builtin_components

        path, data, chosen = _load_arguments(path, data, source_lang, target_lang, engine, device, seed)
        import_builtin_components()
        entry = TASKS.get("translation")
        if data is None:
            data = data_folder_of(path)
        task_values = {"data": data, "source_lang": source_lang, "target_lang": target_lang}
        if max_tokens is not None:
            task_values["max_tokens"] = max_tokens
        task_cfg = from_dict(entry.config, {k: v for k, v in task_values.items() if v is not None}, what="Translator")
        task_cfg.validate()
        gen = from_dict(GenerationConfig, {**options, "path": path}, what="Translator")
        gen.validate()
        opened = open_model(path.split(":")[0])  # read once: it chooses the task, then it loads
        return cls.from_task(model_task(task_cfg, opened), gen, Engine(engine, chosen, seed=seed), opened=opened)

    @classmethod
    def from_task(cls, task, gen: GenerationConfig, engine: Engine, need_attn: bool = False,
                  scores: bool = True, opened=None) -> "Translator":
        """Load ``gen.path`` for a task already set up (what the programs call after parsing options).
        ``need_attn``: alignments will be asked for (refused now where :meth:`alignment_refusal` says why not); ``scores=False``: CTranslate2 skips
        its per-token scoring pass (nmt-generate --quiet prints no scores); ``opened``: the first model of
        ``gen.path`` as :func:`~nmt_toolkit.loading.open_model` read it already (else it is read here)."""
        from nmt_toolkit.generation.output import Detokenizer

        if not gen.path:
            raise UsageError("--path is required (a checkpoint, or several separated by ':')")
        gen = gen.for_engine(engine.name)
        codec = task.subword("target")  # a model folder may hold one subword model per side
        detokenizer = Detokenizer(codec, task.bpe_symbol() if codec is None else None)
        if engine.name == "ctranslate2":
            return cls(task, _ctranslate2_generator(task, gen, engine, need_attn, scores, opened), detokenizer,
                       engine, gen)
        models = _load_models(task, gen, engine, opened)
        return cls(task, _beam_search(models, task, gen, engine), detokenizer, engine, gen, models)

    # ------------------------------------------------------------------ translating

    def alignment_refusal(self) -> Optional[str]:
        """Why this translator's hypotheses cannot carry alignments (None: they can, when asked for)."""
        if self.models is None:
            return self.generator.alignment_refusal
        if self.gen.static_search == "on":
            return "--static-search on records no attention (use --static-search auto)"
        return None

    def source_limit(self, budget: bool = True) -> tuple[int, str]:
        """The longest source line (tokens, its EOS included) that can be translated, and what sets it: the
        model's positions, ``max_source_positions``, and for batches made by :meth:`batches` (``budget``)
        ``max_tokens``, since a longer line fits in no batch."""
        limits = [(self.generator.model.max_positions()[0], "the model's source positions"),
                  (self.task.cfg.max_source_positions, "--max-source-positions")]
        if budget and self.task.cfg.max_tokens:
            limits.append((self.task.cfg.max_tokens, "--max-tokens"))
        return min(limits, key=lambda limit: limit[0])

    def with_options(self, **options: Any) -> "Translator":
        """The same loaded model with other search options (``beam=8``, ``nbest=4`` …); nothing is reloaded."""
        if not options:
            return self
        from nmt_toolkit.config import from_dict

        values = {**dataclasses.asdict(self.gen), **options}
        gen = from_dict(GenerationConfig, values, what="Translator options")
        gen.validate()
        gen = gen.for_engine(self.engine.name)
        if self.models is None:  # CTranslate2 reads its options at each call: share the loaded model
            _refuse_what_ctranslate2_lacks(gen, self.engine)
            generator = self.generator.with_gen(gen)
        else:
            generator = _beam_search(self.models, self.task, gen, self.engine)
        return Translator(self.task, generator, self.detokenize, self.engine, gen, self.models)

    def without_scores(self) -> "Translator":
        """The same loaded model, its hypotheses without per-token scores where they cost a pass of their own
        (CTranslate2: ``score_batch``; ``positional_scores`` are NaN and the score CTranslate2's own); the
        torch engine computes them during its search anyway."""
        if self.models is not None:
            return self
        return Translator(self.task, self.generator.with_gen(self.gen, scores=False), self.detokenize, self.engine,
                          self.gen, self.models)

    def for_direction(self, source_lang: str, target_lang: str) -> "Translator":
        """The same loaded multilingual model translating ``source_lang`` → ``target_lang`` (any two of its
        languages): weights, search and options are shared, only the language tokens placed differ, so one
        loaded model serves every direction. An unknown language is one line naming the known ones."""
        if not self.task.multilingual:
            raise UsageError("choosing the direction needs a multilingual model (--task translation_multi_simple_epoch)")
        known = ", ".join(self.task.langs)
        for flag, lang in (("--source-lang", source_lang), ("--target-lang", target_lang)):
            if lang not in self.task.langs:
                raise UsageError(f"{flag} {lang}: not a language of this model; it knows {known}")
        task = copy.copy(self.task)
        task.cfg = dataclasses.replace(self.task.cfg, source_lang=source_lang, target_lang=target_lang)
        task.direction, task.datasets = (source_lang, target_lang), {}
        return Translator(task, self.generator, self.detokenize, self.engine, self.gen, self.models)

    def encode(self, lines: Sequence[str], what: str = "input", first: int = 1, budget: bool = True,
               unit: str = "line") -> list[np.ndarray]:
        """Raw lines → source id arrays: subword-encoded, unknown pieces as ``<unk>``, EOS appended. A line
        longer than :meth:`source_limit` is a :class:`DataError` naming it (``what`` ``unit`` number, counted
        from ``first``) and the limit: a cut line would give a wrong translation, a dropped one none. A line
        that is no ``str`` is a TypeError, one that is no valid Unicode (a lone surrogate) a DataError."""
        check_texts(lines, what, first, unit)
        return encode_lines(lines, self.task.src_dict, self.task.subword(), self.source_limit(budget), what, first, unit,
                            self.target_lang_tag(), self.task.tag_source)

    def source_pieces(self, sentences: Sequence[str], ids: Sequence[np.ndarray]) -> list[list[Optional[str]]]:
        """Each sentence as the model reads it (``ids``: its :meth:`encode` result), one entry per source
        position: its subword piece, or None for a language tag and the end token. An alignment's source
        positions index this list."""
        codec = self.task.subword()
        pieces = codec.encode_pieces_batch(list(sentences)) if codec is not None else [s.split() for s in sentences]
        return [[None] * (len(x) - 1 - len(p)) + list(p) + [None] for p, x in zip(pieces, ids)]  # tags, pieces, EOS

    def target_lang_tag(self) -> Optional[str]:
        """The language token put before every source: ``--target-lang-tag``, else the model folder's or the
        data-bin's (checked when its file was read). A flag's tag that is no language tag of the source
        dictionary (``</s>``, a word, a tag the model lacks) is an error naming it."""
        from nmt_toolkit.data.language_codes import check_language_tag

        if self.gen.target_lang_tag is not None:
            check_language_tag(self.gen.target_lang_tag, self.task.src_dict.symbols, "--target-lang-tag", UsageError)
        return self.gen.target_lang_tag or self.task.default_target_lang_tag()

    def translate(self, sentences: Sequence[str], phrases: Optional[Sequence[Sequence[str]]] = None,
                  glossary: Any = None, keep: Any = None, **options: Any) -> list[Translation]:
        """Translate ``sentences`` (a list of raw texts, one sentence each; a lone ``str`` is a TypeError, not a
        list of characters); results in input order. ``phrases``: for each sentence, the target phrases its
        translation must contain (lexically constrained beam search; in the given order unless the options say
        ``constraints="unordered"``). ``glossary`` (a :class:`~nmt_toolkit.generation.terminology.Glossary`, or
        ``{source term: target term}``) and ``keep`` (regular expressions, or ``KeepPatterns``) add the target
        terms of the source terms a sentence holds and its kept spans (in any order unless the options say)."""
        _check_sentence_list(sentences, "translate")
        if phrases is not None and len(phrases) != len(sentences):
            raise ValueError(f"Translator.translate: {len(phrases)} lists of phrases for {len(sentences)} sentences")
        if glossary is not None or keep is not None:
            phrases = self._with_terms(sentences, phrases, glossary, keep)
            if "constraints" not in options and self.gen.constraints == "off":
                options["constraints"] = "unordered"
        translator = self.with_options(**options)
        if phrases is None:
            return list(translator._stream(sentences, 10_000, translator))
        return translator._translate_chunk(list(sentences), 1, [list(c) for c in phrases])

    def translate_stream(self, sentences: Iterable[str], chunk_size: int = 10_000,
                         **options: Any) -> Iterator[Translation]:
        """Translate an iterable of any length, ``chunk_size`` sentences at a time, yielding in input order.
        The arguments are checked here, before the first sentence is read."""
        _check_sentence_list(sentences, "translate_stream")
        if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
            raise TypeError(f"Translator.translate_stream: chunk_size must be an integer >= 1, got {chunk_size!r}")
        return self._stream(sentences, chunk_size, self.with_options(**options))

    @staticmethod
    def _stream(sentences: Iterable[str], chunk_size: int, translator: "Translator") -> Iterator[Translation]:
        chunk: list[str] = []
        done = 0
        for sentence in sentences:
            chunk.append(sentence)
            if len(chunk) == chunk_size:
                yield from translator._translate_chunk(chunk, done + 1)
                done += len(chunk)
                chunk = []
        if chunk:
            yield from translator._translate_chunk(chunk, done + 1)

    def translate_aligned(self, sentences: Sequence[str]) -> list:
        """Each sentence's best translation as :mod:`nmt_toolkit.markup` places markup by it: a
        :class:`~nmt_toolkit.markup.placement.Aligned` with the target pieces, their word alignment and the
        source as the model read it (None for an empty sentence). The text is :meth:`translate`'s."""
        from nmt_toolkit.markup.placement import Aligned

        _check_sentence_list(sentences, "translate_aligned")
        found = self._translate_chunk(list(sentences), 1, need_attn=True)
        tokens = self.source_tokens(sentences, "Translator input")
        return [Aligned.of(t.hypotheses[0] if t.hypotheses else None, source) for t, source in zip(found, tokens)]

    def source_tokens(self, sentences: Sequence[str], what: str = "input") -> list[list[Optional[str]]]:
        """Each sentence as the model reads it, one entry per source position: its subword piece, or None for
        a language tag and the end token (what an alignment's source positions index)."""
        return self.source_pieces(sentences, self.encode(sentences, what, budget=False, unit="sentence"))

    def _translate_chunk(self, sentences: list[str], first: int, phrases: Optional[list[list[str]]] = None,
                         need_attn: bool = False) -> list[Translation]:
        ids = self.encode(sentences, "Translator input", first, unit="sentence")
        results: dict[int, list[dict]] = {}
        nonempty = [i for i, x in enumerate(ids) if len(x) > 1]  # an empty line has only its EOS
        if phrases is not None:
            phrases = self.encode_constraints(phrases, ids, "Translator input", first, unit="sentence")
            phrases = [phrases[i] for i in nonempty]
        if nonempty:
            dataset = self.task.build_dataset_for_inference([ids[i] for i in nonempty])
            for sample, hyps in self.decode(self.batches(dataset), need_attn, constraints=phrases):
                for row, sid in enumerate(sample["id"].tolist()):
                    results[nonempty[sid]] = hyps[row]
        return [Translation(source, tuple(self.hypothesis(h) for h in results.get(i, ())))
                for i, source in enumerate(sentences)]

    def _with_terms(self, sentences: Sequence[str], phrases, glossary: Any, keep: Any):
        """``phrases`` (or none) with each sentence's glossary terms and kept spans added."""
        from nmt_toolkit.generation.terminology import Glossary, KeepPatterns, with_terms

        if glossary is not None and not isinstance(glossary, Glossary):
            glossary = Glossary.from_pairs(glossary)
        if keep is not None and not isinstance(keep, KeepPatterns):
            keep = KeepPatterns(keep, "keep")
        self.check_glossary(glossary)
        return with_terms(sentences, phrases, glossary, keep)

    def check_glossary(self, glossary) -> None:
        """Every target term of ``glossary`` (or None) encodes to target tokens the dictionary has: checked
        once, an error naming the term's line (or entry), before any sentence needs it."""
        from nmt_toolkit.generation.source_text import phrase_ids

        if glossary is None:
            return
        codec = self.task.subword("target")
        entries = glossary.targets()
        pieces = codec.encode_pieces_batch([t for _, t in entries]) if codec is not None and entries else \
            [t.split() for _, t in entries]
        for (where, target), p in zip(entries, pieces):
            phrase_ids(target, p, self.task.tgt_dict, f"{where}: target term {target!r}")

    def encode_constraints(self, phrases: Sequence[Sequence[str]], sources: Sequence[Any],
                           what: str = "input", first: int = 1, unit: str = "line") -> list[list[list[int]]]:
        """Each sentence's target phrases as token ids (the target subword model), checked: none empty, none
        with pieces the dictionary lacks, all of a sentence's together within its output-length limit
        (``sources``: each encoded source, or its length). The CTranslate2 engine has no constrained search:
        a UsageError."""
        from nmt_toolkit.generation.search_steps import output_limits
        from nmt_toolkit.generation.source_text import check_phrase_room, encode_phrases

        if self.models is None:
            raise UsageError("--constraints: the CTranslate2 engine has no constrained search; use --engine torch")
        ids = encode_phrases(phrases, self.task.tgt_dict, self.task.subword("target"), what, first, unit)
        lengths = torch.tensor([s if isinstance(s, (int, np.integer)) else len(s) for s in sources])
        limits = output_limits(lengths, self.generator.cfg, self.generator.model.max_positions()[1], lengths.device)
        check_phrase_room(ids, limits.tolist(), what, first, unit)
        return ids

    def batches(self, dataset, num_shards: int = 1, shard_id: int = 0):
        """nmt-generate's batches of ``dataset``: by length, within the task's ``max_tokens`` and ``batch_size``
        (on the CPU without a ``batch_size``, ``cpu_batch_size`` sentences at most), in a fixed order."""
        return self.task.get_batch_iterator(dataset, max_sentences=self.batch_sentences(),
                                            required_batch_size_multiple=1,
                                            max_positions=(self.source_limit()[0], None), shuffle=False,
                                            num_shards=num_shards, shard_id=shard_id).next_epoch_itr(shuffle=False)

    def batch_sentences(self) -> Optional[int]:
        """The most sentences a batch holds: the task's ``batch_size`` when set; else, on the CPU, the engine's
        ``cpu_batch_size`` (one-thread workers need several batches to share; ``config.py::ENGINE_RULES``); else
        no limit but the token budget."""
        if self.task.cfg.batch_size or self.engine.device.type != "cpu":
            return self.task.cfg.batch_size
        return self.gen.cpu_batch_size or None

    def decode(self, batches, need_attn: bool = False, workers: Optional[int] = None,
               constraints: Optional[Sequence] = None):
        """Yield ``(sample, hypotheses per sentence)`` for each batch, in order; on the CPU several batches
        decode at once (``workers``; default: :func:`decode_workers`). ``constraints``: each sentence's target
        phrases as ids (:meth:`encode_constraints`), indexed by the dataset's sentence ids."""
        from nmt_toolkit.generation.parallel import decode_batches

        if workers is None:
            workers = decode_workers(None, self.gen, self.engine, len(batches))
        with torch.inference_mode():
            yield from decode_batches(batches, lambda sample: self.translate_batch(sample, need_attn,
                                                                                    constraints=constraints), workers)

    def collate(self, ids: Sequence[np.ndarray]) -> dict:
        """Encoded lines as one batch in their own order, right-padded (nmt-interactive's buffer: answered as
        it arrives, without sorting by length)."""
        lengths = torch.tensor([len(x) for x in ids])
        src = torch.full((len(ids), int(lengths.max())), self.task.src_dict.pad(), dtype=torch.long)
        for row, x in enumerate(ids):
            src[row, : len(x)] = torch.from_numpy(x.astype("int64"))
        return {"id": torch.arange(len(ids)), "net_input": {"src_tokens": src, "src_lengths": lengths}}

    def translate_batch(self, sample: dict, need_attn: bool = False, stop: Optional[Callable[[], bool]] = None,
                        constraints: Optional[Sequence] = None) -> list[list[dict]]:
        """One collated batch through the search (or teacher-forced scoring with ``score_reference``). ``stop``
        is asked between the torch engine's search steps: true, the search ends with ``SearchStopped`` (a
        server's request that timed out); CTranslate2 searches a batch in one call, asked before it."""
        search = {} if stop is None or self.models is None else {"stop": stop}
        wanted = None if constraints is None else [constraints[i] for i in sample["id"].tolist()]
        if wanted is not None and any(wanted):  # a batch without phrases takes the plain (faster) search
            search["constraints"] = wanted
        if stop is not None and self.models is None:
            from nmt_toolkit.generation.search_steps import check_stop

            check_stop(stop)
        device = self.engine.device
        src = sample["net_input"]["src_tokens"].to(device)
        lengths = sample["net_input"]["src_lengths"].to(device)
        target = sample.get("target")
        tag = self.task.decoder_token()
        if self.gen.score_reference:
            if target is None:
                raise UsageError("--score-reference needs references (a binarized split, not --input)")
            target = target if tag is None else _with_first_column(target, tag)
            found = self.generator.score_reference(src, lengths, target.to(device), need_attn=need_attn,
                                                   forced=0 if tag is None else 1)
            return found if tag is None else _without_first_token(found)
        prefix = None
        if self.gen.prefix_size > 0:
            if target is None:
                raise UsageError("--prefix-size needs references (a binarized split, not --input)")
            prefix = target[:, : self.gen.prefix_size].to(device)
            prefix = prefix.masked_fill(prefix == self.generator.eos, self.generator.pad)
        if tag is None:
            return self.generator.generate(src, lengths, prefix_tokens=prefix, need_attn=need_attn, **search)
        # the decoder reads </s> and then the target language's token, as in training: a forced first token
        prefix = _with_first_column(src[:, :0] if prefix is None else prefix, tag)
        found = self.generator.generate(src, lengths, prefix_tokens=prefix, need_attn=need_attn, **search)
        return _without_first_token(found, also=tag)

    def source_text(self, ids) -> str:
        """A binarized source as text, without the language token that tags it for the model."""
        tags = self.task.language_token_ids()
        ids = [i for i in (ids.tolist() if hasattr(ids, "tolist") else ids) if i not in tags]
        return self.detokenize(self.task.src_dict.string(ids))

    def hypothesis(self, hyp: dict) -> Hypothesis:
        """A search result (token ids, natural-log scores) as a :class:`Hypothesis`."""
        pieces = self.task.tgt_dict.string(hyp["tokens"])
        alignment = hyp.get("alignment")
        return Hypothesis(text=self.detokenize(pieces), pieces=pieces, score=float(hyp["score"]) / LN2,
                          positional_scores=tuple(float(p) / LN2 for p in hyp["positional_scores"].tolist()),
                          alignment=None if alignment is None else tuple(alignment.tolist()))


# ---------------------------------------------------------------------- the arguments of the public methods


def _check_sentence_list(sentences: Any, method: str) -> None:
    """A list of sentences, not one: iterating a ``str`` would translate it character by character."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError(f"Translator.{method}: sentences must be a list of str (one sentence each), not a "
                        f"{type(sentences).__name__}; for one sentence: {method}([text])")
    if not isinstance(sentences, Iterable):
        raise TypeError(f"Translator.{method}: sentences must be a list of str, not {type(sentences).__name__}")


def _load_arguments(path: Any, data: Any, source_lang: Any, target_lang: Any, engine: Any, device: Any,
                    seed: Any) -> tuple[str, Optional[str], torch.device]:
    """:meth:`Translator.load`'s arguments checked where the caller gave them (a path as ``str``; the device
    chosen): ``path``, ``data`` and the device."""
    from nmt_toolkit.config import CommonConfig, from_dict

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"Translator.load: path must be a str or os.PathLike (a checkpoint, several joined by ':', "
                        f"a model folder), not {type(path).__name__}")
    kinds = {"data": (str, os.PathLike), "source_lang": str, "target_lang": str, "device": (str, torch.device)}
    for name, value in (("data", data), ("source_lang", source_lang), ("target_lang", target_lang),
                        ("device", device)):
        if value is not None and not isinstance(value, kinds[name]):
            raise TypeError(f"Translator.load: {name} must be a str or None, not {type(value).__name__}")
    if engine not in ENGINES:
        raise UsageError(f"Translator: engine {engine!r}: must be one of {', '.join(ENGINES)}")
    from_dict(CommonConfig, {"seed": seed}, what="Translator")  # --seed's type and range
    try:
        chosen = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    except RuntimeError:
        raise UsageError(f"Translator: device {device!r}: not a torch device (cpu, cuda, cuda:1 …)") from None
    return os.fspath(path), None if data is None else os.fspath(data), chosen


# ---------------------------------------------------------------------- pieces shared with the programs


def _with_first_column(rows: torch.Tensor, token: int) -> torch.Tensor:
    """``rows`` ([B, T]) with a column of ``token`` in front."""
    return torch.cat([torch.full((rows.size(0), 1), token, dtype=rows.dtype, device=rows.device), rows], dim=1)


def _without_first_token(found: list[list[dict]], also: Optional[int] = None) -> list[list[dict]]:
    """Hypotheses without their forced first token (a language tag): it is no output, so its piece, score and
    alignment go; so do later copies of the token ``also`` (the target language's tag, which fairseq-generate
    strips from its output wherever the model emits it; other languages' tags stay). The hypothesis' score
    stays the one the search ranked by, the tags' log-probabilities included as fairseq's is (the forced
    one's counted as 0 with ``--forced-prefix-score zero``)."""
    for hyps in found:
        for hyp in hyps:
            keep = torch.ones(len(hyp["tokens"]), dtype=torch.bool)
            keep[0] = False
            if also is not None:
                keep &= hyp["tokens"].cpu() != also
            for key in ("tokens", "positional_scores", "attention", "alignment"):
                value = hyp.get(key)
                if value is not None:  # the alignment has no row for the end token: the mask's first rows
                    hyp[key] = value[keep[: len(value)].to(value.device)]
    return found


def decode_workers(requested: Optional[int], gen: GenerationConfig, engine: Engine, num_batches: int) -> int:
    """How many batches decode at once. Batches decode concurrently on the CPU only, and sampling draws from
    one seeded random stream, which concurrent batches would consume in an unpredictable order. Unset, a CPU
    decode takes :func:`~nmt_toolkit.generation.parallel.auto_workers` workers: a beam step is hundreds of
    small operations on which intra-op threads mostly wait for each other, so one-thread workers on batches
    of their own keep the cores busier. CTranslate2 decodes as many batches at once as it has replicas."""
    from nmt_toolkit.generation.parallel import auto_workers

    if engine.name == "ctranslate2":  # its replicas were made at load (Engine.ct2_replicas), one per worker
        return max(1, min(engine.ct2_replicas, num_batches))
    serial = engine.device.type != "cpu" or gen.sampling
    if requested is None:
        return 1 if serial else auto_workers(num_batches, torch.get_num_threads())
    if requested > 1 and serial:
        logger.warning("--decode-workers %d ignored: %s decodes one batch at a time", requested,
                       "--sampling" if gen.sampling else "GPU decoding")
        return 1
    return requested


def _load_models(task, gen: GenerationConfig, engine: Engine, opened=None) -> list:
    """The checkpoints of ``gen.path`` (its first as ``opened`` read it, when given), on the engine's device and
    in its precision; on the CPU in float32 with the CPU back end applied (``gen.cpu_packed_linear``)."""
    from nmt_toolkit.loading import load_models

    sources = gen.path.split(":")
    if opened is not None:
        sources[0] = opened
    cfg = task.cfg
    models, _ = load_models(sources, task.src_dict, task.tgt_dict, task.dictionary_files(), engine.device,
                            langs=(cfg.source_lang, cfg.target_lang))
    if engine.precision is not None:
        flag = f"--{engine.precision}"
        if engine.device.type != "cuda":
            raise UsageError(f"{flag} needs a GPU (drop {flag} or --cpu)")
        # log-probabilities, attention softmaxes and scores stay in float32 (see ensemble.py)
        models = [m.to(torch.float16 if engine.precision == "fp16" else torch.bfloat16) for m in models]
    if engine.device.type == "cpu" and gen.cpu_packed_linear:
        from nmt_toolkit.generation.cpu import optimize_for_cpu

        for model in models:
            optimize_for_cpu(model)
    return models


def _beam_search(models: list, task, gen: GenerationConfig, engine: Engine):
    from nmt_toolkit.generation.beam_search import SequenceGenerator

    generator = SequenceGenerator(models, task.tgt_dict, gen, seed=engine.seed)
    gen.check_model_limit(generator.model.max_positions()[1])
    return generator


def _refuse_what_ctranslate2_lacks(gen: GenerationConfig, engine: Engine) -> None:
    """One line naming every option of ``gen`` the CTranslate2 engine cannot honour, at load and for the
    options a request or ``with_options`` asks for alike."""
    from nmt_toolkit.generation.ct2_search import refuse_unsupported

    refuse_unsupported(gen, (f"--{engine.precision}",) if engine.precision else ())


def _ctranslate2_generator(task, gen: GenerationConfig, engine: Engine, need_attn: bool = False, scores: bool = True,
                           opened=None):
    """The CTranslate2 engine (``generation/ct2_engine.py``), after refusing what it lacks."""
    from nmt_toolkit.generation.ct2_engine import CTranslate2Generator
    from nmt_toolkit.loading import open_model

    _refuse_what_ctranslate2_lacks(gen, engine)
    model = opened if opened is not None else open_model(gen.path)
    generator = CTranslate2Generator(model, task, gen, engine.device.type, engine.ct2_threads, seed=engine.seed,
                                     scores=scores, replicas=engine.ct2_replicas)
    if need_attn and generator.alignment_refusal is not None:
        raise UsageError(f"--print-alignment and --format html need alignments: {generator.alignment_refusal}")
    gen.check_model_limit(generator.model.max_positions()[1])
    return generator
